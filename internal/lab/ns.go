package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted (as `ip netns` does).
const NetnsDir = "/run/netns"

// nsPath is the file of a named namespace.
func nsPath(name string) string { return filepath.Join(NetnsDir, name) }

// inNS runs fn on a locked OS thread switched into the named namespace, and switches back.
// If switching back fails the thread stays locked, so Go retires it instead of reusing it.
func inNS(name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(nsPath(name))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("leave netns %s: %w", name, err) // thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// InNS runs fn on a locked OS thread inside the named namespace (e.g. to create a socket
// there: a socket belongs to the namespace it was created in, whatever thread uses it later).
func InNS(name string, fn func() error) error { return inNS(name, fn) }

// createNS creates a named network namespace without moving the caller into it.
func createNS(name string) error {
	if _, err := os.Stat(nsPath(name)); err == nil {
		return fmt.Errorf("network namespace %s already exists (run `cnibench lab clean`)", name)
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		_ = netns.Set(orig)
		runtime.UnlockOSThread()
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	h.Close()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("leave new netns %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	// A new namespace has its loopback down; bring it up the way a container runtime does.
	return inNS(name, func() error { return linkUp("lo") })
}

// deleteNS unmounts and removes a named namespace; missing is not an error.
func deleteNS(name string) error {
	p := nsPath(name)
	if _, err := os.Stat(p); os.IsNotExist(err) {
		return nil
	}
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("unmount netns %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove netns %s: %w", name, err)
	}
	return nil
}

// startInNS starts cmd with the named namespace as its network namespace.
func startInNS(name string, cmd *exec.Cmd) error {
	return inNS(name, cmd.Start)
}

// writeSysctl writes a sysctl, given as a path under /proc/sys (e.g. "net/ipv4/ip_forward",
// so interface names with dots stay intact), inside the named namespace (never the root one).
func writeSysctl(ns, key, value string) error {
	return inNS(ns, func() error {
		p := "/proc/sys/" + key
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, ns, err)
		}
		return nil
	})
}

// nsInode returns the inode of a named namespace, to find the processes inside it.
func nsInode(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(nsPath(name), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
