package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"slices"
	"strings"
)

// portProtoHash is kube-proxy's chain-name hash: the first 16 characters of the base32
// encoding of SHA-256(servicePortName + protocol [+ endpoint]).
func portProtoHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "")))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// SvcChain is the Service port's chain, KUBE-SVC-<hash>.
func (s Service) SvcChain() string { return "KUBE-SVC-" + portProtoHash(s.PortKey(), s.Protocol) }

// SepChain is the chain of one of its endpoints, KUBE-SEP-<hash>.
func (s Service) SepChain(e Endpoint) string {
	return "KUBE-SEP-" + portProtoHash(s.PortKey(), s.Protocol, e.String())
}

// ExtChain is the chain its NodePort traffic enters, KUBE-EXT-<hash> (the hash of SvcChain).
func (s Service) ExtChain() string { return "KUBE-EXT-" + portProtoHash(s.PortKey(), s.Protocol) }

// SvlChain is the chain of its endpoints on the rendering's node, KUBE-SVL-<hash> (the hash
// of SvcChain), for externalTrafficPolicy Local.
func (s Service) SvlChain() string { return "KUBE-SVL-" + portProtoHash(s.PortKey(), s.Protocol) }

// kube-proxy's NodePort chains: KUBE-NODEPORTS (nat) dispatches NodePorts to the Services'
// KUBE-EXT- chains; KUBE-EXTERNAL-SERVICES (filter, the rendering's only filter-table chain)
// drops or rejects NodePort traffic a node has no endpoint for.
const (
	nodePortsChain    = "KUBE-NODEPORTS"
	extServicesChain  = "KUBE-EXTERNAL-SERVICES"
	extServicesHookCm = "kubernetes externally-visible service portals"
)

