package policy

import (
	"cmp"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Names of the objects a Program declares. They follow kube-router's layout and fit the
// kernel's limits: iptables chain names at most 28 characters, ipset names at most 31. The
// 16-character suffix is the first 80 bits of a SHA-256, in base32 (A-Z, 2-7):
//
//   - PolicyChainPrefix + hash("namespace/name" of the NetworkPolicy), 28 characters;
//   - PodChainPrefix + hash("namespace/name" of the pod), 28 characters;
//   - SrcSetPrefix / DstSetPrefix + hash(kind and sorted members of the set), 25 characters.
//     SRC sets are matched against a packet's source (ingress peers), DST sets against its
//     destination (egress peers, named ports).
//
// Set names are derived from their CONTENT, not from the policy that uses them, so sets with
// identical members are declared once and shared (Calico's selector-set dedup): 20,000
// policies whose peers select the same two pods share one set, and the set of a policy that
// changes while its peers do not keeps its name. A hash collision between different contents
// is detected and reported as an error.
const (
	PolicyChainPrefix = "KUBE-NWPLCY-"
	PodChainPrefix    = "KUBE-POD-FW-"
	SrcSetPrefix      = "KUBE-SRC-"
	DstSetPrefix      = "KUBE-DST-"
)

// Compile resolves NetworkPolicies pols over a cluster of pods and namespaces nss into the
// Program the node of the pods marked Local enforces (see ir.go for the meaning of each part).
//
// Selectors are resolved over every pod of the cluster; only local pods get a PodFirewall,
// and only the PolicyChains some local pod refers to are included (with the sets they use). A
// Program compiled with every pod Local, evaluated with Program.Allows, decides every flow as
// Reference does; the property test checks it (both live beside the tests: eval_test.go and
// oracle_test.go). The semantics chosen where the documentation is silent are Reference's:
// ipBlocks match pod addresses too, a pod may always talk to itself, node traffic is not
// modelled.
//
// Resolution details:
//   - a rule's selector peers (podSelector, namespaceSelector, both) are merged into one
//     SetAddrs set; each ipBlock peer is one SetNets set (its cidr plus its excepts, marked
//     Except: longest prefix wins). An ipBlock of cidr /0 is stored as its two /1 halves
//     (ipset hash:net cannot hold a /0). IPv6 ipBlocks can never match this IPv4 engine's
//     flows: they are dropped, and a rule left without peers is dropped (it admits nothing).
//   - a named port is a SetAddrPorts set of (pod address, protocol, port) over the candidate
//     destination pods: for ingress the pods the policy selects, for egress the pods any peer
//     of the rule can match (every pod for an empty "to", the pods inside an ipBlock, since
//     ipBlocks are matched literally). External addresses declare no ports, so a named port
//     never admits a flow to an external address.
//   - a ports entry without port is {Protocol, Port: 0}: every port of that protocol.
//
// Invalid input is rejected with an error naming the object and the field, as the API
// server would reject it: bad selectors, policyTypes, protocols, port numbers or names, endPort
// without a numeric port or below it, peers with no or several kinds, bad CIDRs, excepts not
// strictly inside their cidr; also pods with a bad or duplicate address (pods without an
// address are skipped: nothing can reach them yet), duplicate pods, namespaces or policies,
// pods in unknown namespaces.
//
// The output is deterministic: policies sorted by namespace/name, pods by namespace/name, sets
// by name, every set's members sorted. Compile indexes pods by namespace and by label, so a
// policy selecting pods by one label costs the size of that label's posting list, not the
// size of the cluster (10,000 pods and 20,000 policies compile in a fraction of a second; see
// compile_bench_test.go).
func Compile(pods []Pod, nss []Namespace, pols []networkingv1.NetworkPolicy) (*Program, error) {
	c, err := newCompiler(pods, nss)
	if err != nil {
		return nil, err
	}

	// Pass 1: validate every policy (even those no local pod needs: every node must reject
	// the same input), then sort them so that every list built from them is sorted.
	parsed := make([]*cPolicy, 0, len(pols))
	var errs []error
	byKey := make(map[string]bool, len(pols))
	for i := range pols {
		cp, ferrs := c.parsePolicy(&pols[i])
		if len(ferrs) > 0 {
			errs = append(errs, fmt.Errorf("networkpolicy %s/%s: %w", pols[i].Namespace, pols[i].Name, ferrs.ToAggregate()))
			continue
		}
		if byKey[cp.key] {
			errs = append(errs, fmt.Errorf("networkpolicy %s: declared twice", cp.key))
			continue
		}
		byKey[cp.key] = true
		parsed = append(parsed, cp)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(parsed, func(a, b *cPolicy) int {
		return cmp.Or(cmp.Compare(a.pol.Namespace, b.pol.Namespace), cmp.Compare(a.pol.Name, b.pol.Name))
	})
	chainOwner := make(map[string]string, len(parsed))
	for _, cp := range parsed {
		if other, dup := chainOwner[cp.chain]; dup {
			return nil, fmt.Errorf("networkpolicy %s: chain name %s collides with networkpolicy %s", cp.key, cp.chain, other)
		}
		chainOwner[cp.chain] = cp.key
	}

	// Pass 2: which pods each policy selects; local pods get firewall references.
	fws := make(map[int]*PodFirewall)
	for _, cp := range parsed {
		cp.selected = c.selectInNamespace(cp.pol.Namespace, cp.podSel)
		for _, i := range cp.selected {
			if !c.pods[i].pod.Local {
				continue
			}
			fw := fws[i]
			if fw == nil {
				fw = &PodFirewall{Pod: c.pods[i].key, IP: c.pods[i].addr.String(), Chain: c.pods[i].chain}
				fws[i] = fw
			}
			if cp.ingress {
				fw.IngressOf = append(fw.IngressOf, cp.chain)
			}
			if cp.egress {
				fw.EgressOf = append(fw.EgressOf, cp.chain)
			}
			cp.included = true
		}
	}

	// Pass 3: compile the rules of the policies some local pod refers to.
	prog := &Program{}
	for _, cp := range parsed {
		if !cp.included {
			continue
		}
		pc := PolicyChain{Name: cp.chain, Namespace: cp.pol.Namespace, Policy: cp.pol.Name}
		if cp.ingress {
			for _, r := range cp.in {
				if rule, ok := c.compileRule(cp, r, true); ok {
					pc.Ingress = append(pc.Ingress, rule)
				}
			}
		}
		if cp.egress {
			for _, r := range cp.eg {
				if rule, ok := c.compileRule(cp, r, false); ok {
					pc.Egress = append(pc.Egress, rule)
				}
			}
		}
		prog.Policies = append(prog.Policies, pc)
	}
	if c.err != nil {
		return nil, c.err
	}

	for _, fw := range fws {
		prog.Pods = append(prog.Pods, *fw)
	}
	slices.SortFunc(prog.Pods, func(a, b PodFirewall) int { return cmp.Compare(a.Pod, b.Pod) })
	prog.Sets = make([]Set, 0, len(c.sets))
	for _, s := range c.sets {
		prog.Sets = append(prog.Sets, *s)
	}
	slices.SortFunc(prog.Sets, func(a, b Set) int { return cmp.Compare(a.Name, b.Name) })
	return prog, nil
}

// hashName is prefix + the first 80 bits of SHA-256(s) in base32 (16 characters).
func hashName(prefix, s string) string {
	sum := sha256.Sum256([]byte(s))
	return prefix + base32.StdEncoding.EncodeToString(sum[:10])
}

// PolicyChainName is the name of the PolicyChain of NetworkPolicy namespace/name.
func PolicyChainName(namespace, name string) string {
	return hashName(PolicyChainPrefix, namespace+"/"+name)
}

// PodChainName is the name of the PodFirewall chain of pod namespace/name.
func PodChainName(namespace, name string) string {
	return hashName(PodChainPrefix, namespace+"/"+name)
}

// ---- the cluster, indexed ----

// cPod is a pod with a parsed address.
type cPod struct {
	pod   *Pod
	addr  netip.Addr
	key   string // namespace/name
	chain string
}

// labelKey indexes pods by (namespace, label key, label value); value is unused for the
// by-key index.
type labelKey struct{ ns, k, v string }

// compiler holds the indexed cluster and the sets declared so far.
type compiler struct {
	pods     []cPod
	byNS     map[string][]int   // pod indices per namespace, ascending
	byLabel  map[labelKey][]int // pods per (namespace, key, value), ascending
	byKey    map[labelKey][]int // pods per (namespace, key), ascending
	nsNames  []string           // sorted
	nsLabels map[string]labels.Set

	parsed    map[string]parsedSelector // parsed selectors by raw text
	selCache  map[string][]int          // resolved selections
	sets      map[string]*Set           // by name
	byContent map[string]string         // prefix + content -> set name
	memo      map[string]string         // prefix + description of a selection -> set name
	err       error                     // first set name collision
}

func newCompiler(pods []Pod, nss []Namespace) (*compiler, error) {
	c := &compiler{
		byNS:      make(map[string][]int),
		byLabel:   make(map[labelKey][]int),
		byKey:     make(map[labelKey][]int),
		nsLabels:  make(map[string]labels.Set, len(nss)),
		parsed:    make(map[string]parsedSelector),
		selCache:  make(map[string][]int),
		sets:      make(map[string]*Set),
		byContent: make(map[string]string),
		memo:      make(map[string]string),
	}
	for _, ns := range nss {
		if ns.Name == "" {
			return nil, errors.New("namespace without a name")
		}
		if _, dup := c.nsLabels[ns.Name]; dup {
			return nil, fmt.Errorf("namespace %s: declared twice", ns.Name)
		}
		c.nsLabels[ns.Name] = labels.Set(ns.Labels)
		c.nsNames = append(c.nsNames, ns.Name)
	}
	slices.Sort(c.nsNames)

	var errs []error
	byAddr := make(map[netip.Addr]string, len(pods))
	byName := make(map[string]bool, len(pods))
	chains := make(map[string]string, len(pods))
	c.pods = make([]cPod, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		key := p.Namespace + "/" + p.Name
		if p.Name == "" || p.Namespace == "" {
			errs = append(errs, fmt.Errorf("pod %q: name and namespace are required", key))
			continue
		}
		if byName[key] {
			errs = append(errs, fmt.Errorf("pod %s: declared twice", key))
			continue
		}
		byName[key] = true
		if _, ok := c.nsLabels[p.Namespace]; !ok {
			errs = append(errs, fmt.Errorf("pod %s: unknown namespace %q", key, p.Namespace))
			continue
		}
		for j, np := range p.Ports {
			if proto := portProtocol(np); !validProtocol(proto) {
				errs = append(errs, fmt.Errorf("pod %s: ports[%d].protocol: unsupported protocol %q", key, j, np.Protocol))
			}
		}
		if p.IP == "" {
			continue // not running yet: no address to match or to protect
		}
		addr, err := netip.ParseAddr(p.IP)
		if err != nil || !addr.Is4() {
			errs = append(errs, fmt.Errorf("pod %s: ip %q is not an IPv4 address", key, p.IP))
			continue
		}
		if other, dup := byAddr[addr]; dup {
			errs = append(errs, fmt.Errorf("pod %s: ip %s already belongs to pod %s", key, addr, other))
			continue
		}
		byAddr[addr] = key
		chain := PodChainName(p.Namespace, p.Name)
		if other, dup := chains[chain]; dup {
			errs = append(errs, fmt.Errorf("pod %s: chain name %s collides with pod %s", key, chain, other))
			continue
		}
		chains[chain] = key
		idx := len(c.pods)
		c.pods = append(c.pods, cPod{pod: p, addr: addr, key: key, chain: chain})
		c.byNS[p.Namespace] = append(c.byNS[p.Namespace], idx)
		for k, v := range p.Labels {
			c.byLabel[labelKey{p.Namespace, k, v}] = append(c.byLabel[labelKey{p.Namespace, k, v}], idx)
			c.byKey[labelKey{p.Namespace, k, ""}] = append(c.byKey[labelKey{p.Namespace, k, ""}], idx)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// selector is a parsed label selector with a canonical text (for caches).
type selector struct {
	raw *metav1.LabelSelector
	sel labels.Selector
	key string
}

// parseSelector parses (and validates) raw. Parsed selectors are cached by their raw text:
// validating label keys and values runs regular expressions, and 20,000 policies often repeat
// the same peer selector.
func (c *compiler) parseSelector(raw *metav1.LabelSelector, path *field.Path) (*selector, field.ErrorList) {
	var kb strings.Builder
	keys := make([]string, 0, len(raw.MatchLabels))
	for k := range raw.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kb.WriteString(k)
		kb.WriteByte('=')
		kb.WriteString(raw.MatchLabels[k])
		kb.WriteByte(0)
	}
	for _, e := range raw.MatchExpressions {
		kb.WriteByte(1)
		kb.WriteString(e.Key)
		kb.WriteByte(0)
		kb.WriteString(string(e.Operator))
		for _, v := range e.Values {
			kb.WriteByte(0)
			kb.WriteString(v)
		}
	}
	rk := kb.String()
	if p, ok := c.parsed[rk]; ok {
		if p.err != nil {
			return nil, field.ErrorList{field.Invalid(path, raw.String(), p.err.Error())}
		}
		return &selector{raw: raw, sel: p.sel, key: p.sel.String()}, nil
	}
	s, err := metav1.LabelSelectorAsSelector(raw)
	c.parsed[rk] = parsedSelector{s, err}
	if err != nil {
		return nil, field.ErrorList{field.Invalid(path, raw.String(), err.Error())}
	}
	return &selector{raw: raw, sel: s, key: s.String()}, nil
}

type parsedSelector struct {
	sel labels.Selector
	err error
}

// selectInNamespace returns the pods of namespace ns that sel matches, ascending. It starts
// from the shortest posting list the selector allows (a matchLabels pair, an In expression,
// an Exists expression) and filters it with the whole selector.
func (c *compiler) selectInNamespace(ns string, sel *selector) []int {
	ck := "s\x00" + ns + "\x00" + sel.key
	if r, ok := c.selCache[ck]; ok {
		return r
	}
	cand := c.byNS[ns]
	sorted := true
	for k, v := range sel.raw.MatchLabels {
		if l := c.byLabel[labelKey{ns, k, v}]; len(l) < len(cand) {
			cand, sorted = l, true
		}
	}
	for _, e := range sel.raw.MatchExpressions {
		switch e.Operator {
		case metav1.LabelSelectorOpExists:
			if l := c.byKey[labelKey{ns, e.Key, ""}]; len(l) < len(cand) {
				cand, sorted = l, true
			}
		case metav1.LabelSelectorOpIn:
			n := 0
			for _, v := range e.Values {
				n += len(c.byLabel[labelKey{ns, e.Key, v}])
			}
			if n < len(cand) {
				cand = make([]int, 0, n)
				for _, v := range e.Values {
					cand = append(cand, c.byLabel[labelKey{ns, e.Key, v}]...)
				}
				sorted = false
			}
		}
	}
	if !sorted {
		slices.Sort(cand)
		cand = slices.Compact(cand)
	}
	var out []int
	for _, i := range cand {
		if sel.sel.Matches(labels.Set(c.pods[i].pod.Labels)) {
			out = append(out, i)
		}
	}
	c.selCache[ck] = out
	return out
}

// peerPods returns the pods a selector peer (podSelector, namespaceSelector or both) of a
// policy of namespace polNS selects, ascending.
func (c *compiler) peerPods(polNS string, p *cPeer) []int {
	if p.nsSel == nil {
		return c.selectInNamespace(polNS, p.podSel)
	}
	ck := "p\x00" + p.key(polNS)
	if r, ok := c.selCache[ck]; ok {
		return r
	}
	var out []int
	for _, ns := range c.nsNames {
		if !p.nsSel.sel.Matches(c.nsLabels[ns]) {
			continue
		}
		if p.podSel == nil {
			out = append(out, c.byNS[ns]...)
		} else {
			out = append(out, c.selectInNamespace(ns, p.podSel)...)
		}
	}
	slices.Sort(out)
	c.selCache[ck] = out
	return out
}

// ---- parsed policies ----

type cPolicy struct {
	pol             *networkingv1.NetworkPolicy
	key             string // namespace/name
	chain           string
	podSel          *selector
	ingress, egress bool // policyTypes, defaults applied
	in, eg          []cRule
	selected        []int
	included        bool
}

type cRule struct {
	peers []cPeer // nil: any peer
	ports []cPort // nil: any port
}

type cPeer struct {
	podSel, nsSel *selector
	block         *cBlock
}

// key describes what the peer selects, for caches (a podSelector alone depends on the
// policy's namespace).
func (p *cPeer) key(polNS string) string {
	switch {
	case p.block != nil:
		return "b" + p.block.key()
	case p.nsSel == nil:
		return "p" + polNS + "\x00" + p.podSel.key
	case p.podSel == nil:
		return "n" + p.nsSel.key + "\x00*"
	default:
		return "n" + p.nsSel.key + "\x00" + p.podSel.key
	}
}

type cBlock struct {
	cidr   netip.Prefix // masked
	except []netip.Prefix
}

func (b *cBlock) key() string {
	var sb strings.Builder
	sb.WriteString(b.cidr.String())
	for _, e := range b.except {
		sb.WriteString(" !")
		sb.WriteString(e.String())
	}
	return sb.String()
}

// contains: is a inside the cidr and outside every except?
func (b *cBlock) contains(a netip.Addr) bool {
	if !b.cidr.Contains(a) {
		return false
	}
	for _, e := range b.except {
		if e.Contains(a) {
			return false
		}
	}
	return true
}

type cPort struct {
	proto     string
	port, end int    // 0, 0: every port of proto
	name      string // named port
}

func validProtocol(p string) bool {
	return p == string(corev1.ProtocolTCP) || p == string(corev1.ProtocolUDP) || p == string(corev1.ProtocolSCTP)
}

// portProtocol is a declared container port's protocol, TCP by default as in Kubernetes.
func portProtocol(np NamedPort) string {
	if np.Protocol == "" {
		return string(corev1.ProtocolTCP)
	}
	return np.Protocol
}

// parsePolicy validates pol the way the API server does (for the fields that matter here)
// and returns its parsed form.
func (c *compiler) parsePolicy(pol *networkingv1.NetworkPolicy) (*cPolicy, field.ErrorList) {
	var errs field.ErrorList
	if pol.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), ""))
	}
	if pol.Namespace == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "namespace"), ""))
	}
	spec := field.NewPath("spec")
	cp := &cPolicy{pol: pol, key: pol.Namespace + "/" + pol.Name, chain: PolicyChainName(pol.Namespace, pol.Name)}
	var ferrs field.ErrorList
	cp.podSel, ferrs = c.parseSelector(&pol.Spec.PodSelector, spec.Child("podSelector"))
	errs = append(errs, ferrs...)

	if len(pol.Spec.PolicyTypes) == 0 {
		// "If no policyTypes are specified on a NetworkPolicy then by default Ingress will
		// always be set and Egress will be set if the NetworkPolicy has any egress rules."
		cp.ingress, cp.egress = true, len(pol.Spec.Egress) > 0
	}
	for i, t := range pol.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			cp.ingress = true
		case networkingv1.PolicyTypeEgress:
			cp.egress = true
		default:
			errs = append(errs, field.NotSupported(spec.Child("policyTypes").Index(i), t,
				[]string{string(networkingv1.PolicyTypeIngress), string(networkingv1.PolicyTypeEgress)}))
		}
	}
	for i, r := range pol.Spec.Ingress {
		path := spec.Child("ingress").Index(i)
		rule, ferrs := c.parseRule(r.From, r.Ports, path.Child("from"), path.Child("ports"))
		errs = append(errs, ferrs...)
		cp.in = append(cp.in, rule)
	}
	for i, r := range pol.Spec.Egress {
		path := spec.Child("egress").Index(i)
		rule, ferrs := c.parseRule(r.To, r.Ports, path.Child("to"), path.Child("ports"))
		errs = append(errs, ferrs...)
		cp.eg = append(cp.eg, rule)
	}
	return cp, errs
}

