package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// Without a state, and when the base of the ruleset changes, the partial rendering is the
// full one; with nothing changed it is empty.
func TestNFTablesPartialFull(t *testing.T) {
	opt := partialOpt()
	svcs := nodePortServices([5]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14"})
	full, cnt := RenderNFTables(svcs, opt)
	in, st, pcnt := RenderNFTablesPartial(nil, svcs, opt)
	if string(in) != string(full) || st == nil || fmt.Sprint(pcnt) != fmt.Sprint(cnt) || pcnt.Changed != 0 {
		t.Errorf("prev nil: not the full rendering (counts %+v, want %+v)", pcnt, cnt)
	}
	if in, _, c := RenderNFTablesPartial(st, svcs, opt); len(in) != 0 || c.Changed != 0 || c.Chains != cnt.Chains {
		t.Errorf("nothing changed, yet %d changes (counts %+v):\n%s", c.Changed, c, in)
	}
	for what, o := range map[string]Options{
		"cluster CIDR": {ClusterCIDR: "10.245.0.0/16", ServiceCIDR: opt.ServiceCIDR, NodeName: opt.NodeName, NodeIPs: opt.NodeIPs},
		"service CIDR": {ClusterCIDR: opt.ClusterCIDR, NodeName: opt.NodeName, NodeIPs: opt.NodeIPs},
		"node IPs":     {ClusterCIDR: opt.ClusterCIDR, ServiceCIDR: opt.ServiceCIDR, NodeName: opt.NodeName, NodeIPs: []string{"172.30.0.11"}},
		"mod 1 maps":   {ClusterCIDR: opt.ClusterCIDR, ServiceCIDR: opt.ServiceCIDR, NodeName: opt.NodeName, NodeIPs: opt.NodeIPs, NFTMod1Maps: true},
	} {
		want, _ := RenderNFTables(svcs, o)
		if got, _, c := RenderNFTablesPartial(st, svcs, o); string(got) != string(want) || c.Changed != 0 {
			t.Errorf("%s changed: not a full rendering", what)
		}
	}
	// The NodePort sets and maps go with the last NodePort.
	plain := slices.Clone(svcs[:3])
	want, _ := RenderNFTables(plain, opt)
	if got, _, _ := RenderNFTablesPartial(st, plain, opt); string(got) != string(want) {
		t.Error("NodePorts gone: not a full rendering")
	}
	// The node matters only to externalTrafficPolicy Local: no full rendering for it.
	o := opt
	o.NodeName = "node1"
	if got, _, c := RenderNFTablesPartial(st, svcs, o); strings.HasPrefix(string(got), "add table") || c.Changed == 0 {
		t.Errorf("another node: %d changes\n%s", c.Changed, got)
	}
}

// Adding one Service to N writes that Service only: the same input whatever N.
func TestNFTablesPartialAddOne(t *testing.T) {
	opt := partialOpt()
	added := Service{Namespace: "cnb", Name: "added", ClusterIP: "10.97.0.1", Port: 80, Protocol: "tcp",
		Endpoints: []Endpoint{{IP: "10.244.7.1", Port: 8080}, {IP: "10.244.7.2", Port: 8080}}}
	var inputs []string
	for _, n := range []int{10, 3000} {
		svcs := benchSvcs(n)
		_, st, _ := RenderNFTablesPartial(nil, svcs, opt)
		in, _, cnt := RenderNFTablesPartial(st, append(svcs, added), opt)
		// Its chain and 2 endpoint chains, its cluster-ips and service-ips elements.
		_, full := RenderNFTables(append(svcs, added), opt)
		if full.Changed = 3 + 2; cnt.Changed != full.Changed || fmt.Sprint(cnt) != fmt.Sprint(full) || cnt.Services != n+1 {
			t.Errorf("N=%d: counts %+v, want those of the full rendering with 5 changes", n, cnt)
		}
		for _, l := range strings.Split(strings.TrimSuffix(string(in), "\n"), "\n") {
			if !strings.HasPrefix(l, "add ") || !strings.Contains(l, "cnb/added") && !strings.Contains(l, "10.97.0.1") {
				t.Errorf("N=%d: a line that is not about the added Service: %s", n, l)
			}
		}
		inputs = append(inputs, string(in))
	}
	if inputs[0] != inputs[1] {
		t.Errorf("the input depends on N:\n%s\n---\n%s", inputs[0], inputs[1])
	}
	t.Logf("%d bytes:\n%s", len(inputs[0]), inputs[0])
}

// Removing a Service deletes its elements, then flushes and deletes its chains, in one
// transaction; changing its endpoints rewrites its chain only; losing them all moves it from
// service-ips to no-endpoint-services.
func TestNFTablesPartialChanges(t *testing.T) {
	opt := partialOpt()
	svcs := nodePortServices([5]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14"})
	_, st, _ := RenderNFTablesPartial(nil, svcs, opt)
	other := func(in string, s Service) {
		t.Helper()
		for _, o := range svcs {
			if o.Name != s.Name && (strings.Contains(in, "-"+o.nftPortBase()) || strings.Contains(in, `"`+o.PortKey()+`"`) ||
				strings.Contains(in, " "+o.ClusterIP+" ")) {
				t.Errorf("names Service %s, which did not change:\n%s", o.PortKey(), in)
			}
		}
		checkNFTOrder(t, in)
	}

	// np-cluster (index 3): two endpoints, a NodePort.
	gone := svcs[3]
	in, _, cnt := RenderNFTablesPartial(st, slices.Delete(slices.Clone(svcs), 3, 4), opt)
	s := string(in)
	chains := []string{gone.NFTServiceChain(), gone.NFTExternalChain(), gone.NFTEndpointChain(gone.Endpoints[0]), gone.NFTEndpointChain(gone.Endpoints[1])}
	for _, c := range chains {
		if !strings.Contains(s, "flush chain ip kube-proxy "+c+"\n") || !strings.Contains(s, "delete chain ip kube-proxy "+c+"\n") {
			t.Errorf("chain %s not flushed and deleted:\n%s", c, s)
		}
	}
	for _, want := range []string{
		"delete element ip kube-proxy cluster-ips { 10.96.0.12 }\n",
		"delete element ip kube-proxy service-ips { 10.96.0.12 . tcp . 80 }\n",
		"delete element ip kube-proxy service-nodeports { tcp . 30080 }\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, "add ") || cnt.Changed != 4+3 {
		t.Errorf("removal adds something or counts %d changes:\n%s", cnt.Changed, s)
	}
	other(s, gone)

	// web (index 0): one endpoint replaced by another, one added.
	web := slices.Clone(svcs)
	old := web[0].Endpoints
	web[0].Endpoints = []Endpoint{old[0], {IP: "10.244.0.9", Port: 8080, Node: "node0"}, {IP: "10.244.1.9", Port: 8080, Node: "node1"}}
	in, _, cnt = RenderNFTablesPartial(st, web, opt)
	s = string(in)
	if strings.Contains(s, " element ") || strings.Contains(s, "elements = ") || cnt.Changed != 1+2+1 ||
		!strings.Contains(s, "flush chain ip kube-proxy "+web[0].NFTServiceChain()+"\n") ||
		!strings.Contains(s, "add chain ip kube-proxy "+web[0].NFTServiceChain()+" { ip daddr 10.96.0.10 ip saddr != 10.244.0.0/16 jump mark-for-masquerade ; numgen random mod 3 vmap") ||
		!strings.Contains(s, "delete chain ip kube-proxy "+web[0].NFTEndpointChain(old[1])+"\n") ||
		strings.Contains(s, web[0].NFTEndpointChain(old[0])+"\n") {
		t.Errorf("endpoints changed: %d changes\n%s", cnt.Changed, s)
	}
	other(s, web[0])

	// np-local (index 4, Local, one endpoint per node) loses both: its service-ips and
	// service-nodeports elements go, no-endpoint elements come (the NodePort rejected).
	lost := slices.Clone(svcs)
	lost[4].Endpoints = nil
	in, _, cnt = RenderNFTablesPartial(st, lost, opt)
	s = string(in)
	for _, want := range []string{
		"delete element ip kube-proxy service-ips { 10.96.0.13 . tcp . 80 }\n",
		"delete element ip kube-proxy service-nodeports { tcp . 30081 }\n",
		`add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; ` +
			`elements = { 10.96.0.13 . tcp . 80 comment "cnbrec/np-local:http" : goto reject-chain } ; }` + "\n",
		`add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; ` +
			`elements = { tcp . 30081 comment "cnbrec/np-local:http" : goto reject-chain } ; }` + "\n",
		"delete chain ip kube-proxy " + svcs[4].NFTLocalChain() + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	other(s, svcs[4])

	// np-local-remote (index 5, its only endpoint on node1): on node0 its NodePort is
	// dropped; with no endpoints at all it is rejected: the element's value changes.
	rej := slices.Clone(svcs)
	rej[5].Endpoints = nil
	in, _, _ = RenderNFTablesPartial(st, rej, opt)
	s = string(in)
	del := strings.Index(s, "delete element ip kube-proxy no-endpoint-nodeports { tcp . 30082 }\n")
	add := strings.Index(s, `elements = { tcp . 30082 comment "cnbrec/np-local-remote:http" : goto reject-chain }`)
	if del < 0 || add < del {
		t.Errorf("a changed element is not deleted, then added:\n%s", s)
	}
	other(s, svcs[5])
}

// checkNFTOrder checks that a partial input is in an order nft accepts: a rule or element
// names a chain the input adds only after the chain is added, an element that names a chain
// is deleted before the chain, and a deleted chain is flushed first and not named after.
func checkNFTOrder(t *testing.T, in string) {
	t.Helper()
	ref := regexp.MustCompile(`(?:goto|jump) ([A-Za-z0-9_./-]+)`)
	lines := strings.Split(in, "\n")
	adds := map[string]bool{} // the chains the input adds
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 5 && f[0] == "add" && f[1] == "chain" {
			adds[f[4]] = true
		}
	}
	added, deleted, flushed := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		for _, m := range ref.FindAllStringSubmatch(l, -1) {
			if deleted[m[1]] || adds[m[1]] && !added[m[1]] {
				t.Errorf("line %d names %s, deleted or not added yet: %s", i+1, m[1], l)
			}
		}
		switch f[0] + " " + f[1] {
		case "add chain":
			added[f[4]] = true
		case "flush chain":
			flushed[f[4]] = true
		case "delete chain":
			if !flushed[f[4]] {
				t.Errorf("line %d deletes %s before flushing it", i+1, f[4])
			}
			deleted[f[4]] = true
		}
	}
}

// On this kernel (6.2 and later) a chain whose last map element is deleted earlier in the
// same transaction can be deleted in it, which RenderNFTablesPartial relies on; the order
// matters (the other way round the chain is busy), and a changed element must be deleted
// before it is added again.
func TestNFTablesDeleteOrder(t *testing.T) {
	ns, _ := netnstest.Scratch(t)
	opt := partialOpt()
	svcs := nftTestServices() // server: 3 endpoints; dns: 1; empty: none
	in, st, _ := RenderNFTablesPartial(nil, svcs, opt)
	if err := ApplyNFTables(ns, in); err != nil {
		t.Fatal(err)
	}
	dns := svcs[1]
	wrong := fmt.Sprintf("flush chain ip kube-proxy %[1]s\ndelete chain ip kube-proxy %[1]s\ndelete element ip kube-proxy service-ips { %s . udp . 53 }\n",
		dns.NFTServiceChain(), dns.ClusterIP)
	if err := ApplyNFTables(ns, []byte(wrong)); err == nil {
		t.Error("the kernel deleted a chain a map element still jumps to")
	}
	over := fmt.Sprintf("add element ip kube-proxy service-ips { %s . udp . 53 : goto %s }\n", dns.ClusterIP, svcs[0].NFTServiceChain())
	if err := ApplyNFTables(ns, []byte(over)); err == nil {
		t.Error("the kernel added an element over one with another value")
	}
	in, _, _ = RenderNFTablesPartial(st, []Service{svcs[0], svcs[2]}, opt)
	if !strings.Contains(string(in), "delete chain ip kube-proxy "+dns.NFTServiceChain()) {
		t.Fatalf("the Service's chain is not deleted:\n%s", in)
	}
	if err := ApplyNFTables(ns, in); err != nil {
		t.Fatalf("element, then chain, in one transaction: %v\n%s", err, in)
	}
	for _, c := range nftChains(t, ns) {
		if strings.Contains(c, "cnb/dns") {
			t.Errorf("chain %s left", c)
		}
	}
}

// A sequence of changes programmed with partial renderings (fixedSteps, then random ones)
// leaves the kernel's table exactly as the full rendering of the same Services leaves a
// fresh namespace.
//
// Partial inputs go through netlink (applyNFTNetlink), which must translate every one; full
// ones through nft (the reference; TestNFTNetlinkFullAsNft holds full ones through netlink).
func TestNFTablesPartialMatchesFull(t *testing.T) {
	var netlinked, untranslated int
	e := partialEngine{
		render: func(prev any, svcs []Service, opt Options) ([]byte, any, Counts) {
			p, _ := prev.(*NFTState)
			return RenderNFTablesPartial(p, svcs, opt)
		},
		apply: func(ns string, in []byte) error {
			if bytes.HasPrefix(in, []byte("add table ")) {
				return run(ns, "nft", []string{"-f", "-"}, in) // the reference: nft's
			}
			err := applyNFTNetlink(ns, in)
			if !errors.Is(err, errNFTUntranslated) {
				netlinked++
				return err
			}
			t.Errorf("netlink did not translate a partial input: %v", err)
			untranslated++
			return ApplyNFTables(ns, in)
		},
		list: nftListing,
	}
	if n := checkSteps(t, e, "fixed steps", fixedSteps()); n != len(fixedSteps())-1 {
		t.Errorf("only %d of the fixed steps were partial", n)
	}
	const steps = 40
	if n := checkPartialMatchesFull(t, e, steps); n < steps/2 {
		t.Errorf("only %d of %d steps were partial", n, steps)
	}
	t.Logf("%d partial inputs through netlink, %d through nft", netlinked, untranslated)
	if netlinked < steps/4 {
		t.Errorf("only %d partial inputs went through netlink", netlinked)
	}
}
