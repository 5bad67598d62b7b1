package pktengine

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
)

var testAddrs = Addrs{
	SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 1}, DstMAC: [6]byte{0x02, 0, 0, 0, 0, 2},
	Src: netip.MustParseAddr("10.251.0.1"), Dst: netip.MustParseAddr("10.251.0.2"),
	SrcPort: 2152, DstPort: GTPPort,
}

// validIPv4 checks an IPv4 header's checksum the way a receiver does: the one's-complement sum
// of its 16-bit words, checksum included, is 0xffff.
func validIPv4(t *testing.T, what string, h []byte) {
	t.Helper()
	var sum uint32
	for i := 0; i < ipLen; i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	if sum != 0xffff {
		t.Fatalf("%s: IPv4 header checksum %#04x is wrong (sum %#x)", what, binary.BigEndian.Uint16(h[10:12]), sum)
	}
}

// checkLayout checks every header of a built frame against the frame size and mode.
func checkLayout(t *testing.T, f []byte, m Mode, size int, teid uint32) {
	t.Helper()
	if len(f) != size-FCSLen {
		t.Fatalf("size %d: frame of %d bytes, want %d (the FCS is not built)", size, len(f), size-FCSLen)
	}
	if binary.BigEndian.Uint16(f[12:14]) != etherTypeIPv4 || !slices.Equal(f[0:6], testAddrs.DstMAC[:]) || !slices.Equal(f[6:12], testAddrs.SrcMAC[:]) {
		t.Fatalf("size %d: bad Ethernet header % x", size, f[:14])
	}
	ip := f[ethLen:]
	validIPv4(t, "outer", ip)
	if got := int(binary.BigEndian.Uint16(ip[2:4])); got != len(ip) || ip[9] != protoUDP || ip[8] != ipTTL {
		t.Fatalf("size %d: outer IPv4 total length %d (want %d), protocol %d, ttl %d", size, got, len(ip), ip[9], ip[8])
	}
	if netip.AddrFrom4([4]byte(ip[12:16])) != testAddrs.Src || netip.AddrFrom4([4]byte(ip[16:20])) != testAddrs.Dst {
		t.Fatalf("size %d: outer addresses % x", size, ip[12:20])
	}
	udp := ip[ipLen:]
	if got := int(binary.BigEndian.Uint16(udp[4:6])); got != len(udp) {
		t.Fatalf("size %d: UDP length %d, want %d", size, got, len(udp))
	}
	if binary.BigEndian.Uint16(udp[0:2]) != testAddrs.SrcPort || binary.BigEndian.Uint16(udp[2:4]) != testAddrs.DstPort {
		t.Fatalf("size %d: UDP ports % x", size, udp[:4])
	}
	if m != GTPU {
		return
	}
	g := udp[udpLen:]
	if g[0] != 0x30 || g[1] != 0xff {
		t.Fatalf("size %d: GTP-U flags %#x type %#x, want 0x30 (v1, PT 1) and 0xff (G-PDU)", size, g[0], g[1])
	}
	if got := int(binary.BigEndian.Uint16(g[2:4])); got != len(g)-gtpLen {
		t.Fatalf("size %d: GTP-U length %d, want %d (what follows the 8-byte header)", size, got, len(g)-gtpLen)
	}
	if got := binary.BigEndian.Uint32(g[4:8]); got != teid {
		t.Fatalf("size %d: TEID %d, want %d", size, got, teid)
	}
	in := g[gtpLen:]
	validIPv4(t, "inner", in)
	if got := int(binary.BigEndian.Uint16(in[2:4])); got != len(in) || in[9] != protoUDP {
		t.Fatalf("size %d: inner IPv4 total length %d (want %d), protocol %d", size, got, len(in), in[9])
	}
	if got := int(binary.BigEndian.Uint16(in[ipLen+4 : ipLen+6])); got != len(in)-ipLen {
		t.Fatalf("size %d: inner UDP length %d, want %d", size, got, len(in)-ipLen)
	}
}

