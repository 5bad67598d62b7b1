package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
)

// allows is the eBPF engine's decision for the first packet of f with b loaded, both
// directions checked on this node (as Program.Allows): exactly the kernel's lookups, done
// naively (linear scans) so that the model is obviously what BPFPolicy documents.
func (b *BPFPolicy) allows(f Flow) bool {
	_, eg := b.decide(f, true)
	_, in := b.decide(f, false)
	return eg && in
}

// decide is the check of one direction: checked says whether the endpoint at that end is
// isolated in that direction (a rule lookup happened), admitted whether the packet passes.
func (b *BPFPolicy) decide(f Flow, egress bool) (checked, admitted bool) {
	src, dst, ok := parseFlow(f)
	if !ok || src == dst {
		return false, true
	}
	self, peer := dst, src
	if egress {
		self, peer = src, dst
	}
	ep := b.endpoint(self)
	if ep == nil || (egress && !ep.Egress) || (!egress && !ep.Ingress) {
		return false, true
	}
	id := b.identity(peer)
	proto, _ := bpfProto(f.Protocol) // not TCP, UDP or SCTP: a number no rule but Proto 0 has
	for _, r := range b.Rules {
		if r.Endpoint == ep.ID && r.Egress == egress && (r.Identity == id || r.Identity == AnyIdentity) &&
			(r.Proto == 0 || (r.Proto == proto && topBitsEqual(r.Port, uint16(f.Port), r.PortBits))) {
			return true, true
		}
	}
	return true, false
}

func topBitsEqual(a, b uint16, n uint8) bool {
	mask := ^uint16(0) << (16 - uint(n)) // n == 0: shifted out entirely, mask 0
	return a&mask == b&mask
}

func (b *BPFPolicy) endpoint(a netip.Addr) *BPFEndpoint {
	for i := range b.Endpoints {
		if b.Endpoints[i].IP == a {
			return &b.Endpoints[i]
		}
	}
	return nil
}

// identity is the IP cache's longest-prefix lookup (0: no entry contains a).
func (b *BPFPolicy) identity(a netip.Addr) uint32 {
	best, id := -1, uint32(0)
	for _, e := range b.IPCache {
		if e.Prefix.Contains(a) && e.Prefix.Bits() > best {
			best, id = e.Prefix.Bits(), e.Identity
		}
	}
	return id
}

// explain describes what the engine looks at for f in one direction, for failure messages.
func (b *BPFPolicy) explain(f Flow, egress bool) string {
	var sb strings.Builder
	src, dst, _ := parseFlow(f)
	self, peer := dst, src
	if egress {
		self, peer = src, dst
	}
	fmt.Fprintf(&sb, "    endpoint %s: %+v; identity(%s) = %d\n", self, b.endpoint(self), peer, b.identity(peer))
	sb.WriteString("    ipcache:")
	for _, e := range b.IPCache {
		fmt.Fprintf(&sb, " %s=%d", e.Prefix, e.Identity)
	}
	sb.WriteString("\n    rules of the endpoint in that direction:")
	if ep := b.endpoint(self); ep != nil {
		for _, r := range b.Rules {
			if r.Endpoint == ep.ID && r.Egress == egress {
				fmt.Fprintf(&sb, " id%d/%d/%d/%d", r.Identity, r.Proto, r.Port, r.PortBits)
			}
		}
	}
	sb.WriteString("\n")
	return sb.String()
}

