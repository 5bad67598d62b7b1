// Package netns is cnibench's one way into network namespaces: entering a named namespace to
// run code there, creating and deleting named namespaces (bind mounts under /run/netns, as
// `ip netns` makes them), and what is usually done inside one (a sysctl, a netlink handle).
//
// Code that must run inside a namespace runs on a locked OS thread of its own goroutine, never
// on the caller's: the caller's thread is never moved, so a failure cannot leave it in the wrong
// namespace. Afterwards the thread goes back to its original namespace and is unlocked; if
// going back fails it stays locked, and the Go runtime ends the thread when its goroutine
// returns (the main thread it parks for good) instead of reusing it. A panic in the code is recovered on that thread, the thread
// is restored (or retired) the same way, and the panic is raised again in the caller, so the
// caller's deferred cleanup runs.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/mounts"
	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named network namespaces are bind-mounted (as `ip netns` does).
const Dir = "/run/netns"

// Path is the file of a named namespace, e.g. for `nsenter --net=PATH`.
func Path(name string) string { return filepath.Join(Dir, name) }

// setNS switches the calling thread's namespace; a variable so that a test can make the
// return to the original namespace fail.
var setNS = vns.Set

// Do runs fn on a locked OS thread inside the named namespace, and returns fn's error. Sockets
// fn creates belong to that namespace, whatever thread uses them later; processes it starts
// (exec.Cmd.Start) are in it. fn must not start goroutines that expect to be in the namespace:
// only its own thread is.
func Do(name string, fn func() error) error { return DoPath(Path(name), fn) }

// DoPath is Do for the namespace whose file is at path (e.g. one not under Dir).
func DoPath(path string, fn func() error) error {
	name := strings.TrimPrefix(path, Dir+"/")
	target, err := vns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	return onThread(name, func() error {
		if err := setNS(target); err != nil {
			return fmt.Errorf("enter netns %s: %w", name, err)
		}
		return fn()
	})
}

// onThread runs fn on a new goroutine locked to its OS thread, then returns that thread to the
// network namespace it started in (see the package comment). name is for error messages.
func onThread(name string, fn func() error) error {
	var (
		err      error
		caught   any
		panicked bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, e := vns.Get()
		if e != nil {
			runtime.UnlockOSThread()
			err = fmt.Errorf("get current netns: %w", e)
			return
		}
		defer orig.Close()
		defer func() {
			if r := recover(); r != nil {
				caught, panicked = r, true
			}
			if e := setNS(orig); e != nil {
				// The thread stays locked: the runtime ends it when this goroutine returns.
				err = errors.Join(err, fmt.Errorf("leave netns %s: %w", name, e))
				return
			}
			runtime.UnlockOSThread()
		}()
		err = fn()
	}()
	<-done
	if panicked {
		panic(caught)
	}
	return err
}

// Create creates the named network namespace without moving the caller into it. The new
// namespace has only a loopback device, down. An existing one is an error that wraps
// fs.ErrExist.
func Create(name string) error {
	p := Path(name)
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := sharedDir(); err != nil {
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("network namespace %s already exists: %w", name, err)
	}
	if err != nil {
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	f.Close()
	err = onThread(name, func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, p, "bind", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		return nil
	})
	if err != nil {
		_ = Delete(name)
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	return nil
}

// Delete unmounts and removes a named namespace (it lives on while processes or open handles
// hold it). A missing namespace, or a file left without its mount, is not an error.
func Delete(name string) error {
	p := Path(name)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("unmount netns %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, unix.EBUSY) && len(mounts.Under(p)) > 0 {
			return fmt.Errorf("remove netns %s: its mount is hidden under a later mount of %s (`ip netns` or a container runtime bind-mounted %s onto itself while it was mounted); free it with: umount %s && umount %s && rm %s",
				name, Dir, Dir, Dir, p, p)
		}
		return fmt.Errorf("remove netns %s: %w", name, err)
	}
	return nil
}

