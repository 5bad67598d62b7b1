package policy

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// The eBPF engine follows Cilium's identity scheme: addresses are not matched against sets
// rule by rule; each address maps to a security identity (one longest-prefix lookup in an
// IP cache), and a policy map keyed by (endpoint, direction, identity, protocol, port) says
// what is admitted (one longest-prefix lookup). Two lookups per checked direction, whatever
// the number of pods, policies and set members.
//
// For the first packet of a connection (src, dst, protocol, dport; dport 0 for packets
// without ports), src != dst:
//
//   - if src is an Endpoint with Egress, the packet is admitted for egress iff some Rule with
//     Endpoint = src's ID, Egress = true and Identity = identity(dst) matches protocol and
//     dport; likewise, if dst is an Endpoint with Ingress, for ingress with identity(src);
//     when both apply both must admit. identity(a) is the Identity of the IPCache entry with
//     the longest prefix containing a (0.0.0.0/0 is always there, so every IPv4 address has
//     one).
//   - a Rule matches when Proto is 0, or Proto equals the packet's protocol and the top
//     PortBits bits of dport equal those of Port. As an LPM trie key laid out (endpoint,
//     direction, identity, protocol, port), a Rule is the prefix that stops after the identity
//     (Proto 0) or after PortBits bits of the port; any match exists iff the longest one does.
//
// Identities. An identity is a class of addresses the Program cannot tell apart: same
// membership in every SetAddrs set, same membership in every SetNets set (the longest member
// prefix containing the address decides, an Except member meaning "not in the set"), and the
// same (protocol, port) pairs in every SetAddrPorts set. Every rule of the Program decides a
// flow from these memberships of the flow's far end (peers: SetAddrs / SetNets membership;
// named ports on egress: the destination's pairs) and of the endpoint itself (named ports on
// ingress: the endpoint's own pairs, known at render time), so expanding each rule over the
// identities its peers match decides every flow as the Program does.
//
// The IP cache holds: a /32 for every address of a SetAddrs or SetAddrPorts set and for every
// endpoint; every prefix of a SetNets set (members and exceptions); 0.0.0.0/0. An entry P is
// given the class of the addresses whose longest IP-cache match is P, which is well defined:
//
//   - such an address a is in a SetAddrs or SetAddrPorts set only if it has a /32 entry, so
//     either P is that /32 (a is the one address) or a is in none of those sets;
//   - for a SetNets set S, the members of S containing a are IP-cache prefixes containing a,
//     hence no longer than P (the longest one); prefixes containing a and no longer than P are
//     exactly the prefixes containing P (prefixes containing one address nest). So the
//     members of S containing a are the members of S containing P, the same for every such a:
//     the longest of them (an exception winning a tie, as in ipset) decides a's membership.
//
// 0.0.0.0/0 thus gets the class of an address in no prefix ("world"). An entry no address
// falls to (a prefix wholly covered by longer entries) still gets a class; it is never looked
// up. Equal classes share one identity: identities are numbered 1..m in the order of their
// first entry in IPCache (sorted by address, then prefix length), so 0.0.0.0/0 has identity 1.
//
// A peer Any is the wildcard identity AnyIdentity (0): the kernel looks a packet up with its
// far end's identity and, when nothing matches, with 0, so that "from anywhere" is one rule
// and not one per identity (Cilium's wildcard entry) — except for a named port on egress,
// whose pairs depend on the destination: there Any expands to every identity holding pairs in
// the set. A ports entry Any goes to
// Proto 0; a protocol with Port 0 to PortBits 0; Port..EndPort to the aligned power-of-two
// blocks covering it; a named port (a SetAddrPorts set) on ingress to the endpoint's own
// (protocol, port) pairs in the set, on egress, per identity, to the pairs that identity holds
// in it; only pairs of the entry's protocol count, as in the Evaluator.

// BPFPolicy is a Program rendered for the eBPF policy engine: the endpoints (local pods with
// a firewall) the engine checks, the IP cache mapping addresses to security identities, and
// the policy rules keyed by endpoint, direction, identity, protocol and port (see the comment
// above for the kernel's decision and how identities are built). It decides every flow as the
// Program does (Program.Allows in the package's tests).
type BPFPolicy struct {
	Endpoints []BPFEndpoint // local pods with a firewall (Program.Pods), sorted by IP
	IPCache   []BPFPrefix   // prefix -> identity, longest prefix wins; always holds 0.0.0.0/0
	Rules     []BPFRule     // sorted deterministically, no duplicates
}

