package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The property: for random clusters, policies and flows, the compiled Program decides every
// flow as Reference does, both with one Program for the whole cluster (every pod Local) and
// with one Program per node (egress checked on the source's node, ingress on the
// destination's node). Each case has its own seed; a failure prints it and
//
//	POLICY_PROP_SEED=<seed> go test -run TestPropertyCompileMatchesReference ./internal/engine/policy/
//
// replays that case alone, verbosely.

const propCases = 1500

// propSeeds are the generator seeds a property test runs: the one POLICY_PROP_SEED names (a
// replay), else propCases of them (200 with -short).
func propSeeds(t *testing.T) []uint64 {
	t.Helper()
	if replay := os.Getenv("POLICY_PROP_SEED"); replay != "" {
		s, err := strconv.ParseUint(replay, 10, 64)
		if err != nil {
			t.Fatalf("POLICY_PROP_SEED: %v", err)
		}
		return []uint64{s}
	}
	n := propCases
	if testing.Short() {
		n = 200
	}
	seeds := make([]uint64, 0, n)
	for i := range n {
		seeds = append(seeds, uint64(i))
	}
	return seeds
}

func TestPropertyCompileMatchesReference(t *testing.T) {
	seeds := propSeeds(t)
	replay := os.Getenv("POLICY_PROP_SEED")

	var flows, allowed, byRule, failures int
	kinds := map[string]int{}
	for _, seed := range seeds {
		c := genCase(seed)
		if replay != "" {
			t.Log(c.dump())
		}
		a, r, n, fails := checkCase(c)
		flows += n
		allowed += a
		byRule += r
		for _, k := range c.kinds {
			kinds[k]++
		}
		if len(fails) > 0 {
			failures++
			t.Errorf("seed %d (replay: POLICY_PROP_SEED=%d go test -run TestPropertyCompileMatchesReference ./internal/engine/policy/):\n  %s\n%s",
				seed, seed, strings.Join(fails, "\n  "), c.dump())
			if failures >= 3 {
				t.Fatal("stopping after 3 failing cases")
			}
		}
	}
	t.Logf("%d cases, %d flows: %d denied, %d allowed by a rule of an isolated end, %d allowed for want of isolation; generated: %v",
		len(seeds), flows, flows-allowed, byRule, allowed-byRule, kinds)
	// A generator that only produced trivial answers would prove nothing.
	if replay == "" && (byRule < flows/20 || flows-allowed < flows/10) {
		t.Errorf("degenerate generator: of %d flows, %d denied and %d allowed by a rule", flows, flows-allowed, byRule)
	}
}

// propCase is one random cluster with its policies and flows.
type propCase struct {
	seed  uint64
	pods  []Pod
	node  []int // node of each pod (0 or 1)
	nss   []Namespace
	pols  []networkingv1.NetworkPolicy
	flows []Flow
	kinds []string // what the generator produced, for the coverage log
}

func (c *propCase) dump() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "  namespaces:\n")
	for _, n := range c.nss {
		fmt.Fprintf(&sb, "    %s %v\n", n.Name, n.Labels)
	}
	fmt.Fprintf(&sb, "  pods:\n")
	for i, p := range c.pods {
		fmt.Fprintf(&sb, "    %s/%s %s node%d labels=%v ports=%v\n", p.Namespace, p.Name, p.IP, c.node[i], p.Labels, p.Ports)
	}
	fmt.Fprintf(&sb, "  policies:\n")
	for _, p := range c.pols {
		b, _ := json.Marshal(p.Spec)
		fmt.Fprintf(&sb, "    %s/%s %s\n", p.Namespace, p.Name, b)
	}
	return sb.String()
}

