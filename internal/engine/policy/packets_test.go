package policy_test

import (
	"context"
	"fmt"
	"github.com/cnibench/cnibench/internal/netns"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/policy"
	"github.com/cnibench/cnibench/internal/lab"
)

// pktFlow is one connection attempt and its expected fate.
type pktFlow struct {
	from, to string
	port     int
	pass     bool
	why      string
}

func (f pktFlow) String() string { return fmt.Sprintf("%s -> %s:%d", f.from, f.to, f.port) }

// Flows under the first Program (see pktPrograms). a, b, c are on node0; d, e, f on node1.
var pktFlowsV1 = []pktFlow{
	{"a", "b", 8080, true, "intra: a's egress and b's ingress admit (the reply passes a's deny-all ingress by conntrack)"},
	{"a", "b", 9090, false, "intra: a's egress admits (b, any port), b's ingress port rule denies"},
	{"c", "b", 8080, false, "intra: b's ingress denies a source outside its set"},
	{"e", "b", 8080, true, "inter: e's ipBlock admits b's /32 inside an except; b's ingress admits e"},
	{"d", "b", 8080, false, "inter: b's ingress denies"},
	{"a", "d", 8080, true, "inter: a's egress admits by the named-port set"},
	{"a", "d", 9090, false, "inter: a's egress denies a port outside the named-port set"},
	{"a", "c", 8080, false, "intra: a's egress denies (c is in no egress peer)"},
	{"e", "c", 8080, false, "inter: e's egress ipBlock except denies node0's pods"},
	{"e", "f", 8080, true, "intra (node1): e's egress ipBlock and f's ingress admit"},
	{"f", "d", 8080, true, "intra (node1): f's egress admits d on 8080"},
	{"f", "d", 9090, false, "intra (node1): f's egress denies 9090, though f's own ingress rule admits packets from f (direction)"},
	{"f", "c", 8080, false, "inter: f's egress denies"},
	{"e", "d", 9090, false, "intra (node1): e's egress port rule denies"},
	{"c", "a", 8080, false, "intra: a's ingress policy without rules denies all"},
	{"d", "a", 8080, false, "inter: a's ingress policy without rules denies all"},
	{"c", "d", 9090, true, "no policy isolates c or d"},
}

// Flows under the second Program: b admits any source on 8080, a lost its egress policy.
var pktFlowsV2 = []pktFlow{
	{"c", "b", 8080, true, "changed: b's ingress admits any source"},
	{"d", "b", 8080, true, "changed: b's ingress admits any source (inter)"},
	{"a", "b", 9090, false, "b's ingress still admits 8080 only"},
	{"a", "c", 8080, true, "changed: a is no longer isolated for egress"},
	{"a", "d", 9090, true, "changed: a is no longer isolated for egress (inter)"},
	{"e", "c", 8080, false, "e's egress ipBlock except still denies"},
	{"e", "b", 8080, true, "e's egress ipBlock still admits b"},
	{"c", "a", 8080, false, "a's deny-all ingress is kept"},
}

