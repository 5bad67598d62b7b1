package bpfdp

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/names"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// EncodeServices' text is sorted by Service (whatever the input order), keeps each Service's
// backends in their order (slot i is the i-th backend), keeps Services without backends, and
// DecodeServices reads it back to the same Services; blank lines are ignored.
func TestLBServicesRoundTrip(t *testing.T) {
	in := []Service{
		{Addr: netip.MustParseAddr("10.96.0.11"), Port: 53, Proto: "udp", Backends: bes(ap("10.244.1.3:5353"))},
		{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: "tcp", Backends: bes(ap("10.244.1.9:8080"), ap("10.244.0.2:8080"))},
		{Addr: netip.MustParseAddr("10.96.0.12"), Port: 443, Proto: "tcp"},
		{Addr: netip.MustParseAddr("172.30.0.10"), Port: 30080, Proto: "tcp", NodePort: true,
			Backends: []Backend{{AddrPort: ap("10.244.0.2:8080")}, {AddrPort: ap("10.244.1.9:8080"), Remote: true}}},
	}
	text := EncodeServices(in)
	want := "tcp 10.96.0.10 80 10.244.1.9:8080 10.244.0.2:8080\n" +
		"tcp 10.96.0.12 443\n" +
		"tcp 172.30.0.10 30080 nodeport 10.244.0.2:8080 10.244.1.9:8080/remote\n" +
		"udp 10.96.0.11 53 10.244.1.3:5353\n"
	if string(text) != want {
		t.Fatalf("EncodeServices:\n%s\nwant\n%s", text, want)
	}
	out, err := DecodeServices(append([]byte("\n"), text...))
	if err != nil {
		t.Fatal(err)
	}
	wantOut := []Service{in[1], in[2], in[3], in[0]}
	if !reflect.DeepEqual(out, wantOut) {
		t.Errorf("DecodeServices:\n%+v\nwant\n%+v", out, wantOut)
	}
	if out, err := DecodeServices(nil); err != nil || len(out) != 0 {
		t.Errorf("DecodeServices(nil) = %v, %v", out, err)
	}
	if s := EncodeServices(nil); len(s) != 0 {
		t.Errorf("EncodeServices(nil) = %q", s)
	}
}

// DecodeServices rejects each kind of bad line with an error naming the line (its number and
// the offending field).
func TestLBDecodeServicesErrors(t *testing.T) {
	good := "tcp 10.96.0.10 80 10.244.0.2:8080\n"
	for _, c := range []struct{ line, want string }{
		{"sctp 10.96.0.10 80", `line 2: want "tcp|udp ADDR PORT`},
		{"tcp 10.96.0.10", `line 2: want "tcp|udp ADDR PORT`},
		{"tcp", `line 2: want`},
		{"tcp nope 80", `line 2: "nope" is not an IPv4 address`},
		{"tcp fd00::1 80", `line 2: "fd00::1" is not an IPv4 address`},
		{"tcp 10.96.0.10 65536", `line 2: port "65536"`},
		{"tcp 10.96.0.10 http", `line 2: port "http"`},
		{"tcp 10.96.0.10 80 10.244.0.2", `line 2: backend "10.244.0.2" is not IPv4ADDR:PORT`},
		{"tcp 10.96.0.10 80 10.244.0.2:8080 [fd00::2]:8080", `line 2: backend "[fd00::2]:8080" is not IPv4ADDR:PORT`},
		{"udp 10.96.0.10 80 10.244.0.2:99999", `line 2: backend "10.244.0.2:99999"`},
	} {
		out, err := DecodeServices([]byte(good + c.line + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeServices(%q) = %v, %v; want an error containing %q", c.line, out, err, c.want)
		}
	}
}

// needLB skips a test that needs the kernel to load and attach the load balancer.
func needLB(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF programs)")
	}
	if err := LBUsable(); err != nil {
		t.Skipf("the load balancer cannot run here: %v", err)
	}
}

// scratchNode is a Node with a bpf file system of its own in a scratch directory (unmounted at
// the end) and, if ns, a scratch network namespace named like a lab's (deleted at the end).
func scratchNode(t testing.TB, ns bool) Node {
	t.Helper()
	n := Node{Dir: filepath.Join(t.TempDir(), "bpf")}
	t.Cleanup(func() {
		if err := nf.Unmount(n.Dir); err != nil {
			t.Error(err)
		}
	})
	if ns {
		n.NS = "cnbtlb" + names.Random(names.Lower, 5)
		if err := netns.Create(n.NS); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := netns.Delete(n.NS); err != nil {
				t.Error(err)
			}
		})
	}
	return n
}

