//go:build unix

package container

import (
	"os/exec"
	"syscall"
)

// detach puts the watchdog in a process group of its own, so that a
// terminal's interrupt or hang-up, sent to the test binary's group, does
// not reach it.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