func (c *compiler) parseRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, peersPath, portsPath *field.Path) (cRule, field.ErrorList) {
	var r cRule
	var errs field.ErrorList
	if len(peers) > 0 {
		r.peers = make([]cPeer, 0, len(peers))
	}
	for i := range peers {
		p, ferrs := c.parsePeer(&peers[i], peersPath.Index(i))
		errs = append(errs, ferrs...)
		r.peers = append(r.peers, p)
	}
	if len(ports) > 0 {
		r.ports = make([]cPort, 0, len(ports))
	}
	for i := range ports {
		p, ferrs := parsePort(&ports[i], portsPath.Index(i))
		errs = append(errs, ferrs...)
		r.ports = append(r.ports, p)
	}
	return r, errs
}

func (c *compiler) parsePeer(peer *networkingv1.NetworkPolicyPeer, path *field.Path) (cPeer, field.ErrorList) {
	var p cPeer
	var errs, ferrs field.ErrorList
	if peer.IPBlock != nil {
		if peer.PodSelector != nil || peer.NamespaceSelector != nil {
			return p, field.ErrorList{field.Forbidden(path, "may not specify more than 1 peer type")}
		}
		p.block, errs = parseIPBlock(peer.IPBlock, path.Child("ipBlock"))
		return p, errs
	}
	if peer.PodSelector == nil && peer.NamespaceSelector == nil {
		return p, field.ErrorList{field.Required(path, "must specify a peer")}
	}
	if peer.PodSelector != nil {
		p.podSel, ferrs = c.parseSelector(peer.PodSelector, path.Child("podSelector"))
		errs = append(errs, ferrs...)
	}
	if peer.NamespaceSelector != nil {
		p.nsSel, ferrs = c.parseSelector(peer.NamespaceSelector, path.Child("namespaceSelector"))
		errs = append(errs, ferrs...)
	}
	return p, errs
}

