package pktengine

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nf"
)

// The XDP VNF's tests use knf_test.go's topology (newKnfNet): a generator, the VNF (n.knf) and
// a receiver namespace on one bridge.

// bridgeNS is the namespace of newKnfNet's bridge, whose ports p0, p1, p2 are the peers of the
// generator's, the VNF's and the receiver's eth0.
func (n knfNet) bridgeNS() string { return strings.TrimSuffix(n.gen, "-g") + "-b" }

// xdpOn says whether an XDP program is attached to the VNF's eth0.
func (n knfNet) xdpOn(t testing.TB) bool {
	t.Helper()
	h, err := netns.Netlink(n.knf)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lk, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	x := lk.Attrs().Xdp
	return x != nil && x.Attached
}

// startXfwd runs RunXfwd in the VNF's namespace and returns once it is ready (or failed), and a
// function that ends it and returns its result; the program must be on eth0 while it runs and
// gone once it returned.
func (n knfNet) startXfwd(t *testing.T, o XfwdOptions) func() XfwdResult {
	t.Helper()
	stop := startInNS(t, n.knf, "RunXfwd", func(ctx context.Context, ready func()) (XfwdResult, error) {
		o.Ready = ready
		return RunXfwd(ctx, o)
	}, func() {
		if n.xdpOn(t) {
			t.Error("the XDP program is still attached after RunXfwd returned")
		}
	})
	if !n.xdpOn(t) {
		t.Error("no XDP program on the VNF's eth0 once RunXfwd is ready")
	}
	return stop
}

// The program sends every datagram to the VNF's port on to the targets in turn, from the VNF's
// address: 2,000 datagrams from the generator, with real UDP checksums (the generator's TX
// checksumming off), arrive intact and with a right checksum, the even ones at the first
// target's socket and the odd ones at the second's; what is not for the VNF's port goes on to
// the VNF's stack (a datagram to another port reaches a socket there, a ping is answered); the
// counters are exact, and the program is gone once the run ends.
func TestXfwdRoundRobin(t *testing.T) {
	n := newKnfNet(t)
	if _, err := nf.SetFeature(nf.Endpoint{NS: n.gen, Dev: "eth0"}, nf.TxChecksum, false); err != nil {
		t.Fatal(err)
	}
	csumErrs := snmp(t, n.recv, "Udp", "InCsumErrors")
	conns := n.listen(t, 2153, 2154)
	var local *net.UDPConn // a socket of the VNF's own, on another port
	if err := netns.Do(n.knf, func() (err error) {
		local, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 2160})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	stop := n.startXfwd(t, XfwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.recvIP, 2153), netip.AddrPortFrom(n.recvIP, 2154)}})
	const count = 2000
	out := n.dial(t, GTPPort)
	var ipBytes uint64
	for i := 0; i < count; i++ {
		msg := fmt.Sprintf("datagram %d", i)
		if _, err := out.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		ipBytes += uint64(20 + 8 + len(msg))
		if i%100 == 99 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if _, err := n.dial(t, 2160).Write([]byte("another port")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	_ = local.SetReadDeadline(time.Now().Add(2 * time.Second))
	if k, from, err := local.ReadFromUDP(buf); err != nil || string(buf[:k]) != "another port" || !from.IP.Equal(n.genIP.AsSlice()) {
		t.Errorf("the VNF's socket on port 2160 got %q from %v, %v; want the generator's datagram (XDP_PASS)", buf[:k], from, err)
	}
	if o, err := netns.Output(netns.Path(n.gen), "ping", []string{"-c", "1", "-W", "2", n.knfIP.String()}, nil); err != nil {
		t.Errorf("ping from the generator to the VNF: %v\n%s", err, o)
	}
	got := make([]map[string]bool, 2)
	for i, conn := range conns {
		got[i] = map[string]bool{}
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		for len(got[i]) < count/2 {
			k, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if !from.IP.Equal(n.knfIP.AsSlice()) || from.Port == 0 {
				t.Errorf("datagram from %s, want the VNF's address %s", from, n.knfIP)
			}
			got[i][string(buf[:k])] = true
		}
	}
	if e := snmp(t, n.recv, "Udp", "InCsumErrors") - csumErrs; e != 0 {
		t.Errorf("%d UDP checksum errors at the receiver", e)
	}
	res := stop()
	t.Logf("result %+v", res)
	for i := 0; i < count; i++ {
		if !got[i%2][fmt.Sprintf("datagram %d", i)] {
			t.Fatalf("datagram %d not forwarded intact to target %d (%d and %d of %d arrived)", i, i%2, len(got[0]), len(got[1]), count)
		}
	}
	if res.Packets != count || res.Bytes != ipBytes || len(res.PacketsTo) != 2 || res.PacketsTo[0] != count/2 || res.PacketsTo[1] != count/2 ||
		res.Mode != XfwdGeneric || res.Dev != "eth0" || res.Port != GTPPort || len(res.To) != 2 || res.To[1] != n.recvIP.String()+":2154" || res.DurationS <= 0 {
		t.Errorf("result %+v, want %d datagrams (%d bytes), half to each target, in generic mode on eth0", res, count, ipBytes)
	}
}

// The packet engine's frames have a UDP checksum of 0 (none), which the program leaves so:
// every datagram of a 1 s run at 5,000 pps reaches the target's socket on another port, with
// no checksum error, and the counters say how many and how many bytes.
func TestXfwdChecksumZero(t *testing.T) {
	n := newKnfNet(t)
	conn := n.listen(t, 2155)[0]
	stop := n.startXfwd(t, XfwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.recvIP, 2155)}})
	csumErrs := snmp(t, n.recv, "Udp", "InCsumErrors")
	sent, got := n.genThrough(t, conn)
	if e := snmp(t, n.recv, "Udp", "InCsumErrors") - csumErrs; e != 0 {
		t.Errorf("%d UDP checksum errors at the receiver", e)
	}
	res := stop()
	t.Logf("generator sent %d, receiver got %d from the VNF, result %+v", sent, got, res)
	if sent < 4000 || uint64(got) != sent {
		t.Errorf("generator sent %d datagrams, the receiver got %d from the VNF", sent, got)
	}
	if res.Packets != sent || res.PacketsTo[0] != sent || res.Bytes != sent*(256-4-14) {
		t.Errorf("result %+v, want %d datagrams of %d IP bytes", res, sent, 256-4-14)
	}
}

