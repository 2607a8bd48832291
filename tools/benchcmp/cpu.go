package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// meter reads the CPU time of this process and of the broker.
type meter struct {
	brokerPID int // 0 when the broker's process was not found
	tick      time.Duration
}

// newMeter finds the broker's Erlang VM (beam.smp) and the kernel's clock
// tick, in which /proc/<pid>/stat counts.
func newMeter() *meter {
	m := &meter{tick: 10 * time.Millisecond}
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if hz, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && hz > 0 {
			m.tick = time.Second / time.Duration(hz)
		}
	}
	if out, err := exec.Command("pgrep", "-f", "beam.smp").Output(); err == nil {
		for f := range strings.FieldsSeq(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				m.brokerPID = pid
				break
			}
		}
	}
	return m
}

// sample is the CPU used so far by the client and the broker, and when.
type sample struct {
	at     time.Time
	client time.Duration
	broker time.Duration // -1 when unknown
}

func (m *meter) sample() sample {
	return sample{at: time.Now(), client: selfCPU(), broker: m.brokerCPU()}
}

// selfCPU is this process's user plus system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerCPU is utime+stime of the broker's process, from /proc/<pid>/stat.
func (m *meter) brokerCPU() time.Duration {
	if m.brokerPID == 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.brokerPID) + "/stat")
	if err != nil {
		return -1
	}
	// The command name may hold spaces: fields count from after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * m.tick
}

// measurement is one run of one scenario.
type measurement struct {
	msgs     int
	elapsed  time.Duration
	clientUS float64 // client CPU µs per message
	brokerUS float64 // broker CPU µs per message, -1 when unknown
	p50, p99 time.Duration
}

func (m measurement) rate() float64 { return float64(m.msgs) / m.elapsed.Seconds() }

// between turns two samples around n messages into a measurement.
func between(a, b sample, n int) measurement {
	r := measurement{
		msgs:     n,
		elapsed:  b.at.Sub(a.at),
		clientUS: float64((b.client - a.client).Microseconds()) / float64(n),
		brokerUS: -1,
	}
	if a.broker >= 0 && b.broker >= 0 {
		r.brokerUS = float64((b.broker - a.broker).Microseconds()) / float64(n)
	}
	return r
}