func parseIPBlock(b *networkingv1.IPBlock, path *field.Path) (*cBlock, field.ErrorList) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(path.Child("cidr"), b.CIDR, "must be a valid CIDR")}
	}
	blk := &cBlock{cidr: cidr.Masked()}
	var errs field.ErrorList
	for i, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child("except").Index(i), e, "must be a valid CIDR"))
			continue
		}
		ex = ex.Masked()
		if ex.Addr().Is4() != blk.cidr.Addr().Is4() || !blk.cidr.Contains(ex.Addr()) || ex.Bits() <= blk.cidr.Bits() {
			errs = append(errs, field.Invalid(path.Child("except").Index(i), e, "must be a strict subset of `cidr`"))
			continue
		}
		blk.except = append(blk.except, ex)
	}
	slices.SortFunc(blk.except, comparePrefix)
	blk.except = slices.Compact(blk.except)
	return blk, errs
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

func parsePort(p *networkingv1.NetworkPolicyPort, path *field.Path) (cPort, field.ErrorList) {
	var errs field.ErrorList
	out := cPort{proto: string(corev1.ProtocolTCP)}
	if p.Protocol != nil {
		out.proto = string(*p.Protocol)
		if !validProtocol(out.proto) {
			errs = append(errs, field.NotSupported(path.Child("protocol"), *p.Protocol,
				[]string{string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP)}))
		}
	}
	switch {
	case p.Port == nil:
		if p.EndPort != nil {
			errs = append(errs, field.Invalid(path.Child("endPort"), *p.EndPort, "may not be specified when `port` is not specified"))
		}
	case p.Port.Type == intstr.Int:
		out.port = int(p.Port.IntVal)
		out.end = out.port
		for _, msg := range validation.IsValidPortNum(out.port) {
			errs = append(errs, field.Invalid(path.Child("port"), p.Port.IntVal, msg))
		}
		if p.EndPort != nil {
			out.end = int(*p.EndPort)
			if out.end < out.port {
				errs = append(errs, field.Invalid(path.Child("endPort"), *p.EndPort, "must be greater than or equal to `port`"))
			}
			for _, msg := range validation.IsValidPortNum(out.end) {
				errs = append(errs, field.Invalid(path.Child("endPort"), *p.EndPort, msg))
			}
		}
	default:
		out.name = p.Port.StrVal
		if p.EndPort != nil {
			errs = append(errs, field.Invalid(path.Child("endPort"), *p.EndPort, "may not be specified when `port` is non-numeric"))
		}
		for _, msg := range validation.IsValidPortName(out.name) {
			errs = append(errs, field.Invalid(path.Child("port"), out.name, msg))
		}
	}
	return out, errs
}