// checkCase compiles c (all local, then per node) and compares every flow with Reference. It
// counts the flows allowed, and among them those allowed by a rule while an end is isolated
// (denied by the same policies stripped of their rules).
func checkCase(c propCase) (allowed, byRule, n int, fails []string) {
	all := make([]Pod, len(c.pods))
	copy(all, c.pods)
	for i := range all {
		all[i].Local = true
	}
	prog, err := Compile(all, c.nss, c.pols)
	if err != nil {
		return 0, 0, 0, []string{"Compile (all local): " + err.Error()}
	}
	if err := prog.Validate(); err != nil {
		return 0, 0, 0, []string{"Validate (all local): " + err.Error()}
	}
	var nodes [2]*Evaluator
	for k := range nodes {
		local := make([]Pod, len(c.pods))
		copy(local, c.pods)
		for i := range local {
			local[i].Local = c.node[i] == k
		}
		p, err := Compile(local, c.nss, c.pols)
		if err != nil {
			return 0, 0, 0, []string{fmt.Sprintf("Compile (node%d): %v", k, err)}
		}
		if err := p.Validate(); err != nil {
			return 0, 0, 0, []string{fmt.Sprintf("Validate (node%d): %v", k, err)}
		}
		nodes[k] = p.Evaluator()
	}
	nodeOf := func(ip string) int {
		for i, p := range c.pods {
			if p.IP == ip {
				return c.node[i]
			}
		}
		return 0 // external: no pod firewall on either node
	}

	stripped := make([]networkingv1.NetworkPolicy, len(c.pols))
	for i, p := range c.pols {
		stripped[i] = *p.DeepCopy()
		stripped[i].Spec.PolicyTypes = nil
		if refHasType(&p, ingressT) {
			stripped[i].Spec.PolicyTypes = append(stripped[i].Spec.PolicyTypes, ingressT)
		}
		if refHasType(&p, egressT) {
			stripped[i].Spec.PolicyTypes = append(stripped[i].Spec.PolicyTypes, egressT)
		}
		stripped[i].Spec.Ingress, stripped[i].Spec.Egress = nil, nil
	}

	ev := prog.Evaluator()
	for _, f := range c.flows {
		want := Reference(c.pods, c.nss, c.pols, f)
		if want {
			allowed++
			if !Reference(c.pods, c.nss, stripped, f) {
				byRule++
			}
		}
		n++
		if got := ev.Allows(f); got != want {
			fails = append(fails, fmt.Sprintf("%s: compiled (all local) %v, reference %v", flowString(f), got, want))
		}
		got := nodes[nodeOf(f.Src)].AllowsEgress(f) && nodes[nodeOf(f.Dst)].AllowsIngress(f)
		if got != want {
			fails = append(fails, fmt.Sprintf("%s: compiled (per node: egress on node%d, ingress on node%d) %v, reference %v",
				flowString(f), nodeOf(f.Src), nodeOf(f.Dst), got, want))
		}
	}
	return allowed, byRule, n, fails
}

// The generator. Pod addresses are drawn from 10.0.0.0/27 so that random ipBlocks and excepts
// over that range cut through pods; external addresses come from the same range (unused
// addresses) and from elsewhere.