// pktPrograms writes, by hand, the Programs each node enforces: v1 and, changed, v2. Every
// node holds every policy (kube-router's way: those no local pod uses are idle there); only
// local pods get firewalls.
func pktPrograms(ip map[string]string) (v1, v2 map[string]*policy.Program) {
	node0 := ip["b"][:strings.LastIndex(ip["b"], ".")] + ".0/24"
	sets1 := []policy.Set{
		{Name: "KUBE-SRC-B", Kind: policy.SetAddrs, Members: []policy.Member{{Addr: ip["a"]}, {Addr: ip["e"]}}},
		{Name: "KUBE-DST-A", Kind: policy.SetAddrs, Members: []policy.Member{{Addr: ip["b"]}}},
		{Name: "KUBE-DST-HTTP", Kind: policy.SetAddrPorts, Members: []policy.Member{
			{Addr: ip["b"], Protocol: "TCP", Port: 8080}, {Addr: ip["d"], Protocol: "TCP", Port: 8080}}},
		{Name: "KUBE-DST-NETE", Kind: policy.SetNets, Members: []policy.Member{
			{Addr: "10.244.0.0/16"}, {Addr: node0, Except: true}, {Addr: ip["b"] + "/32"}}},
		{Name: "KUBE-SRC-WEB", Kind: policy.SetAddrs, Members: []policy.Member{{Addr: ip["d"]}, {Addr: ip["e"]}, {Addr: ip["f"]}}},
		{Name: "KUBE-DST-D", Kind: policy.SetAddrs, Members: []policy.Member{{Addr: ip["d"]}}},
	}
	tcp := func(p int) policy.PortMatch { return policy.PortMatch{Protocol: "TCP", Port: p, EndPort: p} }
	bin := policy.PolicyChain{Name: "KUBE-NWPLCY-BIN", Namespace: "t", Policy: "b-in",
		Ingress: []policy.Rule{{Peers: []policy.Peer{{Set: "KUBE-SRC-B"}}, Ports: []policy.PortMatch{tcp(8080)}}}}
	aout := policy.PolicyChain{Name: "KUBE-NWPLCY-AOUT", Namespace: "t", Policy: "a-out",
		Egress: []policy.Rule{
			{Peers: []policy.Peer{{Set: "KUBE-DST-A"}}, Ports: []policy.PortMatch{{Any: true}}},
			{Peers: []policy.Peer{{Any: true}}, Ports: []policy.PortMatch{{Protocol: "TCP", Set: "KUBE-DST-HTTP"}}},
		}}
	eout := policy.PolicyChain{Name: "KUBE-NWPLCY-EOUT", Namespace: "t", Policy: "e-out",
		Egress: []policy.Rule{{Peers: []policy.Peer{{Set: "KUBE-DST-NETE"}}, Ports: []policy.PortMatch{tcp(8080)}}}}
	// f's policy has both directions, and its ingress peers include f itself ("from the pods
	// of my app"): its ingress rule must not admit f's own outgoing packets.
	fself := policy.PolicyChain{Name: "KUBE-NWPLCY-FSELF", Namespace: "t", Policy: "f-self",
		Ingress: []policy.Rule{{Peers: []policy.Peer{{Set: "KUBE-SRC-WEB"}}, Ports: []policy.PortMatch{{Any: true}}}},
		Egress:  []policy.Rule{{Peers: []policy.Peer{{Set: "KUBE-DST-D"}}, Ports: []policy.PortMatch{tcp(8080)}}}}
	deny := policy.PolicyChain{Name: "KUBE-NWPLCY-DENY", Namespace: "t", Policy: "a-deny"}
	bin2 := policy.PolicyChain{Name: "KUBE-NWPLCY-BIN2", Namespace: "t", Policy: "b-in-2",
		Ingress: []policy.Rule{{Peers: []policy.Peer{{Any: true}}, Ports: []policy.PortMatch{tcp(8080)}}}}
	fw := func(pod string, in, out []string) policy.PodFirewall {
		return policy.PodFirewall{Pod: "t/" + pod, IP: ip[pod], Chain: "KUBE-POD-FW-" + strings.ToUpper(pod), IngressOf: in, EgressOf: out}
	}
	node1 := []policy.PodFirewall{fw("e", nil, []string{eout.Name}), fw("f", []string{fself.Name}, []string{fself.Name})}
	pols1 := []policy.PolicyChain{bin, aout, eout, fself, deny}
	v1 = map[string]*policy.Program{
		"node0": {Sets: sets1, Policies: pols1,
			Pods: []policy.PodFirewall{fw("a", []string{deny.Name}, []string{aout.Name}), fw("b", []string{bin.Name}, nil)}},
		"node1": {Sets: sets1, Policies: pols1, Pods: node1},
	}
	sets2 := sets1[3:]
	pols2 := []policy.PolicyChain{bin2, eout, fself, deny}
	v2 = map[string]*policy.Program{
		"node0": {Sets: sets2, Policies: pols2,
			Pods: []policy.PodFirewall{fw("a", []string{deny.Name}, nil), fw("b", []string{bin2.Name}, nil)}},
		"node1": {Sets: sets2, Policies: pols2, Pods: node1},
	}
	return v1, v2
}

// pktEngine applies Programs with one engine and reads back what a namespace holds.
type pktEngine struct {
	name  string
	apply func(ns string, p *policy.Program) error
	clear func(ns string) error
	// installed returns the engine's chains and sets found in the namespace; rendered, those
	// a rendering of p declares.
	installed func(t *testing.T, ns string) (chains, sets []string)
	rendered  func(p *policy.Program) (chains, sets []string)
}

func nsOut(t *testing.T, ns string, argv ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "--"}, argv...)...).Output()
	if err != nil {
		t.Fatalf("%v in %s: %v", argv, ns, err)
	}
	return string(out)
}

// nameLines returns the second field of the lines starting with one of the prefixes, sorted.
func nameLines(text string, prefixes ...string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, strings.Fields(strings.TrimPrefix(l, p))[0])
			}
		}
	}
	sort.Strings(out)
	return out
}

