package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// This file is the model of the kernel: what a node that loaded a Program into iptables+ipset
// or nftables decides for the first packet of a connection. It reads nothing but the Program,
// so it decides exactly what the renderers can decide:
//
//   - a packet from a local pod whose PodFirewall has EgressOf goes through the pod's chain in
//     the egress direction: accepted when some rule of some listed PolicyChain admits it, else
//     dropped; a local pod without EgressOf is not isolated for egress (no chain, no check);
//   - the same for a packet to a local pod whose PodFirewall has IngressOf;
//   - a rule admits when any of its peers matches the other end (the destination for egress,
//     the source for ingress: Any, membership in a SetAddrs set, or a SetNets set where the
//     longest matching prefix decides and an Except prefix means "not in the set", as ipset's
//     nomatch) and any of its port entries matches (Any; the protocol and a port range, Port 0
//     meaning every port of the protocol; or, for a named port, the triple (destination
//     address, protocol, port) being a member of the SetAddrPorts set);
//   - a packet whose source and destination are the same address never leaves the pod (it
//     goes through the pod's loopback): no check applies.
//
// Replies of accepted connections are accepted by connection tracking: a Flow is always the
// first packet of a connection. Node traffic is not modelled (see oracle_test.go).

// Evaluator answers flow questions about one Program, with its sets and chains indexed. Build
// it with Program.Evaluator when asking many questions; the Program methods build one per call.
type Evaluator struct {
	fws       map[netip.Addr]*PodFirewall
	chains    map[string]*PolicyChain
	addrs     map[string]map[netip.Addr]bool
	nets      map[string][]netMember
	addrPorts map[string]map[addrPort]bool
}

type netMember struct {
	prefix netip.Prefix
	except bool
}

type addrPort struct {
	addr  netip.Addr
	proto string
	port  int
}

// Evaluator indexes p for Allows, AllowsEgress and AllowsIngress. Members or addresses that do
// not parse are ignored (Validate reports them); a reference to a missing set matches nothing
// and a reference to a missing chain admits nothing.
func (p *Program) Evaluator() *Evaluator {
	e := &Evaluator{
		fws:       make(map[netip.Addr]*PodFirewall, len(p.Pods)),
		chains:    make(map[string]*PolicyChain, len(p.Policies)),
		addrs:     make(map[string]map[netip.Addr]bool),
		nets:      make(map[string][]netMember),
		addrPorts: make(map[string]map[addrPort]bool),
	}
	for i := range p.Pods {
		if a, err := netip.ParseAddr(p.Pods[i].IP); err == nil {
			e.fws[a] = &p.Pods[i]
		}
	}
	for i := range p.Policies {
		e.chains[p.Policies[i].Name] = &p.Policies[i]
	}
	for _, s := range p.Sets {
		switch s.Kind {
		case SetAddrs:
			m := make(map[netip.Addr]bool, len(s.Members))
			for _, mb := range s.Members {
				if a, err := netip.ParseAddr(mb.Addr); err == nil {
					m[a] = true
				}
			}
			e.addrs[s.Name] = m
		case SetNets:
			var l []netMember
			for _, mb := range s.Members {
				if pf, err := netip.ParsePrefix(mb.Addr); err == nil {
					l = append(l, netMember{pf.Masked(), mb.Except})
				}
			}
			e.nets[s.Name] = l
		case SetAddrPorts:
			m := make(map[addrPort]bool, len(s.Members))
			for _, mb := range s.Members {
				if a, err := netip.ParseAddr(mb.Addr); err == nil {
					m[addrPort{a, mb.Protocol, mb.Port}] = true
				}
			}
			e.addrPorts[s.Name] = m
		}
	}
	return e
}

// Allows reports whether a node running p lets flow f through, both directions checked on
// this node: meant for a Program compiled with every pod Local. For a Program per node,
// combine AllowsEgress on the source's node with AllowsIngress on the destination's node.
func (p *Program) Allows(f Flow) bool { return p.Evaluator().Allows(f) }

// AllowsEgress reports whether p lets f leave its source: true unless the source is a local
// pod isolated for egress whose policies admit no such connection.
func (p *Program) AllowsEgress(f Flow) bool { return p.Evaluator().AllowsEgress(f) }

// AllowsIngress reports whether p lets f reach its destination: true unless the destination
// is a local pod isolated for ingress whose policies admit no such connection.
func (p *Program) AllowsIngress(f Flow) bool { return p.Evaluator().AllowsIngress(f) }

// Allows is Program.Allows on the indexed Program.
func (e *Evaluator) Allows(f Flow) bool { return e.AllowsEgress(f) && e.AllowsIngress(f) }

