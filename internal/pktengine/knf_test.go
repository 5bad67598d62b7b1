package pktengine

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nf"
)

// knfNet is a generator, a kernel-forwarding VNF and a receiver namespace, each with an eth0
// in one /24 on a Linux bridge (in a fourth namespace): the pods of one node of a bridge CNI,
// where the VNF sends a datagram out of the interface it came in by.
type knfNet struct {
	gen, knf, recv       string
	genIP, knfIP, recvIP netip.Addr
}

// newKnfNet makes the namespaces under a fresh test prefix and removes them when the test
// ends, also when it fails; it skips the test when not root.
func newKnfNet(t *testing.T) knfNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	prefix := netnstest.Prefix()
	n := knfNet{gen: prefix + "-g", knf: prefix + "-k", recv: prefix + "-r",
		genIP: netip.MustParseAddr("10.253.0.1"), knfIP: netip.MustParseAddr("10.253.0.2"), recvIP: netip.MustParseAddr("10.253.0.3")}
	br := prefix + "-b"
	all := []string{n.gen, n.knf, n.recv, br}
	t.Cleanup(func() {
		for _, ns := range all {
			_ = netns.KillAll(ns)
			if err := netns.Delete(ns); err != nil {
				t.Errorf("delete %s: %v", ns, err)
			}
		}
	})
	for _, ns := range all {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := netns.WithNetlink(br, func(h *netlink.Handle) error {
		b := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
		if err := h.LinkAdd(b); err != nil {
			return err
		}
		return h.LinkSetUp(b)
	}); err != nil {
		t.Fatal(err)
	}
	for i, ns := range all[:3] {
		port := fmt.Sprintf("p%d", i)
		if err := netns.VethPair(ns, "eth0", br, port, 1500); err != nil {
			t.Fatal(err)
		}
		if err := netns.WithNetlink(br, func(h *netlink.Handle) error {
			lk, err := h.LinkByName(port)
			if err != nil {
				return err
			}
			return h.LinkSetMaster(lk, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}})
		}); err != nil {
			t.Fatal(err)
		}
		ip := []netip.Addr{n.genIP, n.knfIP, n.recvIP}[i]
		if err := netns.WithNetlink(ns, func(h *netlink.Handle) error {
			lk, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			return h.AddrAdd(lk, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(24, 32)}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// knfSysctlKeys are the sysctls the VNF changes in a namespace whose one interface is eth0.
var knfSysctlKeys = []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/send_redirects", "net/ipv4/conf/eth0/send_redirects"}

// sysctls reads knfSysctlKeys in ns.
func (n knfNet) sysctls(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, k := range knfSysctlKeys {
		v, err := netns.Sysctl(n.knf, k)
		if err != nil {
			t.Fatal(err)
		}
		m[k] = v
	}
	return m
}

// start runs RunKnf in the VNF's namespace and returns once it is ready (or failed), and a
// function that ends it and returns its result.
func (n knfNet) start(t *testing.T, o KnfOptions) func() KnfResult {
	t.Helper()
	return startInNS(t, n.knf, "RunKnf", func(ctx context.Context, ready func()) (KnfResult, error) {
		o.Ready = ready
		return RunKnf(ctx, o)
	}, nil)
}

// startInNS runs a forwarder (run, named name) in namespace ns and returns once it called
// ready (or failed), and a function that ends it, checks it with after (nil: no check) and
// returns its result. The test's cleanup ends it too.
func startInNS[R any](t *testing.T, ns, name string, run func(ctx context.Context, ready func()) (R, error), after func()) func() R {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	type out struct {
		res R
		err error
	}
	done := make(chan out, 1)
	go func() {
		var res R
		err := netns.Do(ns, func() (err error) {
			res, err = run(ctx, func() { close(ready) })
			return err
		})
		done <- out{res, err}
	}()
	select {
	case <-ready:
	case r := <-done:
		cancel()
		t.Fatalf("%s ended before it was ready: %v", name, r.err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("%s not ready after 10 s", name)
	}
	var stopped *out
	stop := func() R {
		t.Helper()
		if stopped == nil {
			cancel()
			r := <-done
			stopped = &r
			if r.err != nil {
				t.Fatalf("%s: %v", name, r.err)
			}
			if after != nil {
				after()
			}
		}
		return stopped.res
	}
	t.Cleanup(func() {
		if stopped == nil {
			cancel()
			<-done
		}
	})
	return stop
}

// listen opens UDP sockets on ports in the receiver's namespace.
func (n knfNet) listen(t *testing.T, ports ...int) []*net.UDPConn {
	t.Helper()
	conns := make([]*net.UDPConn, len(ports))
	for i, p := range ports {
		if err := netns.Do(n.recv, func() (err error) {
			conns[i], err = net.ListenUDP("udp4", &net.UDPAddr{Port: p})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conns[i].Close() })
		_ = conns[i].SetReadBuffer(4 << 20)
	}
	return conns
}

// dial opens a UDP socket in the generator's namespace connected to the VNF's port.
func (n knfNet) dial(t *testing.T, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := netns.Do(n.gen, func() (err error) {
		c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.knfIP, uint16(port))))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// snmp reads a counter of /proc/net/snmp ("Icmp", "OutRedirects") as the namespace sees it.
func snmp(t *testing.T, ns, proto, name string) uint64 {
	t.Helper()
	var v uint64
	err := netns.Do(ns, func() error {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		var head []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 0 || fields[0] != proto+":" {
				continue
			}
			if head == nil {
				head = fields
				continue
			}
			for i, h := range head {
				if h == name && i < len(fields) {
					v, err = strconv.ParseUint(fields[i], 10, 64)
					return err
				}
			}
		}
		return fmt.Errorf("/proc/net/snmp has no %s %s", proto, name)
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gone checks that the VNF's rules are out of its namespace and its sysctls are as before.
func (n knfNet) gone(t *testing.T, before map[string]string) {
	t.Helper()
	if out, err := netns.Output(netns.Path(n.knf), "nft", []string{"list", "tables"}, nil); err != nil || strings.Contains(string(out), KnfTable) {
		t.Errorf("nft list tables after the run: %q, %v; want no %s", out, err, KnfTable)
	}
	for _, table := range []string{"mangle", "nat"} {
		if out, err := netns.Output(netns.Path(n.knf), "iptables-save", []string{"-t", table}, nil); err != nil || strings.Contains(string(out), knfChain) {
			t.Errorf("iptables-save -t %s after the run: %q, %v; want no %s", table, out, err, knfChain)
		}
	}
	if after := n.sysctls(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("sysctls after the run %v, before %v", after, before)
	}
}

// The VNF's kernel sends every datagram to the VNF's port on to the targets in turn, from the
// VNF's address: 2,000 datagrams from the generator (with UDP checksums) arrive, each intact
// and with a right checksum, the even ones at the
// first target's socket and the odd ones at the second's; one to another port goes nowhere;
// the rules count them all, no ICMP redirect is sent (the datagrams leave by the interface
// they came in by) and, once the run ends, the table is gone and the sysctls are as they were.
func TestKnfRoundRobin(t *testing.T) {
	n := newKnfNet(t)
	before := n.sysctls(t)
	if before["net/ipv4/ip_forward"] != "0" || before["net/ipv4/conf/all/send_redirects"] != "1" {
		t.Fatalf("a fresh namespace has sysctls %v: this test would prove nothing", before)
	}
	// With TX checksumming off the generator's kernel computes the UDP checksums, and the
	// receiver's checks them: the rewritten datagrams must carry right ones.
	if _, err := nf.SetFeature(nf.Endpoint{NS: n.gen, Dev: "eth0"}, nf.TxChecksum, false); err != nil {
		t.Fatal(err)
	}
	csumErrs := snmp(t, n.recv, "Udp", "InCsumErrors")
	conns := n.listen(t, 2153, 2154, 2160)
	stop := n.start(t, KnfOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.recvIP, 2153), netip.AddrPortFrom(n.recvIP, 2154)}})
	if got := n.sysctls(t); got["net/ipv4/ip_forward"] != "1" || got["net/ipv4/conf/all/send_redirects"] != "0" || got["net/ipv4/conf/eth0/send_redirects"] != "0" {
		t.Errorf("sysctls while it runs: %v", got)
	}
	redirects := snmp(t, n.knf, "Icmp", "OutRedirects")
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
	got := make([]map[string]bool, 2)
	buf := make([]byte, 2048)
	for i, conn := range conns[:2] {
		got[i] = map[string]bool{}
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		for len(got[i]) < count/2 {
			k, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if !from.IP.Equal(n.knfIP.AsSlice()) {
				t.Errorf("datagram from %s, want the VNF's address %s", from, n.knfIP)
			}
			got[i][string(buf[:k])] = true
		}
	}
	_ = conns[2].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if k, from, err := conns[2].ReadFromUDP(buf); err == nil {
		t.Errorf("port 2160 of the receiver got %q from %s", buf[:k], from)
	}
	if e := snmp(t, n.recv, "Udp", "InCsumErrors") - csumErrs; e != 0 {
		t.Errorf("%d UDP checksum errors at the receiver", e)
	}
	if r := snmp(t, n.knf, "Icmp", "OutRedirects") - redirects; r != 0 {
		t.Errorf("the VNF sent %d ICMP redirects", r)
	}
	res := stop()
	t.Logf("result %+v", res)
	for i := 0; i < count; i++ {
		if !got[i%2][fmt.Sprintf("datagram %d", i)] {
			t.Fatalf("datagram %d not forwarded intact to target %d (%d and %d of %d arrived)", i, i%2, len(got[0]), len(got[1]), count)
		}
	}
	if res.Packets != count || res.Bytes != ipBytes || len(res.PacketsTo) != 2 || res.PacketsTo[0] != count/2 || res.PacketsTo[1] != count/2 ||
		res.Rules != KnfNFTables || res.NAT != "stateless" || res.Port != GTPPort || len(res.To) != 2 || res.To[1] != n.recvIP.String()+":2154" || res.DurationS <= 0 {
		t.Errorf("result %+v, want %d datagrams (%d bytes), half to each target, by nftables", res, count, ipBytes)
	}
	n.gone(t, before)
}

// The packet engine's frames, sent from an AF_PACKET ring, have a UDP checksum of 0 (none),
// which a rewrite must leave so (nftables' `udp dport set` alone writes a wrong one, and the
// receiver drops it): every datagram of a 1 s run at 5,000 pps through the VNF, to a target on
// another port, reaches the receiver's socket, with no checksum error. Both rule sets:
// nftables (stateless) and iptables (conntrack, whose flows are gone from conntrack afterwards).
func TestKnfChecksums(t *testing.T) {
	for _, rules := range []string{KnfNFTables, KnfIPTables} {
		t.Run(rules, func(t *testing.T) {
			n := newKnfNet(t)
			before := n.sysctls(t)
			conn := n.listen(t, 2155)[0]
			stop := n.start(t, KnfOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.recvIP, 2155)}, Rules: rules})
			csumErrs := snmp(t, n.recv, "Udp", "InCsumErrors")
			sent, got := n.genThrough(t, conn)
			if e := snmp(t, n.recv, "Udp", "InCsumErrors") - csumErrs; e != 0 {
				t.Errorf("%d UDP checksum errors at the receiver", e)
			}
			var flows int
			if rules == KnfIPTables {
				flows = conntrackFlows(t, n.knf, n.recvIP)
			}
			res := stop()
			t.Logf("generator sent %d, receiver got %d from the VNF, result %+v", sent, got, res)
			if sent < 4000 || uint64(got) != sent {
				t.Errorf("generator sent %d datagrams, the receiver got %d from the VNF", sent, got)
			}
			wantNAT := map[string]string{KnfNFTables: "stateless", KnfIPTables: "conntrack"}[rules]
			if res.Packets != sent || res.PacketsTo[0] != sent || res.Bytes != sent*uint64(FrameIPBytes(256)) || res.Rules != rules || res.NAT != wantNAT {
				t.Errorf("result %+v, want %d datagrams of %d IP bytes by %s (%s)", res, sent, FrameIPBytes(256), rules, wantNAT)
			}
			n.gone(t, before)
			if rules == KnfIPTables {
				if flows == 0 {
					t.Error("no conntrack flow to the target while it ran: the test of their removal would prove nothing")
				}
				if f := conntrackFlows(t, n.knf, n.recvIP); f != 0 {
					t.Errorf("%d conntrack flows to the target left after the run", f)
				}
			}
		})
	}
}

