package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
)

// bpfMaps are a BPFPolicy's three maps as the kernel keys them (the last of entries sharing a
// key wins, as when the policy is written whole).
type bpfMaps struct {
	ipc   map[netip.Prefix]uint32
	rules map[BPFRule]bool
	eps   map[netip.Addr]BPFEndpoint
}

func mapsOf(b *BPFPolicy) bpfMaps {
	m := bpfMaps{ipc: map[netip.Prefix]uint32{}, rules: map[BPFRule]bool{}, eps: map[netip.Addr]BPFEndpoint{}}
	if b == nil {
		return m
	}
	for _, e := range b.IPCache {
		m.ipc[e.Prefix.Masked()] = e.Identity
	}
	for _, r := range b.Rules {
		m.rules[r] = true
	}
	for _, e := range b.Endpoints {
		m.eps[e.IP] = e
	}
	return m
}

// apply applies c to m as ChangePolicy does to the kernel's maps, and checks that c is
// minimal and well formed: every entry written changes what its key holds, every key deleted
// is there, no key is written and deleted or named twice.
func (m bpfMaps) apply(c BPFChange) error {
	wrote := map[any]bool{}
	for _, e := range c.IPCache {
		if id, ok := m.ipc[e.Prefix]; ok && id == e.Identity {
			return fmt.Errorf("ip cache %s=%d written, unchanged", e.Prefix, e.Identity)
		}
		if wrote[e.Prefix] {
			return fmt.Errorf("ip cache %s written twice", e.Prefix)
		}
		wrote[e.Prefix] = true
		m.ipc[e.Prefix] = e.Identity
	}
	for _, r := range c.Rules {
		if m.rules[r] {
			return fmt.Errorf("rule %+v added, there already", r)
		}
		m.rules[r] = true
		wrote[r] = true
	}
	for _, e := range c.Endpoints {
		if old, ok := m.eps[e.IP]; ok && old == e {
			return fmt.Errorf("endpoint %+v written, unchanged", e)
		}
		if wrote[e.IP] {
			return fmt.Errorf("endpoint %s written twice", e.IP)
		}
		wrote[e.IP] = true
		m.eps[e.IP] = e
	}
	for _, k := range c.GoneIPCache {
		if _, ok := m.ipc[k]; !ok || wrote[k] {
			return fmt.Errorf("ip cache %s deleted: not there, written, or deleted twice", k)
		}
		delete(m.ipc, k)
	}
	for _, r := range c.GoneRules {
		if !m.rules[r] || wrote[r] {
			return fmt.Errorf("rule %+v deleted: not there, added, or deleted twice", r)
		}
		delete(m.rules, r)
	}
	for _, a := range c.GoneEndpoints {
		if _, ok := m.eps[a]; !ok || wrote[a] {
			return fmt.Errorf("endpoint %s deleted: not there, written, or deleted twice", a)
		}
		delete(m.eps, a)
	}
	return nil
}

// checkDiff checks DiffBPF(prev, next): applied to prev's maps it leaves next's, minimally
// (bpfMaps.apply); Size counts its entries; it survives JSON; DiffBPF(next, next) is empty.
func checkDiff(prev, next *BPFPolicy) (BPFChange, error) {
	c := DiffBPF(prev, next)
	m := mapsOf(prev)
	if err := m.apply(c); err != nil {
		return c, err
	}
	if want := mapsOf(next); !reflect.DeepEqual(m, want) {
		return c, fmt.Errorf("the diff applied to the previous maps gives %d/%d/%d ip cache/rules/endpoints entries, not the next ones (%d/%d/%d)",
			len(m.ipc), len(m.rules), len(m.eps), len(want.ipc), len(want.rules), len(want.eps))
	}
	n := len(c.IPCache) + len(c.GoneIPCache) + len(c.Rules) + len(c.GoneRules) + len(c.Endpoints) + len(c.GoneEndpoints)
	if c.Size() != n {
		return c, fmt.Errorf("Size %d, %d entries", c.Size(), n)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	var back BPFChange
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, c) {
		return c, fmt.Errorf("JSON round trip: %v, got %+v from %s", err, back, data)
	}
	if same := DiffBPF(next, next); same.Size() != 0 {
		return c, fmt.Errorf("a policy diffed with itself: %+v", same)
	}
	return c, nil
}

// DiffBPF on random clusters (property_test.go's generator): for every case, the renderings of
// the Programs with no policy, with the first k policies for each k, with every policy, and
// per node (another set of endpoints) are diffed one after the other and against nothing; each
// diff applied to the previous maps gives the next maps, writing and deleting only what differs.
func TestDiffBPFRandom(t *testing.T) {
	seeds := propSeeds(t)
	if len(seeds) > 400 {
		seeds = seeds[:400]
	}
	var kinds [6]int
	for _, seed := range seeds {
		c := genCase(seed)
		render := func(pols []networkingv1.NetworkPolicy, node int) *BPFPolicy {
			pods := make([]Pod, len(c.pods))
			copy(pods, c.pods)
			for i := range pods {
				pods[i].Local = node < 0 || c.node[i] == node
			}
			p, err := Compile(pods, c.nss, pols)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			b, _ := RenderBPF(p)
			return b
		}
		seq := []*BPFPolicy{nil}
		for k := range len(c.pols) + 1 {
			seq = append(seq, render(c.pols[:k], -1))
		}
		seq = append(seq, render(c.pols, 0), render(c.pols, 1), render(c.pols[len(c.pols)/2:], -1), nil)
		for i := 1; i < len(seq); i++ {
			for _, prev := range []*BPFPolicy{seq[i-1], nil} {
				d, err := checkDiff(prev, seq[i])
				if err != nil {
					t.Fatalf("seed %d (POLICY_PROP_SEED=%d), step %d: %v\n%s", seed, seed, i, err, c.dump())
				}
				for j, n := range []int{len(d.IPCache), len(d.GoneIPCache), len(d.Rules), len(d.GoneRules), len(d.Endpoints), len(d.GoneEndpoints)} {
					kinds[j] += n
				}
			}
		}
	}
	t.Logf("%d cases: ip cache %d written, %d deleted; rules %d added, %d deleted; endpoints %d written, %d deleted", len(seeds),
		kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5])
	for i, n := range kinds {
		if n == 0 {
			t.Errorf("no diff of the sequence had entries of kind %d: the test tried too little", i)
		}
	}
}