// ---- rules and sets ----

// compileRule turns one parsed rule of cp into a Rule; ok is false when the rule can admit
// nothing (all its peers were IPv6 ipBlocks).
func (c *compiler) compileRule(cp *cPolicy, r cRule, ingress bool) (rule Rule, ok bool) {
	prefix := DstSetPrefix
	if ingress {
		prefix = SrcSetPrefix
	}
	ns := cp.pol.Namespace

	if r.peers == nil {
		rule.Peers = []Peer{{Any: true}}
	} else {
		var selPeers []*cPeer
		for i := range r.peers {
			if r.peers[i].block == nil {
				selPeers = append(selPeers, &r.peers[i])
			}
		}
		if len(selPeers) > 0 {
			rule.Peers = append(rule.Peers, Peer{Set: c.addrSetOfPeers(prefix, ns, selPeers)})
		}
		for i := range r.peers {
			if b := r.peers[i].block; b != nil && b.cidr.Addr().Is4() {
				rule.Peers = append(rule.Peers, Peer{Set: c.netSet(prefix, b)})
			}
		}
		if len(rule.Peers) == 0 {
			return Rule{}, false
		}
	}

	if r.ports == nil {
		rule.Ports = []PortMatch{{Any: true}}
		return rule, true
	}
	for _, p := range r.ports {
		switch {
		case p.name != "":
			rule.Ports = append(rule.Ports, PortMatch{Protocol: p.proto, Set: c.namedPortSet(cp, r, ingress, p)})
		default:
			rule.Ports = append(rule.Ports, PortMatch{Protocol: p.proto, Port: p.port, EndPort: p.end})
		}
	}
	return rule, true
}

