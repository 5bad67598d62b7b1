package pktengine

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Mode is how the generator's payload travels: inside GTP-U or right in the outer UDP.
type Mode string

const (
	// GTPU: outer IPv4/UDP to port 2152, an 8-byte GTP-U header (version 1, PT 1, G-PDU, the
	// stream's TEID) and an inner IPv4/UDP packet that carries the payload.
	GTPU Mode = "gtpu"
	// UDP: the payload right in the outer UDP datagram.
	UDP Mode = "udp"
)

// Modes are the valid modes, the default first.
var Modes = []Mode{GTPU, UDP}

// ParseMode checks a mode's name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown mode %q (valid: gtpu, udp)", s)
}

// Header lengths and the frame layout. Frames are untagged Ethernet II with IPv4 headers of
// 20 bytes (no options).
const (
	ethLen  = 14
	ipLen   = 20
	udpLen  = 8
	gtpLen  = 8
	FCSLen  = 4 // the Ethernet frame check sequence: counted in a frame size, never built
	GTPPort = 2152

	gtpFlags   = 0x30 // version 1, protocol type 1 (GTP, not GTP'), no optional fields
	gtpGPDU    = 0xff // message type G-PDU: a user packet follows
	gtpTEIDOff = ethLen + ipLen + udpLen + 4

	etherTypeIPv4 = 0x0800
	protoUDP      = 17
	ipDF          = 0x4000
	ipTTL         = 64

	// MaxFrameSize is the largest frame size (an untagged frame with a 1500-byte MTU).
	MaxFrameSize = 1518
	// MinEthernetFrame is the smallest Ethernet frame size, the smallest frame size of IMIX.
	MinEthernetFrame = 64
)

// The inner packet of GTP-U mode: from a user equipment's address to a server in the data
// network (the addresses and ports are fixed: a VNF forwards by the outer headers).
var (
	InnerSrc     = netip.AddrFrom4([4]byte{10, 45, 0, 2})
	InnerDst     = netip.AddrFrom4([4]byte{10, 46, 0, 2})
	InnerSrcPort = uint16(40000)
	InnerDstPort = uint16(9)
)

// payloadOffset is where the payload starts in a frame of mode m.
func payloadOffset(m Mode) int {
	if m == GTPU {
		return ethLen + ipLen + udpLen + gtpLen + ipLen + udpLen
	}
	return ethLen + ipLen + udpLen
}

// MinFrameSize is the smallest frame size (FCS included) of mode m that holds the payload:
// 64 for UDP, 100 for GTP-U (its two IPv4/UDP header sets and the GTP-U header take 78 bytes).
func MinFrameSize(m Mode) int { return payloadOffset(m) + PayloadLen + FCSLen }

// IMIX is the simple IMIX (64, 594 and 1518 bytes in the proportion 7:4:1) as the repeating
// sequence of 12 frames the generator sends, interleaved so that the large frames do not come
// in bursts. In a mode whose smallest frame is larger than 64 bytes (GTP-U: 100), that
// smallest frame takes the place of the 64-byte frames.
func IMIX(m Mode) []int {
	s := max(MinEthernetFrame, MinFrameSize(m))
	return []int{s, 594, s, 594, s, s, 594, s, 594, s, s, 1518}
}

// FrameIPBytes is the IP packet a frame of size bytes (FCS included) carries: what the MTU of
// the interface it leaves by must hold.
func FrameIPBytes(size int) int { return size - FCSLen - ethLen }

// ParseSize reads a frame size ("64".."1518", at least MinFrameSize(m)) or "imix", and returns
// the repeating sequence of frame sizes to send.
func ParseSize(s string, m Mode) ([]int, error) {
	if strings.EqualFold(s, "imix") {
		return IMIX(m), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, fmt.Errorf("frame size %q is neither a number nor imix", s)
	}
	if lo := MinFrameSize(m); n < lo || n > MaxFrameSize {
		return nil, fmt.Errorf("frame size %d out of range for mode %s (%d..%d, or imix)", n, m, lo, MaxFrameSize)
	}
	return []int{n}, nil
}

// Addrs are a frame's outer addresses and ports.
type Addrs struct {
	SrcMAC, DstMAC   [6]byte
	Src, Dst         netip.Addr // IPv4
	SrcPort, DstPort uint16
}

// BuildFrame writes into buf the frame of mode m and frame size size (RFC 2544 sense: the
// 4-byte FCS is part of the size, so the frame built is size-4 bytes: the kernel or the NIC
// adds no FCS on a veth, and a NIC adds its own) for stream teid, with every header and
// checksum in place and an all-zero payload, and returns it (buf[:size-4]). The IPv4 header
// checksums are computed; the UDP checksums are 0 (allowed for IPv4), so that the payload can
// change without touching a header. buf must hold size-4 bytes; size must be in
// MinFrameSize(m)..MaxFrameSize.
func BuildFrame(buf []byte, a Addrs, m Mode, size int, teid uint32) []byte {
	n := size - FCSLen
	f := buf[:n]
	clear(f)
	copy(f[0:6], a.DstMAC[:])
	copy(f[6:12], a.SrcMAC[:])
	binary.BigEndian.PutUint16(f[12:14], etherTypeIPv4)
	l3 := f[ethLen:]
	putIPv4(l3, a.Src, a.Dst, len(l3))
	putUDP(l3[ipLen:], a.SrcPort, a.DstPort, len(l3)-ipLen)
	if m == GTPU {
		g := l3[ipLen+udpLen:]
		g[0], g[1] = gtpFlags, gtpGPDU
		binary.BigEndian.PutUint16(g[2:4], uint16(len(g)-gtpLen)) // bytes after the GTP header
		binary.BigEndian.PutUint32(g[4:8], teid)
		inner := g[gtpLen:]
		putIPv4(inner, InnerSrc, InnerDst, len(inner))
		putUDP(inner[ipLen:], InnerSrcPort, InnerDstPort, len(inner)-ipLen)
	}
	return f
}