// DiffBPF by hand: a policy added that isolates one more pod whose address sorts last is a
// change of that pod's endpoint and rules alone; an identity whose class changes is its IP
// cache entries rewritten in place; a policy removed is the reverse; duplicates in the input
// count as the last of them (as in the maps); nil is an empty policy.
func TestDiffBPFExamples(t *testing.T) {
	pods := []Pod{pod("ns", "a", "10.0.0.1", "app", "a"), pod("ns", "b", "10.0.0.2", "app", "b"), pod("ns", "c", "10.0.0.3", "app", "c")}
	nss := []Namespace{ns("ns")}
	from := func(name, target, peer string) networkingv1.NetworkPolicy {
		return netpol("ns", name, networkingv1.NetworkPolicySpec{PodSelector: *ml("app", target),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", peer))}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}})
	}
	render := func(pols ...networkingv1.NetworkPolicy) *BPFPolicy {
		t.Helper()
		p, err := Compile(pods, nss, pols)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := RenderBPF(p)
		return b
	}
	diff := func(what string, prev, next *BPFPolicy) BPFChange {
		t.Helper()
		c, err := checkDiff(prev, next)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return c
	}
	b0 := render(from("b", "b", "a"))
	b1 := render(from("b", "b", "a"), from("c", "c", "a"))
	idA := b1.identity(mustAddr("10.0.0.1"))
	want := BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.3/32"), 1}}, // c's class: world's
		Endpoints: []BPFEndpoint{{IP: mustAddr("10.0.0.3"), ID: 2, Ingress: true}},
		Rules:     []BPFRule{{Endpoint: 2, Identity: idA, Proto: 6, Port: 80, PortBits: 16}}}
	if c := diff("c isolated", b0, b1); !reflect.DeepEqual(c, want) || c.Size() != 3 {
		t.Errorf("c isolated (its address sorts last): %+v, want %+v", c, want)
	}
	wantBack := BPFChange{GoneIPCache: []netip.Prefix{netip.MustParsePrefix("10.0.0.3/32")}, GoneRules: want.Rules,
		GoneEndpoints: []netip.Addr{mustAddr("10.0.0.3")}}
	if c := diff("c's policy removed", b1, b0); !reflect.DeepEqual(c, wantBack) {
		t.Errorf("c's policy removed: %+v, want %+v", c, wantBack)
	}

	// Every pod isolated, b admitting a, then c instead: a's address leaves the peers' class
	// (identity 2, numbered by its first entry, a's /32 then c's), c's enters it; the two /32s
	// are rewritten in place and b's rule, naming identity 2 either way, stays.
	iso := netpol("ns", "all", networkingv1.NetworkPolicySpec{PolicyTypes: types(ingressT)})
	s0, s1 := render(iso, from("b", "b", "a")), render(iso, from("b", "b", "c"))
	want = BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.1/32"), 1}, {netip.MustParsePrefix("10.0.0.3/32"), 2}}}
	if c := diff("b's peer a -> c", s0, s1); !reflect.DeepEqual(c, want) {
		t.Errorf("b's peer a -> c: %+v, want %+v", c, want)
	}

	// a isolated: its address sorts first, so b's endpoint (and its rules) are renumbered.
	b3 := render(from("b", "b", "a"), from("a", "a", "c"))
	c := diff("a isolated", b0, b3)
	t.Logf("a isolated (sorts first, renumbering b): %d entries: %+v", c.Size(), c)

	if c := diff("nothing to b0", nil, b0); len(c.IPCache) != len(b0.IPCache) || len(c.Rules) != len(b0.Rules) || len(c.Endpoints) != len(b0.Endpoints) {
		t.Errorf("from nil: %+v, want every entry of %+v", c, b0)
	}
	if c := diff("b0 to nothing", b0, nil); len(c.GoneIPCache) != len(b0.IPCache) || len(c.GoneRules) != len(b0.Rules) || len(c.GoneEndpoints) != len(b0.Endpoints) {
		t.Errorf("to nil: %+v, want every key of %+v", c, b0)
	}

	dup := *b0
	dup.IPCache = append(append([]BPFPrefix(nil), b0.IPCache...), BPFPrefix{netip.MustParsePrefix("10.0.0.9/24"), 7}, BPFPrefix{netip.MustParsePrefix("10.0.0.0/24"), 8})
	dup.Rules = append(append([]BPFRule(nil), b0.Rules...), b0.Rules...)
	dup.Endpoints = append(append([]BPFEndpoint(nil), b0.Endpoints...), BPFEndpoint{IP: mustAddr("10.0.0.2"), ID: 5, Egress: true})
	c = diff("duplicates", b0, &dup)
	wantDup := BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.0/24"), 8}}, Endpoints: []BPFEndpoint{{IP: mustAddr("10.0.0.2"), ID: 5, Egress: true}}}
	if !reflect.DeepEqual(c, wantDup) {
		t.Errorf("duplicates (the last wins, prefixes masked): %+v, want %+v", c, wantDup)
	}
	if c := diff("duplicates back", &dup, b0); len(c.GoneIPCache) != 1 || len(c.Endpoints) != 1 || c.Size() != 2 {
		t.Errorf("duplicates back: %+v, want the /24 deleted and b's endpoint rewritten", c)
	}
}

// checkRenumbered checks got = RenumberLike(prev, next) against its documentation: with prev
// nil, next itself; else next's endpoints and IP cache entries in next's order with their
// numbers alone changed, by a one-to-one map of endpoint IDs (none becoming 0) and one of
// identities (AnyIdentity kept, nothing else becoming it), which take next's rules to got's,
// sorted as RenderBPF sorts and without duplicates. Numbers are kept: an endpoint whose
// address was prev's keeps prev's ID; a class whose prefixes known to prev all had one
// identity that no other class's had keeps it. A number of prev is given to nothing else but
// what the rules see alike: an identity of prev to a class some of whose prefixes had it, or
// that prev's rules name as got's name the class (the same rules but for the identity, from
// the same endpoint addresses where these are endpoints of both); an endpoint ID of prev whose address is gone to an endpoint with the same
// rules (but for the endpoint). Other numbers are ones prev did not use, the lowest (none above
// the count of prev's numbers and got's, so that numbers do not grow without bound along a
// sequence). prev and next must not repeat an address or prefix (RenderBPF's do not).
func checkRenumbered(prev, next, got *BPFPolicy) error {
	if prev == nil || next == nil {
		if got != next {
			return fmt.Errorf("with prev %p and next %p, got %p, not next", prev, next, got)
		}
		return nil
	}
	if len(got.Endpoints) != len(next.Endpoints) || len(got.IPCache) != len(next.IPCache) {
		return fmt.Errorf("%d endpoints and %d ip cache entries, next has %d and %d",
			len(got.Endpoints), len(got.IPCache), len(next.Endpoints), len(next.IPCache))
	}
	// bijection records a -> b in m and its inverse, failing if either is not a function.
	bijection := func(what string, m, inv map[uint32]uint32, a, b uint32) error {
		if x, ok := m[a]; ok && x != b {
			return fmt.Errorf("%s %d of next is both %d and %d", what, a, x, b)
		}
		if x, ok := inv[b]; ok && x != a {
			return fmt.Errorf("%s %d stands for both %d and %d of next", what, b, x, a)
		}
		m[a], inv[b] = b, a
		return nil
	}
	epOf, epInv := map[uint32]uint32{}, map[uint32]uint32{}
	for i, g := range got.Endpoints {
		n := next.Endpoints[i]
		if g.IP != n.IP || g.Ingress != n.Ingress || g.Egress != n.Egress || g.ID == 0 {
			return fmt.Errorf("endpoint %d: %+v for next's %+v", i, g, n)
		}
		if err := bijection("endpoint", epOf, epInv, n.ID, g.ID); err != nil {
			return err
		}
	}
	idOf, idInv := map[uint32]uint32{AnyIdentity: AnyIdentity}, map[uint32]uint32{AnyIdentity: AnyIdentity}
	for i, g := range got.IPCache {
		n := next.IPCache[i]
		if g.Prefix != n.Prefix {
			return fmt.Errorf("ip cache entry %d: %s for next's %s", i, g.Prefix, n.Prefix)
		}
		if err := bijection("identity", idOf, idInv, n.Identity, g.Identity); err != nil {
			return err
		}
	}
	var want []BPFRule
	for _, r := range next.Rules {
		ep, ok1 := epOf[r.Endpoint]
		id, ok2 := idOf[r.Identity]
		if !ok1 || !ok2 {
			return fmt.Errorf("next's rule %+v names an endpoint or identity next does not have", r)
		}
		r.Endpoint, r.Identity = ep, id
		want = append(want, r)
	}
	slices.SortFunc(want, compareBPFRule)
	want = slices.Compact(want)
	if !slices.Equal(got.Rules, want) {
		return fmt.Errorf("rules %+v, want next's renumbered: %+v", got.Rules, want)
	}
	for i := 1; i < len(got.Rules); i++ {
		if compareBPFRule(got.Rules[i-1], got.Rules[i]) >= 0 {
			return fmt.Errorf("rule %+v after %+v", got.Rules[i], got.Rules[i-1])
		}
	}

	// The rules of an endpoint (its field cleared), of an identity (by endpoint address).
	type seen struct {
		ep netip.Addr
		r  BPFRule
	}
	rulesOfEp := func(b *BPFPolicy, id uint32) (out []BPFRule) {
		for _, r := range b.Rules {
			if r.Endpoint == id {
				r.Endpoint = 0
				out = append(out, r)
			}
		}
		return out
	}
	both := map[netip.Addr]bool{} // endpoints of both
	for _, e := range got.Endpoints {
		if slices.ContainsFunc(prev.Endpoints, func(p BPFEndpoint) bool { return p.IP == e.IP }) {
			both[e.IP] = true
		}
	}
	rulesOfID := func(b *BPFPolicy, id uint32) map[seen]bool {
		out := map[seen]bool{}
		for _, r := range b.Rules {
			if r.Identity == id {
				ep := b.Endpoints[slices.IndexFunc(b.Endpoints, func(e BPFEndpoint) bool { return e.ID == r.Endpoint })].IP
				if !both[ep] {
					ep = netip.Addr{} // an endpoint coming or going
				}
				r.Endpoint, r.Identity = 0, 0
				out[seen{ep, r}] = true
			}
		}
		return out
	}

	prevEp := map[netip.Addr]uint32{}
	usedEp, usedID := map[uint32]bool{}, map[uint32]bool{}
	for _, e := range prev.Endpoints {
		prevEp[e.IP], usedEp[e.ID] = e.ID, true
	}
	prevID := map[netip.Prefix]uint32{}
	for _, e := range prev.IPCache {
		prevID[e.Prefix], usedID[e.Identity] = e.Identity, true
	}
	for _, r := range prev.Rules {
		usedEp[r.Endpoint], usedID[r.Identity] = true, true
	}
	for _, g := range got.Endpoints {
		id, ok := prevEp[g.IP]
		switch {
		case ok && id != 0:
			if g.ID != id {
				return fmt.Errorf("endpoint %s: ID %d, prev's %d", g.IP, g.ID, id)
			}
		case usedEp[g.ID]:
			if i := slices.IndexFunc(got.Endpoints, func(e BPFEndpoint) bool { return prevEp[e.IP] == g.ID }); i >= 0 {
				return fmt.Errorf("new endpoint %s: ID %d, which %s keeps", g.IP, g.ID, got.Endpoints[i].IP)
			}
			if p, n := rulesOfEp(prev, g.ID), rulesOfEp(got, g.ID); !slices.Equal(p, n) {
				return fmt.Errorf("new endpoint %s: ID %d, prev's for rules %+v, not its own %+v", g.IP, g.ID, p, n)
			}
		case int(g.ID) > len(usedEp)+len(got.Endpoints):
			return fmt.Errorf("endpoint %s: ID %d, not the lowest free", g.IP, g.ID)
		}
	}
	had := map[uint32]bool{}             // got's identities some of whose prefixes had them in prev
	olds := map[uint32]map[uint32]bool{} // next's identity -> prev's identities of its prefixes
	owners := map[uint32]map[uint32]bool{}
	for i, g := range got.IPCache {
		old, ok := prevID[g.Prefix]
		if !ok {
			continue
		}
		had[g.Identity] = had[g.Identity] || old == g.Identity
		n := next.IPCache[i].Identity
		if olds[n] == nil {
			olds[n] = map[uint32]bool{}
		}
		olds[n][old] = true
		if owners[old] == nil {
			owners[old] = map[uint32]bool{}
		}
		owners[old][n] = true
	}
	for _, g := range got.IPCache {
		switch {
		case g.Identity == AnyIdentity:
			return fmt.Errorf("identity 0 (%s)", g.Prefix)
		case usedID[g.Identity] && !had[g.Identity]:
			if p, n := rulesOfID(prev, g.Identity), rulesOfID(got, g.Identity); !reflect.DeepEqual(p, n) {
				return fmt.Errorf("identity %d (%s): prev's, given to a class none of whose prefixes had it, for rules %v, not its own %v", g.Identity, g.Prefix, p, n)
			}
		case !usedID[g.Identity] && int(g.Identity) > len(usedID)+len(got.IPCache):
			return fmt.Errorf("identity %d (%s): not the lowest free", g.Identity, g.Prefix)
		}
	}
	for n, os := range olds {
		for old := range os {
			if len(os) == 1 && len(owners[old]) == 1 && old != AnyIdentity && idOf[n] != old {
				return fmt.Errorf("next's identity %d, whose prefixes alone had prev's %d, became %d", n, old, idOf[n])
			}
		}
	}
	// Greedy, most prefixes shared first: a class not given prev's identity p that v of its
	// prefixes had got one at least v of them had, or p went to a class at least v of whose
	// prefixes had it.
	type pair struct{ next, prev uint32 }
	votes := map[pair]int{}
	for i, g := range got.IPCache {
		if old, ok := prevID[g.Prefix]; ok && old != AnyIdentity {
			votes[pair{next.IPCache[i].Identity, old}]++
		}
	}
	for p, v := range votes {
		if got := idOf[p.next]; got != p.prev && votes[pair{p.next, got}] < v && votes[pair{idInv[p.prev], p.prev}] < v {
			return fmt.Errorf("next's identity %d: %d prefixes had prev's %d, which went to next's %d (0: none; %d of its prefixes had it); it became %d (%d)",
				p.next, v, p.prev, idInv[p.prev], votes[pair{idInv[p.prev], p.prev}], got, votes[pair{p.next, got}])
		}
	}
	return nil
}

// sameDecisions fails unless got decides every flow, in each direction, as want does.
func sameDecisions(flows []Flow, got, want *BPFPolicy) error {
	for _, f := range flows {
		for _, egress := range []bool{true, false} {
			_, g := got.decide(f, egress)
			if _, w := want.decide(f, egress); g != w {
				return fmt.Errorf("%s (egress %v): renumbered %v, RenderBPF's %v\n%s", flowString(f), egress, g, w, got.explain(f, egress))
			}
		}
	}
	return nil
}

// RenumberLike on random clusters (property_test.go's generator), along sequences of the
// renderings of TestDiffBPFRandom (the Programs with the first k policies for each k, per
// node, half the policies, all; then all but the first k, on changing nodes; then every pod
// replaced by one of its labels at a new address, one after the other, twice) with a full
// rendering midway (prev nil: RenderBPF's numbering again), each rendering renumbered like the
// previous step's result: each result is as
// documented (checkRenumbered), decides every flow of the case (its flows and sweepFlows, each
// direction) as RenderBPF's rendering does, differs from the previous one by a valid DiffBPF,
// and is its own renumbering (the same Program again is no change). The diffs must be smaller
// in total than those between RenderBPF's renderings; logged: how much, and how many steps
// were larger.
func TestRenumberLikeRandom(t *testing.T) {
	seeds := propSeeds(t)
	if len(seeds) > 300 {
		seeds = seeds[:300]
	}
	var plain, stable, steps, smaller, larger int
	for _, seed := range seeds {
		c := genCase(seed)
		flows := append(append([]Flow(nil), c.flows...), sweepFlows(c)...)
		type step struct {
			b     *BPFPolicy
			flows []Flow
		}
		var seq []step
		render := func(pods []Pod, pols []networkingv1.NetworkPolicy, node int) *BPFPolicy {
			pods = append([]Pod(nil), pods...)
			for i := range pods {
				pods[i].Local = node < 0 || c.node[i] == node
			}
			p, err := Compile(pods, c.nss, pols)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			b, _ := RenderBPF(p)
			return b
		}
		for k := range len(c.pols) + 1 {
			seq = append(seq, step{render(c.pods, c.pols[:k], -1), flows})
		}
		mid := len(seq)
		for _, n := range []int{0, 1, -1} {
			seq = append(seq, step{render(c.pods, c.pols, n), flows})
		}
		seq = append(seq, step{render(c.pods, c.pols[len(c.pols)/2:], -1), flows}, step{render(c.pods, c.pols, -1), flows})
		for k := range len(c.pols) + 1 {
			seq = append(seq, step{render(c.pods, c.pols[k:], 1-k%3), flows})
		}
		// Pods replaced one by one at a new address of the range (their labels and ports
		// kept), all local, then on node 0.
		moved := c
		moved.pods = slices.Clone(c.pods)
		for j := range 2 * len(c.pods) {
			i := j % len(c.pods)
			for k := 7 * j; ; k++ {
				a := addrAt(k % 32).String()
				if !slices.ContainsFunc(moved.pods, func(p Pod) bool { return p.IP == a }) {
					moved.pods[i].IP = a
					break
				}
			}
			seq = append(seq, step{render(moved.pods, c.pols, j/len(c.pods)-1), append(append([]Flow(nil), c.flows...), sweepFlows(moved)...)})
		}
		var prev *BPFPolicy
		for i, st := range seq {
			b, flows := st.b, st.flows
			if i == mid {
				prev = nil // a full rendering: RenderBPF's numbering, whatever came before
			}
			where := fmt.Sprintf("seed %d (POLICY_PROP_SEED=%d) step %d", seed, seed, i)
			s := RenumberLike(prev, b)
			if err := checkRenumbered(prev, b, s); err != nil {
				t.Fatalf("%s: %v\n%s", where, err, c.dump())
			}
			if err := sameDecisions(flows, s, b); err != nil {
				t.Fatalf("%s: %v\n%s", where, err, c.dump())
			}
			if again := RenumberLike(s, b); !reflect.DeepEqual(again, s) {
				t.Fatalf("%s: renumbered like itself, %+v, not %+v", where, again, s)
			}
			ds, err := checkDiff(prev, s)
			if err != nil {
				t.Fatalf("%s: renumbered: %v", where, err)
			}
			if i > 0 && prev != nil {
				dp, err := checkDiff(seq[i-1].b, b)
				if err != nil {
					t.Fatal(err)
				}
				plain, stable, steps = plain+dp.Size(), stable+ds.Size(), steps+1
				if ds.Size() < dp.Size() {
					smaller++
				} else if ds.Size() > dp.Size() {
					larger++
				}
			}
			prev = s
		}
	}
	t.Logf("%d steps: RenderBPF's numbering %d entries written or deleted, RenumberLike's %d (%.0f%%); smaller in %d steps, larger in %d",
		steps, plain, stable, 100*float64(stable)/float64(max(plain, 1)), smaller, larger)
	if stable >= plain {
		t.Errorf("RenumberLike does not shrink the diffs: %d entries, %d with RenderBPF's", stable, plain)
	}
}

// RenumberLike by hand, on TestDiffBPFExamples' pods: a isolated, its address sorting first,
// is a's endpoint (the lowest ID prev did not use: 2), its IP cache entry and its rule, and b
// keeps endpoint 1 and its rule; a's policy removed again is the reverse; nil on either side
// is next itself; next is not modified; a pod replaced at a new address is its IP cache
// entries and endpoint alone; neither 0 nor a number of prev that the rules do not see alike
// is given to a new endpoint or identity, whatever prev holds.
func TestRenumberLikeExamples(t *testing.T) {
	pods := []Pod{pod("ns", "a", "10.0.0.1", "app", "a"), pod("ns", "b", "10.0.0.2", "app", "b"), pod("ns", "c", "10.0.0.3", "app", "c")}
	nss := []Namespace{ns("ns")}
	from := func(name, target, peer string) networkingv1.NetworkPolicy {
		return netpol("ns", name, networkingv1.NetworkPolicySpec{PodSelector: *ml("app", target),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", peer))}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}})
	}
	render := func(pols ...networkingv1.NetworkPolicy) *BPFPolicy {
		t.Helper()
		p, err := Compile(pods, nss, pols)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := RenderBPF(p)
		return b
	}
	renumber := func(what string, prev, next *BPFPolicy) (*BPFPolicy, BPFChange) {
		t.Helper()
		orig := *next
		orig.Endpoints, orig.IPCache, orig.Rules = slices.Clone(next.Endpoints), slices.Clone(next.IPCache), slices.Clone(next.Rules)
		s := RenumberLike(prev, next)
		if !reflect.DeepEqual(*next, orig) {
			t.Errorf("%s: next modified", what)
		}
		if err := checkRenumbered(prev, next, s); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c, err := checkDiff(prev, s)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return s, c
	}

	// b admits a: endpoint 1 is b; identities: 1 the world's (b's, c's), 2 a's.
	b0 := render(from("b", "b", "a"))
	b1 := render(from("b", "b", "a"), from("a", "a", "c")) // a isolated, admitting c
	s1, c := renumber("a isolated", b0, b1)
	idC := s1.identity(mustAddr("10.0.0.3"))
	want := BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.3/32"), idC}},
		Rules:     []BPFRule{{Endpoint: 2, Identity: idC, Proto: 6, Port: 80, PortBits: 16}},
		Endpoints: []BPFEndpoint{{IP: mustAddr("10.0.0.1"), ID: 2, Ingress: true}}}
	if !reflect.DeepEqual(c, want) || idC != 3 {
		t.Errorf("a isolated (sorts first): %+v, want %+v (c's class a new identity, 3)", c, want)
	}
	if plain := DiffBPF(b0, b1); plain.Size() <= c.Size() {
		t.Errorf("RenderBPF's numbering: %d entries, RenumberLike's %d: the example shows nothing", plain.Size(), c.Size())
	}
	if s1.Endpoints[1].ID != 1 || s1.identity(mustAddr("10.0.0.1")) != 2 || s1.identity(mustAddr("192.0.2.1")) != 1 {
		t.Errorf("b's endpoint, a's or the world's identity renumbered: %+v", s1)
	}
	_, c = renumber("a's policy removed", s1, render(from("b", "b", "a")))
	wantBack := BPFChange{GoneIPCache: []netip.Prefix{want.IPCache[0].Prefix}, GoneRules: want.Rules, GoneEndpoints: []netip.Addr{mustAddr("10.0.0.1")}}
	if !reflect.DeepEqual(c, wantBack) {
		t.Errorf("a's policy removed: %+v, want %+v", c, wantBack)
	}

	if s := RenumberLike(nil, b0); s != b0 {
		t.Errorf("RenumberLike(nil, next) is not next")
	}
	if s := RenumberLike(b0, nil); s != nil {
		t.Errorf("RenumberLike(prev, nil) is %+v", s)
	}

	// A pod replaced by another of its labels at a new address: a (in a class of its own, the
	// peers b admits) by a2, then b (an endpoint) by b2. The new class takes a's identity,
	// which b's rule names as before, and b2 takes b's endpoint ID, its rules being b's: the
	// IP cache entries and endpoints change, no rule.
	replace := func(i int, name, ip string) {
		pods = slices.Clone(pods)
		pods[i] = pod("ns", name, ip, "app", pods[i].Labels["app"])
	}
	replace(0, "a2", "10.0.0.4")
	s2, c := renumber("a replaced", b0, render(from("b", "b", "a")))
	wantA := BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.4/32"), 2}}, GoneIPCache: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}}
	if !reflect.DeepEqual(c, wantA) {
		t.Errorf("a replaced: %+v, want %+v", c, wantA)
	}
	replace(1, "b2", "10.0.0.5")
	_, c = renumber("b replaced", s2, render(from("b", "b", "a")))
	wantB := BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.5/32"), 1}}, GoneIPCache: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")},
		Endpoints: []BPFEndpoint{{IP: mustAddr("10.0.0.5"), ID: 1, Ingress: true}}, GoneEndpoints: []netip.Addr{mustAddr("10.0.0.2")}}
	if !reflect.DeepEqual(c, wantB) {
		t.Errorf("b replaced: %+v, want %+v", c, wantB)
	}

	// A class split: a1, a2, a3 (app a) are the peers b admits on port 80, one class
	// (identity 2); a1, whose address sorts first, turns app c, which b admits on port 81. The
	// class keeping a2's and a3's prefixes keeps 2 (RenderBPF would give it to a1's, sorting
	// first), a1's gets a new one: a1's IP cache entry and b's new rule change, nothing else.
	pods = []Pod{pod("ns", "a1", "10.0.0.1", "app", "a"), pod("ns", "b", "10.0.0.2", "app", "b"),
		pod("ns", "a2", "10.0.0.7", "app", "a"), pod("ns", "a3", "10.0.0.8", "app", "a")}
	from81 := netpol("ns", "b81", networkingv1.NetworkPolicySpec{PodSelector: *ml("app", "b"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", "c"))}, Ports: []networkingv1.NetworkPolicyPort{tcp(81)}}}})
	t0 := render(from("b", "b", "a"), from81)
	pods = slices.Clone(pods)
	pods[0] = pod("ns", "a1", "10.0.0.1", "app", "c")
	t1 := render(from("b", "b", "a"), from81)
	s5, c := renumber("a1 split off", t0, t1)
	wantSplit := BPFChange{IPCache: []BPFPrefix{{netip.MustParsePrefix("10.0.0.1/32"), 3}},
		Rules: []BPFRule{{Endpoint: 1, Identity: 3, Proto: 6, Port: 81, PortBits: 16}}}
	if !reflect.DeepEqual(c, wantSplit) || s5.identity(mustAddr("10.0.0.7")) != 2 || t1.identity(mustAddr("10.0.0.1")) != 2 {
		t.Errorf("a1 split off: %+v, want %+v (a2's identity %d, want 2)", c, wantSplit, s5.identity(mustAddr("10.0.0.7")))
	}

	// A next repeating an address (not RenderBPF's): the numbers stay one to one.
	dup := *b1
	dup.Endpoints = append(slices.Clone(b1.Endpoints), BPFEndpoint{IP: b1.Endpoints[0].IP, ID: 7, Egress: true})
	ids := map[uint32]bool{}
	for _, e := range RenumberLike(b1, &dup).Endpoints {
		if ids[e.ID] {
			t.Errorf("next repeating an address: ID %d given twice", e.ID)
		}
		ids[e.ID] = true
	}

	// prev holding 0s, and numbers its rules alone use: 0 is never given, nor a number of prev
	// to what its rules do not see alike. Endpoint 1 is gone (10.0.0.9) but its rule is no
	// new endpoint's: a and b get 2 and 4 (0, 1 and 3 are prev's). Identity 1 (10.0.0.9's,
	// gone) is named by no rule, nor is the world's class: it takes 1; a's class (b's peers)
	// and c's (a's) get fresh numbers, 3 and 5.
	odd := &BPFPolicy{
		Endpoints: []BPFEndpoint{{IP: mustAddr("10.0.0.1"), ID: 0, Ingress: true}, {IP: mustAddr("10.0.0.9"), ID: 1, Ingress: true}},
		IPCache:   []BPFPrefix{{netip.MustParsePrefix("0.0.0.0/0"), 0}, {netip.MustParsePrefix("10.0.0.9/32"), 1}},
		Rules:     []BPFRule{{Endpoint: 3, Identity: 2}, {Endpoint: 1, Identity: 4}},
	}
	s, _ := renumber("prev with 0s", odd, b1)
	if s.Endpoints[0].ID != 2 || s.Endpoints[1].ID != 4 || s.identity(mustAddr("192.0.2.1")) != 1 ||
		s.identity(mustAddr("10.0.0.1")) != 3 || s.identity(mustAddr("10.0.0.3")) != 5 {
		t.Errorf("prev with 0s: %+v; want endpoints 2 and 4, identities 1 (the world's), 3 (a's), 5 (c's)", s)
	}
}

// isolationCluster is a node with n standing isolated pods, each admitting on TCP 80 only
// itself and the client (so that each is an identity of its own), at every other address from
// 10.244.0.10; the client (10.244.0.5), a peer (10.244.0.1, in no set: the world's class) and a
// target pod, whose address sorts first, amidst the standing pods or last. Every pod is local.
func isolationCluster(n int, where string) ([]Pod, []Namespace, []networkingv1.NetworkPolicy) {
	addr := func(k int) string { return netip.AddrFrom4([4]byte{10, 244, byte(k >> 8), byte(k)}).String() }
	target := map[string]int{"first": 3, "middle": 11 + 2*(n/2), "last": 11 + 2*n}[where]
	pods := []Pod{pod("t", "peer", addr(1), "role", "peer"), pod("t", "client", addr(5), "role", "client"),
		pod("t", "target", addr(target), "role", "target")}
	var pols []networkingv1.NetworkPolicy
	for j := range n {
		name := "s" + itoa(j)
		pods = append(pods, pod("t", name, addr(10+2*j), "n", name))
		pols = append(pols, netpol("t", name, networkingv1.NetworkPolicySpec{PodSelector: *ml("n", name),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{podPeer(ml("n", name)), podPeer(ml("role", "client"))},
				Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}}))
	}
	return pods, []Namespace{ns("t")}, pols
}

// Isolating one more pod among n standing ones is a change whose size does not depend on n,
// wherever the pod's address sorts: admitting the client (an identity already there), it is
// the pod's endpoint, IP cache entry and rule (3 entries); admitting the peer (a new identity,
// whose address sorts before every other), the peer's IP cache entry besides (4); removing
// the policy again is as large. With RenderBPF's numbering both grow with n, but for the pod
// sorting last admitting the client (checked, so that the test shows something).
func TestRenumberLikeIsolatingOneMore(t *testing.T) {
	for _, where := range []string{"first", "middle", "last"} {
		for _, peer := range []string{"client", "peer"} {
			wantSize := map[string]int{"client": 3, "peer": 4}[peer]
			var plain []int
			for _, n := range []int{10, 100, 1000} {
				pods, nss, pols := isolationCluster(n, where)
				render := func(pols []networkingv1.NetworkPolicy) (*Program, *BPFPolicy) {
					p, err := Compile(pods, nss, pols)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := RenderBPF(p)
					return p, b
				}
				_, b0 := render(pols)
				p1, b1 := render(append(pols[:n:n], netpol("t", "target", networkingv1.NetworkPolicySpec{PodSelector: *ml("role", "target"),
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("role", peer))},
						Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}})))
				what := fmt.Sprintf("%d standing pods, the target's address %s, admitting the %s", n, where, peer)
				s1 := RenumberLike(b0, b1)
				if err := checkRenumbered(b0, b1, s1); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				var flows []Flow
				for _, a := range []int{0, 1, 2, 3, 3 + n/2, 2 + n} {
					for _, b := range []int{0, 1, 2, 3, 3 + n/2, 2 + n} {
						flows = append(flows, fl(pods[a].IP, pods[b].IP, "TCP", 80), fl(pods[a].IP, pods[b].IP, "UDP", 80))
					}
				}
				if err := sameDecisions(flows, s1, b1); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				ev := p1.Evaluator()
				for _, f := range flows {
					if s1.allows(f) != ev.Allows(f) {
						t.Fatalf("%s: %s: renumbered %v, Program %v", what, flowString(f), s1.allows(f), ev.Allows(f))
					}
				}
				c, err := checkDiff(b0, s1)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				back := RenumberLike(s1, b0)
				cb, err := checkDiff(s1, back)
				if err != nil {
					t.Fatalf("%s, removed: %v", what, err)
				}
				if c.Size() != wantSize || cb.Size() != wantSize {
					t.Errorf("%s: %d entries, %d removing it; want %d: %+v", what, c.Size(), cb.Size(), wantSize, c)
				}
				plain = append(plain, DiffBPF(b0, b1).Size())
			}
			t.Logf("target %s, admitting the %s: RenderBPF's numbering %v entries for 10, 100, 1000 standing pods; RenumberLike's %d", where, peer, plain, wantSize)
			if grows := plain[2] > 10*plain[0]; grows == (where == "last" && peer == "client") {
				t.Errorf("target %s, admitting the %s: RenderBPF's numbering %v entries: the case is not what the test means", where, peer, plain)
			}
		}
	}
}