// checkBPF checks the documented shape of b rendered from p with counts c: endpoints sorted by
// IP, numbered 1..n, one per PodFirewall with its directions; an IP cache sorted by address
// then length, without duplicates, holding 0.0.0.0/0, a /32 for every endpoint and every
// address of an address set, every SetNets prefix, identities 1..m all used; rules sorted
// without duplicates, naming an endpoint and an existing identity, PortBits <= 16, Proto 0
// only with Port 0 and PortBits 0, Port's bits below PortBits zero; Counts as documented.
// p must validate.
func checkBPF(b *BPFPolicy, p *Program, c Counts) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if len(b.Endpoints) != len(p.Pods) {
		bad("%d endpoints for %d pod firewalls", len(b.Endpoints), len(p.Pods))
	}
	fws := map[netip.Addr]PodFirewall{}
	for _, fw := range p.Pods {
		fws[netip.MustParseAddr(fw.IP)] = fw
	}
	for i, e := range b.Endpoints {
		if e.ID != uint32(i+1) {
			bad("endpoint %d (%s) has ID %d", i, e.IP, e.ID)
		}
		if i > 0 && !b.Endpoints[i-1].IP.Less(e.IP) {
			bad("endpoint %s after %s", e.IP, b.Endpoints[i-1].IP)
		}
		fw, ok := fws[e.IP]
		if !ok || e.Ingress != (len(fw.IngressOf) > 0) || e.Egress != (len(fw.EgressOf) > 0) {
			bad("endpoint %+v does not match pod firewall %+v", e, fw)
		}
	}

	cache := map[netip.Prefix]bool{}
	used := map[uint32]bool{}
	for i, e := range b.IPCache {
		if !e.Prefix.Addr().Is4() || e.Prefix != e.Prefix.Masked() {
			bad("ipcache %s: not a canonical IPv4 prefix", e.Prefix)
		}
		if i > 0 && comparePrefix(b.IPCache[i-1].Prefix, e.Prefix) >= 0 {
			bad("ipcache %s after %s: out of order or duplicate", e.Prefix, b.IPCache[i-1].Prefix)
		}
		if e.Identity < 1 || int(e.Identity) > c.Sets {
			bad("ipcache %s: identity %d not in 1..%d", e.Prefix, e.Identity, c.Sets)
		}
		cache[e.Prefix] = true
		used[e.Identity] = true
	}
	if len(used) != c.Sets {
		bad("%d identities used of %d", len(used), c.Sets)
	}
	want := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	for a := range fws {
		want = append(want, netip.PrefixFrom(a, 32))
	}
	for _, s := range p.Sets {
		for _, m := range s.Members {
			if s.Kind == SetNets {
				want = append(want, netip.MustParsePrefix(m.Addr))
			} else {
				want = append(want, netip.PrefixFrom(netip.MustParseAddr(m.Addr), 32))
			}
		}
	}
	for _, pf := range want {
		if !cache[pf] {
			bad("ipcache lacks %s", pf)
		}
	}

	seen := map[BPFRule]bool{}
	for i, r := range b.Rules {
		switch {
		case r.Endpoint < 1 || int(r.Endpoint) > len(b.Endpoints):
			bad("rule %+v: no such endpoint", r)
		case r.Identity != AnyIdentity && !used[r.Identity]:
			bad("rule %+v: no such identity", r)
		case r.PortBits > 16:
			bad("rule %+v: PortBits > 16", r)
		case r.Proto == 0 && (r.PortBits != 0 || r.Port != 0):
			bad("rule %+v: any protocol with a port", r)
		case r.Proto != 0 && r.Proto != 6 && r.Proto != 17 && r.Proto != 132:
			bad("rule %+v: protocol", r)
		case uint32(r.Port)&(1<<(16-uint32(r.PortBits))-1) != 0:
			bad("rule %+v: bits below PortBits set", r)
		case seen[r]:
			bad("rule %+v: duplicate", r)
		case i > 0 && compareBPFRule(b.Rules[i-1], r) >= 0:
			bad("rule %+v after %+v: out of order", r, b.Rules[i-1])
		}
		seen[r] = true
	}

	wantCounts := Counts{Policies: len(p.Policies), PodChains: len(b.Endpoints), Sets: len(used),
		SetMembers: len(b.IPCache), Rules: len(b.Rules)}
	if c != wantCounts {
		bad("counts %+v, want %+v", c, wantCounts)
	}
	return errors.Join(errs...)
}

