package lab

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
)

// Pod processes run in their node's cgroup: one cgroup v2 directory per lab node, named with the
// lab's prefix, under a cnibench directory of the host's cgroup v2 hierarchy, as a kubelet puts
// a node's pods under its own slice. Engines that hook a node's sockets (socket load balancing)
// attach there. A host without a cgroup v2 hierarchy runs pod processes in cnibench's cgroup,
// and such engines say they cannot run.

// CgroupRoot is the cnibench directory of the host's cgroup v2 hierarchy ("" when the host
// has none mounted).
var CgroupRoot = sync.OnceValue(func() string {
	if mp := bpfdp.Cgroup2(); mp != "" {
		return filepath.Join(mp, "cnibench")
	}
	return ""
})

// nodeCgroup is node n's cgroup directory ("" without cgroup v2).
func (l *Lab) nodeCgroup(n *node) string {
	if CgroupRoot() == "" {
		return ""
	}
	return filepath.Join(CgroupRoot(), n.ns)
}

// makeCgroup creates a node's cgroup (nothing without cgroup v2).
func makeCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	return os.MkdirAll(dir, 0o755)
}

// removeCgroup removes a cgroup directory once the processes killed in it are gone (a cgroup
// with processes cannot be removed: EBUSY for a moment after they were killed).
func removeCgroup(dir string) error {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return &os.PathError{Op: "remove cgroup", Path: dir, Err: err}
		}
	}
}
