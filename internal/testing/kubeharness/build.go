package kubeharness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BuildLock is the file in the binaries' directory that scripts/kube-build.sh holds an
// exclusive flock on while it builds into that directory.
const BuildLock = ".build.lock"

// AwaitBinaries waits until every one of names is in dir while scripts/kube-build.sh is
// building into dir (it holds dir's BuildLock), polling every poll, and saying once on log what
// it waits for. It returns nil once all are there, or an error naming the first missing one
// when no build is under way (never started, finished or failed without it).
func AwaitBinaries(dir string, names []string, poll time.Duration, log io.Writer) error {
	said := false
	start := time.Now()
	for {
		missing := ""
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				missing = n
				break
			}
		}
		if missing == "" {
			if said {
				fmt.Fprintf(log, "kube-build: %s all built after %.0f s of waiting\n", strings.Join(names, ", "), time.Since(start).Seconds())
			}
			return nil
		}
		building, err := buildUnderWay(dir)
		if err != nil {
			return err
		}
		if !building {
			return fmt.Errorf("missing %s in %s: run scripts/kube-build.sh", missing, dir)
		}
		if !said {
			fmt.Fprintf(log, "kube-build: waiting for scripts/kube-build.sh to build %s into %s\n", missing, dir)
			said = true
		}
		time.Sleep(poll)
	}
}

// buildUnderWay tells whether a process holds dir's BuildLock.
func buildUnderWay(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, BuildLock))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return false, nil // closing f releases the shared lock just taken
}
