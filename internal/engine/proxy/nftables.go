package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net"
	"slices"
	"strings"
)

// NFTable is the table kube-proxy's nftables mode owns (family ip): everything it programs
// lives inside it, so its chains need no "KUBE-" prefix.
const NFTable = "kube-proxy"

// nftNameLengthMax is the longest object name nftables accepts (knftables.NameLengthMax);
// kube-proxy keeps 16 of it for the chain-name prefix ("service-", "endpoint-", ...).
const (
	nftNameLengthMax     = 256
	nftChainBaseLenMax   = nftNameLengthMax - 16
	nftServicePrefix     = "service-"
	nftEndpointPrefix    = "endpoint-"
	nftServicesChain     = "services"
	nftMarkMasqChain     = "mark-for-masquerade"
	nftMasqueradingChain = "masquerading"
	nftServiceIPsMap     = "service-ips"
	nftClusterIPsSet     = "cluster-ips"
	nftNoEndpointMap     = "no-endpoint-services"
	nftRejectChain       = "reject-chain"
	nftEPCheckChain      = "service-endpoints-check"
	nftClusterIPsCheck   = "cluster-ips-check"
	nftVerdictMapType    = "ipv4_addr . inet_proto . inet_service : verdict"

	nftExternalPrefix       = "external-"
	nftLocalPrefix          = "local-"
	nftNodePortIPsSet       = "nodeport-ips"
	nftServiceNodePortsMap  = "service-nodeports"
	nftNoEndpointNodePorts  = "no-endpoint-nodeports"
	nftNodePortEPCheckChain = "nodeport-endpoints-check"
	nftNodePortMapType      = "inet_proto . inet_service : verdict"
)

// nftHashAndTruncate is kube-proxy's hashAndTruncate (pkg/proxy/nftables/proxier.go): the
// name prefixed with the first 8 characters of the base32 encoding of its SHA-256, cut to
// 240 characters ("..." at the end) should it be longer. Unlike the iptables mode, the
// readable name stays in the chain name and the hash only disambiguates it.
func nftHashAndTruncate(name string) string {
	sum := sha256.Sum256([]byte(name))
	name = base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
	if len(name) > nftChainBaseLenMax {
		name = name[:nftChainBaseLenMax-3] + "..."
	}
	return name
}

// nftPortBase is kube-proxy's servicePortChainNameBase input: "namespace/name/protocol/port"
// (port is the Service port's name, empty for an unnamed port).
func (s Service) nftPortBase() string {
	return s.Namespace + "/" + s.Name + "/" + strings.ToLower(s.Protocol) + "/" + s.PortName
}

// NFTServiceChain is the Service port's chain in kube-proxy's nftables mode,
// "service-<hash8>-<ns>/<name>/<proto>/<portname>".
func (s Service) NFTServiceChain() string {
	return nftServicePrefix + nftHashAndTruncate(s.nftPortBase())
}

// NFTEndpointChain is the chain of one of its endpoints,
// "endpoint-<hash8>-<ns>/<name>/<proto>/<portname>__<ip>/<port>" (IPv6 colons become dots, as
// kube-proxy does: a chain name cannot hold a colon).
func (s Service) NFTEndpointChain(e Endpoint) string {
	ip := strings.ReplaceAll(e.IP, ":", ".")
	return nftEndpointPrefix + nftHashAndTruncate(fmt.Sprintf("%s__%s/%d", s.nftPortBase(), ip, e.Port))
}

// NFTExternalChain is the chain its NodePort traffic enters,
// "external-<hash8>-<ns>/<name>/<proto>/<portname>" (the hash of NFTServiceChain).
func (s Service) NFTExternalChain() string {
	return nftExternalPrefix + nftHashAndTruncate(s.nftPortBase())
}

// NFTLocalChain is the chain of its endpoints on the rendering's node, for
// externalTrafficPolicy Local: "local-<hash8>-<ns>/<name>/<proto>/<portname>".
func (s Service) NFTLocalChain() string {
	return nftLocalPrefix + nftHashAndTruncate(s.nftPortBase())
}

// nftBaseChains are kube-proxy's base chains (named "<type>-<hook>") that this rendering
// uses, with their hook and priority (dstnat = -100, srcnat = 100, filter = 0).
var nftBaseChains = []struct {
	name, typ, hook string
	prio            int
}{
	{"filter-forward", "filter", "forward", 0},
	{"filter-input", "filter", "input", 0},
	{"filter-output", "filter", "output", 0},
	{"nat-output", "nat", "output", -100},
	{"nat-postrouting", "nat", "postrouting", 100},
	{"nat-prerouting", "nat", "prerouting", -100},
}

