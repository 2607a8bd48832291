//go:build !unix

package container

import "os/exec"

// detach does nothing where process groups are not Unix's.
func detach(*exec.Cmd) {}