// Every frame size of every mode, and IMIX, builds a frame whose headers are right and whose
// payload parses back.
func TestFrameRoundTrip(t *testing.T) {
	buf := make([]byte, MaxFrameSize)
	for _, m := range Modes {
		var sizes []int
		for s := MinFrameSize(m); s <= MaxFrameSize; s++ {
			sizes = append(sizes, s)
		}
		sizes = append(sizes, IMIX(m)...)
		for i, size := range sizes {
			teid := uint32(0xfffffff0) + uint32(i%16)
			f := BuildFrame(buf, testAddrs, m, size, teid+1)
			if m == GTPU {
				PutTEID(f, teid) // as the generator does for another stream
			}
			checkLayout(t, f, m, size, teid)
			want := Payload{Stream: teid, Seq: uint64(i) * 0x10001, TxNs: 1_700_000_000_123_456_789 + int64(i), Probe: i%7 == 0}
			want.Put(f[payloadOffset(m):])
			got, ok := ParseFrame(f)
			if !ok {
				t.Fatalf("%s size %d: not recognised", m, size)
			}
			want.TxNs &= wireMask
			if got.Payload != want || got.GTP != (m == GTPU) || (m == GTPU && got.TEID != teid) {
				t.Fatalf("%s size %d: parsed %+v, want %+v (GTP %v, TEID %d)", m, size, got, want, m == GTPU, teid)
			}
		}
	}
}

func TestMinSizes(t *testing.T) {
	if MinFrameSize(UDP) != 64 || MinFrameSize(GTPU) != 100 {
		t.Fatalf("smallest frames: udp %d, gtpu %d; want 64 and 100", MinFrameSize(UDP), MinFrameSize(GTPU))
	}
	for _, c := range []struct {
		s    string
		m    Mode
		want []int
	}{
		{"64", UDP, []int{64}},
		{"1518", GTPU, []int{1518}},
		{"100", GTPU, []int{100}},
		{"IMIX", UDP, IMIX(UDP)},
	} {
		got, err := ParseSize(c.s, c.m)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseSize(%q, %s) = %v, %v; want %v", c.s, c.m, got, err, c.want)
		}
	}
	for _, c := range []struct {
		s string
		m Mode
	}{{"63", UDP}, {"99", GTPU}, {"64", GTPU}, {"1519", UDP}, {"x", UDP}, {"", GTPU}} {
		if got, err := ParseSize(c.s, c.m); err == nil {
			t.Errorf("ParseSize(%q, %s) = %v, want an error", c.s, c.m, got)
		}
	}
	for _, m := range Modes {
		n := map[int]int{}
		for _, s := range IMIX(m) {
			n[s]++
		}
		small := max(64, MinFrameSize(m))
		if len(n) != 3 || n[small] != 7 || n[594] != 4 || n[1518] != 1 {
			t.Errorf("IMIX(%s) = %v, want %d, 594 and 1518 in 7:4:1", m, IMIX(m), small)
		}
	}
}