// Return values of the program (tcx).
const (
	tcxNext   = 0xffffffff // TCX_NEXT (-1): on to the next program, the packet passes
	tcActShot = 2
)

// bes are local backends.
func bes(aps ...netip.AddrPort) []Backend {
	out := make([]Backend, len(aps))
	for i, a := range aps {
		out[i].AddrPort = a
	}
	return out
}

// pkt is an Ethernet + IPv4 + TCP/UDP packet with valid checksums; a TCP one carries ACK (a
// packet of a connection under way: syn makes it a connection's first).
func pkt(proto uint8, src, dst netip.AddrPort, payload string) []byte {
	l4len := 20
	if proto == unix.IPPROTO_UDP {
		l4len = 8
	}
	b := make([]byte, 14+20+l4len+len(payload))
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+l4len+len(payload)))
	ip[8], ip[9] = 64, proto
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip)))
	l4 := b[34:]
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	copy(l4[l4len:], payload)
	if proto == unix.IPPROTO_TCP {
		l4[12] = 5 << 4
		l4[13] = 0x10 // ACK
		binary.BigEndian.PutUint16(l4[16:], ^fold(l4sum(b)))
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4len+len(payload)))
		binary.BigEndian.PutUint16(l4[6:], ^fold(l4sum(b)))
	}
	return b
}

// syn turns a TCP packet of pkt into the first of a connection (SYN, no ACK).
func syn(b []byte) []byte {
	b[34+13] = 0x02
	b[34+16], b[34+17] = 0, 0
	binary.BigEndian.PutUint16(b[34+16:], ^fold(l4sum(b)))
	return b
}

func sum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// l4sum is the sum of a packet's TCP/UDP segment and its pseudo header.
func l4sum(b []byte) uint32 {
	ip, l4 := b[14:34], b[34:]
	return sum(ip[12:20]) + uint32(ip[9]) + uint32(len(l4)) + sum(l4)
}

// tuple reads a packet's addresses and ports and checks its checksums (a UDP checksum of 0
// means none).
func tuple(t *testing.T, b []byte) (src, dst netip.AddrPort) {
	t.Helper()
	ip, l4 := b[14:34], b[34:]
	if fold(sum(ip)) != 0xffff {
		t.Errorf("bad IPv4 header checksum in % x", ip)
	}
	if !(ip[9] == unix.IPPROTO_UDP && binary.BigEndian.Uint16(l4[6:]) == 0) && fold(l4sum(b)) != 0xffff {
		t.Errorf("bad L4 checksum (protocol %d) in % x", ip[9], l4)
	}
	src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(l4[0:]))
	dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(l4[2:]))
	return src, dst
}

// run passes one packet through the program and returns its verdict and the packet after.
func run(t *testing.T, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+256)
	ret, err := prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, out[:len(in)]
}

