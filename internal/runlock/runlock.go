// Package runlock keeps runs apart: one host-wide lock that a run holds while it measures (two
// runs at once would pin the same CPUs and disturb each other), and an exclusive lock on a run
// directory (two processes appending to one results.jsonl would mix their trials).
package runlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// HostFile is the host-wide measuring lock.
var HostFile = "/run/cnibench.lock"

// DirFile is the lock file inside a run directory.
const DirFile = ".lock"

// Lock is a held lock.
type Lock struct{ f *os.File }

// Release lets the lock go (closing the file drops the flock). Safe on nil.
func (l *Lock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// holder describes this process for whoever finds the lock taken.
func holder(what string) string {
	return fmt.Sprintf("pid %d (%s, since %s)\n", os.Getpid(), what, time.Now().UTC().Format(time.RFC3339))
}

// tryLock takes an exclusive flock on path without waiting; busy says another holds it (its
// description is returned).
func tryLock(path string) (f *os.File, busy string, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, "", err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(b))
			if who == "" {
				who = "another process"
			}
			return nil, who, nil
		}
		return nil, "", err
	}
	return f, "", nil
}

// own writes the holder's description into a lock file just taken.
func own(f *os.File, what string) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(holder(what)), 0)
	return err
}

// Host takes the host-wide measuring lock for what (e.g. "cnibench run runs/x"). When another
// run holds it, waiting is called once with that run's description and Host waits until the
// lock is free or ctx ends.
func Host(ctx context.Context, what string, waiting func(holder string)) (*Lock, error) {
	told := false
	for {
		f, busy, err := tryLock(HostFile)
		if err != nil {
			return nil, fmt.Errorf("host lock %s: %w", HostFile, err)
		}
		if f != nil {
			if err := own(f, what); err != nil {
				f.Close()
				return nil, fmt.Errorf("host lock %s: %w", HostFile, err)
			}
			return &Lock{f: f}, nil
		}
		if !told && waiting != nil {
			waiting(busy)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ErrBusy is returned by Dir when another process holds the run directory.
var ErrBusy = errors.New("run directory in use")

// Dir takes the exclusive lock of a run directory (created if missing), without waiting: a
// directory another process holds is ErrBusy, naming the holder.
func Dir(dir, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, DirFile)
	f, busy, err := tryLock(path)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if f == nil {
		return nil, fmt.Errorf("%w: %s is held by %s", ErrBusy, dir, busy)
	}
	if err := own(f, what); err != nil {
		f.Close()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// NewDir creates a fresh run directory: base, or base-2, base-3, ... when base exists (two
// runs started in the same second get directories of their own).
func NewDir(base string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return "", err
	}
	for i := 1; i < 1000; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("no free run directory after %s-999", base)
}
