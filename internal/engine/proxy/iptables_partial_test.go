package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Without a state the partial rendering is RenderIPTables, Stale honoured.
func TestIPTablesPartialFull(t *testing.T) {
	opt := partialOpt()
	opt.Stale = []string{"KUBE-SVC-GONEGONEGONEGONE", extServicesChain}
	svcs := nftTestServices()
	full, cnt := RenderIPTables(svcs, opt)
	in, st, pcnt := RenderIPTablesPartial(nil, svcs, opt)
	if string(in) != string(full) || st == nil || fmt.Sprint(pcnt) != fmt.Sprint(cnt) {
		t.Errorf("prev nil: not the full rendering (counts %+v, want %+v):\n%s", pcnt, cnt, in)
	}
	// Nothing changed: KUBE-SERVICES only, rewritten as kube-proxy does; Stale ignored.
	in, _, c := RenderIPTablesPartial(st, svcs, opt)
	if want := "*nat\n:KUBE-SERVICES - [0:0]\n"; !strings.HasPrefix(string(in), want) || strings.Count(string(in), "\n:") != 1 ||
		strings.Contains(string(in), "-X ") || strings.Contains(string(in), "*filter") || c.Changed != 1 {
		t.Errorf("nothing changed: %d changes\n%s", c.Changed, in)
	}
}