// RenderNFTables returns kube-proxy's nftables-mode ruleset for svcs as one `nft -f` input
// and what it holds. The input replaces the table whole and atomically: it starts with
// "add table" + "delete table" (the add makes the delete valid when the table does not exist
// yet) and then declares the full table; nft runs the file as a single netlink batch, so
// packets see either the old ruleset or the new one, never a half-built one, and nothing of
// the previous ruleset (chains of Services that went away, map elements) survives. Hence
// opt.Stale is not needed here and is ignored. (The alternative, "flush table" and redefine,
// keeps the chains and sets: chains of Services that went away would stay, empty, unless
// the caller remembered and deleted them.)
//
// kube-proxy itself keeps the table. Its full syncs (the first one, and after errors)
// re-add and flush every chain and map in place; its partial syncs flush and refill only the
// chains of changed Services, add and delete single map elements it tracks in memory, and
// flush the chains of Services that went away, deleting them a second later (kernels before
// 6.2 did not release a chain still referenced by a just deleted map element). Replacing the
// table costs time proportional to all Services on every change (1 to 2 s for 10,000 on a
// 2-core machine), so the lab also does partial syncs: RenderNFTablesPartial keeps the table
// and writes only what changed, which ApplyNFTables sends through netlink (about 30 ms to add
// one Service to 10,000 there, most of it the kernel's check of the whole table for loops:
// BenchmarkAddOneAt10k, BenchmarkServiceAddOneAt10k in internal/lab). This full rendering is what a partial one falls
// back to (no state yet, a failed Apply, a change of the ruleset's base), and what the lab's
// "full" sync mode measures. ApplyNFTables sends it through netlink too, as one transaction:
// 10,000 Services in 0.37-0.53 s where `nft -f` of the same text takes 0.77-0.89 s (nft's
// own parsing and evaluating is most of its time; BenchmarkNFTFullNetlinkVsNft).
//
// Layout (names and rules as kube-proxy writes them, IPv4 only):
//   - base chains nat-prerouting and nat-output (hook priority dstnat) jump to "services",
//     which dispatches "ip daddr . meta l4proto . th dport" through the verdict map
//     service-ips to the Service's chain;
//   - service-<hash>-<ns>/<name>/<proto>/<port>: masquerade mark for sources outside
//     opt.ClusterCIDR (if set), then "numgen random mod N vmap { 0 : goto endpoint-..., ... }"
//     for N >= 2 endpoints, and "goto endpoint-..." for a single one (see below);
//   - endpoint-...__<ip>/<port>: "ip saddr <ip> jump mark-for-masquerade" (hairpin), then
//     "meta l4proto <proto> dnat to <ip>:<port>";
//   - nat-postrouting (srcnat) jumps to "masquerading", which masquerades (fully-random)
//     marked packets;
//   - a Service without endpoints gets no chain: its ClusterIP . proto . port is put in the
//     no-endpoint-services map, checked by service-endpoints-check from the filter-input,
//     filter-forward and filter-output chains for new connections, which rejects them
//     (goto reject-chain), so clients fail at once instead of timing out;
//   - every ClusterIP is in the cluster-ips set, and cluster-ips-check rejects new
//     connections to a ClusterIP that were not DNATed (a port the Service does not have);
//   - NodePorts (only when a Service has one, see hasNodePorts): "services" also dispatches
//     "meta l4proto . th dport" of packets to opt.NodeIPs (the nodeport-ips set) through the
//     service-nodeports map to external-<hash>-...: for externalTrafficPolicy Cluster it marks
//     for masquerade and goes to the service- chain; for Local it short-circuits traffic from
//     pods (opt.ClusterCIDR) and from the node itself (fib saddr type local, masqueraded) to
//     the service- chain and sends the rest to local-<hash>-..., which balances over the
//     endpoints on opt.NodeName, keeping the client's address. NodePort traffic this node
//     has no endpoint for is in the no-endpoint-nodeports map, checked from filter-input by
//     nodeport-endpoints-check: dropped (Local, none on this node) or rejected (no endpoints
//     at all).
//
// Single endpoint: kube-proxy up to 1.36 wrote "numgen random mod 1 vmap { 0 : goto ... }"
// here too. Every such vmap is an anonymous set, and the kernel, when it creates one, scans
// all sets of the table to pick its name (nf_tables_set_alloc_name, "__map%d"): n Services
// cost O(n^2). Measured on this project's 2-core machine (kernel 6.18, nft 1.0.6), one
// transaction with 10,000 one-endpoint Services took 61 s with the maps and 4 s without. The
// same super-linear sync time was reported upstream (kubernetes issue #139513), and
// kube-proxy 1.37 dropped the map for single-endpoint Services (PR #140723); this rendering
// does the same unless opt.NFTMod1Maps asks for the old form. Services with two or more
// endpoints still need one anonymous map each, so 10,000 of those remain slow to program.
//
// With opt.ServiceCIDR, cluster-ips-check also drops new connections to addresses of the
// service CIDR that are no ClusterIP.
//
// Not rendered (the Service type has none of it): external and load-balancer IPs, firewall
// source ranges (and their filter-prerouting-pre-dnat / filter-output-pre-dnat chains),
// session affinity, internalTrafficPolicy. TestNFTablesMatchesKubeProxy and
// TestNFTablesNodePortsMatchKubeProxy compare the rest, as the kernel lists it, with dumps of
// kube-proxy 1.34 in testdata/real.
//
// Services are ordered by port key and protocol, endpoints by address, so the output is
// deterministic.
func RenderNFTables(svcs []Service, opt Options) ([]byte, Counts) {
	m := buildNFT(svcs, opt)
	return m.full(), m.cnt
}

