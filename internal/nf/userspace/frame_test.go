package userspace

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cnibench/cnibench/internal/nf"
)

var (
	client = netip.MustParseAddr("10.250.0.1")
	server = netip.MustParseAddr("10.250.0.2")
	// testRules: 10 rules over the test flow (TCP 5201 and UDP 5202 allowed both ways, fillers
	// that drop 198.18.0.x), then a rule without ports that lets UDP from 10.9.0.0/16 through
	// (for fragments and port-less matching).
	testRules = func() nf.RuleSet {
		rs, err := nf.Build(nf.Flow{Client: client, Server: server, Ports: []nf.Port{{Proto: nf.TCP, Port: 5201}, {Proto: nf.UDP, Port: 5202}}}, 10)
		if err != nil {
			panic(err)
		}
		rs.Rules = append(rs.Rules, nf.Rule{Src: netip.MustParsePrefix("10.9.0.0/16"), Dst: netip.MustParsePrefix("0.0.0.0/0"), Proto: nf.UDP, Allow: true})
		return rs
	}()
)

func ether(typ uint16) []byte {
	b := make([]byte, ethHeaderLen)
	copy(b, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(b[12:], typ)
	return b
}

// ipv4 builds an Ethernet frame with an IPv4 header of ihlWords 32-bit words (options zero),
// the given fragment field, and then l4 bytes of transport header.
func ipv4(src, dst netip.Addr, proto uint8, ihlWords int, frag uint16, l4 []byte) []byte {
	ip := make([]byte, ihlWords*4)
	ip[0] = 4<<4 | byte(ihlWords)
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(l4)))
	binary.BigEndian.PutUint16(ip[6:], frag)
	ip[8] = 64
	ip[9] = proto
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	return append(append(ether(etherTypeIPv4), ip...), l4...)
}

func ports(sport, dport uint16, extra int) []byte {
	b := make([]byte, 4+extra)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	return b
}

// patch sets frame[i] to v.
func patch(frame []byte, i int, v byte) []byte {
	frame[i] = v
	return frame
}

func TestParseAndVerdict(t *testing.T) {
	other := netip.MustParseAddr("10.9.1.1")
	for _, c := range []struct {
		name  string
		frame []byte
		class class
		pkt   nf.Packet // for classIPv4: what the rules must see
	}{
		{"arp", append(ether(etherTypeARP), make([]byte, 28)...), classARP, nf.Packet{}},
		{"arp header only", ether(etherTypeARP), classARP, nf.Packet{}},
		{"ipv6", append(ether(0x86dd), make([]byte, 60)...), classDrop, nf.Packet{}},
		{"vlan", append(ether(0x8100), ipv4(client, server, nf.TCP, 5, 0, ports(40000, 5201, 16))[12:]...), classDrop, nf.Packet{}},
		{"tcp allowed", ipv4(client, server, nf.TCP, 5, 0, ports(40000, 5201, 16)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.TCP, SrcPort: 40000, DstPort: 5201}},
		{"tcp reply allowed", ipv4(server, client, nf.TCP, 5, 0x4000, ports(5201, 40000, 16)), classIPv4,
			nf.Packet{Src: server, Dst: client, Proto: nf.TCP, SrcPort: 5201, DstPort: 40000}},
		{"tcp denied port", ipv4(client, server, nf.TCP, 5, 0, ports(40000, 5299, 16)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.TCP, SrcPort: 40000, DstPort: 5299}},
		{"udp allowed", ipv4(client, server, nf.UDP, 5, 0, ports(40000, 5202, 4)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.UDP, SrcPort: 40000, DstPort: 5202}},
		{"udp on the tcp port", ipv4(client, server, nf.UDP, 5, 0, ports(40000, 5201, 4)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.UDP, SrcPort: 40000, DstPort: 5201}},
		{"filler source", ipv4(netip.MustParseAddr("198.18.0.1"), server, nf.TCP, 5, 0, ports(1, 5201, 0)), classIPv4,
			nf.Packet{Src: netip.MustParseAddr("198.18.0.1"), Dst: server, Proto: nf.TCP, SrcPort: 1, DstPort: 5201}},
		{"options ihl=6", ipv4(client, server, nf.TCP, 6, 0, ports(40000, 5201, 0)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.TCP, SrcPort: 40000, DstPort: 5201}},
		{"options ihl=15", ipv4(client, server, nf.UDP, 15, 0, ports(40000, 5202, 0)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.UDP, SrcPort: 40000, DstPort: 5202}},
		{"ihl=4", patch(ipv4(client, server, nf.TCP, 5, 0, ports(40000, 5201, 0)), ethHeaderLen, 4<<4|4), classDrop, nf.Packet{}},
		{"version 6 in an IPv4 frame", patch(ipv4(client, server, nf.TCP, 5, 0, ports(40000, 5201, 0)), ethHeaderLen, 6<<4|5), classDrop, nf.Packet{}},
		{"icmp", ipv4(client, server, 1, 5, 0, make([]byte, 8)), classIPv4, nf.Packet{Src: client, Dst: server, Proto: 1}},
		{"icmp without payload", ipv4(client, server, 1, 5, 0, nil), classIPv4, nf.Packet{Src: client, Dst: server, Proto: 1}},
		{"first fragment", ipv4(client, server, nf.UDP, 5, 0x2000, ports(40000, 5202, 8)), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.UDP, SrcPort: 40000, DstPort: 5202}},
		{"later fragment of allowed flow", ipv4(client, server, nf.UDP, 5, 0x2000|185, []byte{1, 2, 3, 4, 5, 6, 7, 8}), classIPv4,
			nf.Packet{Src: client, Dst: server, Proto: nf.UDP}},
		{"later fragment, port-less rule", ipv4(other, server, nf.UDP, 5, 3, nil), classIPv4,
			nf.Packet{Src: other, Dst: server, Proto: nf.UDP}},
		{"port-less rule, ports", ipv4(other, server, nf.UDP, 5, 0, ports(1, 2, 0)), classIPv4,
			nf.Packet{Src: other, Dst: server, Proto: nf.UDP, SrcPort: 1, DstPort: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			frame := c.frame
			p, cl := parse(frame)
			if cl != c.class {
				t.Fatalf("class %d, want %d", cl, c.class)
			}
			want := false
			switch cl {
			case classARP:
				want = true
			case classIPv4:
				if p != c.pkt {
					t.Fatalf("packet %+v, want %+v", p, c.pkt)
				}
				want = testRules.Verdict(c.pkt)
			}
			if got := allowed(&testRules, frame); got != want {
				t.Fatalf("allowed = %v, want %v (RuleSet.Verdict)", got, want)
			}
			// Every prefix that cuts into the headers is dropped (or is still ARP), and none
			// panics.
			for n := range len(frame) {
				pp, pc := parse(frame[:n])
				switch {
				case pc == classARP && cl == classARP:
				case pc == classIPv4 && cl == classIPv4 && pp == p:
					// the headers the rules need end at or before n
				case pc != classDrop:
					t.Fatalf("prefix of %d bytes: class %d %+v, want drop", n, pc, pp)
				}
				_ = allowed(&testRules, frame[:n])
			}
		})
	}
	// The expectations above exercise both verdicts.
	if !testRules.Verdict(nf.Packet{Src: client, Dst: server, Proto: nf.UDP, SrcPort: 40000, DstPort: 5202}) ||
		testRules.Verdict(nf.Packet{Src: client, Dst: server, Proto: nf.UDP, SrcPort: 40000, DstPort: 5201}) ||
		!testRules.Verdict(nf.Packet{Src: netip.MustParseAddr("10.9.1.1"), Dst: server, Proto: nf.UDP}) {
		t.Fatal("test rule set does not decide as the cases assume")
	}
}