func iptEngine(backend string) pktEngine {
	save := "iptables-nft-save"
	if backend == "legacy" {
		save = "iptables-legacy-save"
	}
	return pktEngine{
		name: "iptables-" + backend,
		apply: func(ns string, p *policy.Program) error {
			sets, filter, _ := policy.RenderIPTables(p)
			return policy.ApplyIPTables(ns, backend, sets, filter)
		},
		clear: func(ns string) error { return policy.ClearIPTables(ns, backend) },
		installed: func(t *testing.T, ns string) ([]string, []string) {
			text := nsOut(t, ns, save, "-t", "filter")
			if n := strings.Count(text, "\n-A FORWARD -j "+policy.IPTablesTopChain+"\n"); n > 1 {
				t.Errorf("%d FORWARD hooks, want at most 1", n)
			}
			var ours []string
			for _, c := range nameLines(text, ":") {
				if strings.HasPrefix(c, "KUBE-") {
					ours = append(ours, c)
				}
			}
			return ours, strings.Fields(nsOut(t, ns, "ipset", "list", "-n"))
		},
		rendered: func(p *policy.Program) ([]string, []string) {
			sets, filter, _ := policy.RenderIPTables(p)
			return nameLines(string(filter), ":"), nameLines(string(sets), "create ")
		},
	}
}

var nftEngine = pktEngine{
	name: "nftables",
	apply: func(ns string, p *policy.Program) error {
		input, _ := policy.RenderNFTables(p)
		return policy.ApplyNFTables(ns, input)
	},
	clear: policy.ClearNFTables,
	installed: func(t *testing.T, ns string) ([]string, []string) {
		tables := nsOut(t, ns, "nft", "list", "tables")
		if !strings.Contains(tables, "table ip "+policy.NFTablesTable+"\n") {
			return nil, nil
		}
		text := nsOut(t, ns, "nft", "list", "table", "ip", policy.NFTablesTable)
		return nameLines(text, "chain "), nameLines(text, "set ", "map ")
	},
	rendered: func(p *policy.Program) ([]string, []string) {
		input, _ := policy.RenderNFTables(p)
		return nameLines(string(input), "chain "), nameLines(string(input), "set ", "map ")
	},
}

// TestPacketsPolicyEngines builds a routed (calico) and a bridged (flannel) lab, hand-writes
// each node's Program and enforces it with each engine (iptables-nft, iptables-legacy,
// nftables), then sends real connections between pods: allowed ones are answered, denied ones
// time out (dropped, not refused), for ingress and egress, within a node and across nodes.
// A changed Program is applied over the first one and takes effect, leaving exactly the new
// rendering's chains and sets; clearing leaves nothing.
func TestPacketsPolicyEngines(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	for _, dp := range []string{"calico", "flannel"} {
		t.Run(dp, func(t *testing.T) { pktDataplane(t, dp) })
	}
}