// The property: for random clusters, policies and flows (property_test.go's generator), the
// eBPF rendering of the compiled Program decides every flow, in each direction, as the
// Program does (Evaluator), both with one Program for the whole cluster and with one per node.
// Besides the case's flows, every pod talks with every address of the generator's range and
// the outside addresses, both ways, so that each identity class is probed. Replay one case
// with POLICY_PROP_SEED=<seed> go test -run TestPropertyBPFMatchesEvaluator.
func TestPropertyBPFMatchesEvaluator(t *testing.T) {
	seeds := propSeeds(t)
	replay := os.Getenv("POLICY_PROP_SEED")

	var checks, denied, byRule, identities, rules, failures int
	for _, seed := range seeds {
		c := genCase(seed)
		if replay != "" {
			t.Log(c.dump())
		}
		flows := append(append([]Flow(nil), c.flows...), sweepFlows(c)...)
		var fails []string
		for k, local := range []func(i int) bool{
			func(int) bool { return true },
			func(i int) bool { return c.node[i] == 0 },
			func(i int) bool { return c.node[i] == 1 },
		} {
			name := []string{"all local", "node0", "node1"}[k]
			pods := append([]Pod(nil), c.pods...)
			for i := range pods {
				pods[i].Local = local(i)
			}
			prog, err := Compile(pods, c.nss, c.pols)
			if err == nil {
				err = prog.Validate()
			}
			if err != nil {
				t.Fatalf("seed %d, %s: %v", seed, name, err)
			}
			bp, counts := RenderBPF(prog)
			if err := checkBPF(bp, prog, counts); err != nil {
				fails = append(fails, fmt.Sprintf("%s: malformed rendering: %v", name, err))
			}
			identities += counts.Sets
			rules += counts.Rules
			ev := prog.Evaluator()
			for _, f := range flows {
				for _, egress := range []bool{true, false} {
					dir, want := "ingress", ev.AllowsIngress(f)
					if egress {
						dir, want = "egress", ev.AllowsEgress(f)
					}
					checked, got := bp.decide(f, egress)
					if checked {
						checks++
						if !got {
							denied++
						} else {
							byRule++
						}
					}
					if got != want {
						fails = append(fails, fmt.Sprintf("%s, %s of %s: eBPF %v, Program %v\n%s",
							name, dir, flowString(f), got, want, bp.explain(f, egress)))
					}
				}
				if k == 0 && bp.allows(f) != ev.Allows(f) {
					fails = append(fails, fmt.Sprintf("%s, %s: eBPF allows %v, Program %v", name, flowString(f), !ev.Allows(f), ev.Allows(f)))
				}
			}
		}
		if len(fails) > 0 {
			failures++
			if len(fails) > 5 {
				fails = append(fails[:5], fmt.Sprintf("... and %d more", len(fails)-5))
			}
			t.Errorf("seed %d (replay: POLICY_PROP_SEED=%d go test -run TestPropertyBPFMatchesEvaluator ./internal/engine/policy/):\n  %s\n%s",
				seed, seed, strings.Join(fails, "\n  "), c.dump())
			if failures >= 3 {
				t.Fatal("stopping after 3 failing cases")
			}
		}
	}
	t.Logf("%d cases: %d rule lookups, %d admitted, %d denied; %d identities and %d rules rendered",
		len(seeds), checks, byRule, denied, identities, rules)
	if replay == "" && (byRule < checks/10 || denied < checks/10) {
		t.Errorf("degenerate generator: of %d rule lookups, %d admitted and %d denied", checks, byRule, denied)
	}
}

