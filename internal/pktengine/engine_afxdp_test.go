package pktengine

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// xdpAttached tells whether an XDP program is attached to the receiver's end.
func (p nsPair) xdpAttached(t testing.TB) bool {
	t.Helper()
	h, err := netns.Netlink(p.recv)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lk, err := h.LinkByName(p.recvDev)
	if err != nil {
		t.Fatal(err)
	}
	x := lk.Attrs().Xdp
	return x != nil && x.Attached
}

func needAFXDP(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if err := (afXDP{}).Usable(); err != nil {
		t.Skipf("af_xdp: %v", err)
	}
}

// The receiver's XDP program is attached while its RX is open and gone after Close (which is
// idempotent).
func TestAFXDPCloseDetaches(t *testing.T) {
	needAFXDP(t)
	p := newPair(t)
	if p.xdpAttached(t) {
		t.Fatal("an XDP program is attached before the receiver opened")
	}
	rx := p.openRX(t, "af_xdp")
	if !p.xdpAttached(t) {
		_ = rx.Close()
		t.Fatal("no XDP program attached while the receiver is open")
	}
	if err := rx.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rx.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if p.xdpAttached(t) {
		t.Fatal("the XDP program is still attached after Close")
	}
}

const afxdpChildEnv = "CNIBENCH_TEST_AFXDP_CHILD"

// A receiver killed with SIGKILL leaves no XDP program on its interface: the program hangs on
// a bpf_link, which the kernel releases with the process's file descriptors.
func TestAFXDPKilledLeavesNoProgram(t *testing.T) {
	if spec, ok := os.LookupEnv(afxdpChildEnv); ok {
		// The child: open the receiver in the namespace, say so, wait to be killed.
		ns, dev, _ := strings.Cut(spec, ",")
		err := netns.Do(ns, func() error {
			ifc, err := IfaceByName(dev)
			if err != nil {
				return err
			}
			_, err = afXDP{}.OpenRX(ifc)
			return err
		})
		if err != nil {
			fmt.Println("child error:", err)
			os.Exit(1)
		}
		fmt.Println("child attached")
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	needAFXDP(t)
	p := newPair(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAFXDPKilledLeavesNoProgram$")
	cmd.Env = append(os.Environ(), afxdpChildEnv+"="+p.recv+","+p.recvDev)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(20 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the child ended before it attached")
			}
			if strings.HasPrefix(l, "child error:") {
				t.Fatal(l)
			}
			if l == "child attached" {
				break wait
			}
		case <-timeout:
			t.Fatal("the child did not attach in 20 s")
		}
	}
	if !p.xdpAttached(t) {
		t.Fatal("the child's XDP program is not attached")
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The kernel releases the link in a work item after the process's files are closed.
	if !netnstest.Eventually(3*time.Second, func() bool { return !p.xdpAttached(t) }) {
		t.Fatal("the XDP program is still attached 3 s after its receiver was killed")
	}
}

const afxdpNoCapsEnv = "CNIBENCH_TEST_AFXDP_NOCAPS"

// Without the capabilities an unprivileged Kubernetes pod lacks, af_xdp says why it cannot run
// and the default engine is af_packet. The capabilities are dropped from the effective set of
// one thread of a child process (the test binary run again), which then asks.
func TestAFXDPUnprivileged(t *testing.T) {
	if caps, ok := os.LookupEnv(afxdpNoCapsEnv); ok {
		runtime.LockOSThread() // capabilities are per thread: this one stays dropped
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			fmt.Println("child error:", err)
			os.Exit(1)
		}
		for _, f := range strings.Split(caps, ",") {
			c, _ := strconv.Atoi(f)
			data[c/32].Effective &^= 1 << (c % 32)
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			fmt.Println("child error:", err)
			os.Exit(1)
		}
		e, err := Lookup("", RoleSend)
		if err != nil {
			fmt.Println("child error:", err)
			os.Exit(1)
		}
		fmt.Printf("child default=%s\nchild af_xdp=%v\n", e.Name(), afXDP{}.Usable())
		os.Exit(0)
	}
	needAFXDP(t)
	for _, c := range []struct {
		name string
		drop []int
		want string
	}{
		// An unprivileged pod: CAP_NET_RAW, neither CAP_NET_ADMIN nor CAP_BPF.
		{"pod", []int{unix.CAP_NET_ADMIN, unix.CAP_BPF, unix.CAP_SYS_ADMIN, unix.CAP_PERFMON}, "CAP_NET_ADMIN"},
		{"no CAP_BPF", []int{unix.CAP_BPF, unix.CAP_SYS_ADMIN}, "does not load"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var caps []string
			for _, d := range c.drop {
				caps = append(caps, strconv.Itoa(d))
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestAFXDPUnprivileged$")
			cmd.Env = append(os.Environ(), afxdpNoCapsEnv+"="+strings.Join(caps, ","))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got := map[string]string{}
			for _, l := range strings.Split(string(out), "\n") {
				if k, v, ok := strings.Cut(strings.TrimPrefix(l, "child "), "="); ok && strings.HasPrefix(l, "child ") {
					got[k] = v
				}
			}
			t.Logf("default %s; af_xdp: %s", got["default"], got["af_xdp"])
			if got["default"] != "af_packet" {
				t.Errorf("default engine %q, want af_packet\n%s", got["default"], out)
			}
			if !strings.Contains(got["af_xdp"], c.want) {
				t.Errorf("af_xdp's reason %q does not say %q", got["af_xdp"], c.want)
			}
		})
	}
}