// At scale (compile_bench_test.go's scaleCluster: 10,000 pods, each selected by two policies,
// each with a named-port identity of its own), from the cluster without the two policies
// selecting pod 25 to the whole one and back: pod 25 gets an endpoint and an identity of its
// own, and with RenderBPF's numbering every later endpoint and identity shifts by one, so that
// nearly every IP cache entry, rule and endpoint is rewritten; RenumberLike's writes pod 25's
// endpoint, IP cache entry and six rules, and deletes them again. Then pods replaced by others
// of their labels at new addresses (after every other), pod 25 and a client (a peer of the
// pods of its namespace, its own among them): the old endpoint and IP cache entry deleted, the
// new ones written, no rule (4 entries; RenderBPF's numbering rewrites the IP cache entries
// and endpoints after the old address, and the client's rules). Checked as the random test
// does, on flows of pods around 25 and of the client.
func TestRenumberLikeAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	pods, nss, pols := scaleCluster()
	var prevPols []networkingv1.NetworkPolicy
	for j, p := range pols {
		if j%10000 != 25 {
			prevPols = append(prevPols, p)
		}
	}
	render := func(pods []Pod, pols []networkingv1.NetworkPolicy) *BPFPolicy {
		p, err := Compile(pods, nss, pols)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := RenderBPF(p)
		return b
	}
	client := slices.IndexFunc(pods, func(p Pod) bool { return p.Labels["role"] == "client" && p.Namespace == pods[25].Namespace })
	var flows []Flow
	addFlows := func(pods []Pod) {
		for _, i := range []int{0, 5, 24, 25, 26, client, 9999} {
			for _, j := range []int{0, 5, 24, 25, 26, client, 9999} {
				flows = append(flows, fl(pods[i].IP, pods[j].IP, "TCP", 80), fl(pods[i].IP, pods[j].IP, "TCP", 8080), fl(pods[i].IP, pods[j].IP, "UDP", 53))
			}
		}
	}
	addFlows(pods)
	// step renumbers next like prev, and compares the change with the one between RenderBPF's
	// renderings, prevR's and next.
	step := func(what string, prev, prevR, next *BPFPolicy, want int) *BPFPolicy {
		t.Helper()
		start := time.Now()
		s := RenumberLike(prev, next)
		took := time.Since(start)
		if err := checkRenumbered(prev, next, s); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := sameDecisions(flows, s, next); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		plain, c := DiffBPF(prevR, next), DiffBPF(prev, s)
		t.Logf("%s: renumbered in %v; RenderBPF's numbering: %d entries (ip cache %d written, %d deleted, rules %d added, %d deleted, endpoints %d written, %d deleted); RenumberLike's: %d",
			what, took.Round(time.Millisecond), plain.Size(), len(plain.IPCache), len(plain.GoneIPCache), len(plain.Rules), len(plain.GoneRules), len(plain.Endpoints), len(plain.GoneEndpoints), c.Size())
		if c.Size() != want {
			t.Errorf("%s: RenumberLike's change: %d entries, want %d: %+v", what, c.Size(), want, c)
		}
		return s
	}
	b0, b1 := render(pods, prevPols), render(pods, pols)
	t.Logf("%d ip cache entries, %d rules, %d endpoints", len(b1.IPCache), len(b1.Rules), len(b1.Endpoints))
	if plain := DiffBPF(b0, b1); plain.Size() < 10000 {
		t.Errorf("pod 25 isolated: RenderBPF's numbering %d entries: the case is not what the test means", plain.Size())
	}
	s := step("pod 25 isolated", b0, b0, b1, 8)
	s = step("pod 25's policies removed", s, b1, b0, 8)
	s = step("pod 25 isolated again", s, b0, b1, 8)
	moved, prevR := slices.Clone(pods), b1
	for _, i := range []int{25, client} {
		moved[i].IP = "10.200.0." + itoa(i%250)
		addFlows(moved)
		next := render(moved, pols)
		s = step("pod "+moved[i].Name+" replaced", s, prevR, next, 4)
		prevR = next
	}
}