// sweepFlows: every pod with every address of the generator's range (10.0.0.0/27) and the
// outside addresses, both ways, on a random protocol and port (a declared port of the
// destination half of the time when it has some).
func sweepFlows(c propCase) []Flow {
	r := rand.New(rand.NewPCG(c.seed, 0xb5f))
	var others []string
	for j := range 32 {
		others = append(others, addrAt(j).String())
	}
	others = append(others, outsideIPs...)
	var flows []Flow
	for _, p := range c.pods {
		for _, o := range others {
			for _, pair := range [][2]string{{p.IP, o}, {o, p.IP}} {
				f := Flow{Src: pair[0], Dst: pair[1], Protocol: pick(r, protocols), Port: pick(r, flowPorts)}
				if r.IntN(20) == 0 {
					f.Protocol = "SCTP"
				}
				for _, q := range c.pods {
					if q.IP == f.Dst && len(q.Ports) > 0 && r.IntN(2) == 0 {
						np := pick(r, q.Ports)
						f.Protocol, f.Port = portProtocol(np), np.Port
					}
				}
				flows = append(flows, f)
			}
		}
	}
	return flows
}

// renderBPFChecked renders p, which must validate, and checks the rendering's shape.
func renderBPFChecked(t *testing.T, p *Program) *BPFPolicy {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	b, c := RenderBPF(p)
	if err := checkBPF(b, p, c); err != nil {
		t.Fatal(err)
	}
	return b
}