// Hooks are the rules that send traffic into kube-proxy's chains, one argv each (after
// "iptables"); kube-proxy ensures them one by one, outside the restore input. The filter
// ones only matter to a rendering with a *filter section (NodePorts): ApplyIPTables ensures
// the hooks of the tables its input has. (kube-proxy inserts its hooks at the top of the
// built-in chains; these are appended, as the lab always did.)
func Hooks() [][]string {
	return [][]string{
		{"-t", "nat", "-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
		{"-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
		{"-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING"},
		{"-t", "filter", "-A", "INPUT", "-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", extServicesHookCm, "-j", extServicesChain},
		{"-t", "filter", "-A", "FORWARD", "-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", extServicesHookCm, "-j", extServicesChain},
	}
}

// RenderIPTables returns kube-proxy's chains for svcs, as the node opt.NodeName sees them,
// as iptables-restore input (to be applied with --noflush: the declared chains are
// replaced, the rest of the tables is left alone) and what it holds. Services are ordered by
// their port key, endpoints by address, so the output is deterministic.
//
// The nat table holds KUBE-SERVICES -> KUBE-SVC-<hash> -> KUBE-SEP-<hash> for ClusterIPs,
// and, when a Service has a NodePort, KUBE-NODEPORTS (jumped to last from KUBE-SERVICES for
// local destination addresses) -> KUBE-EXT-<hash>: for externalTrafficPolicy Cluster it
// marks for masquerade and goes to KUBE-SVC-; for Local it short-circuits traffic from pods
// and from the node itself to KUBE-SVC- and sends the rest to KUBE-SVL-<hash>, the
// endpoints on this node, keeping the client's address. A Local Service with no endpoint
// on this node (or a NodePort Service without endpoints) gets a DROP (REJECT) rule in the
// filter table's KUBE-EXTERNAL-SERVICES, in a *filter section that declares only that chain.
// The section is there whenever a Service has a NodePort, and also when opt.Stale names the
// chain (an earlier rendering had NodePorts): then it flushes the rules left from then. The
// chain itself stays, as the hooks jump to it. A Service without endpoints gets nothing
// else: kube-proxy rejects its ClusterIP in the filter table, the lab leaves it unreachable.
// With more than 1,000 endpoints in all, the endpoint chains' rules and the jumps to them go
// without comments, as in kube-proxy's large cluster mode (largeClusterEndpoints).
func RenderIPTables(svcs []Service, opt Options) ([]byte, Counts) {
	w := buildIPT(svcs, opt, nil)
	filter := w.nodePorts || slices.Contains(opt.Stale, extServicesChain)
	return w.text(opt.Stale, filter), w.counts(filter)
}

// buildIPT renders svcs into a writer, keeping each Service's part apart (w.frags). With
// prev (a partial rendering), a Service that is as prev rendered it, on the same node and
// cluster CIDR, is not rendered again: prev's part is taken as it is, and the writer
// collects no text (RenderIPTablesPartial writes its own).
func buildIPT(svcs []Service, opt Options, prev *IPTState) *iptWriter {
	svcs = sortedServices(svcs)
	w := &iptWriter{cnt: Counts{Services: len(svcs)}, nodePorts: hasNodePorts(svcs), noText: prev != nil,
		svcs: svcs, frags: make([]*iptFrag, len(svcs)), large: largeCluster(svcs)}
	for _, c := range []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"} {
		w.chain(c)
	}
	if w.nodePorts {
		w.chain(nodePortsChain)
	}
	w.rule("-A KUBE-POSTROUTING -m mark ! --mark %s/%s -j RETURN", MasqMark, MasqMark)
	w.rule("-A KUBE-POSTROUTING -j MARK --xor-mark %s", MasqMark)
	w.rule(`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`)
	w.rule("-A KUBE-MARK-MASQ -j MARK --or-mark %s", MasqMark)
	reuse := prev != nil && prev.node == opt.NodeName && prev.clusterCIDR == opt.ClusterCIDR
	j := 0 // prev's Services, in the same order
	for i, s := range svcs {
		if reuse {
			for ; j < len(prev.svcs) && cmpServices(&prev.svcs[j], &svcs[i]) < 0; j++ {
			}
			if j < len(prev.svcs) && cmpServices(&prev.svcs[j], &svcs[i]) == 0 && sameService(prev.svcs[j], s) {
				w.svcs[i], w.frags[i] = prev.svcs[j], prev.frags[j]
				w.replay(w.frags[i])
				continue
			}
		}
		w.svcs[i].Endpoints = slices.Clone(s.Endpoints) // the caller's may change later
		w.frag = &iptFrag{}
		w.service(s, opt)
		w.frags[i], w.frag = w.frag, nil
	}
	w.after = true
	if w.nodePorts {
		// Last, so that ClusterIPs are matched first. Every local address serves NodePorts
		// (kube-proxy's default nodePortAddresses, hence no opt.NodeIPs here) except
		// loopback ones: DNAT from 127.0.0.0/8 needs route_localnet, which the lab never
		// sets (kube-proxy's localhostNodePorts: false, as on the cluster of testdata/real).
		w.rule(`-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j %s`, nodePortsChain)
	}
	return w
}

// largeClusterEndpoints is kube-proxy's largeClusterEndpointsThreshold (iptables mode): with
// more endpoints than this over all Service ports, it is in "large cluster mode" and leaves
// the comments off the rules of the KUBE-SEP- chains and off the jumps to them (in KUBE-SVC-
// and KUBE-SVL-), "to reduce the size of iptables by 40%+". The other rules keep theirs.
const largeClusterEndpoints = 1000

// largeCluster says whether kube-proxy renders svcs in large cluster mode.
func largeCluster(svcs []Service) bool {
	n := 0
	for _, s := range svcs {
		n += len(s.Endpoints)
	}
	return n > largeClusterEndpoints
}

// iptWriter collects an iptables rendering: the nat table's chain declarations and rules,
// the filter table's rules, and what they hold; and, apart, each Service's part of it.
type iptWriter struct {
	chains, rules, filter strings.Builder
	noText                bool // collect the parts and counts only
	cnt                   Counts
	nodePorts             bool // a Service has a NodePort: KUBE-NODEPORTS, the filter rules
	large                 bool // kube-proxy's large cluster mode: see largeClusterEndpoints
	// head and tail are the rules written outside any Service's part, before them
	// (KUBE-POSTROUTING, KUBE-MARK-MASQ) and after them (KUBE-SERVICES's jump to
	// KUBE-NODEPORTS).
	head, tail []iptRule
	after      bool // the Services are written: the rules go to the tail
	// svcs and frags are the Services (in sortedServices' order, as rendered) and their
	// parts; frag is the part being written.
	svcs  []Service
	frags []*iptFrag
	frag  *iptFrag
}

// iptFrag is a Service port's part of an iptables rendering: the nat chains it declares,
// its nat rules in order (in its own chains, and in KUBE-SERVICES and KUBE-NODEPORTS), its
// filter rules and its endpoints.
type iptFrag struct {
	chains    []string
	rules     []iptRule
	filter    []string
	endpoints int
}

// iptRule is a nat rule and the chain it is in.
type iptRule struct{ chain, line string }

// counts are what the rendering holds, with or without the filter section's chain.
func (w *iptWriter) counts(filter bool) Counts {
	cnt := w.cnt
	if filter {
		cnt.Chains++
		cnt.Names = append(slices.Clip(cnt.Names), extServicesChain)
	}
	return cnt
}

// chain declares a nat chain.
func (w *iptWriter) chain(name string) {
	if !w.noText {
		fmt.Fprintf(&w.chains, ":%s - [0:0]\n", name)
	}
	w.cnt.Chains++
	w.cnt.Names = append(w.cnt.Names, name)
	if w.frag != nil {
		w.frag.chains = append(w.frag.chains, name)
	}
}

// rule appends a nat rule ("-A <chain> ...").
func (w *iptWriter) rule(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	chain, _, _ := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
	w.addRule(iptRule{chain, line})
	switch {
	case w.frag != nil:
		w.frag.rules = append(w.frag.rules, iptRule{chain, line})
	case w.after:
		w.tail = append(w.tail, iptRule{chain, line})
	default:
		w.head = append(w.head, iptRule{chain, line})
	}
}

// addRule writes a nat rule and counts it (rule, or replay of a Service's part).
func (w *iptWriter) addRule(r iptRule) {
	if !w.noText {
		w.rules.WriteString(r.line)
		w.rules.WriteByte('\n')
	}
	w.cnt.Rules++
}

// filterRule appends a filter rule (of KUBE-EXTERNAL-SERVICES).
func (w *iptWriter) filterRule(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	w.addFilterRule(line)
	if w.frag != nil {
		w.frag.filter = append(w.frag.filter, line)
	}
}

// addFilterRule writes a filter rule and counts it.
func (w *iptWriter) addFilterRule(line string) {
	if !w.noText {
		w.filter.WriteString(line)
		w.filter.WriteByte('\n')
	}
	w.cnt.Rules++
}

// endpoint counts an endpoint of the Service being written.
func (w *iptWriter) endpoint() {
	w.cnt.Endpoints++
	if w.frag != nil {
		w.frag.endpoints++
	}
}

// replay writes a Service's part as service wrote it before.
func (w *iptWriter) replay(f *iptFrag) {
	for _, c := range f.chains {
		w.chain(c)
	}
	for _, r := range f.rules {
		w.addRule(r)
	}
	for _, l := range f.filter {
		w.addFilterRule(l)
	}
	w.cnt.Endpoints += f.endpoints
}

// service writes one Service port: its ClusterIP and endpoint chains, then its NodePort.
func (w *iptWriter) service(s Service, opt Options) {
	key, p := s.PortKey(), s.Protocol
	var np nodePort
	if s.NodePort != 0 {
		np = s.nodePortOn(opt.NodeName)
		w.blockNodePort(s, np.fate)
	}
	if len(s.Endpoints) == 0 {
		return // kube-proxy rejects in the filter table; the lab leaves it unreachable
	}
	svc := s.SvcChain()
	match := fmt.Sprintf("-m %s -p %s -d %s/32 --dport %d", p, p, s.ClusterIP, s.Port)
	w.chain(svc)
	w.rule(`-A KUBE-SERVICES -m comment --comment "%s cluster IP" %s -j %s`, key, match, svc)
	if opt.ClusterCIDR != "" {
		w.rule(`-A %s -m comment --comment "%s cluster IP" %s ! -s %s -j KUBE-MARK-MASQ`, svc, key, match, opt.ClusterCIDR)
	}
	eps := s.sortedEndpoints()
	for i, e := range eps {
		sep := s.SepChain(e)
		w.chain(sep)
		w.endpoint()
		w.pick(s, svc, eps, i)
		cm := w.endpointComment(key)
		w.rule(`-A %s %s-s %s/32 -j KUBE-MARK-MASQ`, sep, cm, e.IP)
		w.rule(`-A %s %s-m %s -p %s -j DNAT --to-destination %s`, sep, cm, p, p, e)
	}
	if s.NodePort != 0 {
		w.external(s, np, opt.ClusterCIDR)
	}
}

// pick writes chain's rule that sends a connection to the endpoint chain of eps[i]: with
// probability 1/(endpoints left), so that each gets the same share; the last one always.
func (w *iptWriter) pick(s Service, chain string, eps []Endpoint, i int) {
	e := eps[i]
	cm := w.endpointComment(`"` + s.PortKey() + " -> " + e.String() + `"`)
	if n := len(eps) - i; n > 1 {
		w.rule(`-A %s %s-m statistic --mode random --probability %.10f -j %s`, chain, cm, 1/float64(n), s.SepChain(e))
	} else {
		w.rule(`-A %s %s-j %s`, chain, cm, s.SepChain(e))
	}
}

// endpointComment is the comment match (with a space after it) of an endpoint chain's rule
// or a jump to one, as kube-proxy writes it: none in large cluster mode.
func (w *iptWriter) endpointComment(text string) string {
	if w.large {
		return ""
	}
	return "-m comment --comment " + text + " "
}

// external writes s's NodePort path on this node (s has endpoints): KUBE-NODEPORTS ->
// KUBE-EXT-<hash> -> KUBE-SVC- (Cluster) or KUBE-SVL- (Local), as nodePort says.
func (w *iptWriter) external(s Service, np nodePort, clusterCIDR string) {
	key, p, ext, svc := s.PortKey(), s.Protocol, s.ExtChain(), s.SvcChain()
	w.rule(`-A %s -m comment --comment %s -m %s -p %s --dport %d -j %s`, nodePortsChain, key, p, p, s.NodePort, ext)
	w.chain(ext)
	if !s.ExternalLocal {
		w.rule(`-A %s -m comment --comment "masquerade traffic for %s external destinations" -j KUBE-MARK-MASQ`, ext, key)
		w.rule(`-A %s -j %s`, ext, svc)
		return
	}
	if clusterCIDR != "" {
		w.rule(`-A %s -m comment --comment "pod traffic for %s external destinations" -s %s -j %s`, ext, key, clusterCIDR, svc)
	}
	w.rule(`-A %s -m comment --comment "masquerade LOCAL traffic for %s external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ`, ext, key)
	w.rule(`-A %s -m comment --comment "route LOCAL traffic for %s external destinations" -m addrtype --src-type LOCAL -j %s`, ext, key, svc)
	if np.fate != nodePortServed {
		return // the rest falls through and KUBE-EXTERNAL-SERVICES drops it
	}
	svl := s.SvlChain()
	w.rule(`-A %s -j %s`, ext, svl)
	w.chain(svl)
	for i := range np.local {
		w.pick(s, svl, np.local, i)
	}
}

// blockNodePort writes the filter rule for s's NodePort traffic that no endpoint takes on
// this node: dropped (Local, none here) or rejected (no endpoints at all).
func (w *iptWriter) blockNodePort(s Service, fate nodePortFate) {
	why, target := "has no local endpoints", "DROP"
	switch fate {
	case nodePortServed:
		return
	case nodePortRejected:
		why, target = "has no endpoints", "REJECT"
	}
	p := s.Protocol
	w.filterRule(`-A %s -m comment --comment "%s %s" -m addrtype --dst-type LOCAL -m %s -p %s --dport %d -j %s`, extServicesChain, s.PortKey(), why, p, p, s.NodePort, target)
}

// text is the restore input: the nat table, with the stale chains of an earlier rendering
// declared (flushed) and deleted, then the filter table if asked for.
func (w *iptWriter) text(stale []string, filter bool) []byte {
	// KUBE-EXTERNAL-SERVICES, the filter chain, is no stale nat chain: the filter section
	// (there whenever stale names it) empties it.
	declared := map[string]bool{extServicesChain: true}
	for _, n := range w.cnt.Names {
		declared[n] = true
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	b.WriteString(w.chains.String())
	for _, s := range stale {
		if !declared[s] {
			fmt.Fprintf(&b, ":%s - [0:0]\n", s)
		}
	}
	b.WriteString(w.rules.String())
	for _, s := range stale {
		if !declared[s] {
			fmt.Fprintf(&b, "-X %s\n", s)
		}
	}
	b.WriteString("COMMIT\n")
	if filter {
		fmt.Fprintf(&b, "*filter\n:%s - [0:0]\n", extServicesChain)
		b.WriteString(w.filter.String())
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}