// profiles tells groups of rules apart by every field it compares, and by these only: by
// endpoint, the rules' fields but the endpoint; by identity, the fields but the endpoint and
// the identity, and the endpoint's address (none, the zero Addr, apart from all); the order
// and repetitions of the rules do not count.
func TestRuleProfiles(t *testing.T) {
	r := BPFRule{Endpoint: 5, Egress: true, Identity: 7, Proto: 6, Port: 1024, PortBits: 6}
	a := mustAddr("10.0.0.1")
	ofEp := func(rs ...BPFRule) string {
		return profiles(rs, func(r BPFRule) (uint32, ruleElem, bool) { return 1, byEndpoint(r), true })[1]
	}
	ofID := func(ep netip.Addr, rs ...BPFRule) string {
		return profiles(rs, func(r BPFRule) (uint32, ruleElem, bool) { return 1, byPeer(r, ep), true })[1]
	}
	for field, v := range map[string]BPFRule{
		"Endpoint": {Endpoint: 6, Egress: true, Identity: 7, Proto: 6, Port: 1024, PortBits: 6},
		"Egress":   {Endpoint: 5, Egress: false, Identity: 7, Proto: 6, Port: 1024, PortBits: 6},
		"Identity": {Endpoint: 5, Egress: true, Identity: 8, Proto: 6, Port: 1024, PortBits: 6},
		"Proto":    {Endpoint: 5, Egress: true, Identity: 7, Proto: 17, Port: 1024, PortBits: 6},
		"Port":     {Endpoint: 5, Egress: true, Identity: 7, Proto: 6, Port: 2048, PortBits: 6},
		"PortBits": {Endpoint: 5, Egress: true, Identity: 7, Proto: 6, Port: 1024, PortBits: 7},
	} {
		if same := ofEp(r) == ofEp(v); same != (field == "Endpoint") {
			t.Errorf("by endpoint, %s changed: profiles equal %v", field, same)
		}
		if same := ofID(a, r) == ofID(a, v); same != (field == "Endpoint" || field == "Identity") {
			t.Errorf("by identity, %s changed: profiles equal %v", field, same)
		}
		if ofEp(r, v) != ofEp(v, r, v) || (ofEp(r, v) == ofEp(r)) != (field == "Endpoint") {
			t.Errorf("%s changed: order or repetitions count, or a second rule does not", field)
		}
	}
	if ofID(a, r) == ofID(mustAddr("10.0.0.2"), r) || ofID(a, r) == ofID(netip.Addr{}, r) || ofID(mustAddr("0.0.0.0"), r) == ofID(netip.Addr{}, r) {
		t.Errorf("by identity, the endpoint's address does not count")
	}
	if ofEp() != "" {
		t.Errorf("no rule: %q", ofEp())
	}
	g := profiles([]BPFRule{r, {Endpoint: 9}}, func(r BPFRule) (uint32, ruleElem, bool) { return r.Endpoint, byEndpoint(r), r.Endpoint != 9 })
	if len(g) != 1 || g[5] != ofEp(r) {
		t.Errorf("grouped by endpoint, the rules picked: %v", g)
	}
}