// expectFlows checks the rendering's decision for each flow against the wanted one and
// against the Program's.
func expectFlows(t *testing.T, p *Program, b *BPFPolicy, want map[Flow]bool) {
	t.Helper()
	ev := p.Evaluator()
	for f, w := range want {
		if got, prog := b.allows(f), ev.Allows(f); got != w || prog != w {
			t.Errorf("%s: eBPF %v, Program %v, want %v\n%s%s", flowString(f), got, prog, w, b.explain(f, true), b.explain(f, false))
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// A port range becomes the aligned power-of-two blocks covering it, and decides every port as
// the range does.
func TestRenderBPFPortRange(t *testing.T) {
	prog := func(lo, hi int) *Program {
		return &Program{
			Policies: []PolicyChain{{Name: "range", Namespace: "n", Policy: "range", Ingress: []Rule{{
				Peers: []Peer{{Any: true}},
				Ports: []PortMatch{{Protocol: "TCP", Port: lo, EndPort: hi}},
			}}}},
			Pods: []PodFirewall{{Pod: "n/a", IP: "10.0.0.1", Chain: "fw-a", IngressOf: []string{"range"}}},
		}
	}
	p := prog(1000, 1999)
	b := renderBPFChecked(t, p)
	// 10.0.0.1 is in no set: it shares the world's identity; Any is the wildcard identity.
	wantCache := []BPFPrefix{{netip.MustParsePrefix("0.0.0.0/0"), 1}, {netip.MustParsePrefix("10.0.0.1/32"), 1}}
	if !reflect.DeepEqual(b.IPCache, wantCache) {
		t.Errorf("ipcache %v, want %v", b.IPCache, wantCache)
	}
	var want []BPFRule
	for _, blk := range []struct {
		port uint16
		bits uint8
	}{{1000, 13}, {1008, 12}, {1024, 7}, {1536, 8}, {1792, 9}, {1920, 10}, {1984, 12}} {
		want = append(want, BPFRule{Endpoint: 1, Identity: AnyIdentity, Proto: 6, Port: blk.port, PortBits: blk.bits})
	}
	if !reflect.DeepEqual(b.Rules, want) {
		t.Errorf("rules\n  %+v\nwant\n  %+v", b.Rules, want)
	}
	expectFlows(t, p, b, map[Flow]bool{
		fl("192.0.2.1", "10.0.0.1", "TCP", 999):  false,
		fl("192.0.2.1", "10.0.0.1", "TCP", 1000): true,
		fl("192.0.2.1", "10.0.0.1", "TCP", 1500): true,
		fl("192.0.2.1", "10.0.0.1", "TCP", 1999): true,
		fl("192.0.2.1", "10.0.0.1", "TCP", 2000): false,
		fl("192.0.2.1", "10.0.0.1", "UDP", 1000): false,
	})

	// Every port, for ranges at the edges of the port space.
	for _, r := range [][2]int{{1000, 1999}, {1, 65535}, {65535, 65535}, {32767, 32768}, {80, 80}, {50, 85}} {
		p := prog(r[0], r[1])
		b := renderBPFChecked(t, p)
		ev := p.Evaluator()
		for port := range 65536 {
			f := fl("192.0.2.1", "10.0.0.1", "TCP", port)
			if got, want := b.allows(f), ev.Allows(f); got != want || want != (r[0] <= port && port <= r[1]) {
				t.Errorf("range %d-%d, port %d: eBPF %v, Program %v", r[0], r[1], port, got, want)
				break
			}
		}
		if r == [2]int{1, 65535} && len(b.Rules) != 16 {
			t.Errorf("1-65535: %d blocks, want 16: %+v", len(b.Rules), b.Rules)
		}
	}
}

// A named port resolves on ingress to the endpoint's own port, on egress to each destination
// identity's port, of the entry's protocol only.
func TestRenderBPFNamedPort(t *testing.T) {
	p := &Program{
		Sets: []Set{
			{Name: "clients", Kind: SetAddrs, Members: []Member{{Addr: "10.0.0.2"}}},
			{Name: "np-a", Kind: SetAddrPorts, Members: []Member{{Addr: "10.0.0.1", Protocol: "TCP", Port: 8080}}},
			{Name: "np-servers", Kind: SetAddrPorts, Members: []Member{
				{Addr: "10.0.0.1", Protocol: "TCP", Port: 8080},
				{Addr: "10.0.0.3", Protocol: "TCP", Port: 9090},
				{Addr: "10.0.0.3", Protocol: "UDP", Port: 5353},
			}},
		},
		Policies: []PolicyChain{
			{Name: "in", Namespace: "n", Policy: "in", Ingress: []Rule{{
				Peers: []Peer{{Set: "clients"}}, Ports: []PortMatch{{Protocol: "TCP", Set: "np-a"}},
			}}},
			{Name: "out", Namespace: "n", Policy: "out", Egress: []Rule{{
				Peers: []Peer{{Any: true}}, Ports: []PortMatch{{Protocol: "TCP", Set: "np-servers"}},
			}}},
		},
		Pods: []PodFirewall{
			{Pod: "n/b", IP: "10.0.0.2", Chain: "fw-b", EgressOf: []string{"out"}},
			{Pod: "n/a", IP: "10.0.0.1", Chain: "fw-a", IngressOf: []string{"in"}},
		},
	}
	b := renderBPFChecked(t, p)
	a, cl, c := b.identity(mustAddr("10.0.0.1")), b.identity(mustAddr("10.0.0.2")), b.identity(mustAddr("10.0.0.3"))
	if w := b.identity(mustAddr("192.0.2.1")); len(map[uint32]bool{a: true, cl: true, c: true, w: true}) != 4 {
		t.Errorf("identities a=%d client=%d c=%d world=%d: want 4 different", a, cl, c, w)
	}
	want := []BPFRule{
		{Endpoint: 1, Egress: false, Identity: cl, Proto: 6, Port: 8080, PortBits: 16}, // a (10.0.0.1) is endpoint 1
		{Endpoint: 2, Egress: true, Identity: a, Proto: 6, Port: 8080, PortBits: 16},
		{Endpoint: 2, Egress: true, Identity: c, Proto: 6, Port: 9090, PortBits: 16},
	}
	if !reflect.DeepEqual(b.Rules, want) {
		t.Errorf("rules\n  %+v\nwant\n  %+v", b.Rules, want)
	}
	expectFlows(t, p, b, map[Flow]bool{
		fl("10.0.0.2", "10.0.0.1", "TCP", 8080):  true,
		fl("10.0.0.2", "10.0.0.1", "TCP", 9090):  false,
		fl("10.0.0.2", "10.0.0.3", "TCP", 9090):  true,
		fl("10.0.0.2", "10.0.0.3", "UDP", 9090):  false,
		fl("10.0.0.2", "10.0.0.3", "UDP", 5353):  false,
		fl("10.0.0.2", "10.0.0.3", "TCP", 5353):  false,
		fl("10.0.0.2", "10.0.0.3", "TCP", 8080):  false,
		fl("10.0.0.2", "192.0.2.1", "TCP", 8080): false,
		fl("192.0.2.1", "10.0.0.1", "TCP", 8080): false,
		fl("10.0.0.3", "10.0.0.1", "TCP", 8080):  false,
	})
}

// An ipBlock with an except splits the block: the except's addresses share the world's
// identity, the rest of the block (an endpoint's /32 included) has the block's.
func TestRenderBPFIPBlockExcept(t *testing.T) {
	p := &Program{
		Sets: []Set{{Name: "blk", Kind: SetNets, Members: []Member{{Addr: "10.0.0.0/8"}, {Addr: "10.1.0.0/16", Except: true}}}},
		Policies: []PolicyChain{
			{Name: "out", Namespace: "n", Policy: "out", Egress: []Rule{{Peers: []Peer{{Set: "blk"}}, Ports: []PortMatch{{Any: true}}}}},
			{Name: "open", Namespace: "n", Policy: "open", Ingress: []Rule{{Peers: []Peer{{Any: true}}, Ports: []PortMatch{{Any: true}}}}},
		},
		Pods: []PodFirewall{
			{Pod: "n/p", IP: "10.2.0.9", Chain: "fw-p", EgressOf: []string{"out"}},
			{Pod: "n/q", IP: "10.1.0.9", Chain: "fw-q", IngressOf: []string{"open"}},
		},
	}
	b := renderBPFChecked(t, p)
	in, ex, world := b.identity(mustAddr("10.2.0.1")), b.identity(mustAddr("10.1.0.1")), b.identity(mustAddr("192.0.2.1"))
	if in == ex {
		t.Errorf("10.2.0.1 and 10.1.0.1 share identity %d", in)
	}
	if ex != world || b.identity(mustAddr("10.1.0.9")) != world || b.identity(mustAddr("10.2.0.9")) != in {
		t.Errorf("identities: 10.1.0.1 %d, 10.1.0.9 %d, world %d; 10.2.0.1 %d, 10.2.0.9 %d",
			ex, b.identity(mustAddr("10.1.0.9")), world, in, b.identity(mustAddr("10.2.0.9")))
	}
	var prefixes []string
	for _, e := range b.IPCache {
		prefixes = append(prefixes, e.Prefix.String())
	}
	if got, want := strings.Join(prefixes, " "), "0.0.0.0/0 10.0.0.0/8 10.1.0.0/16 10.1.0.9/32 10.2.0.9/32"; got != want {
		t.Errorf("ipcache %s, want %s", got, want)
	}
	expectFlows(t, p, b, map[Flow]bool{
		fl("10.2.0.9", "10.2.0.1", "UDP", 53):   true,
		fl("10.2.0.9", "10.255.0.1", "SCTP", 1): true,
		fl("10.2.0.9", "10.1.0.1", "TCP", 80):   false,
		fl("10.2.0.9", "10.1.0.9", "TCP", 80):   false,
		fl("10.2.0.9", "192.0.2.1", "TCP", 80):  false,
		fl("192.0.2.1", "10.1.0.9", "TCP", 80):  true,
	})
}

// A policy with an empty ingress rule list isolates its pods and admits nothing to them; their
// egress stays open.
func TestRenderBPFEmptyIngressIsolates(t *testing.T) {
	p := &Program{
		Policies: []PolicyChain{{Name: "deny", Namespace: "n", Policy: "deny"}},
		Pods:     []PodFirewall{{Pod: "n/a", IP: "10.0.0.1", Chain: "fw-a", IngressOf: []string{"deny"}}},
	}
	b := renderBPFChecked(t, p)
	if want := []BPFEndpoint{{IP: mustAddr("10.0.0.1"), ID: 1, Ingress: true}}; !reflect.DeepEqual(b.Endpoints, want) || len(b.Rules) != 0 {
		t.Errorf("endpoints %+v, rules %+v; want %+v and no rule", b.Endpoints, b.Rules, want)
	}
	expectFlows(t, p, b, map[Flow]bool{
		fl("10.0.0.2", "10.0.0.1", "TCP", 80):  false,
		fl("192.0.2.1", "10.0.0.1", "UDP", 53): false,
		fl("10.0.0.2", "10.0.0.1", "SCTP", 9):  false,
		fl("10.0.0.1", "10.0.0.2", "TCP", 80):  true,
		fl("10.0.0.1", "10.0.0.1", "TCP", 80):  true,
	})
}

// The render tests' example (nested excepts, a 0.0.0.0/0 member, SCTP named ports, a pod
// isolated both ways) decides as the Program over a sweep of flows.
func TestRenderBPFExample(t *testing.T) {
	p := renderExample()
	b, c := RenderBPF(p)
	if c.Policies != 3 || c.PodChains != 2 {
		t.Errorf("counts %+v", c)
	}
	ev := p.Evaluator()
	addrs := []string{"10.244.0.5", "10.244.0.6", "10.244.1.7", "10.244.1.9", "10.244.9.9", "10.0.0.1", "10.1.0.1",
		"10.1.2.3", "192.168.1.1", "192.0.2.1", "0.0.0.0", "255.255.255.255"}
	for _, s := range addrs {
		for _, d := range addrs {
			for _, proto := range []string{"TCP", "UDP", "SCTP"} {
				for _, port := range []int{0, 80, 7777, 8080, 8999, 9000, 9050, 9100, 9101, 65535} {
					f := fl(s, d, proto, port)
					for _, egress := range []bool{true, false} {
						want := ev.AllowsIngress(f)
						if egress {
							want = ev.AllowsEgress(f)
						}
						if _, got := b.decide(f, egress); got != want {
							t.Errorf("%s (egress %v): eBPF %v, Program %v\n%s", flowString(f), egress, got, want, b.explain(f, egress))
						}
					}
				}
			}
		}
	}
}

// BenchmarkRenderBPF10kPods20kPolicies renders the Program of the compile benchmark's scale
// case (compile_bench_test.go) and reports what the rendering holds.
func BenchmarkRenderBPF10kPods20kPolicies(b *testing.B) {
	pods, nss, pols := scaleCluster()
	prog, err := Compile(pods, nss, pols)
	if err != nil {
		b.Fatal(err)
	}
	var bp *BPFPolicy
	var c Counts
	b.ReportAllocs()
	for b.Loop() {
		bp, c = RenderBPF(prog)
	}
	if err := checkBPF(bp, prog, c); err != nil {
		b.Fatal(err)
	}
	ev := prog.Evaluator()
	p0, p10, p20, p30 := pods[0].IP, pods[10].IP, pods[20].IP, pods[30].IP
	for _, f := range []Flow{fl(p0, p20, "TCP", 80), fl(p0, p20, "TCP", 8080), fl(p0, p20, "TCP", 81),
		fl(p30, p20, "TCP", 80), fl(p20, p10, "UDP", 53), fl(p20, p30, "UDP", 53)} {
		if got, want := bp.allows(f), ev.Allows(f); got != want {
			b.Errorf("%s: eBPF %v, Program %v", flowString(f), got, want)
		}
	}
	b.ReportMetric(float64(c.PodChains), "endpoints")
	b.ReportMetric(float64(c.Sets), "identities")
	b.ReportMetric(float64(c.SetMembers), "ipcache")
	b.ReportMetric(float64(c.Rules), "rules")
	b.ReportMetric(float64(c.Policies), "policies")
}
