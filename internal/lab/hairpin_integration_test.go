package lab

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// hairpinCase is one combination of TestServiceHairpin: a data plane and a proxy, and how the
// hairpin path is proven.
type hairpinCase struct {
	dataplane, proxy string
	// up builds the lab (nil: upLab with the data plane and the proxy).
	up func(t *testing.T) *Lab
	// rules are kube-proxy's layouts' rules of the hairpin masquerade (kubeProxyRules), each
	// counting one packet per hairpin connection and none for a connection from another pod.
	rules *kubeProxyRules
	// hairpin and other are, for the eBPF load balancers, how much counters of the pod's node
	// (DataplaneCounters names) move for one hairpin connection and for one connection of
	// another pod to the same Service.
	hairpin, other map[string]uint64
	// from is the source the server must see for a hairpin connection: "node" (masquerade: an
	// address of the pod's node), "loopback" (bpfdp.ServiceLoopback), "self" (the pod's own).
	from string
	// policy: also with a NetworkPolicy that denies the pod all ingress, the hairpin connection
	// passes (the engine lets a pod's traffic to itself pass) and the other pod's is dropped.
	policy bool
}

// hairpinCases: kube-proxy's iptables (both backends) and nftables layouts on a routed
// (calico) and a bridged (flannel) data plane; the eBPF load balancer per packet on the cilium
// preset and on routed and bridged pods, and at connect time (the cilium preset's own proxy,
// ebpf-sock); seed 003's provider, both builds.
var hairpinCases = []hairpinCase{
	{dataplane: "calico", proxy: "iptables", rules: iptablesHairpin("iptables-save"), from: "node"},
	{dataplane: "calico", proxy: "iptables-legacy", rules: iptablesHairpin("iptables-legacy-save"), from: "node"},
	{dataplane: "calico", proxy: "nftables", rules: nftablesHairpin, from: "node"},
	{dataplane: "flannel", proxy: "iptables", rules: iptablesHairpin("iptables-save"), from: "node"},
	{dataplane: "flannel", proxy: "iptables-legacy", rules: iptablesHairpin("iptables-legacy-save"), from: "node"},
	{dataplane: "flannel", proxy: "nftables", rules: nftablesHairpin, from: "node"},
	{dataplane: "cilium", proxy: "ebpf", up: ebpfLab("cilium"), hairpin: lbHairpin, other: lbOther, from: "loopback", policy: true},
	{dataplane: "calico", proxy: "ebpf", up: ebpfLab("calico"), hairpin: lbHairpin, other: lbOther, from: "loopback"},
	{dataplane: "flannel", proxy: "ebpf", up: ebpfLab("flannel"), hairpin: lbHairpin, other: lbOther, from: "loopback"},
	// Socket LB: connect() is given a backend, the per-packet load balancer sees no connection
	// to the Service.
	{dataplane: "cilium", proxy: "ebpf-sock", up: sockLBLab, hairpin: sockPicked, other: sockPicked, from: "self"},
	{dataplane: "polycube", proxy: "polycube", up: polycubeLab("polycube"), hairpin: ilbHairpin, other: ilbOther, from: "loopback", policy: true},
	{dataplane: "polycube-mono", proxy: "polycube", up: polycubeLab("polycube-mono"), hairpin: ilbHairpin, other: ilbOther, from: "loopback", policy: true},
}

var (
	lbHairpin  = map[string]uint64{"lb_new": 1, "lb_hairpin": 1}
	lbOther    = map[string]uint64{"lb_new": 1, "lb_hairpin": 0}
	sockPicked = map[string]uint64{"sock_picked": 1, "lb_new": 0, "lb_hairpin": 0}
	ilbHairpin = map[string]uint64{"ilb_new": 1, "ilb_hairpin": 1}
	ilbOther   = map[string]uint64{"ilb_new": 1, "ilb_hairpin": 0}
)

func ebpfLab(dp string) func(t *testing.T) *Lab {
	return func(t *testing.T) *Lab { return upEBPFLab(t, dp) }
}

