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