// PutTEID writes a GTP-U frame's TEID (no checksum covers it).
func PutTEID(frame []byte, teid uint32) {
	binary.BigEndian.PutUint32(frame[gtpTEIDOff:gtpTEIDOff+4], teid)
}

// PutSrcPort sets a frame's outer UDP source port (the frame carries no UDP checksum).
func PutSrcPort(frame []byte, port uint16) {
	binary.BigEndian.PutUint16(frame[ethLen+ipLen:], port)
}

func putIPv4(b []byte, src, dst netip.Addr, total int) {
	b[0] = 0x45 // version 4, 20-byte header
	binary.BigEndian.PutUint16(b[2:4], uint16(total))
	binary.BigEndian.PutUint16(b[6:8], ipDF) // DF, ID 0 (RFC 6864: no fragments, no ID needed)
	b[8], b[9] = ipTTL, protoUDP
	s, d := src.As4(), dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[10:12], ipChecksum(b[:ipLen]))
}

func putUDP(b []byte, src, dst uint16, length int) {
	binary.BigEndian.PutUint16(b[0:2], src)
	binary.BigEndian.PutUint16(b[2:4], dst)
	binary.BigEndian.PutUint16(b[4:6], uint16(length))
	binary.BigEndian.PutUint16(b[6:8], 0) // no checksum
}

// ipChecksum is the Internet checksum of an IPv4 header whose checksum field is zero; over a
// header with its checksum in place it is 0.
func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Packet is what the receiver reads from a generator's frame.
type Packet struct {
	Payload
	GTP  bool   // the payload came inside GTP-U
	TEID uint32 // the GTP-U header's TEID (GTP only)
}

// ParseFrame finds a generator's payload in an Ethernet frame: untagged IPv4, unfragmented
// UDP, then either GTP-U (version 1, PT 1, G-PDU; optional fields and extension headers are
// skipped) carrying IPv4/UDP, or the payload directly; the payload's magic must match. ok is
// false for any other frame. The IPv4 header checksums are not checked (the kernel did on the
// way); frame may be cut short after the payload.
func ParseFrame(frame []byte) (p Packet, ok bool) {
	if len(frame) < ethLen || binary.BigEndian.Uint16(frame[12:14]) != etherTypeIPv4 {
		return p, false
	}
	udp, ok := udpPayload(frame[ethLen:])
	if !ok {
		return p, false
	}
	if g, teid, ok := gtpPayload(udp); ok {
		if inner, ok := udpPayload(g); ok {
			if p.Payload, ok = GetPayload(inner); ok {
				p.GTP, p.TEID = true, teid
				return p, true
			}
		}
	}
	p.Payload, ok = GetPayload(udp)
	return p, ok
}

// udpPayload returns the UDP payload of an IPv4 packet (cut to the packet's lengths), or false
// when it is not an unfragmented IPv4 UDP packet with whole headers.
func udpPayload(ip []byte) ([]byte, bool) {
	if len(ip) < ipLen || ip[0]>>4 != 4 || ip[9] != protoUDP {
		return nil, false
	}
	ihl := int(ip[0]&0x0f) * 4
	if ihl < ipLen || len(ip) < ihl+udpLen || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // MF or an offset
		return nil, false
	}
	udp := ip[ihl:]
	if ul := int(binary.BigEndian.Uint16(udp[4:6])); ul >= udpLen && ul < len(udp) {
		udp = udp[:ul]
	}
	return udp[udpLen:], true
}

// gtpPayload returns what a GTP-U G-PDU carries and its TEID, or false when b is not one.
func gtpPayload(b []byte) ([]byte, uint32, bool) {
	if len(b) < gtpLen || b[0]>>5 != 1 || b[0]&0x10 == 0 || b[1] != gtpGPDU {
		return nil, 0, false
	}
	teid := binary.BigEndian.Uint32(b[4:8])
	off := gtpLen
	if b[0]&0x07 != 0 { // E, S or PN: sequence number, N-PDU number and next extension type
		off += 4
		if len(b) < off {
			return nil, 0, false
		}
		next := b[off-1]
		for b[0]&0x04 != 0 && next != 0 { // extension headers: a length in 4-byte units first
			if len(b) <= off || b[off] == 0 || len(b) < off+int(b[off])*4 {
				return nil, 0, false
			}
			off += int(b[off]) * 4
			next = b[off-1]
		}
	}
	return b[off:], teid, true
}
