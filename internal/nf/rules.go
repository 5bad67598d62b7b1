package nf

import (
	"fmt"
	"net/netip"
)

// IP protocol numbers the rules match.
const (
	TCP uint8 = 6
	UDP uint8 = 17
)

// Port is one port of the measured flow.
type Port struct {
	Proto uint8 // TCP or UDP
	Port  uint16
}

// Flow is what the chain must let through: the client to the server's ports, and the server's
// replies from them.
type Flow struct {
	Client, Server netip.Addr
	Ports          []Port
}

// Rule is one stateless firewall rule over IPv4 packets. Zero ports match any port.
type Rule struct {
	Src, Dst         netip.Prefix
	Proto            uint8
	SrcPort, DstPort uint16
	Allow            bool
}

// Packet is what a rule looks at.
type Packet struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
}

// Matches tells whether r matches p.
func (r Rule) Matches(p Packet) bool {
	return r.Proto == p.Proto && r.Src.Contains(p.Src) && r.Dst.Contains(p.Dst) &&
		(r.SrcPort == 0 || r.SrcPort == p.SrcPort) && (r.DstPort == 0 || r.DstPort == p.DstPort)
}

// RuleSet is the firewall every kind enforces, in order: the first rule that matches decides;
// an IPv4 packet no rule matches is dropped. It is stateless (no connection tracking), so every
// packet of the flow is checked against the rules before it, as in seed 000's firewalls; ARP
// passes (transparent kinds must let the neighbours resolve each other), other non-IPv4 frames
// are dropped.
type RuleSet struct {
	Rules []Rule
}

// Verdict is the rule set's decision for p (the reference the kinds are tested against and the
// user-space kinds run).
func (rs RuleSet) Verdict(p Packet) bool {
	for _, r := range rs.Rules {
		if r.Matches(p) {
			return r.Allow
		}
	}
	return false
}

// MaxRules bounds a rule set (the sweep's top is 10,000).
const MaxRules = 100000

// Build makes a rule set of exactly count rules for flow: count - 2*len(flow.Ports) filler
// rules that drop a source the flow never has (one address each from 198.18.0.0/15, RFC 2544's
// benchmark range) towards the server's ports, then the allow rules of the flow (client to
// each server port, each server port back to the client): the matching rules come last, so a
// packet of the flow passes every filler first.
func Build(flow Flow, count int) (RuleSet, error) {
	need := 2 * len(flow.Ports)
	if len(flow.Ports) == 0 || !flow.Client.Is4() || !flow.Server.Is4() {
		return RuleSet{}, fmt.Errorf("flow needs an IPv4 client, server and at least one port")
	}
	if count < need || count > MaxRules {
		return RuleSet{}, fmt.Errorf("rule count %d: must be %d..%d (the flow alone needs %d allow rules); set rules: in the plan to a value in range", count, need, MaxRules, need)
	}
	c, s := netip.PrefixFrom(flow.Client, 32), netip.PrefixFrom(flow.Server, 32)
	rules := make([]Rule, 0, count)
	base := netip.MustParseAddr("198.18.0.1").As4()
	for i := 0; i < count-need; i++ {
		a := base
		n := uint32(a[1]&1)<<16 | uint32(a[2])<<8 | uint32(a[3])
		n += uint32(i)
		a[1], a[2], a[3] = 18|byte(n>>16&1), byte(n>>8), byte(n)
		p := flow.Ports[i%len(flow.Ports)]
		rules = append(rules, Rule{Src: netip.PrefixFrom(netip.AddrFrom4(a), 32), Dst: s, Proto: p.Proto, DstPort: p.Port})
	}
	for _, p := range flow.Ports {
		rules = append(rules,
			Rule{Src: c, Dst: s, Proto: p.Proto, DstPort: p.Port, Allow: true},
			Rule{Src: s, Dst: c, Proto: p.Proto, SrcPort: p.Port, Allow: true})
	}
	return RuleSet{Rules: rules}, nil
}

// ProtoName is the name iptables and OpenFlow give a protocol number.
func ProtoName(p uint8) string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprint(p)
}
