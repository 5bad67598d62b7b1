package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/mounts"
	"github.com/cnibench/cnibench/internal/names"
)

// The main goroutine keeps the main thread: the runtime cannot end the main thread (it parks
// a locked one that must go), so only other threads show a retired thread ending.
func init() { runtime.LockOSThread() }

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// threadNS is the inode of a thread's network namespace (0 if the thread is gone).
func threadNS(tid int) uint64 {
	var st unix.Stat_t
	if unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", tid), &st) != nil {
		return 0
	}
	return st.Ino
}

// scratch creates a namespace "cnbtns" + 6 random characters (a lab-like prefix, so `cnibench
// lab clean` would find a leftover) and checks at the end that nothing of it is left.
func scratch(t *testing.T) string {
	t.Helper()
	name := "cnbtns" + names.Random(names.Lower, 6)
	if err := Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Delete(name); err != nil {
			t.Error(err)
		}
		noneLeft(t, name)
	})
	return name
}

func noneLeft(t *testing.T, name string) {
	t.Helper()
	if _, err := os.Lstat(Path(name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists (%v)", Path(name), err)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil && strings.Contains(string(out), name) {
		t.Errorf("ip netns list still shows %s:\n%s", name, out)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), Path(name)) {
		t.Errorf("%s is still mounted", Path(name))
	}
}