func polycubeLab(dp string) func(t *testing.T) *Lab {
	return func(t *testing.T) *Lab { return upPolycubeLab(t, dp) }
}

func sockLBLab(t *testing.T) *Lab {
	needEBPFProxy(t)
	if err := bpfdp.SockLBUsable(); err != nil {
		t.Skipf("the socket load balancer cannot run here: %v", err)
	}
	return upLab(t, Config{Dataplane: "cilium", Proxy: "ebpf-sock"})
}

// TestServiceHairpin: a pod reaching a ClusterIP Service whose only endpoint is that pod itself
// (hairpin) gets its data through and back with every lab proxy, and the path is the one the
// real data plane takes:
//   - kube-proxy's layouts (iptables, iptables-legacy, nftables; routed and bridged pods): the
//     pod sees the connection come from an address of its node, not from itself, the endpoint
//     chain's "source is the endpoint: mark for masquerade" rule and the masquerade rule of
//     the postrouting chain each counted the connection's first packet, and a connection from
//     another pod of the node to the same Service is not masqueraded (the pod sees that pod's
//     address, the two rules count nothing);
//   - the eBPF load balancer per packet (proxy ebpf) and seed 003's ILB (proxy polycube): the
//     pod sees the service loopback address (bpfdp.ServiceLoopback, Cilium's), the load
//     balancer counted a hairpin connection, another pod's connection keeps its address and
//     counts none; with a NetworkPolicy denying the pod all ingress (cilium and polycube
//     presets, whose policy engines are eBPF), the hairpin connection still passes, as a pod's
//     traffic to itself does, and the other pod's is dropped;
//   - the socket load balancer (proxy ebpf-sock, the cilium preset's): connect() is given the
//     pod's own address, so the connection runs over the pod's loopback device and the pod
//     sees itself, as with Cilium's socket LB; the socket load balancer counted it and the
//     per-packet one saw no new connection.
//
// The client is a process of the pod (busybox nc, in the node's cgroup where socket load
// balancing acts), the server serveWho in the pod's namespace, which answers with the source
// address it saw and the bytes it received.
func TestServiceHairpin(t *testing.T) {
	needRoot(t)
	for _, c := range hairpinCases {
		t.Run(c.dataplane+"/"+c.proxy, func(t *testing.T) {
			start := time.Now()
			testHairpin(t, c)
			t.Logf("%.1f s", time.Since(start).Seconds())
		})
	}
}

