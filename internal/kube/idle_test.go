package kube

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestIdleCommandEndsAtSIGTERM runs a pod's idle command as process 1 of a PID namespace of
// its own, as in a container, and sends it SIGTERM, as the kubelet does when the pod is
// deleted: it exits at once (busybox sleep, the command before it, ignores the signal as
// process 1 and holds the deletion for the grace period; checked too, so the test can fail).
func TestIdleCommandEndsAtSIGTERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a PID namespace)")
	}
	if _, err := os.Stat(busybox); err != nil {
		t.Skipf("no %s: %v", busybox, err)
	}
	for _, c := range []struct {
		name  string
		argv  []string
		exits bool
	}{
		{"idleCommand", idleCommand, true},
		{"busybox sleep infinity", []string{busybox, "sleep", "infinity"}, false},
	} {
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if c.exits { // signal only once the shell has its trap (SigCgt has SIGTERM's bit)
			for deadline := time.Now().Add(5 * time.Second); !catches(cmd.Process.Pid, syscall.SIGTERM); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s set no SIGTERM handler within 5 s", c.name)
				}
			}
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !c.exits {
				t.Errorf("%s as process 1 exited at SIGTERM (%v): the control case should ignore it", c.name, err)
			} else if err != nil {
				t.Errorf("%s exited at SIGTERM with %v, want 0", c.name, err)
			}
		case <-time.After(2 * time.Second):
			if c.exits {
				t.Errorf("%s as process 1 still runs 2 s after SIGTERM", c.name)
			}
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// catches says whether process pid has a handler for sig (/proc/PID/status, SigCgt).
func catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
