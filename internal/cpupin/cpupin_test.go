package cpupin

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowedHere is the calling thread's CPU set.
func allowedHere(t *testing.T) []int {
	t.Helper()
	cpus, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	return cpus
}

// Run pins the thread fn runs on to the CPU, and a child process started there inherits the
// pin (the kernel work of a system call and the tools the lab runs happen there); the thread
// gets its CPU set back afterwards.
func TestRunPins(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := allowedHere(t)
	cpu := before[len(before)-1]
	var inside []int
	var child string
	err := Run(cpu, func() error {
		inside = allowedHere(t)
		out, err := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status").Output()
		child = strings.TrimSpace(strings.TrimPrefix(string(out), "Cpus_allowed_list:"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inside, []int{cpu}) {
		t.Errorf("inside Run the thread may run on %v, want only CPU %d", inside, cpu)
	}
	if child != strconv.Itoa(cpu) {
		t.Errorf("a child started inside Run may run on %q, want %d", child, cpu)
	}
	if after := allowedHere(t); !slices.Equal(after, before) {
		t.Errorf("after Run the thread may run on %v, before on %v", after, before)
	}
}

// A CPU that does not exist is an error, and fn does not run.
func TestRunBadCPU(t *testing.T) {
	ran := false
	err := Run(1000, func() error { ran = true; return nil })
	if err == nil || ran {
		t.Fatalf("Run on CPU %d: err %v, fn ran %v", 1000, err, ran)
	}
}

// cpu < 0 runs fn without pinning; fn's error comes back.
func TestRunAnywhere(t *testing.T) {
	want := os.ErrNotExist
	var inside []int
	if err := Run(-1, func() error { inside = allowedHere(t); return want }); err != want {
		t.Fatalf("Run returned %v, want fn's %v", err, want)
	}
	if len(inside) == 0 {
		t.Error("fn saw no CPU")
	}
}