func testHairpin(t *testing.T, c hairpinCase) {
	var l *Lab
	if c.up != nil {
		l = c.up(t)
	} else {
		l = upLab(t, Config{Dataplane: c.dataplane, Proxy: c.proxy})
	}
	if got := l.Parts().Proxy.Name(); got != c.proxy {
		t.Fatalf("lab runs proxy %s, want %s", got, c.proxy)
	}
	ctx := context.Background()
	app := map[string]string{"app": "hairpin"}
	pods, err := l.CreatePods(ctx, []cluster.PodSpec{
		{Name: "hp", Node: "node0", Labels: app, Ports: []cluster.ContainerPort{{Name: "who", Port: 8080, Protocol: "tcp"}}},
		{Name: "other", Node: "node0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	hp, other := pods[0], pods[1]
	ns, err := l.PodNS(hp.Name)
	if err != nil {
		t.Fatal(err)
	}
	serveWho(t, ns, hp.Name, 8080)
	svcs, err := l.CreateServices(ctx, []cluster.ServiceSpec{{Name: "hairpin", Selector: app,
		Ports: []cluster.ServicePort{{Port: 80, TargetPort: 8080, Protocol: "tcp"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if eps := svcs[0].Endpoints; len(eps) != 1 || eps[0] != hp.IP {
		t.Fatalf("endpoints %v, want the hairpin pod's %s only", eps, hp.IP)
	}
	vip := net.JoinHostPort(svcs[0].ClusterIP, "80")

	var want []string
	switch c.from {
	case "node":
		want = nodeAddrs(t, l, hp.Node)
	case "loopback":
		want = []string{bpfdp.ServiceLoopback.String()}
	case "self":
		want = []string{hp.IP}
	default:
		t.Fatalf("from %q", c.from)
	}
	// counts are the counters the case watches: the rules' (named by chain and content) or
	// the node's eBPF counters; delta checks how much a connection moved them.
	counts := func() map[string]uint64 {
		t.Helper()
		if c.rules != nil {
			return c.rules.read(t, l, hp.Node)
		}
		return pcCounters(t, l)[hp.Node]
	}
	delta := func(what string, before, after map[string]uint64, hairpin bool) {
		t.Helper()
		want := c.other
		if hairpin {
			want = c.hairpin
		}
		if c.rules != nil {
			want = map[string]uint64{}
			for k := range before {
				want[k] = 0
				if hairpin {
					want[k] = 1 // the connection's first packet: the nat table sees no other
				}
			}
		}
		var got []string
		for k, w := range want {
			a, ok := after[k]
			if !ok {
				t.Fatalf("no counter %s in %v", k, after)
			}
			got = append(got, fmt.Sprintf("%s +%d", k, a-before[k]))
			if a-before[k] != w {
				t.Errorf("%s: %s counted %d, want %d", what, k, a-before[k], w)
			}
		}
		slices.Sort(got)
		t.Logf("%s: %s", what, strings.Join(got, ", "))
	}
	if c.rules != nil {
		c.rules.prepare(t, l, hp.Node)
	}

	// The hairpin connection.
	before := counts()
	name, src, n, err := hairpinAsk(l, hp.Name, vip, 3)
	if err != nil {
		t.Fatalf("hairpin %s -> %s: %v", hp.IP, vip, err)
	}
	after := counts()
	t.Logf("hairpin %s -> %s: the server saw %s (%d bytes)", hp.IP, vip, src, n)
	if name != hp.Name || n != len(hairpinPayload) {
		t.Errorf("hairpin: %s answered having received %d bytes, want %s and %d", name, n, hp.Name, len(hairpinPayload))
	}
	if !slices.Contains(want, src) {
		t.Errorf("hairpin: the server saw the connection from %s, want %s (%v)", src, c.from, want)
	}
	if c.from != "self" && src == hp.IP {
		t.Errorf("hairpin: the server saw its own address %s: the connection was not masqueraded", src)
	}
	delta("hairpin connection", before, after, true)

	// Another pod of the node to the same Service: not masqueraded.
	before = counts()
	name, src, n, err = hairpinAsk(l, other.Name, vip, 3)
	if err != nil {
		t.Fatalf("%s -> %s: %v", other.IP, vip, err)
	}
	after = counts()
	t.Logf("other pod %s -> %s: the server saw %s (%d bytes)", other.IP, vip, src, n)
	if name != hp.Name || n != len(hairpinPayload) || src != other.IP {
		t.Errorf("from another pod: %s answered having received %d bytes from %s; want %s, %d bytes, from %s (not masqueraded)",
			name, n, src, hp.Name, len(hairpinPayload), other.IP)
	}
	delta("another pod's connection", before, after, false)

	if !c.policy {
		return
	}
	// Denied all ingress, the pod still reaches itself through the Service.
	pol := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hairpin-deny"}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: app}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if err := l.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{pol}); err != nil {
		t.Fatal(err)
	}
	before = counts()
	if _, src, _, err := hairpinAsk(l, hp.Name, vip, 3); err != nil || !slices.Contains(want, src) {
		t.Errorf("hairpin with all ingress denied: seen from %s, %v; want it to pass, from %v", src, err, want)
	}
	delta("hairpin connection with all ingress denied", before, counts(), true)
	if _, src, _, err := hairpinAsk(l, other.Name, vip, 1); err == nil {
		t.Errorf("%s -> %s with all ingress of the endpoint denied: it passed (seen from %s)", other.IP, vip, src)
	}
}

// hairpinPayload is what hairpinAsk sends.
const hairpinPayload = "hairpin"

// hairpinAsk connects from a pod to addr with busybox nc (a process of the pod: in its
// namespace and its node's cgroup), waiting up to timeout seconds for the connection, sends
// hairpinPayload, shuts its sending side and returns serveWho's answer.
func hairpinAsk(l *Lab, pod, addr string, timeout int) (name, src string, n int, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeout+5)*time.Second)
	defer cancel()
	res, err := l.Exec(ctx, pod, []string{"sh", "-c", `printf %s "$1" | busybox nc -w "$2" "$3" "$4"`, "sh",
		hairpinPayload, strconv.Itoa(timeout), host, port})
	if err != nil {
		return "", "", 0, err
	}
	line := strings.TrimSpace(string(res.Stdout))
	if _, err := fmt.Sscanf(line, "%s %s %d", &name, &src, &n); err != nil {
		return "", "", 0, fmt.Errorf("nc exit %d, answer %q, %s", res.ExitCode, line, strings.TrimSpace(string(res.Stderr)))
	}
	return name, src, n, nil
}

// nodeAddrs are a node's IPv4 addresses but loopback ones.
func nodeAddrs(t *testing.T, l *Lab, node string) []string {
	t.Helper()
	ns, err := l.NodeNS(node)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	err = withHandle(ns, func(h *netlink.Handle) error {
		as, err := h.AddrList(nil, netlink.FAMILY_V4)
		for _, a := range as {
			if !a.IP.IsLoopback() {
				out = append(out, a.IP.String())
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubeProxyRule is a rule of kube-proxy's layouts in a node: its chain (nat table) and what its
// text holds, its verdict last.
type kubeProxyRule struct {
	chain string
	has   []string
}

func (r kubeProxyRule) String() string { return r.chain + ": " + strings.Join(r.has, " ... ") }

func (r kubeProxyRule) matches(text string) bool {
	for _, h := range r.has {
		if !strings.Contains(text, h) {
			return false
		}
	}
	return true
}

// kubeProxyRules are the rules of the hairpin masquerade in one of kube-proxy's layouts, and
// how their packet counters are read in a node.
type kubeProxyRules struct {
	// rules are the rules for the lab's hairpin Service: the endpoint chain's mark for
	// masquerade of the endpoint's own traffic, then the masquerade of marked packets.
	rules func(t *testing.T, l *Lab) []kubeProxyRule
	// prepare readies the counters (nil: the rules count already).
	prepare func(t *testing.T, l *Lab, node string)
	// read returns the rules' packet counters in the node, by kubeProxyRule.String.
	read func(t *testing.T, l *Lab, node string) map[string]uint64
}

// hairpinService is the lab's rendering input of the hairpin Service and its endpoint: what
// the proxy named its chains after.
func hairpinService(t *testing.T, l *Lab) (proxy.Service, proxy.Endpoint) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.services["hairpin"]
	if s == nil || len(s.proxied) != 1 || len(s.proxied[0].Endpoints) != 1 {
		t.Fatalf("the hairpin Service as the proxy was given it: %+v", s)
	}
	return s.proxied[0], s.proxied[0].Endpoints[0]
}

// iptablesHairpin: the KUBE-SEP chain's "-s <endpoint>/32 -j KUBE-MARK-MASQ" and
// KUBE-POSTROUTING's MASQUERADE, read with save -c (every iptables rule counts).
func iptablesHairpin(save string) *kubeProxyRules {
	var r kubeProxyRules
	r.rules = func(t *testing.T, l *Lab) []kubeProxyRule {
		s, e := hairpinService(t, l)
		return []kubeProxyRule{{s.SepChain(e), []string{"-s " + e.IP + "/32", "-j KUBE-MARK-MASQ"}},
			{"KUBE-POSTROUTING", []string{"-j MASQUERADE"}}}
	}
	r.prepare = func(*testing.T, *Lab, string) {}
	r.read = func(t *testing.T, l *Lab, node string) map[string]uint64 {
		t.Helper()
		ns, err := l.NodeNS(node)
		if err != nil {
			t.Fatal(err)
		}
		out, err := nsenter(t, ns, save, "-c", "-t", "nat")
		if err != nil {
			t.Fatalf("%s in %s: %v\n%s", save, node, err, out)
		}
		counts := map[string]uint64{}
		for _, rule := range r.rules(t, l) {
			found := false
			for _, line := range strings.Split(out, "\n") {
				// "[packets:bytes] -A CHAIN ..."
				cnt, text, ok := strings.Cut(line, " ")
				if !ok || !strings.HasPrefix(text, "-A "+rule.chain+" ") || !rule.matches(text) {
					continue
				}
				p, _, _ := strings.Cut(strings.Trim(cnt, "[]"), ":")
				v, err := strconv.ParseUint(p, 10, 64)
				if err != nil || found {
					t.Fatalf("%s: counter of %q (found twice: %v): %v\n%s", save, line, found, err, out)
				}
				counts[rule.String()], found = v, true
			}
			if !found {
				t.Fatalf("%s in %s: no rule of chain %s holding %q\n%s", save, node, rule.chain, rule.has, out)
			}
		}
		return counts
	}
	return &r
}

// nftablesHairpin: the endpoint chain's "ip saddr <endpoint> jump mark-for-masquerade" and the
// masquerading chain's "masquerade fully-random". kube-proxy's nftables rules have no counter;
// prepare gives these two one, replacing each (by its handle) with the same rule and a
// "counter" statement before its verdict, which nft list then shows.
var nftablesHairpin = func() *kubeProxyRules {
	var r kubeProxyRules
	r.rules = func(t *testing.T, l *Lab) []kubeProxyRule {
		s, e := hairpinService(t, l)
		return []kubeProxyRule{{s.NFTEndpointChain(e), []string{"ip saddr " + e.IP + " ", "jump mark-for-masquerade"}},
			{"masquerading", []string{"masquerade fully-random"}}}
	}
	list := func(t *testing.T, ns, chain string) []string {
		t.Helper()
		out, err := nsenter(t, ns, "nft", "-a", "list", "chain", "ip", proxy.NFTable, chain)
		if err != nil {
			t.Fatalf("nft list chain %s: %v\n%s", chain, err, out)
		}
		return strings.Split(out, "\n")
	}
	r.prepare = func(t *testing.T, l *Lab, node string) {
		t.Helper()
		ns, err := l.NodeNS(node)
		if err != nil {
			t.Fatal(err)
		}
		var batch strings.Builder
		for _, rule := range r.rules(t, l) {
			n := 0
			for _, line := range list(t, ns, rule.chain) {
				text, handle, ok := strings.Cut(strings.TrimSpace(line), " # handle ")
				if !ok || !rule.matches(text) {
					continue
				}
				verdict := rule.has[len(rule.has)-1]
				fmt.Fprintf(&batch, "replace rule ip %s %s handle %s %s\n", proxy.NFTable, rule.chain, handle,
					strings.Replace(text, verdict, "counter "+verdict, 1))
				n++
			}
			if n != 1 {
				t.Fatalf("chain %s: %d rules holding %q, want 1", rule.chain, n, rule.has)
			}
		}
		if out, err := nsenterStdin(t, ns, batch.String(), "nft", "-f", "-"); err != nil {
			t.Fatalf("nft -f -: %v\n%s\n%s", err, batch.String(), out)
		}
	}
	r.read = func(t *testing.T, l *Lab, node string) map[string]uint64 {
		t.Helper()
		ns, err := l.NodeNS(node)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]uint64{}
		for _, rule := range r.rules(t, l) {
			found := false
			for _, line := range list(t, ns, rule.chain) {
				_, after, ok := strings.Cut(line, "counter packets ")
				if !ok || !rule.matches(line) {
					continue
				}
				f := strings.Fields(after)
				v, err := strconv.ParseUint(f[0], 10, 64)
				if err != nil || found {
					t.Fatalf("counter of %q (found twice: %v): %v", line, found, err)
				}
				counts[rule.String()], found = v, true
			}
			if !found {
				t.Fatalf("chain %s: no counted rule holding %q", rule.chain, rule.has)
			}
		}
		return counts
	}
	return &r
}()
