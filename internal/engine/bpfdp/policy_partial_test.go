package bpfdp

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibench/cnibench/internal/engine/policy"
	"github.com/cnibench/cnibench/internal/nf"
)

// polGen is a random cluster for the policy engine's tests: pods in three namespaces with
// addresses in 10.0.0.0/26 (so that ipBlocks and their excepts cut through them), some of them
// local, some declaring named ports; and NetworkPolicies with pod, namespace and ipBlock peers
// (excepts too), port numbers, ranges, named ports and bare protocols, ingress and egress.
type polGen struct {
	r      *rand.Rand
	nss    []policy.Namespace
	pods   []policy.Pod
	pols   []networkingv1.NetworkPolicy
	made   int // policies and pods made, for their names
	what   []string
	sample string
}

var (
	genApps  = []string{"a", "b", "c"}
	genTiers = []string{"x", "y"}
	genNets  = []string{"10.0.0.0/26", "10.0.0.0/27", "10.0.0.32/27", "10.0.0.16/28", "10.0.0.48/29", "0.0.0.0/0"}
)

func pickOf[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func newPolGen(r *rand.Rand) *polGen {
	g := &polGen{r: r}
	for i := range 3 {
		n := "ns" + strconv.Itoa(i)
		g.nss = append(g.nss, policy.Namespace{Name: n, Labels: map[string]string{"kubernetes.io/metadata.name": n}})
	}
	for range 16 {
		g.addPod()
	}
	for range 3 {
		g.pols = append(g.pols, g.policy())
	}
	return g
}

func (g *polGen) addPod() {
	used := map[string]bool{}
	for _, p := range g.pods {
		used[p.IP] = true
	}
	var ip string
	for ip == "" || used[ip] {
		ip = netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + g.r.IntN(62))}).String()
	}
	g.made++
	p := policy.Pod{Name: "pod" + strconv.Itoa(g.made), Namespace: pickOf(g.r, g.nss).Name, IP: ip,
		Labels: map[string]string{"app": pickOf(g.r, genApps)}, Local: g.r.IntN(3) != 0}
	if g.r.IntN(2) == 0 {
		p.Labels["tier"] = pickOf(g.r, genTiers)
	}
	if g.r.IntN(2) == 0 {
		p.Ports = append(p.Ports, policy.NamedPort{Name: "http", Protocol: "TCP", Port: 8080 + g.r.IntN(2)})
	}
	if g.r.IntN(3) == 0 {
		p.Ports = append(p.Ports, policy.NamedPort{Name: "dns", Protocol: "UDP", Port: 53})
	}
	g.pods = append(g.pods, p)
}

func (g *polGen) selector() *metav1.LabelSelector {
	switch g.r.IntN(5) {
	case 0:
		return &metav1.LabelSelector{}
	case 1, 2:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": pickOf(g.r, genApps)}}
	case 3:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"tier": pickOf(g.r, genTiers)}}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{pickOf(g.r, genApps), pickOf(g.r, genApps)}}}}
}

func (g *polGen) peers() []networkingv1.NetworkPolicyPeer {
	if g.r.IntN(6) == 0 {
		return nil // anyone
	}
	var out []networkingv1.NetworkPolicyPeer
	for range 1 + g.r.IntN(2) {
		switch g.r.IntN(5) {
		case 0:
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: g.selector()})
		case 1:
			out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": pickOf(g.r, g.nss).Name}}})
		case 2:
			out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: g.selector()})
		default:
			cidr := netip.MustParsePrefix(pickOf(g.r, genNets))
			b := &networkingv1.IPBlock{CIDR: cidr.String()}
			for range g.r.IntN(3) {
				a := netip.AddrFrom4([4]byte{10, 0, 0, byte(g.r.IntN(64))})
				bits := max(cidr.Bits()+1, 28+g.r.IntN(5))
				if e := netip.PrefixFrom(a, bits).Masked(); cidr.Contains(e.Addr()) && !slicesHas(b.Except, e.String()) {
					b.Except = append(b.Except, e.String())
				}
			}
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: b})
		}
	}
	return out
}

func slicesHas(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (g *polGen) ports() []networkingv1.NetworkPolicyPort {
	proto := func(p corev1.Protocol) *corev1.Protocol { return &p }
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	var out []networkingv1.NetworkPolicyPort
	for range g.r.IntN(3) { // none: every port
		switch g.r.IntN(6) {
		case 0:
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: proto(corev1.ProtocolTCP), Port: num(80)})
		case 1:
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: proto(corev1.ProtocolUDP), Port: num(53)})
		case 2:
			lo := 1000 + g.r.IntN(100)
			end := int32(lo + g.r.IntN(1000))
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: proto(corev1.ProtocolTCP), Port: num(lo), EndPort: &end})
		case 3:
			http := intstr.FromString("http")
			out = append(out, networkingv1.NetworkPolicyPort{Port: &http})
		case 4:
			dns := intstr.FromString("dns")
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: proto(corev1.ProtocolUDP), Port: &dns})
		case 5:
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: proto(corev1.ProtocolSCTP)})
		}
	}
	return out
}

