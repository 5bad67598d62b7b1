package ebpf

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/nf"
)

// Return codes of the programs (linux/bpf.h, linux/pkt_cls.h).
const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
	tcShot      = 2
	tcRedirect  = 7
)

// firewall is one of the programs that enforce a rule set, loaded with it, and the codes it
// returns for an allowed and a denied frame.
type firewall struct {
	name        string
	prog        *ebpf.Program
	allow, drop uint32
	xdp         bool
}

// loadFirewalls loads every program that enforces rule sets with rs (closed when the test ends).
func loadFirewalls(t *testing.T, rs nf.RuleSet) []firewall {
	t.Helper()
	for _, k := range []nf.Kind{xdpKind{}, tcKind{}, redirectKind{}} {
		needUsable(t, k)
	}
	var out []firewall
	pass, err := loadXDP(rs, xdpFwFwModeMODE_PASS, 0, 0)
	if err != nil {
		t.Fatalf("load xdp pass: %v", err)
	}
	t.Cleanup(func() { _ = pass.Close() })
	out = append(out, firewall{"xdp pass", pass.XdpFw, xdpPass, xdpDrop, true})
	redir, err := loadXDP(rs, xdpFwFwModeMODE_REDIRECT, 1, 1)
	if err != nil {
		t.Fatalf("load xdp redirect: %v", err)
	}
	t.Cleanup(func() { _ = redir.Close() })
	out = append(out, firewall{"xdp redirect", redir.XdpFw, xdpRedirect, xdpDrop, true})
	tc, err := loadTC(rs, 1, 1)
	if err != nil {
		t.Fatalf("load tc: %v", err)
	}
	t.Cleanup(func() { _ = tc.Close() })
	out = append(out, firewall{"tc", tc.TcFw, tcRedirect, tcShot, false})
	// A test run's skb comes in on the loopback device (1), or on no device (0).
	fw, fwd, err := loadRedirect(rs, map[uint32]uint32{0: 1, 1: 1})
	if err != nil {
		t.Fatalf("load redirect: %v", err)
	}
	t.Cleanup(func() { _ = closeAll(fw, fwd) })
	out = append(out, firewall{"redirect firewall -> forwarder", fw.RedirectFw, tcRedirect, tcShot, false})
	return out
}

// check runs every firewall on frame and fails unless each returns its code for allow.
func check(t *testing.T, fws []firewall, what string, frame []byte, allow bool) {
	t.Helper()
	for _, fw := range fws {
		ret, err := fw.prog.Run(&ebpf.RunOptions{Data: frame})
		if err != nil {
			t.Fatalf("%s: run on %s: %v", fw.name, what, err)
		}
		want := fw.drop
		if allow {
			want = fw.allow
		}
		if ret != want {
			t.Errorf("%s: %s: returned %d, want %d (allow=%v)", fw.name, what, ret, want, allow)
		}
	}
}

// frameOpts shape an IPv4 frame beyond its packet fields.
type frameOpts struct {
	ihl        int    // IPv4 header length in 32-bit words (0: 5)
	version    int    // IP version field (0: 4)
	fragOffset uint16 // in 8-byte units
	l4Len      int    // bytes after the IPv4 header (0: a full TCP/UDP header, or 8)
}

// ipv4Frame builds an Ethernet frame carrying p.
func ipv4Frame(p nf.Packet, o frameOpts) []byte {
	if o.ihl == 0 {
		o.ihl = 5
	}
	if o.version == 0 {
		o.version = 4
	}
	l4 := 8
	if p.Proto == nf.TCP {
		l4 = 20
	}
	if o.l4Len != 0 {
		l4 = o.l4Len
	}
	b := make([]byte, 14+o.ihl*4+l4)
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = byte(o.version<<4 | o.ihl&0xf)
	binary.BigEndian.PutUint16(ip[2:], uint16(o.ihl*4+l4))
	binary.BigEndian.PutUint16(ip[6:], o.fragOffset&0x1fff)
	ip[8] = 64
	ip[9] = p.Proto
	s, d := p.Src.As4(), p.Dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	l := ip[o.ihl*4:]
	if len(l) >= 2 {
		binary.BigEndian.PutUint16(l[0:], p.SrcPort)
	}
	if len(l) >= 4 {
		binary.BigEndian.PutUint16(l[2:], p.DstPort)
	}
	return b
}