// Native XDP on a veth: XDP_TX hands the frame to the peer's NAPI ring, which the kernel
// flushes (schedules the peer's NAPI) only when the peer has an XDP program. With an XDP_PASS
// program on the bridge's port every datagram arrives; without one, none does, though the
// program counts them all; with GRO on the peer (its NAPI exists, no program) they are left in
// its ring (logged only: a kernel's behaviour, not this package's) — why generic is the default.
func TestXfwdNative(t *testing.T) {
	for _, peer := range []string{"xdp", "gro", "none"} {
		t.Run("peer "+peer, func(t *testing.T) {
			n := newKnfNet(t)
			switch peer {
			case "xdp":
				prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
					Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()}})
				if err != nil {
					t.Fatal(err)
				}
				defer prog.Close()
				if err := netns.Do(n.bridgeNS(), func() error {
					ifc, err := IfaceByName("p1")
					if err != nil {
						return err
					}
					lk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
					if err == nil {
						t.Cleanup(func() { lk.Close() })
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
			case "gro":
				if _, err := nf.SetFeature(nf.Endpoint{NS: n.bridgeNS(), Dev: "p1"}, nf.GRO, true); err != nil {
					t.Fatal(err)
				}
			}
			conn := n.listen(t, 2155)[0]
			stop := n.startXfwd(t, XfwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.recvIP, 2155)}, Mode: XfwdNative})
			sent, got := n.genThrough(t, conn)
			res := stop()
			t.Logf("peer %s: generator sent %d, receiver got %d from the VNF, result %+v", peer, sent, got, res)
			if res.Mode != XfwdNative || res.Packets != sent || sent < 4000 {
				t.Errorf("result %+v, want %d datagrams in native mode", res, sent)
			}
			if want, ok := map[string]int{"xdp": int(sent), "none": 0}[peer]; ok && got != want {
				t.Errorf("the receiver got %d datagrams of %d; want %d", got, sent, want)
			}
		})
	}
}

const xfwdChildEnv = "CNIBENCH_TEST_XFWD_CHILD"