// Adding one Service writes KUBE-SERVICES and that Service's chains; removing one also
// deletes its chains after the jumps to them are gone; changing its endpoints rewrites its
// chains only.
func TestIPTablesPartialChanges(t *testing.T) {
	opt := partialOpt()
	svcs := nodePortServices([5]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14"})
	_, st, _ := RenderIPTablesPartial(nil, svcs, opt)
	declared := func(in string) []string {
		var names []string
		for _, l := range strings.Split(in, "\n") {
			if name, ok := strings.CutPrefix(l, ":"); ok {
				names = append(names, strings.Fields(name)[0])
			}
		}
		slices.Sort(names)
		return names
	}
	sorted := func(names ...string) []string { slices.Sort(names); return names }

	added := Service{Namespace: "cnb", Name: "added", ClusterIP: "10.97.0.1", Port: 80, Protocol: "tcp",
		Endpoints: []Endpoint{{IP: "10.244.7.1", Port: 8080}}}
	in, _, cnt := RenderIPTablesPartial(st, append(slices.Clone(svcs), added), opt)
	s := string(in)
	// KUBE-SERVICES, KUBE-NODEPORTS (always), the Service's 2 chains; KUBE-EXTERNAL-SERVICES.
	want := sorted("KUBE-SERVICES", nodePortsChain, added.SvcChain(), added.SepChain(added.Endpoints[0]), extServicesChain)
	if got := declared(s); !slices.Equal(got, want) || cnt.Changed != 5 || strings.Contains(s, "-X ") {
		t.Errorf("add: chains %v (want %v), %d changes:\n%s", got, want, cnt.Changed, s)
	}
	if _, full := RenderIPTables(append(slices.Clone(svcs), added), opt); fmt.Sprint(cnt.Names) != fmt.Sprint(full.Names) || cnt.Rules != full.Rules {
		t.Errorf("counts %+v, full %+v", cnt, full)
	}

	// np-cluster (index 3): two endpoints, a NodePort; gone.
	gone := svcs[3]
	in, _, cnt = RenderIPTablesPartial(st, slices.Delete(slices.Clone(svcs), 3, 4), opt)
	s = string(in)
	chains := []string{gone.SvcChain(), gone.ExtChain(), gone.SepChain(gone.Endpoints[0]), gone.SepChain(gone.Endpoints[1])}
	want = sorted(append([]string{"KUBE-SERVICES", nodePortsChain, extServicesChain}, chains...)...)
	if got := declared(s); !slices.Equal(got, want) || cnt.Changed != 3+4 {
		t.Errorf("remove: chains %v (want %v), %d changes:\n%s", got, want, cnt.Changed, s)
	}
	last := strings.LastIndex(s[:strings.Index(s, "COMMIT")], "\n-A ") // in the nat table
	for _, c := range chains {
		if i := strings.Index(s, "-X "+c+"\n"); i < last || strings.Contains(s, "-j "+c) {
			t.Errorf("%s not deleted after the last rule, or still jumped to:\n%s", c, s)
		}
	}

	// web (index 0): one more endpoint; its KUBE-SVC- chain and the new KUBE-SEP- only.
	more := slices.Clone(svcs)
	more[0].Endpoints = append(slices.Clone(more[0].Endpoints), Endpoint{IP: "10.244.0.9", Port: 8080, Node: "node0"})
	in, _, cnt = RenderIPTablesPartial(st, more, opt)
	want = sorted("KUBE-SERVICES", nodePortsChain, extServicesChain, more[0].SvcChain(), more[0].SepChain(more[0].Endpoints[2]))
	if got := declared(string(in)); !slices.Equal(got, want) || cnt.Changed != 5 {
		t.Errorf("endpoint added: chains %v (want %v), %d changes:\n%s", got, want, cnt.Changed, in)
	}

	// The NodePorts go: KUBE-NODEPORTS and the KUBE-EXT-/KUBE-SVL- chains are deleted,
	// KUBE-EXTERNAL-SERVICES emptied (it held np-local-remote's drop); then left alone.
	plain := slices.Clone(svcs)
	for i := range plain {
		plain[i].NodePort = 0
	}
	in, st2, _ := RenderIPTablesPartial(st, plain, opt)
	s = string(in)
	for _, c := range []string{nodePortsChain, svcs[3].ExtChain(), svcs[4].ExtChain(), svcs[4].SvlChain(), svcs[5].ExtChain()} {
		if !strings.Contains(s, "-X "+c+"\n") {
			t.Errorf("%s not deleted:\n%s", c, s)
		}
	}
	if !strings.HasSuffix(s, "*filter\n:"+extServicesChain+" - [0:0]\nCOMMIT\n") {
		t.Errorf("%s not emptied:\n%s", extServicesChain, s)
	}
	if in, _, _ := RenderIPTablesPartial(st2, plain, opt); strings.Contains(string(in), "*filter") {
		t.Errorf("an empty %s written again:\n%s", extServicesChain, in)
	}
}

// A sequence of changes programmed with partial renderings (fixedSteps, then random ones)
// leaves the kernel's nat and filter tables exactly as the full rendering of the same
// Services leaves a fresh namespace, with iptables-nft (through ApplyIPTables' whole-table
// cache) and iptables-legacy.
func TestIPTablesPartialMatchesFull(t *testing.T) {
	for _, backend := range []IPTablesBackend{"nft", "legacy"} {
		t.Run(string(backend), func(t *testing.T) {
			e := partialEngine{
				render: func(prev any, svcs []Service, opt Options) ([]byte, any, Counts) {
					p, _ := prev.(*IPTState)
					return RenderIPTablesPartial(p, svcs, opt)
				},
				apply: func(ns string, in []byte) error { return ApplyIPTables(ns, backend, "", in) },
				list:  iptListing(backend),
			}
			if n := checkSteps(t, e, "fixed steps", fixedSteps()); n != len(fixedSteps())-1 {
				t.Errorf("only %d of the fixed steps were partial", n)
			}
			const steps = 25
			if n := checkPartialMatchesFull(t, e, steps); n != steps {
				t.Errorf("only %d of %d steps were partial", n, steps)
			}
		})
	}
}

// kube-proxy's TestSyncProxyRulesLargeClusterMode (pkg/proxy/iptables/proxier_test.go,
// v1.34.10), replayed: two Services of 499 endpoints keep their endpoint comments; a third
// of 3 endpoints crosses the 1,000 threshold and its rules (a partial sync) go without
// them while the others are not rewritten; a full rendering then leaves them off all. The
// expected lines are the ones that test asserts.
func TestIPTablesLargeClusterMode(t *testing.T) {
	svc := func(ns, name, port, ip string, p int, eps []Endpoint) Service {
		return Service{Namespace: ns, Name: name, PortName: port, ClusterIP: ip, Port: p, Protocol: "tcp", Endpoints: eps}
	}
	many := func(net, port int) []Endpoint {
		eps := make([]Endpoint, largeClusterEndpoints/2-1)
		for i := range eps {
			eps[i] = Endpoint{IP: fmt.Sprintf("10.%d.%d.%d", net, i%256, i/256), Port: port}
		}
		return eps
	}
	svcs := []Service{svc("ns1", "svc1", "p80", "172.30.0.41", 80, many(0, 80)),
		svc("ns2", "svc2", "p8080", "172.30.0.42", 8080, many(1, 8080))}
	// count returns the DNAT rule to first and how many of in's DNAT rules (endpoints) and
	// endpoint comments there are, as kube-proxy's countEndpointsAndComments does.
	count := func(in []byte, first string) (line string, eps, comments int) {
		for l := range strings.Lines(string(in)) {
			l = strings.TrimSuffix(l, "\n")
			if !strings.HasPrefix(l, "-A KUBE-SEP-") || !strings.Contains(l, "DNAT") {
				continue
			}
			eps++
			if strings.Contains(l, "-m comment") {
				comments++
			}
			if strings.Contains(l, "--to-destination "+first+":") {
				line = l
			}
		}
		return line, eps, comments
	}
	in, st, _ := RenderIPTablesPartial(nil, svcs, Options{})
	line, eps, cms := count(in, "10.0.0.0")
	if want := "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80"; line != want {
		t.Errorf("under the threshold: %q, want %q", line, want)
	}
	if eps != 998 || cms != eps {
		t.Errorf("under the threshold: %d endpoints, %d comments; want 998 each", eps, cms)
	}
	svcs = append(svcs, svc("ns3", "svc3", "p8081", "172.30.0.43", 8081,
		[]Endpoint{{IP: "203.0.113.4", Port: 8081}, {IP: "203.0.113.8", Port: 8081}, {IP: "203.0.113.12", Port: 8081}}))
	in, _, _ = RenderIPTablesPartial(st, svcs, Options{})
	line, eps, cms = count(in, "203.0.113.4")
	if want := "-A KUBE-SEP-RUVVH7YV3PHQBDOS -m tcp -p tcp -j DNAT --to-destination 203.0.113.4:8081"; line != want {
		t.Errorf("partial, over the threshold: %q, want %q", line, want)
	}
	if eps != 3 || cms != 0 {
		t.Errorf("partial, over the threshold: %d endpoints, %d comments; want 3 and 0", eps, cms)
	}
	if pick := "-A " + svcs[2].SvcChain() + " -m statistic --mode random --probability 0.3333333333 -j "; !strings.Contains(string(in), pick) {
		t.Errorf("partial, over the threshold: no %q in\n%s", pick, in)
	}
	in, _ = RenderIPTables(svcs, Options{})
	line, eps, cms = count(in, "10.0.0.0")
	if want := "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80"; line != want {
		t.Errorf("full, over the threshold: %q, want %q", line, want)
	}
	if eps != 1001 || cms != 0 {
		t.Errorf("full, over the threshold: %d endpoints, %d comments; want 1001 and 0", eps, cms)
	}
	// The Services' own rules keep theirs.
	if want := `-A KUBE-SERVICES -m comment --comment "ns3/svc3:p8081 cluster IP" -m tcp -p tcp -d 172.30.0.43/32 --dport 8081 -j ` + svcs[2].SvcChain(); !strings.Contains(string(in), want) {
		t.Errorf("full, over the threshold: no %q", want)
	}
}