func etherFrame(ethertype uint16, payload int) []byte {
	b := make([]byte, 14+payload)
	b[0] = 0xff
	binary.BigEndian.PutUint16(b[12:], ethertype)
	return b
}

// TestVerdictMatchesRuleSet runs the programs on crafted frames (BPF_PROG_TEST_RUN) and
// compares each decision with nf.RuleSet.Verdict: random overlapping rule sets (first match,
// prefixes of every length, ports, protocols), rules that can never match, and the frames
// that are not plain IPv4.
func TestVerdictMatchesRuleSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.1.1", "10.1.0.1", "192.168.7.9", "0.0.0.0", "255.255.255.255"}
	addr := func() netip.Addr { return netip.MustParseAddr(addrs[r.IntN(len(addrs))]) }
	bits := []int{0, 8, 16, 23, 24, 31, 32}
	ports := []uint16{0, 53, 80, 5201, 65535}
	protos := []uint8{nf.TCP, nf.UDP, 1}
	prefix := func() netip.Prefix {
		switch r.IntN(40) {
		case 0:
			return netip.MustParsePrefix("::/0") // IPv6: never contains an IPv4 address
		case 1:
			return netip.Prefix{} // invalid: contains nothing
		case 2:
			return netip.MustParsePrefix("::ffff:10.0.0.1/128") // 4in6: not IPv4
		}
		return netip.PrefixFrom(addr(), bits[r.IntN(len(bits))]) // not necessarily masked
	}
	for set := 0; set < 6; set++ {
		n := []int{0, 1, 3, 10, 40, 200}[set]
		var rs nf.RuleSet
		for i := 0; i < n; i++ {
			rule := nf.Rule{Src: prefix(), Dst: prefix(), Proto: protos[r.IntN(len(protos))], Allow: r.IntN(2) == 0}
			if r.IntN(2) == 0 {
				rule.SrcPort = ports[r.IntN(len(ports))]
			}
			if r.IntN(2) == 0 {
				rule.DstPort = ports[r.IntN(len(ports))]
			}
			rs.Rules = append(rs.Rules, rule)
		}
		t.Run(fmt.Sprintf("rules=%d", n), func(t *testing.T) {
			fws := loadFirewalls(t, rs)
			allowed := 0
			for i := 0; i < 400; i++ {
				p := nf.Packet{Src: addr(), Dst: addr(), Proto: []uint8{nf.TCP, nf.UDP, 1, 0, 132}[r.IntN(5)]}
				if p.Proto == nf.TCP || p.Proto == nf.UDP {
					p.SrcPort, p.DstPort = ports[r.IntN(len(ports))], ports[r.IntN(len(ports))]
				}
				v := rs.Verdict(p)
				if v {
					allowed++
				}
				check(t, fws, fmt.Sprintf("%+v", p), ipv4Frame(p, frameOpts{}), v)
				// The same packet with IP options: the ports are found after them.
				check(t, fws, fmt.Sprintf("%+v with options", p), ipv4Frame(p, frameOpts{ihl: 7}), v)
				// A later fragment carries no ports: only rules without ports can match.
				np := p
				np.SrcPort, np.DstPort = 0, 0
				check(t, fws, fmt.Sprintf("%+v later fragment", p), ipv4Frame(p, frameOpts{fragOffset: 100}), rs.Verdict(np))
			}
			t.Logf("%d rules: %d of 400 random packets allowed", n, allowed)
			for _, f := range []struct {
				what    string
				frame   []byte
				allow   bool
				xdpOnly bool // the kernel refuses to test-run an skb with a short IPv4 header
			}{
				{"ARP", etherFrame(0x0806, 28), true, false},
				{"IPv6", etherFrame(0x86dd, 60), false, false},
				{"802.1Q", etherFrame(0x8100, 60), false, false},
				{"short IPv4 header", etherFrame(0x0800, 10), false, true},
				{"IP version 6 as IPv4", ipv4Frame(nf.Packet{Src: addr(), Dst: addr(), Proto: nf.UDP}, frameOpts{version: 6}), false, false},
				{"IPv4 header length 4", ipv4Frame(nf.Packet{Src: addr(), Dst: addr(), Proto: nf.UDP}, frameOpts{ihl: 4}), false, false},
				{"TCP without ports", ipv4Frame(nf.Packet{Src: addr(), Dst: addr(), Proto: nf.TCP}, frameOpts{l4Len: 3}), false, false},
			} {
				on := fws
				if f.xdpOnly {
					on = nil
					for _, fw := range fws {
						if fw.xdp {
							on = append(on, fw)
						}
					}
				}
				check(t, on, f.what, f.frame, f.allow)
			}
		})
	}
}