// nftChain is a chain of the rendering: its name, its base-chain or comment spec, and its
// rules (without the "add rule ip kube-proxy <chain>" prefix).
type nftChain struct {
	name, spec string
	rules      []string
}

// nftElem is an element of a set or map: key, optional comment, and value (maps only).
type nftElem struct{ key, comment, value string }

func (e nftElem) String() string {
	s := e.key
	if e.comment != "" {
		s += fmt.Sprintf(" comment %q", e.comment)
	}
	if e.value != "" {
		s += " : " + e.value
	}
	return s
}

// nftSets are the sets and maps whose elements the rendering fills, in the model's order
// (the el* indices below).
var nftSets = [...]string{nftClusterIPsSet, nftServiceIPsMap, nftNoEndpointMap, nftNodePortIPsSet, nftServiceNodePortsMap, nftNoEndpointNodePorts}

// nftSetDecls declare the sets and maps (by el* index) as kube-proxy does: the object kind
// and what goes between its braces. A full rendering declares them empty; a partial one
// adds elements by declaring them again with an "elements = { ... }" (see
// RenderNFTablesPartial).
var nftSetDecls = [len(nftSets)]struct{ kind, body string }{
	elClusterIPs:          {"set", `type ipv4_addr ; comment "Active ClusterIPs" ;`},
	elServiceIPs:          {"map", "type " + nftVerdictMapType + ` ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ;`},
	elNoEndpoint:          {"map", "type " + nftVerdictMapType + ` ; comment "vmap to drop or reject packets to services with no endpoints" ;`},
	elNodePortIPs:         {"set", `type ipv4_addr ; comment "IPs that accept NodePort traffic" ;`},
	elServiceNodePorts:    {"map", "type " + nftNodePortMapType + ` ; comment "NodePort traffic" ;`},
	elNoEndpointNodePorts: {"map", "type " + nftNodePortMapType + ` ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ;`},
}

// nftDeclOrder is the order the full rendering declares them in (kube-proxy's).
var nftDeclOrder = []int{elClusterIPs, elNoEndpoint, elServiceIPs, elNodePortIPs, elNoEndpointNodePorts, elServiceNodePorts}

const (
	elClusterIPs = iota
	elServiceIPs
	elNoEndpoint
	elNodePortIPs
	elServiceNodePorts
	elNoEndpointNodePorts
)

// nftFrag is a part of the rendering: the base (the chains every rendering has, the
// nodeport-ips set) or one Service port's own chains and elements. A partial rendering
// keeps the fragments of the Services that did not change and renders the others again.
type nftFrag struct {
	chains    []nftChain
	elems     [len(nftSets)][]nftElem
	rules     int
	endpoints int
}