// TestDoEntersAndComesBack: fn runs inside the namespace (on a thread whose namespace is the
// named one), the caller's thread never moves, and the thread fn ran on is back in the
// original namespace afterwards.
func TestDoEntersAndComesBack(t *testing.T) {
	needRoot(t)
	name := scratch(t)
	want, err := Inode(name)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := unix.Gettid()
	orig := threadNS(caller)
	var tid int
	var inside, during uint64
	if err := Do(name, func() error {
		tid = unix.Gettid()
		inside, during = threadNS(tid), threadNS(caller)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if during != orig {
		t.Errorf("the caller's thread was in namespace %d during Do, want %d", during, orig)
	}
	if inside != want {
		t.Errorf("inside Do: namespace %d, want %d (the named one)", inside, want)
	}
	if got := threadNS(caller); got != orig {
		t.Errorf("caller's thread in namespace %d after Do, want %d", got, orig)
	}
	if got := threadNS(tid); got != orig {
		t.Errorf("Do's thread in namespace %d afterwards, want %d (0 = thread gone)", got, orig)
	}
	// fn's error comes back as it is; a missing namespace is an error before fn runs.
	boom := errors.New("boom")
	if err := Do(name, func() error { return boom }); err != boom {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	ran := false
	if err := Do(name+"-missing", func() error { ran = true; return nil }); err == nil || ran {
		t.Errorf("Do in a missing namespace: err %v, fn ran %v", err, ran)
	}
}

// TestDoPanic: a panic inside fn reaches the caller, and the thread fn ran on is back in its
// namespace (still alive, so it was returned, not retired).
func TestDoPanic(t *testing.T) {
	needRoot(t)
	name := scratch(t)
	orig := threadNS(unix.Gettid())
	var tid int
	got := func() (r any) {
		defer func() { r = recover() }()
		_ = Do(name, func() error {
			tid = unix.Gettid()
			panic("inside")
		})
		return nil
	}()
	if got != "inside" {
		t.Fatalf("recovered %v, want the panic of fn", got)
	}
	if ns := threadNS(tid); ns != orig {
		t.Errorf("thread %d in namespace %d after the panic, want %d (0 = thread gone)", tid, ns, orig)
	}
	// The namespace is still usable, and so is Do.
	if err := Do(name, func() error { return nil }); err != nil {
		t.Error(err)
	}
}

// TestDoRetiresThreadItCannotRestore: when the return to the original namespace fails, Do says
// so and the thread (left locked) is ended by the runtime, never reused inside the namespace.
func TestDoRetiresThreadItCannotRestore(t *testing.T) {
	needRoot(t)
	name := scratch(t)
	target, err := vns.GetFromPath(Path(name))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	calls := 0
	setNS = func(h vns.NsHandle) error {
		calls++
		if calls == 2 { // the way back
			return errors.New("injected")
		}
		return vns.Set(h)
	}
	defer func() { setNS = vns.Set }()
	var tid int
	err = Do(name, func() error { tid = unix.Gettid(); return nil })
	if err == nil || !strings.Contains(err.Error(), "leave netns") {
		t.Fatalf("Do = %v, want a leave netns error", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for threadNS(tid) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ns := threadNS(tid); ns != 0 {
		t.Errorf("thread %d still alive (namespace %d): a thread that could not leave must be retired", tid, ns)
	}
}

// TestCreateDelete: Create makes a namespace without moving the caller, refuses an existing
// one, and Delete removes it (twice is fine) leaving nothing behind.
func TestCreateDelete(t *testing.T) {
	needRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig := threadNS(unix.Gettid())
	name := "cnbtns" + names.Random(names.Lower, 6)
	if err := Create(name); err != nil {
		t.Fatal(err)
	}
	if got := threadNS(unix.Gettid()); got != orig {
		t.Errorf("Create moved the caller to namespace %d", got)
	}
	ino, err := Inode(name)
	if err != nil || ino == orig {
		t.Errorf("Inode = %d, %v; want a new namespace (caller's is %d)", ino, err, orig)
	}
	if err := Create(name); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create = %v, want fs.ErrExist", err)
	}
	// Only a loopback, down; a sysctl written inside stays inside.
	h, err := Netlink(name)
	if err != nil {
		t.Fatal(err)
	}
	links, err := h.LinkList()
	h.Close()
	if err != nil || len(links) != 1 || links[0].Attrs().Name != "lo" {
		t.Errorf("links in a new namespace: %v, %v", links, err)
	}
	host, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	next := "1"
	if strings.TrimSpace(string(host)) == "1" {
		next = "0"
	}
	if err := SetSysctl(name, "net/ipv4/ip_forward", next); err != nil {
		t.Fatal(err)
	}
	if v, err := Sysctl(name, "net/ipv4/ip_forward"); err != nil || v != next {
		t.Errorf("Sysctl inside = %q, %v; want %q", v, err, next)
	}
	if after, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); string(after) != string(host) {
		t.Errorf("the caller's ip_forward changed from %q to %q", host, after)
	}
	// A process started inside is listed by PIDs.
	var cmd *exec.Cmd
	if err := Do(name, func() error {
		cmd = exec.Command("sleep", "30")
		return cmd.Start()
	}); err != nil {
		t.Fatal(err)
	}
	pids := PIDs(name)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("PIDs = %v, want [%d]", pids, cmd.Process.Pid)
	}

	if err := Delete(name); err != nil {
		t.Fatal(err)
	}
	if err := Delete(name); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	noneLeft(t, name)
	if pids := PIDs(name); pids != nil {
		t.Errorf("PIDs of a deleted namespace = %v", pids)
	}
}

// TestDirUpgrade runs dirUpgradeCases in a private mount namespace of its own (a child of
// this test binary under `unshare -m`), with a tmpfs on /run, so Dir starts as a plain
// directory and nothing there touches the host's mounts.
func TestDirUpgrade(t *testing.T) {
	needRoot(t)
	if os.Getenv("CNB_NETNS_DIR_CHILD") == "1" {
		dirUpgradeCases(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", exe, "-test.run", "^TestDirUpgrade$", "-test.v")
	cmd.Env = append(os.Environ(), "CNB_NETNS_DIR_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDirUpgrade") {
		t.Fatalf("child in its own mount namespace: %v\n%s", err, out)
	}
}

// freshRun mounts an empty tmpfs on /run (only in the child's mount namespace) and makes Dir
// a plain directory in it.
func freshRun(t *testing.T) {
	t.Helper()
	// What the host (or an earlier case) mounted at Dir goes first, from this namespace only:
	// listed under a new /run, it would still count as mounted there.
	for _, mp := range mounts.Under(Dir) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			t.Fatalf("unmount %s: %v", mp, err)
		}
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount tmpfs on /run: %v", err)
	}
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// isMountPoint: whether path is a mount point, and whether it has shared propagation.
func isMountPoint(t *testing.T, path string) (mounted, shared bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, _, _ := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if len(f) >= 6 && f[4] == path {
			mounted = true
			shared = strings.Contains(pre, " shared:")
		}
	}
	return mounted, shared
}

// bindNS mounts this process's network namespace at Dir/name the plain way (no upgrade of
// Dir), as an older cnibench did.
func bindNS(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(Path(name), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/net", Path(name), "bind", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
}

func dirUpgradeCases(t *testing.T) {
	runtime.LockOSThread() // mounts below are made by this thread's mount namespace
	// 1. Create makes a plain Dir a shared mount point, so `ip netns add` (which otherwise
	// bind-mounts Dir onto itself, hiding what is mounted there) leaves it alone: our
	// namespace deletes cleanly afterwards.
	freshRun(t)
	if m, _ := isMountPoint(t, Dir); m {
		t.Fatalf("%s is a mount point before Create", Dir)
	}
	if err := Create("cnbtnsa"); err != nil {
		t.Fatal(err)
	}
	if m, sh := isMountPoint(t, Dir); !m || !sh {
		t.Fatalf("after Create %s: mount point %v, shared %v; want both", Dir, m, sh)
	}
	if out, err := exec.Command("ip", "netns", "add", "cnbtnsb").CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	for _, n := range []string{"cnbtnsa", "cnbtnsb"} {
		if err := Delete(n); err != nil {
			t.Errorf("Delete(%s) after ip netns add: %v", n, err)
		}
		if _, err := os.Lstat(Path(n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", Path(n), err)
		}
	}

	// 2. A namespace already mounted in a plain Dir keeps Dir as it is (binding it now would
	// hide that one), and both delete cleanly.
	freshRun(t)
	bindNS(t, "cnbtnsold")
	if err := Create("cnbtnsc"); err != nil {
		t.Fatal(err)
	}
	if m, _ := isMountPoint(t, Dir); m {
		t.Errorf("Create bind-mounted %s over a namespace mounted in it", Dir)
	}
	for _, n := range []string{"cnbtnsold", "cnbtnsc"} {
		if err := Delete(n); err != nil {
			t.Errorf("Delete(%s): %v", n, err)
		}
	}

	// 3. A namespace hidden under a later bind mount of Dir (what `ip netns add` does to a
	// plain Dir): Delete says what happened and how to free it.
	freshRun(t)
	bindNS(t, "cnbtnsg")
	if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	err := Delete("cnbtnsg")
	if err == nil || !strings.Contains(err.Error(), "hidden under a later mount") || !strings.Contains(err.Error(), "umount "+Dir) {
		t.Errorf("Delete of a hidden namespace = %v; want the hidden-mount explanation", err)
	}
	// Freeing it as the message says works.
	if err := unix.Unmount(Dir, 0); err != nil {
		t.Fatal(err)
	}
	if err := Delete("cnbtnsg"); err != nil {
		t.Errorf("Delete after unmounting %s: %v", Dir, err)
	}
}
