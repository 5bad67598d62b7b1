package kubeharness

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAwaitBinaries: while a build holds the lock, a missing binary is waited for and found
// once it appears; once the lock is free, a binary still missing is an error naming it at once.
func TestAwaitBinaries(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	if err := AwaitBinaries(dir, []string{"kubelet"}, time.Millisecond, &log); err == nil || !strings.Contains(err.Error(), "missing kubelet") {
		t.Fatalf("no build, no kubelet: %v", err)
	}
	lock, err := os.Create(filepath.Join(dir, BuildLock))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := AwaitBinaries(dir, []string{"kubelet"}, time.Millisecond, &log); err == nil {
		t.Fatal("a lock file nobody holds: want missing kubelet")
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- AwaitBinaries(dir, []string{"kubelet", "kwok"}, time.Millisecond, &log) }()
	for _, b := range []string{"kubelet", "kwok"} {
		select {
		case err := <-done:
			t.Fatalf("returned before %s was built: %v", b, err)
		case <-time.After(50 * time.Millisecond):
		}
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "waiting for scripts/kube-build.sh to build kubelet") {
		t.Errorf("log %q", log.String())
	}
	go func() { done <- AwaitBinaries(dir, []string{"calico-node"}, time.Millisecond, &log) }()
	time.Sleep(50 * time.Millisecond)
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "missing calico-node") {
			t.Errorf("the build ended without calico-node: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5 s after the build let go of its lock")
	}
}