// TestVerdictFirstMatchAndLength: the first matching rule decides even when a later one says
// the opposite; a packet walks a long rule set to its last rule (nf.Build's layout, the
// benchmark's) and up to nf.MaxRules.
func TestVerdictFirstMatchAndLength(t *testing.T) {
	c, s := netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("10.250.0.2")
	tcp := nf.Packet{Src: c, Dst: s, Proto: nf.TCP, SrcPort: 40000, DstPort: 5201}
	all := netip.MustParsePrefix("0.0.0.0/0")
	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, 32) }
	cases := []struct {
		name  string
		rules []nf.Rule
		allow bool
	}{
		{"drop before allow", []nf.Rule{{Src: host(c), Dst: host(s), Proto: nf.TCP, DstPort: 5201}, {Src: all, Dst: all, Proto: nf.TCP, Allow: true}}, false},
		{"allow before drop", []nf.Rule{{Src: all, Dst: all, Proto: nf.TCP, Allow: true}, {Src: host(c), Dst: host(s), Proto: nf.TCP, DstPort: 5201}}, true},
		{"other port then allow", []nf.Rule{{Src: host(c), Dst: host(s), Proto: nf.TCP, DstPort: 5202}, {Src: host(c), Dst: host(s), Proto: nf.TCP, SrcPort: 40000, Allow: true}}, true},
		{"other protocol only", []nf.Rule{{Src: all, Dst: all, Proto: nf.UDP, Allow: true}}, false},
		{"no rules", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := nf.RuleSet{Rules: tc.rules}
			if rs.Verdict(tcp) != tc.allow {
				t.Fatalf("test case disagrees with RuleSet.Verdict")
			}
			check(t, loadFirewalls(t, rs), tc.name, ipv4Frame(tcp, frameOpts{}), tc.allow)
		})
	}
	for _, n := range []int{10000, nf.MaxRules} {
		t.Run(fmt.Sprintf("rules=%d", n), func(t *testing.T) {
			rs, err := nf.Build(nf.Flow{Client: c, Server: s, Ports: []nf.Port{{Proto: nf.TCP, Port: 5201}}}, n)
			if err != nil {
				t.Fatal(err)
			}
			fws := loadFirewalls(t, rs)
			check(t, fws, "the flow (last rules)", ipv4Frame(tcp, frameOpts{}), true)
			back := nf.Packet{Src: s, Dst: c, Proto: nf.TCP, SrcPort: 5201, DstPort: 40000}
			check(t, fws, "the flow's replies", ipv4Frame(back, frameOpts{}), true)
			filler := tcp
			filler.Src = netip.MustParseAddr("198.18.0.1")
			check(t, fws, "the first filler's source", ipv4Frame(filler, frameOpts{}), false)
			other := tcp
			other.DstPort = 5299
			check(t, fws, "another port (no rule)", ipv4Frame(other, frameOpts{}), false)
		})
	}
}
