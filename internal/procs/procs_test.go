package procs

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// start runs a shell script as a process group leader (Attr), and returns the command, the
// channel closed when it has been waited for, and the PID of the child it prints first.
func start(t *testing.T, script string) (*exec.Cmd, chan struct{}, int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = Attr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	child, cerr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || cerr != nil {
		_ = Kill(cmd.Process.Pid)
		_ = cmd.Wait()
		t.Fatalf("no child PID from the script: %q, %v", line, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = Kill(cmd.Process.Pid)
			<-done
		}
	})
	return cmd, done, child
}

// gone waits until pid has exited (no process, or a zombie waiting for its new parent).
func gone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopKillsGroupIgnoringTERM: a group whose leader and child ignore SIGTERM is killed after
// the grace period, the child with it.
func TestStopKillsGroupIgnoringTERM(t *testing.T) {
	// The ignored disposition is inherited by the child (sleep) as well.
	cmd, done, child := start(t, `trap '' TERM; sleep 30 & echo $!; wait; wait`)
	const grace = 300 * time.Millisecond
	t0 := time.Now()
	Stop(cmd.Process.Pid, done, grace)
	took := time.Since(t0)
	if took < grace {
		t.Errorf("Stop returned after %v, before the grace period of %v: SIGTERM was not ignored?", took, grace)
	}
	if took > grace+5*time.Second {
		t.Errorf("Stop took %v", took)
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("leader ended with %v, want killed by SIGKILL", cmd.ProcessState)
	}
	if !gone(child, 5*time.Second) {
		t.Errorf("child %d of the group still runs", child)
	}
}

// TestStopTERM: a group that obeys SIGTERM stops at once, without waiting for the grace period.
func TestStopTERM(t *testing.T) {
	cmd, done, child := start(t, `sleep 30 & echo $!; wait`)
	t0 := time.Now()
	Stop(cmd.Process.Pid, done, 10*time.Second)
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("Stop took %v for a group that obeys SIGTERM", took)
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("leader ended with %v, want SIGTERM", cmd.ProcessState)
	}
	if !gone(child, 5*time.Second) {
		t.Errorf("child %d of the group still runs", child)
	}
}

// TestStopExited: stopping a group that already ended returns at once.
func TestStopExited(t *testing.T) {
	cmd, done, _ := start(t, `echo 1`)
	<-done
	t0 := time.Now()
	Stop(cmd.Process.Pid, done, 10*time.Second)
	if took := time.Since(t0); took > time.Second {
		t.Errorf("Stop of an exited group took %v", took)
	}
}