// FuzzParse: parse never panics, never reads beyond the frame, agrees with the bytes, and
// allowed is RuleSet.Verdict of what parse returns. Run with
// go test -fuzz FuzzParse ./internal/nf/userspace/
func FuzzParse(f *testing.F) {
	f.Add(ipv4(client, server, nf.TCP, 5, 0, ports(40000, 5201, 16)))
	f.Add(ipv4(client, server, nf.UDP, 7, 0x2000, ports(40000, 5202, 4)))
	f.Add(ipv4(client, server, nf.UDP, 5, 0x0010, nil))
	f.Add(append(ether(etherTypeARP), make([]byte, 28)...))
	f.Add(append(ether(0x86dd), make([]byte, 40)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		// a copy with no spare capacity: reading beyond len panics
		frame = append([]byte(nil), frame...)[:len(frame):len(frame)]
		p, c := parse(frame)
		want := false
		switch c {
		case classARP:
			want = true
			if len(frame) < ethHeaderLen || binary.BigEndian.Uint16(frame[12:]) != etherTypeARP {
				t.Fatalf("ARP class for %x", frame)
			}
		case classIPv4:
			ip := frame[ethHeaderLen:]
			ihl := int(ip[0]&15) * 4
			if binary.BigEndian.Uint16(frame[12:]) != etherTypeIPv4 || ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl {
				t.Fatalf("IPv4 class for %x", frame)
			}
			if p.Src != netip.AddrFrom4([4]byte(ip[12:16])) || p.Dst != netip.AddrFrom4([4]byte(ip[16:20])) || p.Proto != ip[9] {
				t.Fatalf("addresses/protocol %+v do not match %x", p, frame)
			}
			later := binary.BigEndian.Uint16(ip[6:])&ipFragOffset != 0
			if (p.Proto == nf.TCP || p.Proto == nf.UDP) && !later {
				if p.SrcPort != binary.BigEndian.Uint16(ip[ihl:]) || p.DstPort != binary.BigEndian.Uint16(ip[ihl+2:]) {
					t.Fatalf("ports %+v do not match %x", p, frame)
				}
			} else if p.SrcPort != 0 || p.DstPort != 0 {
				t.Fatalf("ports %+v for a packet without them", p)
			}
			want = testRules.Verdict(p)
		case classDrop:
			if p != (nf.Packet{}) {
				t.Fatalf("dropped frame with a packet %+v", p)
			}
		}
		if got := allowed(&testRules, frame); got != want {
			t.Fatalf("allowed = %v, want %v for %x", got, want, frame)
		}
	})
}