var (
	podKeys    = []string{"app", "tier"}
	podValues  = []string{"a", "b"}
	nsKeys     = []string{"team", "env"}
	nsValues   = []string{"x", "y"}
	portNames  = []string{"http", "dns", "metrics"}
	portNums   = []int{53, 80, 8080}
	flowPorts  = []int{50, 53, 55, 80, 81, 110, 8080}
	protocols  = []string{"TCP", "UDP"}
	rangeBase  = netip.MustParseAddr("10.0.0.0")
	outsideIPs = []string{"10.0.1.1", "192.0.2.1", "203.0.113.7"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func genCase(seed uint64) propCase {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	c := propCase{seed: seed}

	for i := range 2 + r.IntN(2) {
		n := ns("ns" + strconv.Itoa(i))
		for _, k := range nsKeys {
			if r.IntN(2) == 0 {
				n.Labels[k] = pick(r, nsValues)
			}
		}
		c.nss = append(c.nss, n)
	}

	used := map[string]bool{}
	for i := range 3 + r.IntN(6) {
		var ip string
		for ip == "" || used[ip] {
			ip = addrAt(1 + r.IntN(30)).String()
		}
		used[ip] = true
		p := Pod{Name: "p" + strconv.Itoa(i), Namespace: pick(r, c.nss).Name, IP: ip, Labels: map[string]string{}}
		for _, k := range podKeys {
			if r.IntN(10) < 6 {
				p.Labels[k] = pick(r, podValues)
			}
		}
		if r.IntN(2) == 0 {
			for range 1 + r.IntN(2) {
				p.Ports = append(p.Ports, NamedPort{Name: pick(r, portNames), Protocol: pick(r, []string{"", "TCP", "UDP"}), Port: pick(r, portNums)})
			}
		}
		c.pods = append(c.pods, p)
		c.node = append(c.node, r.IntN(2))
	}

	nPols := 1 + r.IntN(5)
	if r.IntN(10) == 0 {
		nPols = 0
	}
	for i := range nPols {
		c.pols = append(c.pols, c.genPolicy(r, "pol"+strconv.Itoa(i)))
	}

	var ext []string
	for j := 1; j < 31; j++ {
		if ip := addrAt(j).String(); !used[ip] {
			ext = append(ext, ip)
		}
	}
	ext = append(ext, outsideIPs...)
	for range 24 {
		f := Flow{Protocol: pick(r, protocols), Port: pick(r, flowPorts)}
		if r.IntN(20) == 0 {
			f.Protocol = "SCTP"
		}
		src, dst := pick(r, c.pods).IP, pick(r, c.pods).IP
		switch k := r.IntN(10); {
		case k < 2:
			dst = pick(r, ext)
		case k < 4:
			src = pick(r, ext)
		case k == 4:
			dst = src
		}
		f.Src, f.Dst = src, dst
		// Aim at a declared port of the destination half of the time, so that named ports
		// are exercised often.
		for _, p := range c.pods {
			if p.IP == dst && len(p.Ports) > 0 && r.IntN(2) == 0 {
				np := pick(r, p.Ports)
				f.Protocol, f.Port = portProtocol(np), np.Port
			}
		}
		c.flows = append(c.flows, f)
	}
	return c
}

func addrAt(i int) netip.Addr {
	b := rangeBase.As4()
	b[3] += byte(i)
	return netip.AddrFrom4(b)
}

func (c *propCase) genPolicy(r *rand.Rand, name string) networkingv1.NetworkPolicy {
	p := netpol(pick(r, c.nss).Name, name, networkingv1.NetworkPolicySpec{PodSelector: *c.genSelector(r, podKeys, podValues)})
	if r.IntN(3) == 0 {
		p.Spec.PodSelector = metav1.LabelSelector{} // isolate the whole namespace more often
	}
	switch r.IntN(4) {
	case 1:
		p.Spec.PolicyTypes = types(ingressT)
	case 2:
		p.Spec.PolicyTypes = types(egressT)
	case 3:
		p.Spec.PolicyTypes = types(ingressT, egressT)
	}
	if r.IntN(4) != 0 {
		p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{}
		for range r.IntN(3) {
			p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: c.genPeers(r), Ports: c.genPorts(r)})
		}
	}
	if r.IntN(4) != 0 {
		p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{}
		for range r.IntN(3) {
			p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: c.genPeers(r), Ports: c.genPorts(r)})
		}
	}
	return p
}

func (c *propCase) genSelector(r *rand.Rand, keys, values []string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	switch r.IntN(6) {
	case 0: // empty: everything
		c.kinds = append(c.kinds, "sel:empty")
		return s
	case 1, 2:
		c.kinds = append(c.kinds, "sel:labels")
		s.MatchLabels = map[string]string{pick(r, keys): pick(r, values)}
		if r.IntN(3) == 0 {
			s.MatchLabels[pick(r, keys)] = pick(r, values)
		}
		return s
	}
	c.kinds = append(c.kinds, "sel:expressions")
	for range 1 + r.IntN(2) {
		req := metav1.LabelSelectorRequirement{Key: pick(r, keys)}
		switch r.IntN(4) {
		case 0:
			req.Operator = metav1.LabelSelectorOpIn
			req.Values = []string{pick(r, values), pick(r, values)}
		case 1:
			req.Operator = metav1.LabelSelectorOpNotIn
			req.Values = []string{pick(r, values)}
		case 2:
			req.Operator = metav1.LabelSelectorOpExists
		case 3:
			req.Operator = metav1.LabelSelectorOpDoesNotExist
		}
		s.MatchExpressions = append(s.MatchExpressions, req)
	}
	if r.IntN(3) == 0 {
		s.MatchLabels = map[string]string{pick(r, keys): pick(r, values)}
	}
	return s
}

