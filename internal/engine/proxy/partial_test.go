package proxy

import (
	"fmt"
	"math/rand"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// This file holds what the nftables and iptables partial-sync tests share: a namespace
// helper, a generator of random Services and of random changes to them, and the real-kernel
// check that a sequence of partial renderings leaves a node exactly as a full rendering of
// the same Services leaves a fresh one.

// partialOpt are the options of the partial-sync tests: a node with NodePorts (node0) and
// every option that shapes a rendering set.
func partialOpt() Options {
	return Options{ClusterCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", NodeName: "node0", NodeIPs: []string{"172.30.0.10"}}
}

// svcGen makes Services with names, ClusterIPs and NodePorts never used before, and
// endpoints on node0 (10.244.0.0/24) and node1 (10.244.1.0/24).
type svcGen struct {
	rng  *rand.Rand
	next int
}

func (g *svcGen) endpoint() Endpoint {
	node := g.rng.Intn(2)
	return Endpoint{IP: fmt.Sprintf("10.244.%d.%d", node, 2+g.rng.Intn(250)), Port: 8080 + g.rng.Intn(2), Node: fmt.Sprintf("node%d", node)}
}

func (g *svcGen) service() Service {
	g.next++
	s := Service{Namespace: "cnb", Name: fmt.Sprintf("s%03d", g.next), ClusterIP: fmt.Sprintf("10.96.%d.%d", g.next/250, 1+g.next%250),
		Port: []int{80, 443, 53}[g.rng.Intn(3)], Protocol: []string{"tcp", "udp"}[g.rng.Intn(2)]}
	if g.rng.Intn(3) == 0 {
		s.PortName = "p"
	}
	for range g.rng.Intn(4) { // 0 to 3 endpoints
		s.Endpoints = g.addEndpoint(s.Endpoints)
	}
	if g.rng.Intn(3) == 0 {
		s.NodePort, s.ExternalLocal = 30000+g.next, g.rng.Intn(2) == 0
	}
	return s
}

// addEndpoint adds an endpoint eps does not have.
func (g *svcGen) addEndpoint(eps []Endpoint) []Endpoint {
	for {
		e := g.endpoint()
		if !slices.ContainsFunc(eps, func(o Endpoint) bool { return o.String() == e.String() }) {
			return append(slices.Clip(eps), e)
		}
	}
}

// change makes one random change to svcs (which it does not modify) and says what it did.
func (g *svcGen) change(svcs []Service) ([]Service, string) {
	svcs = slices.Clone(svcs)
	add := func() ([]Service, string) {
		n := g.service()
		return append(svcs, n), fmt.Sprintf("add %s (%d endpoints, NodePort %d)", n.PortKey(), len(n.Endpoints), n.NodePort)
	}
	// pick is a random Service for which ok holds (-1: none).
	pick := func(ok func(Service) bool) int {
		var is []int
		for i, s := range svcs {
			if ok(s) {
				is = append(is, i)
			}
		}
		if len(is) == 0 {
			return -1
		}
		return is[g.rng.Intn(len(is))]
	}
	any := func(Service) bool { return true }
	if len(svcs) < 3 {
		return add()
	}
	switch g.rng.Intn(9) {
	case 0, 1:
		return add()
	case 2:
		i := pick(any)
		what := "remove " + svcs[i].PortKey()
		return slices.Delete(svcs, i, i+1), what
	case 3, 4:
		s := &svcs[pick(any)]
		s.Endpoints = g.addEndpoint(s.Endpoints)
		return svcs, fmt.Sprintf("%s: endpoint added (%d now)", s.PortKey(), len(s.Endpoints))
	case 5:
		i := pick(func(s Service) bool { return len(s.Endpoints) > 0 })
		if i < 0 {
			return add()
		}
		s := &svcs[i]
		j := g.rng.Intn(len(s.Endpoints))
		s.Endpoints = slices.Delete(slices.Clone(s.Endpoints), j, j+1)
		return svcs, fmt.Sprintf("%s: endpoint removed (%d now)", s.PortKey(), len(s.Endpoints))
	case 6:
		s := &svcs[pick(any)]
		if s.NodePort != 0 {
			s.NodePort = 0
			return svcs, s.PortKey() + ": NodePort removed"
		}
		g.next++
		s.NodePort, s.ExternalLocal = 30000+g.next, g.rng.Intn(2) == 0
		return svcs, fmt.Sprintf("%s: NodePort %d added (local %v)", s.PortKey(), s.NodePort, s.ExternalLocal)
	case 7:
		i := pick(func(s Service) bool { return s.NodePort != 0 })
		if i < 0 {
			return add()
		}
		s := &svcs[i]
		s.ExternalLocal = !s.ExternalLocal
		return svcs, fmt.Sprintf("%s: externalTrafficPolicy Local %v", s.PortKey(), s.ExternalLocal)
	default:
		if !hasNodePorts(svcs) {
			for j := range svcs[:2] {
				g.next++
				svcs[j].NodePort, svcs[j].ExternalLocal = 30000+g.next, j == 0
			}
			return svcs, "NodePorts appear"
		}
		for j := range svcs {
			svcs[j].NodePort = 0
		}
		return svcs, "every NodePort removed"
	}
}

// partialEngine is a proxy with partial syncs as the partial-sync tests drive it.
type partialEngine struct {
	render func(prev any, svcs []Service, opt Options) ([]byte, any, Counts)
	apply  func(ns string, in []byte) error
	list   func(t *testing.T, ns string) map[string][]string
}

// checkPartialMatchesFull programs a random set of Services with a full rendering in a
// namespace, then a random sequence of changes, each with a partial rendering from the state
// the previous one returned (checkSteps). It returns how many steps were rendered as
// partial changes (Changed > 0).
func checkPartialMatchesFull(t *testing.T, e partialEngine, steps int) int {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	g := &svcGen{rng: rand.New(rand.NewSource(seed))}
	var svcs []Service
	for range 8 + g.rng.Intn(8) {
		svcs = append(svcs, g.service())
	}
	seq := []partialStep{{"random Services", svcs}}
	for range steps {
		var what string
		svcs, what = g.change(svcs)
		seq = append(seq, partialStep{what, svcs})
	}
	return checkSteps(t, e, fmt.Sprintf("seed %d", seed), seq)
}

// partialStep is a set of Services and what changed to make it.
type partialStep struct {
	what string
	svcs []Service
}

// checkSteps programs seq[0] with a full rendering in a namespace, then each next step with a
// partial rendering from the state the previous one returned. After each step the kernel's
// listing must be the one a full rendering of the same Services gives in a fresh namespace,
// and the counts those of the full rendering. It returns how many steps were partial
// (Changed > 0); why says how to find the sequence again.
func checkSteps(t *testing.T, e partialEngine, why string, seq []partialStep) int {
	t.Helper()
	opt := partialOpt()
	ns, _ := netnstest.Scratch(t)
	in, state, cnt := e.render(nil, seq[0].svcs, opt)
	if err := e.apply(ns, in); err != nil {
		t.Fatalf("full rendering: %v", err)
	}
	if cnt.Changed != 0 {
		t.Errorf("a full rendering counts %d changes", cnt.Changed)
	}
	partial := 0
	for step := 1; step < len(seq); step++ {
		svcs, what := seq[step].svcs, seq[step].what
		in, next, cnt := e.render(state, svcs, opt)
		if err := e.apply(ns, in); err != nil {
			t.Fatalf("step %d (%s, %s): %v\ninput:\n%s", step, what, why, err, in)
		}
		state = next
		if cnt.Changed > 0 {
			partial++
		}
		full, _, fcnt := e.render(nil, svcs, opt)
		fresh, del := netnstest.Scratch(t)
		if err := e.apply(fresh, full); err != nil {
			t.Fatalf("step %d (%s): full rendering: %v", step, what, err)
		}
		got, want := e.list(t, ns), e.list(t, fresh)
		del()
		if !sameListing(t, got, want) {
			t.Fatalf("step %d (%s, %s): the partial rendering left another ruleset than the full one; input:\n%s", step, what, why, in)
		}
		fcnt.Changed = cnt.Changed
		if fmt.Sprint(sansFilterChain(cnt)) != fmt.Sprint(sansFilterChain(fcnt)) {
			t.Errorf("step %d (%s): counts %+v, the full rendering's %+v", step, what, cnt, fcnt)
		}
		t.Logf("step %d: %s: %d changes, %d bytes", step, what, cnt.Changed, len(in))
	}
	return partial
}

// fixedSteps are changes the random sequences may miss, from the NodePort recordings'
// Services (on node0: np-local has an endpoint there, np-local-remote not): a map element
// whose value changes (np-local-remote's NodePort, dropped, is rejected once its endpoint
// goes), a Service that loses all its endpoints, one that goes away, endpoints replaced.
func fixedSteps() []partialStep {
	svcs := nodePortServices([5]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14"})
	seq := []partialStep{{"NodePort recordings", svcs}}
	step := func(what string, change func(s []Service) []Service) {
		s := slices.Clone(seq[len(seq)-1].svcs)
		seq = append(seq, partialStep{what, change(s)})
	}
	step("np-local-remote loses its endpoint", func(s []Service) []Service { s[5].Endpoints = nil; return s })
	step("np-local loses its endpoints", func(s []Service) []Service { s[4].Endpoints = nil; return s })
	step("np-cluster goes", func(s []Service) []Service { return slices.Delete(s, 3, 4) })
	step("web's endpoints replaced", func(s []Service) []Service {
		s[0].Endpoints = []Endpoint{{IP: "10.244.0.9", Port: 8080, Node: "node0"}}
		return s
	})
	step("np-local-remote gets an endpoint on node0", func(s []Service) []Service {
		s[4].Endpoints = []Endpoint{{IP: "10.244.0.7", Port: 8080, Node: "node0"}}
		return s
	})
	return seq
}

// sameListing compares two listings object by object and reports the differences.
func sameListing(t *testing.T, got, want map[string][]string) bool {
	t.Helper()
	same := true
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("missing %s", name)
			same = false
		case !slices.Equal(g, w):
			t.Errorf("%s differs:\npartial:\n\t%s\nfull:\n\t%s", name, strings.Join(g, "\n\t"), strings.Join(w, "\n\t"))
			same = false
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("left over: %s %v", name, got[name])
			same = false
		}
	}
	return same
}

// nftListing is the kernel's table ip kube-proxy, object by object (nftObjects).
func nftListing(t *testing.T, ns string) map[string][]string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+ns, "nft", "list", "table", "ip", NFTable).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v: %s", err, out)
	}
	return nftObjects(string(out))
}

