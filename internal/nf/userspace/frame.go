package userspace

import (
	"encoding/binary"
	"net/netip"

	"github.com/cnibench/cnibench/internal/nf"
)

// class is what a frame is to the firewall.
type class uint8

const (
	// classDrop: neither IPv4 nor ARP (IPv6, a VLAN tag, ...), or IPv4 whose headers are
	// malformed or cut short.
	classDrop class = iota
	// classARP passes (transparent kinds let the neighbours resolve each other).
	classARP
	// classIPv4: the rule set decides.
	classIPv4
)

const (
	ethHeaderLen  = 14
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
	ipFragOffset  = 0x1fff
)

// parse classifies an Ethernet frame (from its destination MAC) and, for IPv4, returns what the
// rules look at. A TCP or UDP packet carries its ports; a later fragment of one (which has no
// transport header) and any other protocol have ports 0, so only rules without ports can match
// them. The IPv4 header must be whole (IHL >= 5, options included) and a first TCP/UDP fragment
// must show its ports, else the frame is classDrop. It never reads beyond frame.
func parse(frame []byte) (nf.Packet, class) {
	if len(frame) < ethHeaderLen {
		return nf.Packet{}, classDrop
	}
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case etherTypeARP:
		return nf.Packet{}, classARP
	case etherTypeIPv4:
	default:
		return nf.Packet{}, classDrop
	}
	ip := frame[ethHeaderLen:]
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return nf.Packet{}, classDrop
	}
	ihl := int(ip[0]&0x0f) * 4
	if ihl < 20 || len(ip) < ihl {
		return nf.Packet{}, classDrop
	}
	p := nf.Packet{
		Src:   netip.AddrFrom4([4]byte(ip[12:16])),
		Dst:   netip.AddrFrom4([4]byte(ip[16:20])),
		Proto: ip[9],
	}
	if (p.Proto != nf.TCP && p.Proto != nf.UDP) || binary.BigEndian.Uint16(ip[6:8])&ipFragOffset != 0 {
		return p, classIPv4
	}
	l4 := ip[ihl:]
	if len(l4) < 4 {
		return nf.Packet{}, classDrop
	}
	p.SrcPort = binary.BigEndian.Uint16(l4[0:2])
	p.DstPort = binary.BigEndian.Uint16(l4[2:4])
	return p, classIPv4
}

// allowed is the rule set's decision on a frame: ARP passes, IPv4 goes by rules.Verdict, the
// rest is dropped.
func allowed(rules *nf.RuleSet, frame []byte) bool {
	p, c := parse(frame)
	switch c {
	case classARP:
		return true
	case classIPv4:
		return rules.Verdict(p)
	}
	return false
}