// genThrough sends 1 s of the packet engine's UDP frames (checksum 0) at 5,000 pps to the VNF's
// port and returns what the generator sent and how many datagrams conn got from the VNF.
func (n knfNet) genThrough(t *testing.T, conn *net.UDPConn) (sent uint64, got int) {
	t.Helper()
	recvd := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		k := 0
		for {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if from.IP.Equal(n.knfIP.AsSlice()) {
				k++
			}
		}
		recvd <- k
	}()
	o := genOptions(UDP, "256", 5000, time.Second)
	o.Engine, o.Dst, o.SrcPort, o.DstPort = "af_packet", n.knfIP, GTPPort, GTPPort
	var gen GenResult
	if err := netns.Do(n.gen, func() (err error) {
		gen, err = RunGen(context.Background(), o)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return gen.SentPackets, <-recvd
}

// conntrackFlows counts the UDP flows in ns's conntrack table translated to target.
func conntrackFlows(t *testing.T, ns string, target netip.Addr) int {
	t.Helper()
	var k int
	if err := netns.WithNetlink(ns, func(h *netlink.Handle) error {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		for _, f := range flows {
			if f.Forward.Protocol == unix.IPPROTO_UDP && f.Reverse.SrcIP.Equal(target.AsSlice()) {
				k++
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return k
}

// Without CAP_NET_ADMIN (a pod without it) RunKnf fails at once, saying so, and the namespace
// keeps its rules and sysctls.
func TestKnfNeedsCapNetAdmin(t *testing.T) {
	n := newKnfNet(t)
	before := n.sysctls(t)
	var err error
	if e := netns.Do(n.knf, func() error {
		// The thread loses CAP_NET_ADMIN: it must never run anything else. Locked once more
		// than netns.Do unlocks it, it ends with this goroutine.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return err
		}
		_, err = RunKnf(context.Background(), KnfOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(n.recvIP, GTPPort)}, Duration: time.Second})
		return nil
	}); e != nil {
		t.Fatal(e)
	}
	if err == nil || !strings.Contains(err.Error(), "CAP_NET_ADMIN") || strings.Contains(err.Error(), "\n") {
		t.Errorf("RunKnf without CAP_NET_ADMIN: %v; want one line naming CAP_NET_ADMIN", err)
	}
	n.gone(t, before)
}

// Bad options are the caller's mistakes (*ConfigError), found before anything changes; so is
// a second target without nftables; a second VNF in one namespace finds the first's table.
func TestKnfRefuses(t *testing.T) {
	to := netip.MustParseAddrPort("10.253.0.3:2152")
	for _, c := range []struct {
		o     KnfOptions
		field string
	}{
		{KnfOptions{Port: 0, To: []netip.AddrPort{to}}, "port"},
		{KnfOptions{Port: GTPPort}, "to"},
		{KnfOptions{Port: GTPPort, To: []netip.AddrPort{netip.MustParseAddrPort("[fe80::1]:2152")}}, "to"},
	} {
		_, err := RunKnf(context.Background(), c.o)
		if ce, ok := err.(*ConfigError); !ok || ce.Field != c.field {
			t.Errorf("RunKnf(%+v) = %v, want a ConfigError of %s", c.o, err, c.field)
		}
	}
	n := newKnfNet(t)
	before := n.sysctls(t)
	run := func(o KnfOptions) error {
		return netns.Do(n.knf, func() error { _, err := RunKnf(context.Background(), o); return err })
	}
	two := []netip.AddrPort{to, netip.AddrPortFrom(n.recvIP, 2153)}
	if err := run(KnfOptions{Port: GTPPort, To: two, Rules: KnfIPTables}); err == nil || !strings.Contains(err.Error(), "nftables") {
		t.Errorf("two targets with iptables: %v, want an error saying they need nftables", err)
	}
	if err := run(KnfOptions{Port: GTPPort, To: []netip.AddrPort{to}, Rules: "ebpf"}); err == nil || !strings.Contains(err.Error(), "rules") {
		t.Errorf("rules ebpf: %v", err)
	}
	n.gone(t, before)
	stop := n.start(t, KnfOptions{Port: GTPPort, To: []netip.AddrPort{to}})
	if err := run(KnfOptions{Port: 2153, To: []netip.AddrPort{to}}); err == nil || !strings.Contains(err.Error(), "already there") {
		t.Errorf("a second VNF in the namespace: %v, want an error naming the table already there", err)
	}
	stop()
	n.gone(t, before)
}

// The nftables rules: one target on the VNF's own port is a jump and an address rewrite (no
// port rewrite); several are taken in turn by numgen, and a target on another port gets its
// port written raw into a datagram without checksum.
func TestRenderKnfNFTables(t *testing.T) {
	src := netip.MustParseAddr("10.0.0.2")
	one := string(RenderKnfNFTables(2152, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.3:2152")}, []netip.Addr{src}))
	for _, want := range []string{"create table ip cnibench-knf\n", "fib daddr type local notrack counter name \"datagrams\" jump to0\n",
		"ip daddr set 10.0.0.3\n", "ip daddr 10.0.0.3 udp dport 2152 ip saddr set 10.0.0.2\n"} {
		if !strings.Contains(one, want) {
			t.Errorf("one target: no %q in\n%s", want, one)
		}
	}
	if strings.Contains(one, "dport set") || strings.Contains(one, "numgen") {
		t.Errorf("one target on the same port: a port rewrite or numgen in\n%s", one)
	}
	two := string(RenderKnfNFTables(2152, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.3:2152"), netip.MustParseAddrPort("10.0.0.4:2153")}, []netip.Addr{src, src}))
	for _, want := range []string{"numgen inc mod 2 vmap { 0 : jump to0, 1 : jump to1 }\n", "udp checksum 0 @th,16,16 set 2153\n", "udp checksum != 0 udp dport set 2153\n"} {
		if !strings.Contains(two, want) {
			t.Errorf("two targets: no %q in\n%s", want, two)
		}
	}
}