func mapLen(t *testing.T, n Node, name string) int {
	t.Helper()
	m, err := n.lbMap(name)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := 0
	k := make([]byte, m.KeySize())
	v := make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&k, &v) {
		c++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// The load balancer's program, run on crafted packets (BPF_PROG_TEST_RUN) with the maps
// SetServices writes: the first packet to a Service is DNATed to its backend with valid IPv4
// and TCP/UDP checksums (a UDP checksum of 0 stays 0), later packets of the connection follow
// the connection table, replies are SNATed back to the Service, a Service without backends
// drops, other traffic passes untouched, the backend is picked at random among several, and
// the counters say so. SetServices replacing the table deletes stale Services and backend
// slots while a connection already made keeps its backend.
func TestLBProgram(t *testing.T) {
	needLB(t)
	n := scratchNode(t, false)
	web, dns, empty, two := ap("10.96.0.10:80"), ap("10.96.0.11:53"), ap("10.96.0.12:80"), ap("10.96.0.13:80")
	be0, be1, beDNS := ap("10.244.1.2:8080"), ap("10.244.0.7:8080"), ap("10.244.1.3:5353")
	svc := func(a netip.AddrPort, proto string, b ...netip.AddrPort) Service {
		return Service{Addr: a.Addr(), Port: a.Port(), Proto: proto, Backends: bes(b...)}
	}
	if err := n.SetServices([]Service{svc(web, "tcp", be0), svc(dns, "udp", beDNS), svc(empty, "tcp"), svc(two, "tcp", be0, be1)}); err != nil {
		t.Fatal(err)
	}
	if s, b := mapLen(t, n, lbServices), mapLen(t, n, lbBackends); s != 4 || b != 4 {
		t.Fatalf("maps hold %d Services and %d backends, want 4 and 4", s, b)
	}
	prog, err := ebpf.LoadPinnedProgram(n.path(lbProg), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	client := ap("10.244.0.5:40000")
	expect := func(what string, in []byte, wantRet uint32, wantSrc, wantDst netip.AddrPort) {
		t.Helper()
		ret, out := run(t, prog, in)
		src, dst := tuple(t, out)
		if ret != wantRet || src != wantSrc || dst != wantDst {
			t.Errorf("%s: verdict %#x, %s -> %s; want %#x, %s -> %s", what, ret, src, dst, wantRet, wantSrc, wantDst)
		}
	}
	stats := func(want LBStats) {
		t.Helper()
		got, err := n.LBStats()
		if err != nil || got != want {
			t.Errorf("stats %+v (%v), want %+v", got, err, want)
		}
	}
	stats(LBStats{})

	expect("first packet", syn(pkt(unix.IPPROTO_TCP, client, web, "GET /")), tcxNext, client, be0)
	stats(LBStats{Packets: 1, New: 1})
	expect("second packet", pkt(unix.IPPROTO_TCP, client, web, "more"), tcxNext, client, be0)
	stats(LBStats{Packets: 2, New: 1, Forward: 1})
	expect("reply", pkt(unix.IPPROTO_TCP, be0, client, "200 OK"), tcxNext, web, client)
	stats(LBStats{Packets: 3, New: 1, Forward: 1, Reply: 1})
	expect("no backend", syn(pkt(unix.IPPROTO_TCP, client, empty, "")), tcActShot, client, empty)
	stats(LBStats{Packets: 4, New: 1, Forward: 1, Reply: 1, NoBackend: 1})
	other := ap("10.244.1.9:80")
	expect("not a Service", syn(pkt(unix.IPPROTO_TCP, client, other, "")), tcxNext, client, other)
	expect("a Service's port over the other protocol", pkt(unix.IPPROTO_UDP, client, web, "x"), tcxNext, client, web)
	stats(LBStats{Packets: 6, New: 1, Forward: 1, Reply: 1, NoBackend: 1})

	// UDP, with a checksum and without one.
	expect("udp", pkt(unix.IPPROTO_UDP, client, dns, "query"), tcxNext, client, beDNS)
	expect("udp reply", pkt(unix.IPPROTO_UDP, beDNS, client, "answer"), tcxNext, dns, client)
	noSum := pkt(unix.IPPROTO_UDP, ap("10.244.0.5:40001"), dns, "query")
	noSum[34+6], noSum[34+7] = 0, 0
	ret, out := run(t, prog, noSum)
	if _, dst := tuple(t, out); ret != tcxNext || dst != beDNS || out[34+6] != 0 || out[34+7] != 0 {
		t.Errorf("udp without checksum: verdict %#x, to %s, checksum % x; want it DNATed to %s and 0", ret, dst, out[40:42], beDNS)
	}
	stats(LBStats{Packets: 9, New: 3, Forward: 1, Reply: 2, NoBackend: 1})

	// Not IPv4 (ARP): passed untouched, not counted.
	arp := pkt(unix.IPPROTO_TCP, client, web, "")
	binary.BigEndian.PutUint16(arp[12:], unix.ETH_P_ARP)
	if ret, out := run(t, prog, arp); ret != tcxNext || string(out) != string(arp) {
		t.Errorf("ARP frame: verdict %#x, changed: %v", ret, string(out) != string(arp))
	}
	stats(LBStats{Packets: 9, New: 3, Forward: 1, Reply: 2, NoBackend: 1})

	// Random choice between two backends, kept per connection.
	chosen := map[netip.AddrPort]int{}
	for p := uint16(1000); p < 1100; p++ {
		c := netip.AddrPortFrom(client.Addr(), p)
		_, out := run(t, prog, syn(pkt(unix.IPPROTO_TCP, c, two, "")))
		_, dst := tuple(t, out)
		chosen[dst]++
		_, again := run(t, prog, pkt(unix.IPPROTO_TCP, c, two, "again"))
		if _, d := tuple(t, again); d != dst {
			t.Errorf("connection from %s went to %s, then to %s", c, dst, d)
		}
	}
	if len(chosen) != 2 || chosen[be0] < 20 || chosen[be1] < 20 {
		t.Errorf("100 connections to a Service of 2 backends went to %v", chosen)
	}

	// A new table: one Service left, with one backend of its two.
	if err := n.SetServices([]Service{svc(two, "tcp", be1)}); err != nil {
		t.Fatal(err)
	}
	if s, b := mapLen(t, n, lbServices), mapLen(t, n, lbBackends); s != 1 || b != 1 {
		t.Errorf("after shrinking, maps hold %d Services and %d backends, want 1 and 1", s, b)
	}
	for p := uint16(2000); p < 2020; p++ {
		c := netip.AddrPortFrom(client.Addr(), p)
		expect("the one backend left", syn(pkt(unix.IPPROTO_TCP, c, two, "")), tcxNext, c, be1)
	}
	fresh := ap("10.244.0.5:41000")
	expect("a deleted Service", syn(pkt(unix.IPPROTO_TCP, fresh, web, "")), tcxNext, fresh, web)
	expect("a connection made before the delete", pkt(unix.IPPROTO_TCP, client, web, "late"), tcxNext, client, be0)
	// Ports are reused: a new connection (SYN) never follows an old entry of its tuple. The
	// backend opening a connection of its own to the client from the same port is not a reply;
	// after it, its packets are not rewritten; the client's next connection to the Service from
	// the same port is balanced afresh.
	expect("a direct SYN reusing an old reply tuple", syn(pkt(unix.IPPROTO_TCP, be0, client, "")), tcxNext, be0, client)
	expect("the direct connection's next packet", pkt(unix.IPPROTO_TCP, be0, client, "data"), tcxNext, be0, client)
	expect("a new connection to a Service from a reused port", syn(pkt(unix.IPPROTO_TCP, client, two, "")), tcxNext, client, be1)
	if err := n.SetServices([]Service{svc(two, "tcp", be1), svc(two, "tcp", be0)}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a Service given twice: %v", err)
	}
}

// skbCB is struct __sk_buff up to its control buffer (cb[0..4] are words 12 to 16): the
// context a test run of a tc program is given; skbOut has room for the whole struct, which the
// kernel gives back.
type (
	skbCB  [17]uint32
	skbOut [64]uint32
)

// The load balancer's program on a hairpin connection (a pod reaching a Service that gives it
// itself as the backend), crafted packets as TestLBProgram's: the first packet is DNATed to the
// pod and gets ServiceLoopback as its source, keeping its port; later packets follow; the pod's
// reply to ServiceLoopback is turned back into Service -> pod; every packet of the connection
// carries the hairpin mark for the policy engine after it (bpf/lb_mark.h), none the reply
// mark; the Hairpin counter counts the connection once. Another client of the same Service
// keeps its address and is no hairpin.
func TestLBHairpin(t *testing.T) {
	needLB(t)
	n := scratchNode(t, false)
	vip, pod := ap("10.96.0.20:80"), ap("10.244.0.9:8080")
	if err := n.SetServices([]Service{{Addr: vip.Addr(), Port: vip.Port(), Proto: "tcp", Backends: bes(pod)}}); err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.LoadPinnedProgram(n.path(lbProg), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	const hairpinMark0, replyMark0, mark1 = 0x6c626870, 0x6c627270, 0x9e3779b9
	client := netip.AddrPortFrom(pod.Addr(), 43210)
	loop := netip.AddrPortFrom(ServiceLoopback, client.Port())
	expect := func(what string, in []byte, wantSrc, wantDst netip.AddrPort, mark0 uint32) {
		t.Helper()
		var ctx skbOut
		out := make([]byte, len(in)+256)
		ret, err := prog.Run(&ebpf.RunOptions{Data: in, DataOut: out, Context: skbCB{}, ContextOut: &ctx})
		if err != nil {
			t.Fatalf("%s: test run: %v", what, err)
		}
		src, dst := tuple(t, out[:len(in)])
		cb := ctx[12:14]
		wantCB := []uint32{0, 0}
		if mark0 != 0 {
			wantCB = []uint32{mark0, mark1}
		}
		if ret != tcxNext || src != wantSrc || dst != wantDst || !reflect.DeepEqual(cb, wantCB) {
			t.Errorf("%s: verdict %#x, %s -> %s, cb %#x; want %#x, %s -> %s, cb %#x", what, ret, src, dst, cb, tcxNext, wantSrc, wantDst, wantCB)
		}
	}
	expect("hairpin SYN", syn(pkt(unix.IPPROTO_TCP, client, vip, "")), loop, pod, hairpinMark0)
	expect("hairpin data", pkt(unix.IPPROTO_TCP, client, vip, "GET /"), loop, pod, hairpinMark0)
	expect("the pod's reply to the loopback address", pkt(unix.IPPROTO_TCP, pod, loop, "200 OK"), vip, client, hairpinMark0)
	other := ap("10.244.0.5:40000")
	expect("another client", syn(pkt(unix.IPPROTO_TCP, other, vip, "")), other, pod, 0)
	expect("its reply", pkt(unix.IPPROTO_TCP, pod, other, "200 OK"), vip, other, replyMark0)
	if got, err := n.LBStats(); err != nil || got != (LBStats{Packets: 5, New: 2, Forward: 1, Reply: 2, Hairpin: 1}) {
		t.Errorf("stats %+v (%v), want 5 packets, 2 new, 1 forward, 2 replies, 1 hairpin", got, err)
	}
}

// tcxPrograms lists the IDs of the programs at the tcx ingress of an interface.
func tcxPrograms(t *testing.T, ns string, idx int) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	err := netns.Do(ns, func() error {
		r, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		for _, p := range r.Programs {
			ids = append(ids, p.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("query tcx ingress of %d in %s: %v", idx, ns, err)
	}
	return ids
}

// AttachLB in a scratch namespace: the pinned program goes to the tcx ingress of every
// interface but loopback and bridges, once however often it is called, each link pinned;
// attaching to a named interface adds only it; the pin of a link whose interface is gone is
// removed on the next call; an unknown interface is an error naming it.
func TestLBAttachIngress(t *testing.T) {
	needLB(t)
	n := scratchNode(t, true)
	h, err := netns.Netlink(n.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, l := range []netlink.Link{
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "a"}, PeerName: "b"},
		&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}},
	} {
		if err := h.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
	}
	index := func(name string) int {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Index
	}
	lo, a, b, br := index("lo"), index("a"), index("b"), index("br0")
	for i := 0; i < 2; i++ {
		if err := n.AttachLB(); err != nil {
			t.Fatal(err)
		}
	}
	prog, err := ebpf.LoadPinnedProgram(n.path(lbProg), nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := prog.Info()
	prog.Close()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	for _, c := range []struct {
		idx  int
		want int
	}{{lo, 0}, {a, 1}, {b, 1}, {br, 0}} {
		got := tcxPrograms(t, n.NS, c.idx)
		if len(got) != c.want || (c.want == 1 && got[0] != id) {
			t.Errorf("interface %d: programs %v at tcx ingress, want %d of id %d", c.idx, got, c.want, id)
		}
		if pinned := n.pinned(linkPin(lbProg, c.idx)); pinned != (c.want == 1) {
			t.Errorf("interface %d: link pinned %v", c.idx, pinned)
		}
	}
	// A new interface, named.
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "d0"}, PeerName: "d1"}); err != nil {
		t.Fatal(err)
	}
	d0 := index("d0")
	if err := n.AttachLB("d0"); err != nil {
		t.Fatal(err)
	}
	if got := tcxPrograms(t, n.NS, d0); len(got) != 1 || got[0] != id {
		t.Errorf("d0: programs %v, want [%d]", got, id)
	}
	if got := tcxPrograms(t, n.NS, index("d1")); len(got) != 0 {
		t.Errorf("d1 (not named): programs %v, want none", got)
	}
	// The veth pair goes: its pins go on the next attach to every interface (an attach to named
	// interfaces, a pod's, does not list the others).
	if err := h.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := n.AttachLB("d0"); err != nil {
		t.Fatal(err)
	}
	if !n.pinned(linkPin(lbProg, a)) {
		t.Error("an attach to d0 removed the pins of other interfaces")
	}
	if err := n.AttachLB(); err != nil {
		t.Fatal(err)
	}
	for _, idx := range []int{a, b} {
		if n.pinned(linkPin(lbProg, idx)) {
			t.Errorf("pin of the link on deleted interface %d left", idx)
		}
	}
	if !n.pinned(linkPin(lbProg, d0)) {
		t.Error("pin of d0's link gone")
	}
	err = n.AttachLB("nope")
	if err == nil || !strings.Contains(err.Error(), "nope") || !strings.Contains(err.Error(), n.NS) {
		t.Errorf("attach to a missing interface: %v", err)
	}
}
