package runlock

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lock must hold across processes (flock), not only within one: a child process tries it.
func TestDirLockExcludesAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := Dir(dir, "test run")
	if err != nil {
		t.Fatal(err)
	}
	// flock(1) from util-linux: -n fails at once when the lock is taken.
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) not installed")
	}
	if err := exec.Command("flock", "-n", filepath.Join(dir, DirFile), "true").Run(); err == nil {
		t.Fatal("another process took the run directory's lock while it was held")
	}
	if _, err := Dir(dir, "second"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "test run") {
		t.Errorf("second Dir: %v, want ErrBusy naming the holder", err)
	}
	l.Release()
	if err := exec.Command("flock", "-n", filepath.Join(dir, DirFile), "true").Run(); err != nil {
		t.Errorf("lock not released: %v", err)
	}
	l2, err := Dir(dir, "third")
	if err != nil {
		t.Fatal(err)
	}
	l2.Release()
}

// A second Host waits, says once who holds the lock, and gets it when the first lets go.
func TestHostLockWaits(t *testing.T) {
	old := HostFile
	HostFile = filepath.Join(t.TempDir(), "host.lock")
	defer func() { HostFile = old }()
	ctx := context.Background()
	first, err := Host(ctx, "first run", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock)
	var told []string
	go func() {
		l, err := Host(ctx, "second run", func(h string) { told = append(told, h) })
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("second run got the lock while the first held it")
	case <-time.After(1200 * time.Millisecond):
	}
	first.Release()
	second := <-got
	if len(told) != 1 || !strings.Contains(told[0], "first run") || !strings.Contains(told[0], "pid ") {
		t.Errorf("waiting told %q", told)
	}
	b, _ := os.ReadFile(HostFile)
	if !strings.Contains(string(b), "second run") {
		t.Errorf("lock file names %q", b)
	}
	second.Release()

	// A cancelled wait returns the context's error.
	third, _ := Host(ctx, "third", nil)
	cctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	if _, err := Host(cctx, "fourth", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled wait: %v", err)
	}
	third.Release()
}

func TestNewDirNeverShares(t *testing.T) {
	base := filepath.Join(t.TempDir(), "runs", "20260101T000000Z-quick")
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		d, err := NewDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if seen[d] {
			t.Fatalf("%s handed out twice", d)
		}
		seen[d] = true
	}
	if !seen[base] || !seen[base+"-2"] || !seen[base+"-3"] {
		t.Errorf("dirs %v", seen)
	}
}