// AllowsEgress is Program.AllowsEgress on the indexed Program.
func (e *Evaluator) AllowsEgress(f Flow) bool {
	src, dst, ok := parseFlow(f)
	if !ok {
		return true // not an IPv4 packet: not this engine's business
	}
	if src == dst {
		return true // through the pod's loopback: never reaches the node
	}
	fw := e.fws[src]
	if fw == nil || len(fw.EgressOf) == 0 {
		return true
	}
	for _, name := range fw.EgressOf {
		if c := e.chains[name]; c != nil && e.anyRuleAdmits(c.Egress, dst, dst, f) {
			return true
		}
	}
	return false
}

// AllowsIngress is Program.AllowsIngress on the indexed Program.
func (e *Evaluator) AllowsIngress(f Flow) bool {
	src, dst, ok := parseFlow(f)
	if !ok {
		return true
	}
	if src == dst {
		return true
	}
	fw := e.fws[dst]
	if fw == nil || len(fw.IngressOf) == 0 {
		return true
	}
	for _, name := range fw.IngressOf {
		if c := e.chains[name]; c != nil && e.anyRuleAdmits(c.Ingress, src, dst, f) {
			return true
		}
	}
	return false
}

func parseFlow(f Flow) (src, dst netip.Addr, ok bool) {
	src, err1 := netip.ParseAddr(f.Src)
	dst, err2 := netip.ParseAddr(f.Dst)
	return src, dst, err1 == nil && err2 == nil
}

// anyRuleAdmits: does some rule admit a flow whose other end is peer and destination dst?
func (e *Evaluator) anyRuleAdmits(rules []Rule, peer, dst netip.Addr, f Flow) bool {
	for _, r := range rules {
		if e.peersMatch(r.Peers, peer) && e.portsMatch(r.Ports, dst, f) {
			return true
		}
	}
	return false
}

func (e *Evaluator) peersMatch(peers []Peer, a netip.Addr) bool {
	for _, p := range peers {
		if p.Any || e.inSet(p.Set, a) {
			return true
		}
	}
	return false
}

// inSet: is a in the SetAddrs or SetNets set name?
func (e *Evaluator) inSet(name string, a netip.Addr) bool {
	if m, ok := e.addrs[name]; ok {
		return m[a]
	}
	// hash:net semantics: the longest prefix containing a decides; nomatch (Except) wins a
	// tie (duplicates are invalid anyway).
	best, in := -1, false
	for _, m := range e.nets[name] {
		if !m.prefix.Contains(a) {
			continue
		}
		if b := m.prefix.Bits(); b > best || (b == best && m.except) {
			best, in = b, !m.except
		}
	}
	return in
}

func (e *Evaluator) portsMatch(ports []PortMatch, dst netip.Addr, f Flow) bool {
	for _, p := range ports {
		switch {
		case p.Any:
			return true
		case p.Protocol != f.Protocol:
		case p.Set != "":
			if e.addrPorts[p.Set][addrPort{dst, f.Protocol, f.Port}] {
				return true
			}
		case p.Port == 0:
			return true
		case p.Port <= f.Port && f.Port <= max(p.Port, p.EndPort):
			return true
		}
	}
	return false
}

// Limits of the names a Program declares (iptables chain names, ipset set names).
const (
	MaxChainName = 28
	MaxSetName   = 31
)