// BPFEndpoint is a local pod with a firewall: ID numbers it in Rules (1..n from RenderBPF;
// RenumberLike keeps earlier numbers instead); Ingress/Egress say whether it is isolated in
// that direction (non-empty IngressOf / EgressOf).
type BPFEndpoint struct {
	IP              netip.Addr
	ID              uint32
	Ingress, Egress bool
}

// BPFPrefix maps a prefix to a security identity (1..m from RenderBPF; RenumberLike keeps
// earlier numbers instead; never AnyIdentity).
type BPFPrefix struct {
	Prefix   netip.Prefix
	Identity uint32
}

// AnyIdentity in a BPFRule matches the far end whatever its identity.
const AnyIdentity uint32 = 0

// BPFRule admits packets of endpoint Endpoint in one direction (Egress: the endpoint is the
// source and Identity is the destination's; else the endpoint is the destination and Identity the
// source's; AnyIdentity: any) with protocol Proto (IP protocol number: 6 TCP, 17 UDP, 132 SCTP; 0 = any protocol,
// then PortBits is 0) and a destination port whose top PortBits bits equal Port's (16 = exactly
// Port, 0 = any port; a port range is covered by aligned power-of-two blocks).
//
// Rules are sorted by Endpoint, Egress (ingress first), Identity, Proto, Port, PortBits; Port's
// bits below PortBits are zero.
type BPFRule struct {
	Endpoint uint32
	Egress   bool
	Identity uint32
	Proto    uint8
	Port     uint16
	PortBits uint8
}

// IP protocol numbers of the Kubernetes protocols.
const (
	bpfProtoTCP  uint8 = 6
	bpfProtoUDP  uint8 = 17
	bpfProtoSCTP uint8 = 132
)

// bpfProto is the IP protocol number of a Kubernetes protocol name.
func bpfProto(p string) (uint8, bool) {
	switch corev1.Protocol(p) {
	case corev1.ProtocolTCP:
		return bpfProtoTCP, true
	case corev1.ProtocolUDP:
		return bpfProtoUDP, true
	case corev1.ProtocolSCTP:
		return bpfProtoSCTP, true
	}
	return 0, false
}

// sigElem is one element of an identity's signature: membership of the SetAddrs or SetNets
// set number set (proto 0), or one (proto, port) pair of the SetAddrPorts set number set.
type sigElem struct {
	set   int32
	proto uint8
	port  uint16
}

func cmpSigElem(a, b sigElem) int {
	if c := cmp.Compare(a.set, b.set); c != 0 {
		return c
	}
	if c := cmp.Compare(a.proto, b.proto); c != 0 {
		return c
	}
	return cmp.Compare(a.port, b.port)
}

// netMark is a prefix's role in one SetNets set.
type netMark struct {
	set    int32
	except bool
}

// portBlock is an aligned block of ports: the ports whose top bits bits equal port's.
type portBlock struct {
	port uint16
	bits uint8
}