func (c *propCase) genNSSelector(r *rand.Rand) *metav1.LabelSelector {
	if r.IntN(4) == 0 {
		c.kinds = append(c.kinds, "ns:name")
		return ml("kubernetes.io/metadata.name", pick(r, c.nss).Name)
	}
	return c.genSelector(r, nsKeys, nsValues)
}

func (c *propCase) genPeers(r *rand.Rand) []networkingv1.NetworkPolicyPeer {
	switch r.IntN(5) {
	case 0:
		c.kinds = append(c.kinds, "peers:nil")
		return nil
	case 1:
		c.kinds = append(c.kinds, "peers:empty")
		return []networkingv1.NetworkPolicyPeer{}
	}
	var peers []networkingv1.NetworkPolicyPeer
	for range 1 + r.IntN(2) {
		switch r.IntN(4) {
		case 0:
			c.kinds = append(c.kinds, "peer:pod")
			peers = append(peers, podPeer(c.genSelector(r, podKeys, podValues)))
		case 1:
			c.kinds = append(c.kinds, "peer:ns")
			peers = append(peers, nsPeer(c.genNSSelector(r)))
		case 2:
			c.kinds = append(c.kinds, "peer:ns+pod")
			peers = append(peers, networkingv1.NetworkPolicyPeer{NamespaceSelector: c.genNSSelector(r), PodSelector: c.genSelector(r, podKeys, podValues)})
		case 3:
			c.kinds = append(c.kinds, "peer:ipBlock")
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: c.genIPBlock(r)})
		}
	}
	return peers
}

// genIPBlock: a random network over (or around) the pod range, with 0-2 excepts strictly
// inside it, preferably around pod addresses.
func (c *propCase) genIPBlock(r *rand.Rand) *networkingv1.IPBlock {
	var cidr netip.Prefix
	switch k := r.IntN(12); {
	case k == 0:
		c.kinds = append(c.kinds, "block:/0")
		cidr = netip.MustParsePrefix("0.0.0.0/0")
	case k == 1:
		c.kinds = append(c.kinds, "block:ipv6")
		return &networkingv1.IPBlock{CIDR: "2001:db8::/64", Except: []string{"2001:db8::/80"}}
	case k == 2:
		cidr = netip.MustParsePrefix("10.0.0.0/16")
	default:
		cidr, _ = addrAt(r.IntN(32)).Prefix(26 + r.IntN(6))
	}
	b := &networkingv1.IPBlock{CIDR: cidr.String()}
	if cidr.Bits() == 32 {
		return b
	}
	for range r.IntN(3) {
		c.kinds = append(c.kinds, "block:except")
		bits := cidr.Bits() + 1 + r.IntN(32-cidr.Bits())
		a := addrAt(r.IntN(32))
		if !cidr.Contains(a) {
			a = cidr.Addr()
		}
		ex, _ := a.Prefix(bits)
		b.Except = append(b.Except, ex.String())
	}
	return b
}

func (c *propCase) genPorts(r *rand.Rand) []networkingv1.NetworkPolicyPort {
	switch r.IntN(5) {
	case 0:
		c.kinds = append(c.kinds, "ports:nil")
		return nil
	case 1:
		c.kinds = append(c.kinds, "ports:empty")
		return []networkingv1.NetworkPolicyPort{}
	}
	var ports []networkingv1.NetworkPolicyPort
	for range 1 + r.IntN(2) {
		var p networkingv1.NetworkPolicyPort
		switch r.IntN(4) {
		case 1:
			p.Protocol = protoPtr("TCP")
		case 2:
			p.Protocol = protoPtr("UDP")
		case 3:
			if r.IntN(4) == 0 {
				p.Protocol = protoPtr(string(corev1.ProtocolSCTP))
			}
		}
		switch k := r.IntN(20); {
		case k < 4:
			c.kinds = append(c.kinds, "port:all")
		case k < 11:
			c.kinds = append(c.kinds, "port:number")
			p.Port = intPort(pick(r, portNums))
		case k < 16:
			c.kinds = append(c.kinds, "port:named")
			p.Port = namedPort(pick(r, append([]string{"nope"}, portNames...)))
		default:
			c.kinds = append(c.kinds, "port:range")
			start := pick(r, []int{50, 80})
			p.Port = intPort(start)
			p.EndPort = i32(start + pick(r, []int{0, 5, 30}))
		}
		ports = append(ports, p)
	}
	return ports
}