func TestParseFrameRejects(t *testing.T) {
	buf := make([]byte, MaxFrameSize)
	good := func(m Mode) []byte {
		f := slices.Clone(BuildFrame(buf, testAddrs, m, 200, 7))
		Payload{Stream: 7, Seq: 1}.Put(f[payloadOffset(m):])
		return f
	}
	for _, m := range Modes {
		if _, ok := ParseFrame(good(m)); !ok {
			t.Fatalf("%s: the good frame is not recognised", m)
		}
	}
	for name, mangle := range map[string]func(f []byte) []byte{
		"magic":        func(f []byte) []byte { f[payloadOffset(UDP)] ^= 0x80; return f },
		"vlan":         func(f []byte) []byte { binary.BigEndian.PutUint16(f[12:], 0x8100); return f },
		"ipv6":         func(f []byte) []byte { f[ethLen] = 0x60; return f },
		"tcp":          func(f []byte) []byte { f[ethLen+9] = 6; return f },
		"fragment":     func(f []byte) []byte { f[ethLen+6] |= 0x20; return f },
		"later frag":   func(f []byte) []byte { f[ethLen+7] = 1; return f },
		"short":        func(f []byte) []byte { return f[:payloadOffset(UDP)+PayloadLen-1] },
		"ip too short": func(f []byte) []byte { return f[:ethLen+ipLen-1] },
		"empty":        func(f []byte) []byte { return nil },
	} {
		if p, ok := ParseFrame(mangle(good(UDP))); ok {
			t.Errorf("%s: recognised as %+v", name, p)
		}
	}
	// A GTP-U frame whose inner payload is damaged is not the generator's either.
	f := good(GTPU)
	f[payloadOffset(GTPU)+1] ^= 0xf0
	if p, ok := ParseFrame(f); ok {
		t.Errorf("GTP-U with a bad inner magic: recognised as %+v", p)
	}
}

// A GTP-U header with the optional fields and an extension header (as a UPF may add) is
// skipped to the inner packet.
func TestGTPExtensionHeaders(t *testing.T) {
	inner := make([]byte, ipLen+udpLen+PayloadLen)
	putIPv4(inner, InnerSrc, InnerDst, len(inner))
	putUDP(inner[ipLen:], 1, 2, len(inner)-ipLen)
	Payload{Stream: 42, Seq: 9, Probe: true}.Put(inner[ipLen+udpLen:])
	gtp := []byte{0x34, 0xff, 0, 0, 0, 0, 0, 42, // E flag
		0, 0, 0, 0x85, // sequence number, N-PDU number, next extension: PDU session container
		1, 0x00, 0x01, 0} // 4 bytes: length 1, content, next extension type 0
	gtp = append(gtp, inner...)
	binary.BigEndian.PutUint16(gtp[2:4], uint16(len(gtp)-gtpLen))
	f := make([]byte, ethLen+ipLen+udpLen, 200)
	binary.BigEndian.PutUint16(f[12:14], etherTypeIPv4)
	f = append(f, gtp...)
	putIPv4(f[ethLen:], testAddrs.Src, testAddrs.Dst, len(f)-ethLen)
	putUDP(f[ethLen+ipLen:], GTPPort, GTPPort, len(f)-ethLen-ipLen)
	p, ok := ParseFrame(f)
	if !ok || !p.GTP || p.TEID != 42 || p.Stream != 42 || p.Seq != 9 || !p.Probe {
		t.Fatalf("parsed %+v, %v; want GTP TEID 42, stream 42, seq 9, probe", p, ok)
	}
	f[ethLen+ipLen+udpLen+12] = 9 // an extension header longer than the packet
	if p, ok := ParseFrame(f); ok && p.GTP {
		t.Fatalf("a truncated extension header parsed as %+v", p)
	}
}

func TestWire48(t *testing.T) {
	const span = uint64(1) << 48
	for _, c := range []struct{ ref, wire, want uint64 }{
		{0, 5, 5},
		{100, 99, 99},
		{span - 2, 1, span + 1},        // wrapped forwards
		{span + 1, span - 2, span - 2}, // a late frame from before the wrap
		{3*span + 7, 7, 3*span + 7},
		{10, span - 1, span - 1}, // far ahead of a small reference: taken as it is (no negative)
	} {
		if got := extendSeq(c.ref, c.wire); got != c.want {
			t.Errorf("extendSeq(%d, %d) = %d, want %d", c.ref, c.wire, got, c.want)
		}
	}
	rx := int64(1_763_000_000_000_000_000)
	for _, d := range []int64{0, 1, 25_000, 3_600_000_000_000, -1, -40_000} {
		tx := (rx - d) & wireMask
		if got := latencyNs(rx, tx); got != d {
			t.Errorf("latency of %d ns: got %d", d, got)
		}
	}
}
