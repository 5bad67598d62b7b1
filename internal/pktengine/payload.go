package pktengine

import "encoding/binary"

// The payload every generated frame carries, 18 bytes in network byte order:
//
//	0  magic (12 bits, 0xCB5) and flags (4 bits; bit 0: probe)
//	2  stream id (u32; the TEID of the stream in GTP-U mode)
//	6  sequence number within the stream (low 48 bits)
//	12 transmit time, CLOCK_REALTIME in ns (low 48 bits)
//
// 18 bytes is what a 64-byte frame (60 bytes without its FCS) leaves after the Ethernet, IPv4
// and UDP headers. The sequence number and the transmit time are 64-bit values of which the
// wire carries the low 48 bits: the receiver restores the sequence number from the highest one
// of the stream so far (48 bits wrap after 2.8e14 packets: 217 days at 15 Mpps) and takes a
// latency as its own receive time minus the transmit time modulo 2^48 ns (exact as long as
// the latency is below 2^47 ns, 39 hours).
const (
	PayloadLen = 18
	magic      = 0xcb50
	magicMask  = 0xfff0
	flagProbe  = 0x0001
	wireBits   = 48
	wireMask   = 1<<wireBits - 1
)

// Payload is the decoded payload. Seq and TxNs carry 48 bits when read from a frame.
type Payload struct {
	Stream uint32
	Seq    uint64
	TxNs   int64
	Probe  bool
}

// Put writes p into b[:PayloadLen].
func (p Payload) Put(b []byte) {
	_ = b[PayloadLen-1]
	f := uint16(magic)
	if p.Probe {
		f |= flagProbe
	}
	binary.BigEndian.PutUint16(b[0:2], f)
	binary.BigEndian.PutUint32(b[2:6], p.Stream)
	put48(b[6:12], p.Seq)
	put48(b[12:18], uint64(p.TxNs))
}

// PutTxNs rewrites the transmit time of the payload at b.
func PutTxNs(b []byte, ns int64) { put48(b[12:18], uint64(ns)) }

// GetPayload decodes the payload at the start of b; false if b is too short or the magic does
// not match.
func GetPayload(b []byte) (Payload, bool) {
	if len(b) < PayloadLen {
		return Payload{}, false
	}
	f := binary.BigEndian.Uint16(b[0:2])
	if f&magicMask != magic {
		return Payload{}, false
	}
	return Payload{
		Stream: binary.BigEndian.Uint32(b[2:6]),
		Seq:    get48(b[6:12]),
		TxNs:   int64(get48(b[12:18])),
		Probe:  f&flagProbe != 0,
	}, true
}

func put48(b []byte, v uint64) {
	binary.BigEndian.PutUint16(b[0:2], uint16(v>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(v))
}

func get48(b []byte) uint64 {
	return uint64(binary.BigEndian.Uint16(b[0:2]))<<32 | uint64(binary.BigEndian.Uint32(b[2:6]))
}

// extendSeq restores a 64-bit sequence number from its low 48 bits wire, taking the value
// nearest to ref (the highest of the stream so far).
func extendSeq(ref, wire uint64) uint64 {
	const span = 1 << wireBits
	v := ref&^wireMask | wire
	switch {
	case v > ref && v-ref > span/2 && v >= span:
		v -= span
	case v < ref && ref-v > span/2:
		v += span
	}
	return v
}

// latencyNs is the time from a 48-bit transmit time to a full receive time; negative when the
// transmit time is later (the two clocks disagree).
func latencyNs(rxNs int64, tx48 int64) int64 {
	d := (uint64(rxNs) - uint64(tx48)) & wireMask
	if d >= 1<<(wireBits-1) {
		return int64(d) - 1<<wireBits
	}
	return int64(d)
}