func pktDataplane(t *testing.T, dataplane string) {
	ctx := context.Background()
	prefix := fmt.Sprintf("cnbtp%04d", rand.Intn(10000))
	l, err := lab.Up(ctx, lab.Config{Prefix: prefix, Dataplane: dataplane})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(ctx); err != nil {
			t.Errorf("lab close: %v", err)
		}
		if left := lab.Leftovers(prefix); len(left) > 0 {
			t.Errorf("leftovers: %v", left)
		}
	})
	http := []cluster.ContainerPort{{Name: "http", Port: 8080, Protocol: "tcp"}}
	specs := []cluster.PodSpec{
		{Name: "a", Node: "node0"}, {Name: "b", Node: "node0", Ports: http}, {Name: "c", Node: "node0"},
		{Name: "d", Node: "node1", Ports: http}, {Name: "e", Node: "node1"}, {Name: "f", Node: "node1"},
	}
	pods, err := l.CreatePods(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	ip := map[string]string{}
	for _, p := range pods {
		ip[p.Name] = p.IP
	}
	dir := t.TempDir()
	for _, s := range []struct {
		pod  string
		port int
	}{{"a", 8080}, {"b", 8080}, {"b", 9090}, {"c", 8080}, {"d", 8080}, {"d", 9090}, {"f", 8080}} {
		argv := []string{"busybox", "httpd", "-f", "-p", fmt.Sprint(s.port), "-h", dir}
		if _, err := l.Start(ctx, s.pod, argv, cluster.Ready{TCPPort: s.port}); err != nil {
			t.Fatal(err)
		}
	}
	nodeNS := map[string]string{}
	for _, n := range []string{"node0", "node1"} {
		ns, err := l.NodeNS(n)
		if err != nil {
			t.Fatal(err)
		}
		nodeNS[n] = netns.Path(ns)
		if dataplane == "flannel" {
			// Bridged traffic between pods of a node must cross the FORWARD hook.
			if err := netns.Do(ns, func() error {
				return os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Without policies every flow passes: what is dropped later is dropped by a policy.
	var all []pktFlow
	for _, f := range append(append([]pktFlow(nil), pktFlowsV1...), pktFlowsV2...) {
		f.pass, f.why = true, "no policy installed"
		all = append(all, f)
	}
	if !pktCheck(t, ctx, l, ip, "baseline", all) {
		t.Fatal("the lab does not deliver every flow without policies")
	}

	v1, v2 := pktPrograms(ip)
	for _, e := range []pktEngine{iptEngine("nft"), iptEngine("legacy"), nftEngine} {
		t.Run(e.name, func(t *testing.T) {
			apply := func(progs map[string]*policy.Program) {
				for _, n := range []string{"node0", "node1"} {
					if err := e.apply(nodeNS[n], progs[n]); err != nil {
						t.Fatalf("%s: %v", n, err)
					}
				}
			}
			t.Cleanup(func() {
				for _, n := range []string{"node0", "node1"} {
					if err := e.clear(nodeNS[n]); err != nil {
						t.Errorf("clear %s: %v", n, err)
					}
				}
			})
			apply(v1)
			pktCheck(t, ctx, l, ip, "v1", pktFlowsV1)
			for _, n := range []string{"node0", "node1"} {
				pktInstalled(t, e, nodeNS[n], n+" v1", v1[n])
			}
			apply(v1) // again: replacing a rendering by itself changes nothing
			apply(v2)
			pktCheck(t, ctx, l, ip, "v2", pktFlowsV2)
			for _, n := range []string{"node0", "node1"} {
				pktInstalled(t, e, nodeNS[n], n+" v2", v2[n])
				chains, sets := e.installed(t, nodeNS[n])
				for _, gone := range []string{"KUBE-NWPLCY-AOUT", "KUBE-NWPLCY-BIN", "KUBE-NWPLCY-AOUT-egress", "KUBE-NWPLCY-BIN-ingress"} {
					if pktHas(chains, gone) {
						t.Errorf("%s: stale chain %s after v2", n, gone)
					}
				}
				for _, gone := range []string{"KUBE-SRC-B", "KUBE-DST-A", "KUBE-DST-HTTP"} {
					if pktHas(sets, gone) {
						t.Errorf("%s: stale set %s after v2", n, gone)
					}
				}
			}
			for _, n := range []string{"node0", "node1"} {
				if err := e.clear(nodeNS[n]); err != nil {
					t.Fatalf("clear %s: %v", n, err)
				}
				if chains, sets := e.installed(t, nodeNS[n]); len(chains)+len(sets) > 0 {
					t.Errorf("%s: after clear: chains %v, sets %v", n, chains, sets)
				}
			}
		})
	}
}

func pktHas(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// pktInstalled checks that a namespace holds exactly the chains and sets of p's rendering.
func pktInstalled(t *testing.T, e pktEngine, ns, what string, p *policy.Program) {
	t.Helper()
	chains, sets := e.installed(t, ns)
	wantChains, wantSets := e.rendered(p)
	if e.name != "nftables" {
		var ours []string
		for _, c := range wantChains {
			if strings.HasPrefix(c, "KUBE-") {
				ours = append(ours, c)
			}
		}
		wantChains = ours
	}
	sort.Strings(wantChains)
	sort.Strings(sets)
	if !reflect.DeepEqual(chains, wantChains) {
		t.Errorf("%s: chains %v, want %v", what, chains, wantChains)
	}
	if !reflect.DeepEqual(sets, wantSets) {
		t.Errorf("%s: sets %v, want %v", what, sets, wantSets)
	}
}

// pktCheck tries every flow at once (curl, 1 s to connect) and reports those whose fate is not
// the expected one: a pass is an answer, a drop is a connect timeout (exit 28); a refused
// connection or any other error is a failure either way.
func pktCheck(t *testing.T, ctx context.Context, l *lab.Lab, ip map[string]string, phase string, flows []pktFlow) bool {
	t.Helper()
	type result struct {
		exit int
		err  error
		msg  string
	}
	res := make([]result, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Add(1)
		go func(i int, f pktFlow) {
			defer wg.Done()
			url := fmt.Sprintf("http://%s:%d/", ip[f.to], f.port)
			r, err := l.Exec(ctx, f.from, []string{"curl", "-s", "-o", "/dev/null", "--connect-timeout", "1", "--max-time", "3", url})
			res[i] = result{r.ExitCode, err, strings.TrimSpace(string(r.Stderr))}
		}(i, f)
	}
	wg.Wait()
	ok := true
	for i, f := range flows {
		r := res[i]
		switch {
		case r.err != nil:
			t.Errorf("%s: %s: %v", phase, f, r.err)
		case f.pass && r.exit != 0:
			t.Errorf("%s: %s: want answered (%s), curl exit %d %s", phase, f, f.why, r.exit, r.msg)
		case !f.pass && r.exit != 28:
			t.Errorf("%s: %s: want dropped (%s), curl exit %d (28 = timeout) %s", phase, f, f.why, r.exit, r.msg)
		default:
			continue
		}
		ok = false
	}
	return ok
}