// nftModel is a rendering before it is written out: the base and one fragment per Service
// port, in order (sortedServices'; svcs are the Services as rendered), and how
// many Service ports have each ClusterIP (the cluster-ips set has each once: the ports of a
// Service share it).
type nftModel struct {
	base      *nftFrag
	svcs      []Service
	frags     []*nftFrag
	ipCount   map[string]int
	nodePorts bool // the NodePort sets and maps are declared
	cnt       Counts
}

const nftT = "ip " + NFTable

// chain adds a chain (spec: its base-chain or comment spec, "" for none).
func (f *nftFrag) chain(name, spec string) {
	f.chains = append(f.chains, nftChain{name: name, spec: spec})
}

// elem adds an element to a set or map (an el* index).
func (f *nftFrag) elem(set int, e nftElem) { f.elems[set] = append(f.elems[set], e) }

// rule appends a rule to a chain of f added before (a fragment has a few chains: the search
// is short).
func (f *nftFrag) rule(chain, format string, args ...any) {
	for i := len(f.chains) - 1; i >= 0; i-- {
		if f.chains[i].name == chain {
			f.chains[i].rules = append(f.chains[i].rules, fmt.Sprintf(format, args...))
			f.rules++
			return
		}
	}
	panic("nftables rendering: rule for undeclared chain " + chain)
}

func buildNFT(svcs []Service, opt Options) nftModel {
	svcs = sortedServices(svcs)
	m := nftModel{base: &nftFrag{}, nodePorts: hasNodePorts(svcs), svcs: svcs,
		frags: make([]*nftFrag, len(svcs)), ipCount: make(map[string]int, len(svcs))}
	m.base.base(m.nodePorts, opt)
	for i, s := range svcs {
		m.svcs[i].Endpoints = slices.Clone(s.Endpoints) // the caller's may change later
		m.frags[i] = nftService(s, opt)
		m.ipCount[s.ClusterIP]++
	}
	m.count()
	return m
}

// count sets m.cnt from the fragments.
func (m *nftModel) count() {
	m.cnt = Counts{Services: len(m.frags), Elements: len(m.ipCount)}
	for _, f := range append([]*nftFrag{m.base}, m.frags...) {
		m.cnt.add(f)
	}
}

// add counts a fragment: its endpoints, chains (named in order), rules and elements.
func (c *Counts) add(f *nftFrag) {
	c.Endpoints += f.endpoints
	c.Chains += len(f.chains)
	c.Rules += f.rules
	for _, e := range f.elems {
		c.Elements += len(e)
	}
	for _, ch := range f.chains {
		c.Names = append(c.Names, ch.name)
	}
}

// elems are the elements of a set or map (an el* index), in order: a ClusterIP where the
// first of its Service ports is.
func (m *nftModel) elems(set int) []nftElem {
	elems := slices.Clone(m.base.elems[set])
	seen := map[string]bool{}
	for i, f := range m.frags {
		if ip := m.svcs[i].ClusterIP; set == elClusterIPs && !seen[ip] {
			seen[ip] = true
			elems = append(elems, nftElem{key: ip})
		}
		elems = append(elems, f.elems[set]...)
	}
	return elems
}