// xfwdChild, in a child process (the test binary run again with xfwdChildEnv=target), runs
// RunXfwd in its own network namespace and says "child ready" once attached, or "child error:"
// and the error's text (one line, or the test's check fails).
func xfwdChild() {
	to, err := netip.ParseAddrPort(os.Getenv(xfwdChildEnv))
	if err == nil {
		_, err = RunXfwd(context.Background(), XfwdOptions{Port: GTPPort, To: []netip.AddrPort{to}, Duration: time.Minute,
			Ready: func() { fmt.Println("child ready") }})
	}
	if err != nil {
		fmt.Printf("child error: %s\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startChild starts the test binary again as xfwdChild inside the VNF's namespace (nsenter),
// behind the command prefix wrap (nothing, or setpriv dropping capabilities), and returns it
// with its first line.
func (n knfNet) startChild(t *testing.T, test string, wrap ...string) (*exec.Cmd, string) {
	t.Helper()
	args := append([]string{"--net=" + netns.Path(n.knf)}, wrap...)
	args = append(args, os.Args[0], "-test.run=^"+test+"$")
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), xfwdChildEnv+"="+netip.AddrPortFrom(n.recvIP, 2155).String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
		for sc.Scan() {
		}
	}()
	select {
	case l := <-line:
		return cmd, l
	case <-time.After(20 * time.Second):
		t.Fatal("the child said nothing in 20 s")
	}
	return nil, ""
}

// A VNF killed with SIGKILL leaves no program behind: the bpf_link goes with the process.
func TestXfwdKilledLeavesNoProgram(t *testing.T) {
	if _, ok := os.LookupEnv(xfwdChildEnv); ok {
		xfwdChild()
	}
	n := newKnfNet(t)
	cmd, l := n.startChild(t, "TestXfwdKilledLeavesNoProgram")
	if l != "child ready" {
		t.Fatalf("the child said %q", l)
	}
	if !n.xdpOn(t) {
		t.Fatal("the child's XDP program is not attached")
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The kernel releases the link in a work item after the process's files are closed.
	if !netnstest.Eventually(3*time.Second, func() bool { return !n.xdpOn(t) }) {
		t.Fatal("the XDP program is still attached 3 s after its VNF was killed")
	}
}

// A child without CAP_NET_ADMIN or CAP_BPF (and CAP_SYS_ADMIN, which would do for CAP_BPF),
// dropped from its bounding set by setpriv, fails at once with one line naming what it lacks,
// and attaches nothing.
func TestXfwdNeedsCaps(t *testing.T) {
	if _, ok := os.LookupEnv(xfwdChildEnv); ok {
		xfwdChild()
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	n := newKnfNet(t)
	for _, c := range []struct {
		drop, want string
	}{
		{"-net_admin,-bpf,-sys_admin", "missing: CAP_NET_ADMIN, CAP_BPF "},
		{"-net_admin", "missing: CAP_NET_ADMIN "},
		{"-bpf,-sys_admin", "missing: CAP_BPF "},
	} {
		t.Run(c.drop, func(t *testing.T) {
			start := time.Now()
			cmd, l := n.startChild(t, "TestXfwdNeedsCaps", "setpriv", "--bounding-set="+c.drop, "--inh-caps="+c.drop)
			err := cmd.Wait()
			t.Logf("%s (%v)", l, time.Since(start))
			if err == nil || !strings.HasPrefix(l, "child error: ") || !strings.Contains(l, c.want) {
				t.Errorf("the child without %s: %q, %v; want it to fail with %q", c.drop, l, err, c.want)
			}
			if n.xdpOn(t) {
				t.Error("an XDP program is attached")
			}
		})
	}
}

// Bad options are the caller's mistakes (*ConfigError), found before anything is attached; a
// target not reached through the interface, or the VNF's own address, is refused; a second VNF
// on an interface finds the first's program.
func TestXfwdRefuses(t *testing.T) {
	to := netip.MustParseAddrPort("10.253.0.3:2152")
	many := make([]netip.AddrPort, 65)
	for i := range many {
		many[i] = to
	}
	for _, c := range []struct {
		o     XfwdOptions
		field string
	}{
		{XfwdOptions{Port: 0, To: []netip.AddrPort{to}}, "port"},
		{XfwdOptions{Port: GTPPort}, "to"},
		{XfwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.MustParseAddrPort("[fe80::1]:2152")}}, "to"},
		{XfwdOptions{Port: GTPPort, To: many}, "to"},
		{XfwdOptions{Port: GTPPort, To: []netip.AddrPort{to}, Mode: "offload"}, "mode"},
	} {
		_, err := RunXfwd(context.Background(), c.o)
		if ce, ok := err.(*ConfigError); !ok || ce.Field != c.field {
			t.Errorf("RunXfwd(%+v) = %v, want a ConfigError of %s", c.o, err, c.field)
		}
	}
	n := newKnfNet(t)
	run := func(o XfwdOptions) error {
		return netns.Do(n.knf, func() error { _, err := RunXfwd(context.Background(), o); return err })
	}
	for _, c := range []struct {
		o    XfwdOptions
		want string
	}{
		{XfwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:2152")}}, "no route to 192.0.2.1"},
		{XfwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.knfIP, 2153)}}, "goes out of lo"},
		{XfwdOptions{Port: GTPPort, To: []netip.AddrPort{to}, Dev: "eth9"}, "interface eth9"},
	} {
		if err := run(c.o); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("RunXfwd(%+v) = %v, want one line with %q", c.o, err, c.want)
		}
	}
	stop := n.startXfwd(t, XfwdOptions{Port: GTPPort, To: []netip.AddrPort{to}})
	if err := run(XfwdOptions{Port: 2153, To: []netip.AddrPort{to}}); err == nil || !strings.Contains(err.Error(), "another XDP program") {
		t.Errorf("a second VNF on the interface: %v, want an error naming the program attached", err)
	}
	stop()
}