// sharedDir makes Dir a mount point with shared propagation, as `ip netns add` and container
// runtimes do before they mount a namespace there. Each of them, finding Dir a plain
// directory, bind-mounts it onto itself; a namespace of ours mounted in the plain directory
// at that moment ends up under that mount, where its file can be neither unmounted nor
// removed (EBUSY) until the bind mount goes. Doing the upgrade first, under a lock on Dir
// that our processes share, leaves them nothing to do. While namespaces are mounted in a
// plain Dir (made by an older cnibench, or by a tool that mounts without the upgrade) Dir is
// left as it is: binding it now would hide them.
func sharedDir() error {
	d, err := os.Open(Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", Dir, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN)
	err = unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil || err != unix.EINVAL { // EINVAL: not a mount point
		if err != nil {
			return fmt.Errorf("make %s shared: %w", Dir, err)
		}
		return nil
	}
	if len(mounts.Under(Dir)) > 0 {
		return nil
	}
	if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mount %s onto itself: %w", Dir, err)
	}
	if err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", Dir, err)
	}
	return nil
}

// SetSysctl writes a sysctl inside the named namespace (never the caller's). key is the path
// under /proc/sys, e.g. "net/ipv4/ip_forward", so interface names with dots stay intact.
func SetSysctl(name, key, value string) error {
	return Do(name, func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, name, err)
		}
		return nil
	})
}

// Sysctl reads a sysctl (a path under /proc/sys, as for SetSysctl) as seen inside the named
// namespace, without surrounding white space.
func Sysctl(name, key string) (string, error) {
	var v string
	err := Do(name, func() error {
		b, err := os.ReadFile("/proc/sys/" + key)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// Netlink opens a netlink handle that operates inside the named namespace (its sockets are
// made there, so it works from any thread), for the given netlink families (none = all
// that netlink supports). The caller closes it.
func Netlink(name string, families ...int) (*netlink.Handle, error) {
	ns, err := vns.GetFromPath(Path(name))
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, families...)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", name, err)
	}
	return h, nil
}

// Inode is the inode number of the named namespace: /proc/PID/ns/net of a process inside it
// has the same.
func Inode(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(Path(name), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// PIDs lists the processes, other than this one, whose network namespace is the named one
// (none if it does not exist).
func PIDs(name string) []int {
	ino, err := Inode(name)
	if err != nil {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Ino == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillAll sends SIGKILL to every process in the named namespace and waits (up to 3 s) until
// they are gone.
func KillAll(name string) error {
	pids := PIDs(name)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(pids) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		pids = PIDs(name)
	}
	if len(pids) > 0 {
		return fmt.Errorf("processes %v in %s did not exit", pids, name)
	}
	return nil
}

// Output runs tool with args inside the network namespace at nsPath (nsenter --net=, which
// leaves /sys as it is) with stdin (nil: none), and returns its standard output; the error
// names the command and the first lines of what it wrote to standard error.
func Output(nsPath, tool string, args []string, stdin []byte) ([]byte, error) {
	return OutputEnv(nsPath, nil, tool, args, stdin)
}

// OutputEnv is Output with env ("KEY=value") added to this process's environment for the tool.
func OutputEnv(nsPath string, env []string, tool string, args []string, stdin []byte) ([]byte, error) {
	argv := append([]string{"--net=" + nsPath, tool}, args...)
	cmd := exec.Command("nsenter", argv...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s in %s: %v: %s", tool, strings.Join(args, " "), nsPath, err, firstLines(stderr.String(), 5))
	}
	return stdout.Bytes(), nil
}

// firstLines keeps an error message short (a failed restore of 100,000 lines may say a lot).
func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

// VethPair creates a veth pair with ends leftIf in namespace left and rightIf in right, both up.
func VethPair(left, leftIf, right, rightIf string, mtu int) error {
	rns, err := vns.GetFromPath(Path(right))
	if err != nil {
		return err
	}
	defer rns.Close()
	err = WithNetlink(left, func(h *netlink.Handle) error {
		return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: leftIf, MTU: mtu},
			PeerName: rightIf, PeerNamespace: netlink.NsFd(int(rns))})
	})
	if err != nil {
		return err
	}
	if err := WithNetlink(right, func(h *netlink.Handle) error {
		lk, err := h.LinkByName(rightIf)
		if err != nil {
			return err
		}
		if err := h.LinkSetMTU(lk, mtu); err != nil {
			return err
		}
		return h.LinkSetUp(lk)
	}); err != nil {
		return err
	}
	return WithNetlink(left, func(h *netlink.Handle) error {
		lk, err := h.LinkByName(leftIf)
		if err != nil {
			return err
		}
		return h.LinkSetUp(lk)
	})
}

// WithNetlink calls fn with a netlink handle of the named namespace.
func WithNetlink(ns string, fn func(h *netlink.Handle) error) error {
	h, err := Netlink(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}
