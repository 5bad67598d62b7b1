package kubeharness

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/owner"
)

// TestCleanStale builds what a test cluster killed mid-test leaves (its work directory with
// a dead owner, a mount under it, a node cgroup with a process in it, its lab's state, a
// changed sysctl and a host path it created) beside a live cluster's directory, and checks that
// CleanStale takes down the stale one only, leaves the host's shared state to the live one,
// and restores it once no live cluster is left.
func TestCleanStale(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := CleanStale(testWriter{t}); err != nil { // what earlier runs left
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("cnbtks%02d", rand.Intn(100))
	dir := filepath.Join(Root, prefix)
	liveDir := filepath.Join(Root, prefix+"l")
	created := filepath.Join("/var/tmp", prefix+"-created")
	const sysctl = "vm/overcommit_memory"
	orig := readSysctl(t, sysctl)
	changed := "1"
	if orig == "1" {
		changed = "0"
	}
	cg := "/sys/fs/cgroup/cpu/" + prefix + "-node0"
	t.Cleanup(func() {
		_ = os.WriteFile("/proc/sys/"+sysctl, []byte(orig), 0o644)
		_ = syscall.Unmount(filepath.Join(dir, "node0", "kubelet"), syscall.MNT_DETACH)
		_ = syscall.Rmdir(cg + "/pod")
		_ = syscall.Rmdir(cg)
		for _, d := range []string{dir, liveDir, created, filepath.Join(lab.StateRoot, prefix)} {
			_ = os.RemoveAll(d)
		}
		_ = os.Remove(Root)
	})

	dead := owner.Self("kubeharness " + prefix)
	dead.Start++ // the same PID with another start time: a process that is gone
	makeStale := func(rec hostRecord) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "node0", "kubelet"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := owner.Write(filepath.Join(dir, ownerFile), dead); err != nil {
			t.Fatal(err)
		}
		if err := writeHostRecord(dir, rec); err != nil {
			t.Fatal(err)
		}
	}
	rec := hostRecord{Sysctls: map[string]string{sysctl: orig}, Created: []string{created}}
	makeStale(rec)
	if err := syscall.Mount("tmpfs", filepath.Join(dir, "node0", "kubelet"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cg+"/pod", 0o755); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	if err := os.WriteFile(cg+"/pod/cgroup.procs", []byte(fmt.Sprint(sleeper.Process.Pid)), 0o644); err != nil {
		_ = sleeper.Process.Kill()
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(lab.StateRoot, prefix), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(created, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/"+sysctl, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	// A live cluster beside it, owned by this test process.
	if err := os.MkdirAll(liveDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := owner.Write(filepath.Join(liveDir, ownerFile), owner.Self("kubeharness live")); err != nil {
		t.Fatal(err)
	}

	removed, err := CleanStale(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || !strings.Contains(removed[0], dir) || !strings.Contains(removed[0], "is gone") {
		t.Fatalf("removed %q, want the one stale cluster %s (owner gone)", removed, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("stale cluster directory still there: %v", err)
	}
	if err := <-waited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("process in the stale node's cgroup: wait = %v, want killed", err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("stale node cgroup still there: %v", err)
	}
	if left := lab.Leftovers(prefix); len(left) > 0 {
		t.Errorf("stale cluster's lab left: %v", left)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("live cluster's directory removed: %v", err)
	}
	if _, err := os.Stat(created); err != nil {
		t.Errorf("host path removed while a live cluster may use it: %v", err)
	}
	if got := readSysctl(t, sysctl); got != changed {
		t.Errorf("%s = %s with a live cluster standing, want it left at %s", sysctl, got, changed)
	}

	// The live cluster gone, the next stale one restores the host.
	if err := os.RemoveAll(liveDir); err != nil {
		t.Fatal(err)
	}
	makeStale(rec)
	if removed, err = CleanStale(nil); err != nil || len(removed) != 1 {
		t.Fatalf("second clean: removed %q, err %v", removed, err)
	}
	if _, err := os.Stat(created); !os.IsNotExist(err) {
		t.Errorf("host path the stale cluster created still there: %v", err)
	}
	if got := readSysctl(t, sysctl); got != orig {
		t.Errorf("%s = %s, want it restored to %s", sysctl, got, orig)
	}
	if ents, _ := os.ReadDir(Root); len(ents) > 0 {
		t.Errorf("%s not empty: %v", Root, ents)
	}
}

func readSysctl(t *testing.T, s string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + s)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