// spec is a random policy spec: its selector, types, ingress and egress rules.
func (g *polGen) spec() networkingv1.NetworkPolicySpec {
	s := networkingv1.NetworkPolicySpec{PodSelector: *g.selector()}
	switch g.r.IntN(4) {
	case 1:
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for range g.r.IntN(3) {
		s.Ingress = append(s.Ingress, networkingv1.NetworkPolicyIngressRule{From: g.peers(), Ports: g.ports()})
	}
	for range g.r.IntN(3) {
		s.Egress = append(s.Egress, networkingv1.NetworkPolicyEgressRule{To: g.peers(), Ports: g.ports()})
	}
	return s
}

func (g *polGen) policy() networkingv1.NetworkPolicy {
	g.made++
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pickOf(g.r, g.nss).Name, Name: "pol" + strconv.Itoa(g.made)},
		Spec: g.spec()}
}

// mutate changes the cluster at random, as a step of a run: mostly policies added, removed or
// changed (their selector, rules, ports), sometimes a pod moved to or from the node, relabelled,
// or replaced by another at a new address.
func (g *polGen) mutate() {
	g.what = g.what[:0]
	for range 1 + g.r.IntN(2) {
		k := g.r.IntN(10)
		if len(g.pols) > 10 && k < 4 {
			k = 4 // enough policies: remove rather than add
		}
		switch {
		case k < 4 || len(g.pols) == 0:
			g.pols = append(g.pols, g.policy())
			g.what = append(g.what, "+"+g.pols[len(g.pols)-1].Name)
		case k == 4:
			i := g.r.IntN(len(g.pols))
			g.what = append(g.what, "-"+g.pols[i].Name)
			g.pols = append(g.pols[:i:i], g.pols[i+1:]...)
		case k < 7:
			i := g.r.IntN(len(g.pols))
			p := *g.pols[i].DeepCopy()
			switch g.r.IntN(3) {
			case 0:
				p.Spec.PodSelector = *g.selector()
			case 1:
				p.Spec = g.spec()
			case 2:
				for j := range p.Spec.Ingress {
					p.Spec.Ingress[j].Ports = g.ports()
				}
				for j := range p.Spec.Egress {
					p.Spec.Egress[j].Ports = g.ports()
				}
			}
			g.pols = append(append(g.pols[:i:i], p), g.pols[i+1:]...)
			g.what = append(g.what, "~"+p.Name)
		case k == 7:
			i := g.r.IntN(len(g.pods))
			g.pods = append([]policy.Pod(nil), g.pods...)
			g.pods[i].Local = !g.pods[i].Local
			g.what = append(g.what, fmt.Sprintf("%s local=%v", g.pods[i].IP, g.pods[i].Local))
		case k == 8:
			i := g.r.IntN(len(g.pods))
			g.pods = append([]policy.Pod(nil), g.pods...)
			g.pods[i].Labels = map[string]string{"app": pickOf(g.r, genApps)}
			g.what = append(g.what, fmt.Sprintf("%s relabelled %v", g.pods[i].IP, g.pods[i].Labels))
		default:
			i := g.r.IntN(len(g.pods))
			g.what = append(g.what, "-"+g.pods[i].IP)
			g.pods = append(g.pods[:i:i], g.pods[i+1:]...)
			g.addPod()
			g.what = append(g.what, "+"+g.pods[len(g.pods)-1].IP)
		}
	}
}

// render compiles and renders the cluster for the node.
func (g *polGen) render(tb testing.TB, seed uint64) *policy.BPFPolicy {
	tb.Helper()
	p, err := policy.Compile(g.pods, g.nss, g.pols)
	if err != nil {
		tb.Fatalf("seed %d: compile: %v", seed, err)
	}
	b, _ := policy.RenderBPF(p)
	return b
}

// needPolicy skips a test that needs the kernel to load the policy engine.
func needPolicy(t *testing.T) {
	t.Helper()
	needLB(t)
	if err := PolicyUsable(); err != nil {
		t.Skipf("the policy engine cannot run here: %v", err)
	}
}

// testSeed is BPFDP_POLICY_SEED when set (a replay), else a new seed.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("BPFDP_POLICY_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BPFDP_POLICY_SEED: %v", err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

var (
	polPins = []string{polIPCache, polRules, polEps}
	pcPins  = []string{pcPin("ipcache"), pcPin("pol_rules"), pcPin("pol_eps")}
)