// base adds the chains and rules every rendering has, and those of NodePorts if any.
func (f *nftFrag) base(nodePorts bool, opt Options) {
	for _, c := range nftBaseChains {
		f.chain(c.name, fmt.Sprintf("type %s hook %s priority %d ;", c.typ, c.hook, c.prio))
	}
	for _, c := range []string{nftClusterIPsCheck, nftMarkMasqChain, nftMasqueradingChain} {
		f.chain(c, "")
	}
	f.chain(nftRejectChain, `comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ;`)
	f.chain(nftEPCheckChain, "")
	f.chain(nftServicesChain, "")
	if nodePorts {
		f.chain(nftNodePortEPCheckChain, "")
	}

	f.rule(nftClusterIPsCheck, `ip daddr @%s reject comment "Reject traffic to invalid ports of ClusterIPs"`, nftClusterIPsSet)
	if opt.ServiceCIDR != "" {
		f.rule(nftClusterIPsCheck, `ip daddr { %s } drop comment "Drop traffic to unallocated ClusterIPs"`, opt.ServiceCIDR)
	}
	f.rule("filter-forward", "ct state new jump %s", nftEPCheckChain)
	f.rule("filter-forward", "ct state new jump %s", nftClusterIPsCheck)
	if nodePorts {
		f.rule("filter-input", "ct state new jump %s", nftNodePortEPCheckChain)
	}
	f.rule("filter-input", "ct state new jump %s", nftEPCheckChain)
	f.rule("filter-output", "ct state new jump %s", nftEPCheckChain)
	f.rule("filter-output", "ct state new jump %s", nftClusterIPsCheck)
	f.rule(nftMarkMasqChain, "mark set mark or %s", MasqMark)
	f.rule(nftMasqueradingChain, "mark and %s == 0 return", MasqMark)
	f.rule(nftMasqueradingChain, "mark set mark xor %s", MasqMark)
	f.rule(nftMasqueradingChain, "masquerade fully-random")
	f.rule("nat-output", "jump %s", nftServicesChain)
	f.rule("nat-postrouting", "jump %s", nftMasqueradingChain)
	f.rule("nat-prerouting", "jump %s", nftServicesChain)
	f.rule(nftRejectChain, "reject")
	f.rule(nftServicesChain, "ip daddr . meta l4proto . th dport vmap @%s", nftServiceIPsMap)
	f.rule(nftEPCheckChain, "ip daddr . meta l4proto . th dport vmap @%s", nftNoEndpointMap)
	if !nodePorts {
		return
	}
	f.rule(nftServicesChain, "ip daddr @%s meta l4proto . th dport vmap @%s", nftNodePortIPsSet, nftServiceNodePortsMap)
	f.rule(nftNodePortEPCheckChain, "ip daddr @%s meta l4proto . th dport vmap @%s", nftNodePortIPsSet, nftNoEndpointNodePorts)
	for _, ip := range opt.NodeIPs {
		f.elem(elNodePortIPs, nftElem{key: ip})
	}
}

// nftService renders one Service port: its map elements, its chain and its endpoints'
// chains, then its NodePort.
func nftService(s Service, opt Options) *nftFrag {
	f := &nftFrag{}
	p := strings.ToLower(s.Protocol)
	key := fmt.Sprintf("%s . %s . %d", s.ClusterIP, p, s.Port)
	var np nodePort
	if s.NodePort != 0 {
		np = s.nodePortOn(opt.NodeName)
		f.blockNodePort(s, np.fate)
	}
	if len(s.Endpoints) == 0 {
		f.elem(elNoEndpoint, nftElem{key: key, comment: s.PortKey(), value: "goto " + nftRejectChain})
		return f
	}
	svc := s.NFTServiceChain()
	f.elem(elServiceIPs, nftElem{key: key, value: "goto " + svc})
	eps := s.sortedEndpoints()
	f.chain(svc, "")
	if opt.ClusterCIDR != "" {
		// As kube-proxy 1.34 writes it (testdata/real): the ClusterIP only, no port.
		f.rule(svc, "ip daddr %s ip saddr != %s jump %s", s.ClusterIP, opt.ClusterCIDR, nftMarkMasqChain)
	}
	f.balance(s, svc, eps, opt.NFTMod1Maps)
	for _, e := range eps {
		ep := s.NFTEndpointChain(e)
		f.chain(ep, "")
		f.endpoints++
		f.rule(ep, "ip saddr %s jump %s", e.IP, nftMarkMasqChain)
		f.rule(ep, "meta l4proto %s dnat to %s", p, net.JoinHostPort(e.IP, fmt.Sprint(e.Port)))
	}
	if s.NodePort != 0 {
		f.external(s, np, opt)
	}
	return f
}

// balance adds chain's rule that sends a connection to one of eps' endpoint chains, each
// with the same chance (a plain goto for a single one, unless mod1Maps: see RenderNFTables).
func (f *nftFrag) balance(s Service, chain string, eps []Endpoint, mod1Maps bool) {
	if len(eps) == 1 && !mod1Maps {
		f.rule(chain, "goto %s", s.NFTEndpointChain(eps[0]))
		return
	}
	var vm strings.Builder
	for i, e := range eps {
		if i > 0 {
			vm.WriteString(", ")
		}
		fmt.Fprintf(&vm, "%d : goto %s", i, s.NFTEndpointChain(e))
	}
	f.rule(chain, "numgen random mod %d vmap { %s }", len(eps), vm.String())
}