// Validate checks that p is well formed, as a renderer needs it: names unique and within the
// kernel's limits, every reference resolved and of the right kind, sets sorted without
// duplicates, addresses IPv4, SetNets free of /0 (ipset hash:net cannot hold it), every rule
// with at least one peer and one port entry, every PodFirewall isolated in some direction.
// Compile's output always validates.
func (p *Program) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	kinds := make(map[string]SetKind, len(p.Sets))
	for _, s := range p.Sets {
		if s.Name == "" || len(s.Name) > MaxSetName || strings.ContainsAny(s.Name, " \t\n") {
			bad("set %q: name empty, longer than %d or with blanks", s.Name, MaxSetName)
		}
		if _, dup := kinds[s.Name]; dup {
			bad("set %s: declared twice", s.Name)
		}
		kinds[s.Name] = s.Kind
		var prev string
		for i, m := range s.Members {
			key, err := memberKey(s.Kind, m)
			if err != nil {
				bad("set %s: member %d: %v", s.Name, i, err)
				continue
			}
			if i > 0 && key <= prev {
				bad("set %s: member %d (%s) out of order or duplicate", s.Name, i, m.Addr)
			}
			prev = key
		}
	}

	chains := make(map[string]bool, len(p.Policies)+len(p.Pods))
	checkChain := func(what, name string) {
		if name == "" || len(name) > MaxChainName || strings.ContainsAny(name, " \t\n") {
			bad("%s: chain name %q empty, longer than %d or with blanks", what, name, MaxChainName)
		}
		if chains[name] {
			bad("%s: chain name %s used twice", what, name)
		}
		chains[name] = true
	}
	policyChains := make(map[string]bool, len(p.Policies))
	for _, pc := range p.Policies {
		what := "policy " + pc.Namespace + "/" + pc.Policy
		checkChain(what, pc.Name)
		policyChains[pc.Name] = true
		for _, d := range []struct {
			dir   string
			rules []Rule
		}{{"ingress", pc.Ingress}, {"egress", pc.Egress}} {
			for i, r := range d.rules {
				where := fmt.Sprintf("%s: %s rule %d", what, d.dir, i)
				if len(r.Peers) == 0 || len(r.Ports) == 0 {
					bad("%s: no peer or no port entry", where)
				}
				for _, peer := range r.Peers {
					if peer.Any == (peer.Set != "") {
						bad("%s: a peer is either Any or a set", where)
					} else if k := kinds[peer.Set]; !peer.Any && k != SetAddrs && k != SetNets {
						bad("%s: peer set %q missing or of kind %q", where, peer.Set, k)
					}
				}
				for _, pm := range r.Ports {
					switch {
					case pm.Any:
						if pm.Protocol != "" || pm.Port != 0 || pm.EndPort != 0 || pm.Set != "" {
							bad("%s: an Any port entry has nothing else", where)
						}
					case !validProtocol(pm.Protocol):
						bad("%s: port entry protocol %q", where, pm.Protocol)
					case pm.Set != "":
						if kinds[pm.Set] != SetAddrPorts || pm.Port != 0 || pm.EndPort != 0 {
							bad("%s: named port set %q missing, of the wrong kind, or with a port", where, pm.Set)
						}
					case pm.Port == 0:
						if pm.EndPort != 0 {
							bad("%s: end port without port", where)
						}
					case pm.Port < 1 || pm.EndPort < pm.Port || pm.EndPort > 65535:
						bad("%s: port range %d-%d", where, pm.Port, pm.EndPort)
					}
				}
			}
		}
	}

	ips := make(map[netip.Addr]bool, len(p.Pods))
	for _, fw := range p.Pods {
		what := "pod " + fw.Pod
		checkChain(what, fw.Chain)
		a, err := netip.ParseAddr(fw.IP)
		if err != nil || !a.Is4() {
			bad("%s: ip %q is not IPv4", what, fw.IP)
		} else if ips[a] {
			bad("%s: ip %s used twice", what, a)
		}
		ips[a] = true
		if len(fw.IngressOf) == 0 && len(fw.EgressOf) == 0 {
			bad("%s: isolated in no direction", what)
		}
		for _, name := range append(append([]string(nil), fw.IngressOf...), fw.EgressOf...) {
			if !policyChains[name] {
				bad("%s: refers to missing policy chain %s", what, name)
			}
		}
	}
	return errors.Join(errs...)
}

// memberKey checks one member and returns a string that sorts as members must be sorted.
func memberKey(kind SetKind, m Member) (string, error) {
	switch kind {
	case SetAddrs, SetAddrPorts:
		a, err := netip.ParseAddr(m.Addr)
		if err != nil || !a.Is4() || m.Except {
			return "", fmt.Errorf("%q is not an IPv4 address", m.Addr)
		}
		if kind == SetAddrs {
			if m.Protocol != "" || m.Port != 0 {
				return "", fmt.Errorf("%s: an address member has no port", m.Addr)
			}
			return string(a.AsSlice()), nil
		}
		if !validProtocol(m.Protocol) || m.Port < 1 || m.Port > 65535 {
			return "", fmt.Errorf("%s: bad protocol or port %q %d", m.Addr, m.Protocol, m.Port)
		}
		return fmt.Sprintf("%s%-4s%05d", a.AsSlice(), m.Protocol, m.Port), nil
	case SetNets:
		pf, err := netip.ParsePrefix(m.Addr)
		if err != nil || !pf.Addr().Is4() || pf != pf.Masked() || pf.Bits() == 0 {
			return "", fmt.Errorf("%q is not a canonical IPv4 network with a non-zero prefix", m.Addr)
		}
		if m.Protocol != "" || m.Port != 0 {
			return "", fmt.Errorf("%s: a network member has no port", m.Addr)
		}
		return fmt.Sprintf("%s%02d", pf.Addr().AsSlice(), pf.Bits()), nil
	}
	return "", fmt.Errorf("unknown set kind %q", kind)
}