var iptCounters = regexp.MustCompile(` \[\d+:\d+\]$`)

// iptListing is the nat and filter tables as iptables-save (of backend) lists them, chain by
// chain ("nat KUBE-SERVICES": the declaration, without counters, then the rules in order).
// An empty KUBE-EXTERNAL-SERVICES and the hooks jumping to it are left out: the chain stays,
// empty, in a node whose NodePorts went away (the hooks jump to it), and a fresh node never
// had it.
func iptListing(backend IPTablesBackend) func(t *testing.T, ns string) map[string][]string {
	return func(t *testing.T, ns string) map[string][]string {
		t.Helper()
		all := map[string][]string{}
		for _, table := range []string{"nat", "filter"} {
			out, err := exec.Command("nsenter", "--net="+ns, backend.tool(false)+"-save", "-t", table).Output()
			if err != nil {
				t.Fatalf("%s-save -t %s: %v", backend.tool(false), table, err)
			}
			chains := iptablesByChain(string(out))
			if ext := chains[extServicesChain]; table == "filter" && len(ext) == 1 {
				delete(chains, extServicesChain)
				for _, c := range []string{"INPUT", "FORWARD"} {
					chains[c] = slices.DeleteFunc(chains[c], func(l string) bool { return strings.HasSuffix(l, "-j "+extServicesChain) })
				}
			}
			for name, lines := range chains {
				for i, l := range lines {
					lines[i] = iptCounters.ReplaceAllString(l, "")
				}
				all[table+" "+name] = lines
			}
		}
		return all
	}
}

// sansFilterChain are counts without KUBE-EXTERNAL-SERVICES: a partial iptables rendering
// declares it once more than a full one, to empty it when the NodePorts go.
func sansFilterChain(c Counts) Counts {
	if i := slices.Index(c.Names, extServicesChain); i >= 0 {
		c.Names = slices.Delete(slices.Clone(c.Names), i, i+1)
		c.Chains--
	}
	return c
}
