// Package procs runs the long-lived processes cnibench starts (tools in lab pods, the
// components of the test cluster) as process groups, and stops them one way: SIGTERM to the
// group, a grace period, SIGKILL, wait.
package procs

import (
	"syscall"
	"time"
)

// Attr is the SysProcAttr of a child that leads a process group of its own, so that Stop and
// Kill reach everything it forks, and that gets SIGKILL when the thread that started it exits
// (cnibench being killed included).
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Stop stops the process group pgid (the PID of a child started with Attr) and waits: it sends
// SIGTERM to the group, waits up to grace for done to be closed (by the goroutine that waits
// for the child), then sends SIGKILL to the group and waits for done.
func Stop(pgid int, done <-chan struct{}, grace time.Duration) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = Kill(pgid)
		<-done
	}
}

// Kill sends SIGKILL to the process group pgid, e.g. as an exec.Cmd's Cancel.
func Kill(pgid int) error {
	return syscall.Kill(-pgid, syscall.SIGKILL)
}
