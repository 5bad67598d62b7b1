package procs

import (
	"syscall"
	"testing"
	"time"
)

// TestSignalIdleChildren: a child blocked in a read is signalled, a child that keeps running is
// not, and the parent never is.
func TestSignalIdleChildren(t *testing.T) {
	// The leader forks a sleeper (blocked) and a busy loop (running), prints the sleeper's PID,
	// and waits for both.
	cmd, _, sleeper := start(t, `sleep 30 & s=$!; (while :; do :; done) & echo $s; wait`)
	var kids []int
	for deadline := time.Now().Add(5 * time.Second); len(kids) < 2; time.Sleep(10 * time.Millisecond) {
		var err error
		if kids, err = Children(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of %d: %v, want 2", cmd.Process.Pid, kids)
		}
	}
	sent, err := SignalIdleChildren(cmd.Process.Pid, syscall.SIGTERM, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0] != sleeper {
		t.Fatalf("signalled %v, want only the sleeper %d (children %v)", sent, sleeper, kids)
	}
	if !gone(sleeper, 5*time.Second) {
		t.Fatalf("sleeper %d still there after SIGTERM", sleeper)
	}
	for _, k := range kids {
		if k != sleeper && gone(k, 0) {
			t.Errorf("busy child %d gone: it was signalled", k)
		}
	}
	if gone(cmd.Process.Pid, 0) {
		t.Error("the parent is gone: it was signalled")
	}
	if kids, _ := Children(12345678); kids != nil {
		t.Errorf("children of a PID that does not exist: %v", kids)
	}
}