// addrSetOfPeers declares (or reuses) the SetAddrs set of the pods selected by the selector
// peers of one rule of a policy of namespace ns.
func (c *compiler) addrSetOfPeers(prefix, ns string, peers []*cPeer) string {
	var mk strings.Builder
	mk.WriteString(prefix)
	mk.WriteString("\x00peers")
	for _, p := range peers {
		mk.WriteString("\x00")
		mk.WriteString(p.key(ns))
	}
	if name, ok := c.memo[mk.String()]; ok {
		return name
	}
	var idx []int
	for _, p := range peers {
		idx = append(idx, c.peerPods(ns, p)...)
	}
	addrs := make([]netip.Addr, 0, len(idx))
	for _, i := range idx {
		addrs = append(addrs, c.pods[i].addr)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	members := make([]Member, len(addrs))
	for i, a := range addrs {
		members[i] = Member{Addr: a.String()}
	}
	name := c.declare(prefix, SetAddrs, members)
	c.memo[mk.String()] = name
	return name
}

// netSet declares (or reuses) the SetNets set of one ipBlock.
func (c *compiler) netSet(prefix string, b *cBlock) string {
	var members []Member
	var includes []netip.Prefix
	if b.cidr.Bits() == 0 {
		// ipset hash:net cannot store a /0: store both halves.
		includes = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")}
	} else {
		includes = []netip.Prefix{b.cidr}
	}
	for _, in := range includes {
		if !slices.Contains(b.except, in) {
			members = append(members, Member{Addr: in.String()})
		}
	}
	for _, e := range b.except {
		members = append(members, Member{Addr: e.String(), Except: true})
	}
	slices.SortFunc(members, func(x, y Member) int {
		return comparePrefix(netip.MustParsePrefix(x.Addr), netip.MustParsePrefix(y.Addr))
	})
	return c.declare(prefix, SetNets, members)
}

// namedPortSet declares (or reuses) the SetAddrPorts set resolving named port p on every pod
// the flows admitted by rule r of cp can go to.
func (c *compiler) namedPortSet(cp *cPolicy, r cRule, ingress bool, p cPort) string {
	var mk strings.Builder
	mk.WriteString("np\x00" + p.name + "\x00" + p.proto + "\x00")
	if ingress {
		// the destination is a pod the policy selects
		mk.WriteString("sel\x00" + cp.pol.Namespace + "\x00" + cp.podSel.key)
	} else if r.peers == nil {
		mk.WriteString("any")
	} else {
		for i := range r.peers {
			mk.WriteString("\x00" + r.peers[i].key(cp.pol.Namespace))
		}
	}
	if name, ok := c.memo[mk.String()]; ok {
		return name
	}

	var cand []int
	switch {
	case ingress:
		cand = cp.selected
	case r.peers == nil:
		cand = make([]int, len(c.pods))
		for i := range cand {
			cand[i] = i
		}
	default:
		for i := range r.peers {
			peer := &r.peers[i]
			if peer.block == nil {
				cand = append(cand, c.peerPods(cp.pol.Namespace, peer)...)
				continue
			}
			// ipBlocks are matched literally: pods inside them are destinations too.
			for j := range c.pods {
				if peer.block.contains(c.pods[j].addr) {
					cand = append(cand, j)
				}
			}
		}
		slices.Sort(cand)
		cand = slices.Compact(cand)
	}

	type ap struct {
		addr netip.Addr
		port int
	}
	var found []ap
	for _, i := range cand {
		for _, np := range c.pods[i].pod.Ports {
			if np.Name == p.name && portProtocol(np) == p.proto {
				found = append(found, ap{c.pods[i].addr, np.Port})
			}
		}
	}
	slices.SortFunc(found, func(x, y ap) int { return cmp.Or(x.addr.Compare(y.addr), cmp.Compare(x.port, y.port)) })
	found = slices.Compact(found)
	members := make([]Member, len(found))
	for i, f := range found {
		members[i] = Member{Addr: f.addr.String(), Protocol: p.proto, Port: f.port}
	}
	name := c.declare(DstSetPrefix, SetAddrPorts, members)
	c.memo[mk.String()] = name
	return name
}

// declare returns the name of the set of this prefix, kind and (sorted) members, declaring it
// if it is new. The name is a hash of kind and members: identical sets are shared.
func (c *compiler) declare(prefix string, kind SetKind, members []Member) string {
	var sb strings.Builder
	sb.WriteString(string(kind))
	for _, m := range members {
		sb.WriteByte('\n')
		if m.Except {
			sb.WriteByte('!')
		}
		sb.WriteString(m.Addr)
		if m.Protocol != "" {
			sb.WriteByte(' ')
			sb.WriteString(m.Protocol)
			sb.WriteByte(' ')
			sb.WriteString(strconv.Itoa(m.Port))
		}
	}
	content := sb.String()
	if name, ok := c.byContent[prefix+content]; ok {
		return name
	}
	name := hashName(prefix, content)
	if _, dup := c.sets[name]; dup && c.err == nil {
		c.err = fmt.Errorf("set name %s: hash collision between two different sets", name)
	}
	c.sets[name] = &Set{Name: name, Kind: kind, Members: members}
	c.byContent[prefix+content] = name
	return name
}