// samePolicy fails the test unless the maps pinned as gotPins in got hold the same entries as
// those pinned as wantPins in want.
func samePolicy(t *testing.T, step string, got Node, gotPins []string, want Node, wantPins []string) {
	t.Helper()
	for i := range gotPins {
		g, w := dumpMap(t, got, gotPins[i]), dumpMap(t, want, wantPins[i])
		if reflect.DeepEqual(g, w) {
			continue
		}
		var diffs []string
		for k, v := range w {
			if g[k] != v {
				diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", k, g[k], v))
			}
		}
		for k, v := range g {
			if _, ok := w[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s: %q, want none", k, v))
			}
		}
		if len(diffs) > 5 {
			diffs = append(diffs[:5], "...")
		}
		t.Fatalf("%s: %s holds %d entries, %s after a full write %d: %s", step, gotPins[i], len(g), wantPins[i], len(w), strings.Join(diffs, "; "))
	}
}

// The real maps: a node given a policy whole (SetPolicy) and then a random sequence of changes
// (30 steps of policies added, removed and changed, pods moved, relabelled and replaced, then
// every pod isolated for ingress, then both ways, which rewrites endpoints in place; each
// step's rendering renumbered like the previous step's policy, policy.RenumberLike, as the
// engines do, and policy.DiffBPF from that policy, through JSON as the engines carry it,
// applied with ChangePolicy) holds after each step exactly what a fresh node given the step's
// renumbered policy whole holds, in the IP cache, the rules and the endpoints, entry for
// entry; so does the polycube firewall cube changed the same way (PolycubeChangePolicy; its
// maps have pol_check's layout), and at the end a fresh polycube node given the last policy
// whole (PolycubeSetPolicy). Midway, both are given RenderBPF's rendering whole over the
// renumbered maps (a full resync, SetPolicy and PolycubeSetPolicy), and the changes go on from
// it. The sequence must have written and deleted entries of every map, rewritten IP cache
// entries and endpoints in place, and renumbered renderings. ChangePolicy refuses a node
// without the engine, PolycubeChangePolicy one without the provider, and both a change naming
// a key to write and to delete (writing nothing). BPFDP_POLICY_SEED=<seed> replays a sequence.
func TestChangePolicyMatchesSetPolicy(t *testing.T) {
	needPolicy(t)
	seed := testSeed(t)
	t.Logf("seed %d (replay: BPFDP_POLICY_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 3))
	g := newPolGen(r)

	part := scratchNode(t, false)
	if err := part.ChangePolicy(policy.BPFChange{}); err == nil || !strings.Contains(err.Error(), "no policy engine") {
		t.Errorf("a change of a node without the policy engine: %v", err)
	}
	if err := part.PolycubeChangePolicy(policy.BPFChange{}); err == nil || !strings.Contains(err.Error(), "no polycube provider") {
		t.Errorf("a polycube change of a node without the provider: %v", err)
	}
	var pc Node
	if err := PolycubeUsable(); err != nil {
		t.Logf("no polycube firewall: %v", err)
	} else {
		pc = scratchPolycube(t, PolycubeChain)
	}

	prev := g.render(t, seed)
	if err := part.SetPolicy(prev); err != nil {
		t.Fatal(err)
	}
	if pc.Dir != "" {
		if err := pc.PolycubeSetPolicy(prev); err != nil {
			t.Fatal(err)
		}
	}
	var kinds [6]int
	var inPlace [2]int // ip cache entries and endpoints rewritten
	renumbered := 0    // steps whose renumbered rendering is not RenderBPF's
	for step := range 32 {
		switch step {
		case 30: // every pod isolated for ingress only (one local at least), then both ways:
			// endpoints rewritten in place, whatever the random steps did
			g.pods = append([]policy.Pod(nil), g.pods...)
			g.pods[0].Local = true
			g.pols = nil
			for _, ns := range g.nss {
				g.pols = append(g.pols, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "isolate-in"},
					Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}})
			}
			g.what = []string{"every pod isolated for ingress only"}
		case 31:
			for _, ns := range g.nss {
				g.pols = append(g.pols, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "isolate-out"},
					Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}})
			}
			g.what = []string{"every pod isolated both ways"}
		default:
			g.mutate()
		}
		rendered := g.render(t, seed)
		if step == 15 {
			where := fmt.Sprintf("seed %d step %d: a full resync", seed, step)
			if err := part.SetPolicy(rendered); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if pc.Dir != "" {
				if err := pc.PolycubeSetPolicy(rendered); err != nil {
					t.Fatalf("%s: polycube: %v", where, err)
				}
			}
			fresh := scratchNode(t, false)
			if err := fresh.SetPolicy(rendered); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			samePolicy(t, where, part, polPins, fresh, polPins)
			if pc.Dir != "" {
				samePolicy(t, where+" polycube", pc, pcPins, fresh, polPins)
			}
			if err := nf.Unmount(fresh.Dir); err != nil {
				t.Fatal(err)
			}
			prev = rendered
			continue
		}
		next := policy.RenumberLike(prev, rendered)
		if !reflect.DeepEqual(next, rendered) {
			renumbered++
		}
		c := policy.DiffBPF(prev, next)
		where := fmt.Sprintf("seed %d step %d (%s; %d policies, %d endpoints, %d ip cache entries, %d rules; change of %d)",
			seed, step, strings.Join(g.what, ", "), len(g.pols), len(next.Endpoints), len(next.IPCache), len(next.Rules), c.Size())
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var dc policy.BPFChange
		if err := json.Unmarshal(data, &dc); err != nil {
			t.Fatal(err)
		}
		if err := part.ChangePolicy(dc); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if pc.Dir != "" {
			if err := pc.PolycubeChangePolicy(dc); err != nil {
				t.Fatalf("%s: polycube: %v", where, err)
			}
		}
		fresh := scratchNode(t, false)
		if err := fresh.SetPolicy(next); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		samePolicy(t, where, part, polPins, fresh, polPins)
		if pc.Dir != "" {
			samePolicy(t, where+" polycube", pc, pcPins, fresh, polPins)
		}
		if err := nf.Unmount(fresh.Dir); err != nil {
			t.Fatal(err)
		}

		for i, n := range []int{len(c.IPCache), len(c.GoneIPCache), len(c.Rules), len(c.GoneRules), len(c.Endpoints), len(c.GoneEndpoints)} {
			kinds[i] += n
		}
		had := map[any]bool{}
		for _, e := range prev.IPCache {
			had[e.Prefix] = true
		}
		for _, e := range prev.Endpoints {
			had[e.IP] = true
		}
		for _, e := range c.IPCache {
			if had[e.Prefix] {
				inPlace[0]++
			}
		}
		for _, e := range c.Endpoints {
			if had[e.IP] {
				inPlace[1]++
			}
		}
		prev = next
	}
	t.Logf("ip cache %d written (%d in place), %d deleted; rules %d added, %d deleted; endpoints %d written (%d in place), %d deleted; %d steps renumbered; %d policies, %d endpoints at the end",
		kinds[0], inPlace[0], kinds[1], kinds[2], kinds[3], kinds[4], inPlace[1], kinds[5], renumbered, len(g.pols), len(prev.Endpoints))
	for i, n := range append(kinds[:], inPlace[0], inPlace[1], renumbered) {
		if n == 0 {
			t.Errorf("seed %d: the sequence had no change of kind %d (ip cache written, deleted, rules added, deleted, endpoints written, deleted, ip cache and endpoints rewritten, renumbered): it tried too little", seed, i)
		}
	}

	if pc.Dir != "" {
		pcFull := scratchPolycube(t, PolycubeMono)
		if err := pcFull.PolycubeSetPolicy(prev); err != nil {
			t.Fatal(err)
		}
		samePolicy(t, fmt.Sprintf("seed %d, the last policy whole into a fresh polycube node", seed), pc, pcPins, pcFull, pcPins)
	}

	// A change writing and deleting one key is refused before anything is written.
	pf := netip.MustParsePrefix("10.9.9.0/24")
	ep := netip.MustParseAddr("10.9.9.9")
	rule := policy.BPFRule{Endpoint: 999, Identity: 1}
	for what, c := range map[string]policy.BPFChange{
		"ip cache":  {IPCache: []policy.BPFPrefix{{Prefix: pf, Identity: 1}}, GoneIPCache: []netip.Prefix{pf}},
		"rules":     {Rules: []policy.BPFRule{rule}, GoneRules: []policy.BPFRule{rule}, IPCache: []policy.BPFPrefix{{Prefix: pf, Identity: 1}}},
		"endpoints": {Endpoints: []policy.BPFEndpoint{{IP: ep, ID: 9}}, GoneEndpoints: []netip.Addr{ep}, Rules: []policy.BPFRule{rule}},
	} {
		dump := func() (out []map[string]string) {
			for _, pin := range polPins {
				out = append(out, dumpMap(t, part, pin))
			}
			if pc.Dir != "" {
				for _, pin := range pcPins {
					out = append(out, dumpMap(t, pc, pin))
				}
			}
			return out
		}
		before := dump()
		if err := part.ChangePolicy(c); err == nil || !strings.Contains(err.Error(), "at once") {
			t.Errorf("%s: a key written and deleted at once: %v", what, err)
		}
		if pc.Dir != "" {
			if err := pc.PolycubeChangePolicy(c); err == nil || !strings.Contains(err.Error(), "at once") {
				t.Errorf("%s: polycube: a key written and deleted at once: %v", what, err)
			}
		}
		if after := dump(); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: a refused change wrote to the maps", what)
		}
	}
}