// external adds s's NodePort path on this node (s has endpoints), as nodePort says: its
// service-nodeports element, its external- chain and, for Local with endpoints here, its
// local- chain.
func (f *nftFrag) external(s Service, np nodePort, opt Options) {
	ext, svc := s.NFTExternalChain(), s.NFTServiceChain()
	f.elem(elServiceNodePorts, nftElem{key: s.nftNodePortKey(), value: "goto " + ext})
	f.chain(ext, "")
	if !s.ExternalLocal {
		f.rule(ext, "jump %s", nftMarkMasqChain)
		f.rule(ext, "goto %s", svc)
		return
	}
	if opt.ClusterCIDR != "" {
		f.rule(ext, `ip saddr %s goto %s comment "short-circuit pod traffic"`, opt.ClusterCIDR, svc)
	}
	f.rule(ext, `fib saddr type local jump %s comment "masquerade local traffic"`, nftMarkMasqChain)
	f.rule(ext, `fib saddr type local goto %s comment "short-circuit local traffic"`, svc)
	if np.fate != nodePortServed {
		return // the rest falls through; nodeport-endpoints-check drops it
	}
	local := s.NFTLocalChain()
	f.rule(ext, "goto %s", local)
	f.chain(local, "")
	f.balance(s, local, np.local, opt.NFTMod1Maps)
}

// blockNodePort puts s's NodePort in no-endpoint-nodeports when no endpoint takes its
// traffic on this node: dropped (Local, none here) or rejected (no endpoints at all).
func (f *nftFrag) blockNodePort(s Service, fate nodePortFate) {
	verdict := "drop"
	switch fate {
	case nodePortServed:
		return
	case nodePortRejected:
		verdict = "goto " + nftRejectChain
	}
	f.elem(elNoEndpointNodePorts, nftElem{key: s.nftNodePortKey(), comment: s.PortKey(), value: verdict})
}

// nftNodePortKey is s's key in the NodePort maps, "<proto> . <nodePort>".
func (s Service) nftNodePortKey() string {
	return fmt.Sprintf("%s . %d", strings.ToLower(s.Protocol), s.NodePort)
}

func writeChain(b *strings.Builder, c nftChain) {
	if c.spec != "" {
		fmt.Fprintf(b, "add chain %s %s { %s }\n", nftT, c.name, c.spec)
	} else {
		fmt.Fprintf(b, "add chain %s %s\n", nftT, c.name)
	}
}

func writeRules(b *strings.Builder, c nftChain) {
	for _, r := range c.rules {
		fmt.Fprintf(b, "add rule %s %s %s\n", nftT, c.name, r)
	}
}

// writeElems writes "add element" commands, 1,000 elements each (keeps the lines of a
// 10,000-Service rendering reasonable).
func writeElems(b *strings.Builder, set string, elems []nftElem) {
	writeElemsVerb(b, "add", set, elems)
}

// writeElemsVerb writes "<verb> element" commands (add, delete), 1,000 elements each.
func writeElemsVerb(b *strings.Builder, verb, set string, elems []nftElem) {
	const batch = 1000
	for len(elems) > 0 {
		n := min(batch, len(elems))
		fmt.Fprintf(b, "%s element %s %s { ", verb, nftT, set)
		for i, e := range elems[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.String())
		}
		b.WriteString(" }\n")
		elems = elems[n:]
	}
}

// full writes the whole table: chains are all declared before the rules (a rule cannot name
// a chain not yet added), elements come last.
func (m nftModel) full() []byte {
	var b strings.Builder
	b.Grow(800 * (m.cnt.Chains + 10))
	fmt.Fprintf(&b, "add table %s { comment \"rules for kube-proxy\" ; }\n", nftT)
	fmt.Fprintf(&b, "delete table %s\n", nftT)
	fmt.Fprintf(&b, "add table %s { comment \"rules for kube-proxy\" ; }\n", nftT)
	for _, set := range nftDeclOrder {
		if set >= elNodePortIPs && !m.nodePorts { // the NodePort ones
			continue
		}
		d := nftSetDecls[set]
		fmt.Fprintf(&b, "add %s %s %s { %s }\n", d.kind, nftT, nftSets[set], d.body)
	}
	frags := append([]*nftFrag{m.base}, m.frags...)
	for _, f := range frags {
		for _, c := range f.chains {
			writeChain(&b, c)
		}
	}
	for _, f := range frags {
		for _, c := range f.chains {
			writeRules(&b, c)
		}
	}
	for i, set := range nftSets {
		writeElems(&b, set, m.elems(i))
	}
	return []byte(b.String())
}