// RenderBPF renders p for the eBPF policy engine (see BPFPolicy). Its Counts are: Policies =
// the Program's policy chains, PodChains = endpoints, Sets = identities, SetMembers = IPCache
// entries, Rules = BPFRules. p should validate (Program.Validate); what does not parse or
// refers to nothing is ignored, and a rule using it admits nothing through it.
func RenderBPF(p *Program) (*BPFPolicy, Counts) {
	setIdx := make(map[string]int32, len(p.Sets))
	for i, s := range p.Sets {
		setIdx[s.Name] = int32(i)
	}

	// Addresses needing a /32, with their SetAddrs / SetAddrPorts elements; SetNets prefixes.
	hosts := make(map[netip.Addr][]sigElem)
	nets := make(map[netip.Prefix][]netMark)
	var lengths uint64 // bit L: some SetNets prefix has length L
	for i, s := range p.Sets {
		set := int32(i)
		if setIdx[s.Name] != set {
			continue // shadowed by a later set of the same name
		}
		for _, m := range s.Members {
			switch s.Kind {
			case SetAddrs:
				if a, ok := parseV4(m.Addr); ok {
					hosts[a] = append(hosts[a], sigElem{set: set})
				}
			case SetAddrPorts:
				a, ok := parseV4(m.Addr)
				if !ok {
					continue
				}
				proto, okp := bpfProto(m.Protocol)
				if !okp || m.Port < 1 || m.Port > 65535 {
					if _, ok := hosts[a]; !ok {
						hosts[a] = nil // an address of the set all the same
					}
					continue
				}
				hosts[a] = append(hosts[a], sigElem{set: set, proto: proto, port: uint16(m.Port)})
			case SetNets:
				pf, err := netip.ParsePrefix(m.Addr)
				if err != nil || !pf.Addr().Is4() {
					continue
				}
				pf = pf.Masked()
				nets[pf] = append(nets[pf], netMark{set, m.Except})
				lengths |= 1 << pf.Bits()
			}
		}
	}

	// Endpoints, sorted by IP; of two firewalls for one IP the later wins (as in the
	// Evaluator; Validate rejects it).
	type endpoint struct {
		BPFEndpoint
		fw *PodFirewall
	}
	eps := make([]endpoint, 0, len(p.Pods))
	for i := range p.Pods {
		fw := &p.Pods[i]
		a, ok := parseV4(fw.IP)
		if !ok {
			continue
		}
		if _, ok := hosts[a]; !ok {
			hosts[a] = nil
		}
		eps = append(eps, endpoint{BPFEndpoint{IP: a, Ingress: len(fw.IngressOf) > 0, Egress: len(fw.EgressOf) > 0}, fw})
	}
	slices.SortStableFunc(eps, func(a, b endpoint) int { return a.IP.Compare(b.IP) })
	for i := len(eps) - 1; i > 0; i-- {
		if eps[i-1].IP == eps[i].IP {
			eps = slices.Delete(eps, i-1, i)
		}
	}

	// The IP cache's prefixes, sorted by address then length.
	world := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	prefixes := make([]netip.Prefix, 0, len(hosts)+len(nets)+1)
	prefixes = append(prefixes, world)
	for a := range hosts {
		prefixes = append(prefixes, netip.PrefixFrom(a, 32))
	}
	for pf := range nets {
		if _, dup := hosts[pf.Addr()]; pf != world && !(pf.Bits() == 32 && dup) {
			prefixes = append(prefixes, pf)
		}
	}
	slices.SortFunc(prefixes, comparePrefix) // compile.go: address, then length

	// Each entry's signature (see above), deduplicated into identities.
	ipcache := make([]BPFPrefix, len(prefixes))
	idOf := make(map[string]uint32)
	var sigs [][]sigElem // sigs[id-1]
	decided := make([]int, len(p.Sets))
	var sig []sigElem
	var key []byte
	for k, pf := range prefixes {
		stamp := k + 1
		sig = sig[:0]
		if pf.Bits() == 32 {
			sig = append(sig, hosts[pf.Addr()]...)
		}
		for l := pf.Bits(); l >= 0; l-- {
			if lengths&(1<<l) == 0 {
				continue
			}
			marks := nets[netip.PrefixFrom(pf.Addr(), l).Masked()]
			// The longest member decides; of a prefix both member and exception, the exception.
			for _, m := range marks {
				if m.except {
					decided[m.set] = stamp
				}
			}
			for _, m := range marks {
				if !m.except && decided[m.set] != stamp {
					decided[m.set] = stamp
					sig = append(sig, sigElem{set: m.set})
				}
			}
		}
		slices.SortFunc(sig, cmpSigElem)
		sig = slices.Compact(sig)
		key = key[:0]
		for _, e := range sig {
			key = binary.BigEndian.AppendUint32(key, uint32(e.set))
			key = append(key, e.proto)
			key = binary.BigEndian.AppendUint16(key, e.port)
		}
		id, ok := idOf[string(key)]
		if !ok {
			sigs = append(sigs, slices.Clone(sig))
			id = uint32(len(sigs))
			idOf[string(key)] = id
		}
		ipcache[k] = BPFPrefix{pf, id}
	}

	// The identities that are members of each SetAddrs / SetNets set, and all of them.
	members := make([][]uint32, len(p.Sets))
	all := make([]uint32, len(sigs))
	for i, s := range sigs {
		id := uint32(i + 1)
		all[i] = id
		for _, e := range s {
			if e.proto == 0 {
				members[e.set] = append(members[e.set], id)
			}
		}
	}
	// pairs: the (proto, port) pairs identity id holds in SetAddrPorts set s.
	pairs := func(id uint32, s int32) []sigElem {
		sg := sigs[id-1]
		lo, _ := slices.BinarySearchFunc(sg, sigElem{set: s}, cmpSigElem)
		hi := lo
		for hi < len(sg) && sg[hi].set == s {
			hi++
		}
		return sg[lo:hi]
	}
	identityOf := func(a netip.Addr) uint32 {
		i, _ := slices.BinarySearchFunc(ipcache, netip.PrefixFrom(a, 32), func(e BPFPrefix, t netip.Prefix) int {
			return comparePrefix(e.Prefix, t)
		})
		return ipcache[i].Identity // every endpoint has its /32
	}

	chains := make(map[string]*PolicyChain, len(p.Policies))
	for i := range p.Policies {
		chains[p.Policies[i].Name] = &p.Policies[i]
	}

	mark := make([]int, len(sigs)+1)
	stamp := 0
	var peerIDs []uint32
	// peers: the identities some peer matches; any: a peer is Any (ids is then every identity,
	// for named ports on egress).
	peers := func(ps []Peer) (ids []uint32, any bool) {
		stamp++
		peerIDs = peerIDs[:0]
		for _, pe := range ps {
			if pe.Any {
				return all, true
			}
			s, ok := setIdx[pe.Set]
			if !ok {
				continue
			}
			for _, id := range members[s] {
				if mark[id] != stamp {
					mark[id] = stamp
					peerIDs = append(peerIDs, id)
				}
			}
		}
		return peerIDs, false
	}

	out := &BPFPolicy{Endpoints: make([]BPFEndpoint, len(eps)), IPCache: ipcache}
	var blocks []portBlock
	for i := range eps {
		ep := &eps[i]
		ep.ID = uint32(i + 1)
		out.Endpoints[i] = ep.BPFEndpoint
		for _, egress := range []bool{false, true} {
			of := ep.fw.IngressOf
			if egress {
				of = ep.fw.EgressOf
			}
			start := len(out.Rules)
			emit := func(id uint32, proto uint8, b portBlock) {
				out.Rules = append(out.Rules, BPFRule{ep.ID, egress, id, proto, b.port, b.bits})
			}
			for _, name := range of {
				c := chains[name]
				if c == nil {
					continue
				}
				rules := c.Ingress
				if egress {
					rules = c.Egress
				}
				for _, r := range rules {
					all, any := peers(r.Peers)
					if len(all) == 0 {
						continue
					}
					ids := all // the identities of the rule's entries but named ports on egress
					if any {
						ids = []uint32{AnyIdentity}
					}
					for _, pm := range r.Ports {
						if pm.Any {
							for _, id := range ids {
								emit(id, 0, portBlock{})
							}
							continue
						}
						proto, ok := bpfProto(pm.Protocol)
						if !ok {
							continue
						}
						switch {
						case pm.Set != "":
							s, ok := setIdx[pm.Set]
							if !ok || p.Sets[s].Kind != SetAddrPorts {
								continue
							}
							var own []sigElem
							if !egress {
								own = pairs(identityOf(ep.IP), s)
							}
							named := ids
							if egress {
								named = all
							}
							for _, id := range named {
								if egress {
									own = pairs(id, s)
								}
								for _, e := range own {
									if e.proto == proto {
										emit(id, proto, portBlock{e.port, 16})
									}
								}
							}
						case pm.Port == 0:
							for _, id := range ids {
								emit(id, proto, portBlock{})
							}
						default:
							blocks = appendPortBlocks(blocks[:0], pm.Port, max(pm.Port, pm.EndPort))
							for _, id := range ids {
								for _, b := range blocks {
									emit(id, proto, b)
								}
							}
						}
					}
				}
			}
			rs := out.Rules[start:]
			slices.SortFunc(rs, compareBPFRule)
			out.Rules = out.Rules[:start+len(slices.Compact(rs))]
		}
	}

	return out, Counts{
		Policies:   len(p.Policies),
		PodChains:  len(out.Endpoints),
		Sets:       len(sigs),
		SetMembers: len(out.IPCache),
		Rules:      len(out.Rules),
	}
}

// appendPortBlocks appends the aligned power-of-two blocks that cover the ports lo..hi
// (clamped to 0..65535), largest first from lo upwards: 1000-1999 is 1000/13 1008/12 1024/7
// 1536/8 1792/9 1920/10 1984/12.
func appendPortBlocks(dst []portBlock, lo, hi int) []portBlock {
	lo, hi = max(lo, 0), min(hi, 65535)
	for lo <= hi {
		size := 1 << 16
		if lo != 0 {
			size = lo & -lo // the largest block lo is aligned to
		}
		for size > hi-lo+1 {
			size >>= 1
		}
		dst = append(dst, portBlock{uint16(lo), uint8(16 - bits.TrailingZeros(uint(size)))})
		lo += size
	}
	return dst
}

func compareBPFRule(a, b BPFRule) int {
	if c := cmp.Compare(a.Endpoint, b.Endpoint); c != 0 {
		return c
	}
	if a.Egress != b.Egress {
		if b.Egress {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Identity, b.Identity); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Proto, b.Proto); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	return cmp.Compare(a.PortBits, b.PortBits)
}

func parseV4(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	return a, err == nil && a.Is4()
}
