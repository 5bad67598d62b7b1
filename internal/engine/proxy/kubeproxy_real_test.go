package proxy

import (
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The dumps in testdata/real were taken from kube-proxy v1.34.10 on this project's harness
// cluster (see testdata/real/README.md): Service cnbrec/web (port "http" 80/TCP -> 8080, two
// endpoints), cnbrec/dns (port "dns" 53/UDP, no endpoints) and default/kubernetes (port
// "https" 443/TCP, no endpoints there); the NodePort recordings add np-cluster, np-local and
// np-local-remote, on both nodes. The tests below program the same Services with this
// package into a scratch namespace and compare what the kernel then lists with kube-proxy's
// dump, object by object. What the lab leaves out on purpose is named below with the reason
// (and checked to be in the dump); nothing else is skipped.

// recordedPods are the recorded Services' endpoints: web-0 on node0, web-1 on node1.
var recordedPods = []Endpoint{{IP: "10.244.0.2", Port: 8080, Node: "node0"}, {IP: "10.244.1.2", Port: 8080, Node: "node1"}}

// recordedNodes are the harness's nodes, their addresses and the suffix of their NodePort
// dumps.
var recordedNodes = []struct{ name, ip, dump string }{{"node0", "172.30.0.10", ""}, {"node1", "172.30.0.11", "-node1"}}

func realServices(webIP, dnsIP string) []Service {
	return []Service{
		{Namespace: "cnbrec", Name: "web", PortName: "http", ClusterIP: webIP, Port: 80, Protocol: "tcp", Endpoints: recordedPods},
		{Namespace: "cnbrec", Name: "dns", PortName: "dns", ClusterIP: dnsIP, Port: 53, Protocol: "udp"},
		{Namespace: "default", Name: "kubernetes", PortName: "https", ClusterIP: "10.96.0.1", Port: 443, Protocol: "tcp"},
	}
}

// nodePortServices are the Services of the NodePort recordings, with the ClusterIPs of web,
// dns, np-cluster, np-local and np-local-remote in one of the two clusters.
func nodePortServices(ips [5]string) []Service {
	np := func(name, ip string, nodePort int, local bool, eps []Endpoint) Service {
		return Service{Namespace: "cnbrec", Name: name, PortName: "http", ClusterIP: ip, Port: 80, Protocol: "tcp",
			Endpoints: eps, NodePort: nodePort, ExternalLocal: local}
	}
	return append(realServices(ips[0], ips[1]),
		np("np-cluster", ips[2], 30080, false, recordedPods),
		np("np-local", ips[3], 30081, true, recordedPods),
		np("np-local-remote", ips[4], 30082, true, recordedPods[1:]))
}

// Objects of kube-proxy's dumps the lab does not render, and why. A rule of the dump that
// names one of them is left out of the comparison too.
const (
	whyLoadBalancer = "LoadBalancerSourceRanges: the lab has no load balancers"
	whyNodePortsOff = "the lab declares NodePort objects only when a Service has a NodePort (kube-proxy always, empty: checked)"
	whyCanary       = "canary chains tell kube-proxy and the kubelet that someone flushed the table; the lab owns its namespaces"
)

var (
	nftLoadBalancerObjects = map[string]string{"map firewall-ips": whyLoadBalancer, "chain firewall-check": whyLoadBalancer,
		"chain filter-prerouting-pre-dnat": whyLoadBalancer, "chain filter-output-pre-dnat": whyLoadBalancer}
	nftNodePortObjects = map[string]string{"set nodeport-ips": whyNodePortsOff, "map service-nodeports": whyNodePortsOff,
		"map no-endpoint-nodeports": whyNodePortsOff, "chain nodeport-endpoints-check": whyNodePortsOff}
	iptCanaries = map[string]string{"KUBE-KUBELET-CANARY": whyCanary, "KUBE-PROXY-CANARY": whyCanary}
	// The filter table: the lab renders KUBE-EXTERNAL-SERVICES only.
	iptFilterNotRendered = map[string]string{
		"KUBE-SERVICES": "kube-proxy rejects the ClusterIPs of Services without endpoints there; the lab's iptables " +
			"rendering never did (they time out) and keeps ClusterIP-only renderings as they were",
		"KUBE-FORWARD": "accepts forwarded Service traffic on hosts whose FORWARD policy is DROP (and drops INVALID " +
			"through nfacct); lab nodes forward by default",
		"KUBE-FIREWALL":       "the kubelet's guard against martian 127.0.0.0/8 traffic under route_localnet, which the lab never sets",
		"KUBE-PROXY-FIREWALL": whyLoadBalancer,
		"KUBE-NODEPORTS":      "accepts health check NodePorts of LoadBalancer Services; the lab has none",
	}
)

func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// nftObjects splits `nft list table` output into its objects ("chain NAME", "set NAME",
// "map NAME", "table" for the table's own lines), each a list of lines; the elements of a
// set or map become one sorted "element X" line each, however nft wrapped them.
func nftObjects(text string) map[string][]string {
	objs := map[string][]string{}
	cur := "table"
	var elems string
	inElems := false
	for _, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		switch {
		case l == "" || strings.HasPrefix(l, "table "):
			continue
		case inElems:
			elems += " " + l
		case strings.HasPrefix(l, "elements = {"):
			elems, inElems = strings.TrimPrefix(l, "elements = {"), true
		case l == "}":
			cur = "table"
			continue
		case strings.HasSuffix(l, "{") && (strings.HasPrefix(l, "chain ") || strings.HasPrefix(l, "set ") || strings.HasPrefix(l, "map ")):
			cur = strings.TrimSpace(strings.TrimSuffix(l, "{"))
			objs[cur] = []string{}
			continue
		default:
			objs[cur] = append(objs[cur], l)
		}
		if inElems && strings.HasSuffix(l, "}") {
			inElems = false
			var es []string
			for _, e := range strings.Split(strings.TrimSuffix(strings.TrimSpace(elems), "}"), ",") {
				if e = strings.TrimSpace(e); e != "" {
					es = append(es, "element "+e)
				}
			}
			slices.Sort(es)
			objs[cur] = append(objs[cur], es...)
		}
	}
	return objs
}

// compareDump compares what the kernel lists of this package's rendering (mine) with
// kube-proxy's dump (theirs), object by object, but for the objects in except (each with
// why, and each in the dump) and the rules of the dump naming one of them. canon puts an
// object's lines in a form to compare.
func compareDump(t *testing.T, mine, theirs map[string][]string, except map[string]string, canon func(name string, lines []string) []string) {
	t.Helper()
	var refs []*regexp.Regexp
	for name, why := range except {
		if _, ok := theirs[name]; !ok {
			t.Errorf("exception for %s (%s), which kube-proxy's dump does not have", name, why)
		}
		bare := name[strings.LastIndex(name, " ")+1:]
		refs = append(refs, regexp.MustCompile(`(^|[\s@])`+regexp.QuoteMeta(bare)+`(\s|$)`))
	}
	refers := func(line string) bool {
		return slices.ContainsFunc(refs, func(re *regexp.Regexp) bool { return re.MatchString(line) })
	}
	for name, lines := range theirs {
		if _, ok := except[name]; ok {
			continue
		}
		ours, ok := mine[name]
		if !ok {
			t.Errorf("kube-proxy has %s, this rendering not", name)
			continue
		}
		var kept []string
		for _, l := range lines {
			if !refers(l) {
				kept = append(kept, l)
			}
		}
		if a, b := canon(name, ours), canon(name, kept); !slices.Equal(a, b) {
			t.Errorf("%s differs:\nours:\n\t%s\nkube-proxy:\n\t%s", name, strings.Join(a, "\n\t"), strings.Join(b, "\n\t"))
		}
	}
	for name := range mine {
		if _, ok := theirs[name]; !ok {
			t.Errorf("this rendering has %s, kube-proxy not", name)
		}
	}
}

// asListed compares lines in the order listed.
func asListed(_ string, lines []string) []string { return lines }

// perService puts the iptables chains that hold one rule per Service in a canonical order:
// kube-proxy writes those rules in the iteration order of a Go map (node0's and node1's
// dumps differ), so they are compared as a set; kube-proxy's jump to KUBE-NODEPORTS, which
// must be the last rule of KUBE-SERVICES, stays last.
func perService(name string, lines []string) []string {
	if name != "KUBE-SERVICES" && name != nodePortsChain && name != extServicesChain {
		return lines
	}
	out := slices.Clone(lines)
	from, to := 0, len(out)
	if to > 0 && strings.HasPrefix(out[0], ":") {
		from = 1
	}
	if to > from && strings.Contains(out[to-1], "NOTE: this must be the last rule in this chain") {
		to--
	}
	slices.Sort(out[from:to])
	return out
}

func readDump(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/real/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// listNFT applies an nftables rendering in a scratch namespace and returns the table's
// objects as the kernel lists them.
func listNFT(t *testing.T, in []byte) map[string][]string {
	t.Helper()
	ns := scratchNS(t)
	if err := ApplyNFTables(ns, in); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("nsenter", "--net="+ns, "nft", "list", "table", "ip", NFTable).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, got)
	}
	return nftObjects(string(got))
}

func TestNFTablesMatchesKubeProxy(t *testing.T) {
	theirs := nftObjects(readDump(t, "kube-proxy-nftables.txt"))
	in, _ := RenderNFTables(realServices("10.96.76.206", "10.96.91.42"), Options{ClusterCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16"})
	mine := listNFT(t, in)
	for _, m := range []string{"map service-nodeports", "map no-endpoint-nodeports"} {
		if slices.ContainsFunc(theirs[m], func(l string) bool { return strings.HasPrefix(l, "element ") }) {
			t.Errorf("kube-proxy's %s has elements: the exception %q does not hold", m, whyNodePortsOff)
		}
	}
	compareDump(t, mine, theirs, merged(nftLoadBalancerObjects, nftNodePortObjects), asListed)
	if len(mine) < 15 {
		t.Errorf("only %d objects compared", len(mine))
	}
}

// TestNFTablesNodePortsMatchKubeProxy compares the rendering of the NodePort recordings for
// node0 and node1 with kube-proxy's table on each. NFTMod1Maps: kube-proxy 1.34 dispatches
// single endpoints through "numgen random mod 1" maps.
func TestNFTablesNodePortsMatchKubeProxy(t *testing.T) {
	svcs := nodePortServices([5]string{"10.96.101.127", "10.96.176.197", "10.96.118.201", "10.96.64.200", "10.96.243.210"})
	for _, n := range recordedNodes {
		t.Run(n.name, func(t *testing.T) {
			theirs := nftObjects(readDump(t, "kube-proxy-nftables-nodeport"+n.dump+".txt"))
			in, _ := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16",
				NodeName: n.name, NodeIPs: []string{n.ip}, NFTMod1Maps: true})
			mine := listNFT(t, in)
			compareDump(t, mine, theirs, nftLoadBalancerObjects, asListed)
			if len(mine) < 30 {
				t.Errorf("only %d objects compared", len(mine))
			}
		})
	}
}

// iptablesByChain groups `iptables-save` output of one table by chain: the declaration and
// the rules in order, for the KUBE- chains and the hooks in the built-in ones.
func iptablesByChain(text string) map[string][]string {
	chains := map[string][]string{}
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, ":"):
			name := strings.Fields(l[1:])[0]
			chains[name] = append(chains[name], l)
		case strings.HasPrefix(l, "-A "):
			name := strings.Fields(l)[1]
			chains[name] = append(chains[name], l)
		}
	}
	return chains
}

// listIPTables applies an iptables rendering (iptables-nft, as on the recording cluster) in
// a scratch namespace and returns the chains of each table it names.
func listIPTables(t *testing.T, in []byte, tables ...string) map[string]map[string][]string {
	t.Helper()
	ns := scratchNS(t)
	if err := ApplyIPTables(ns, "nft", "", in); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	for _, table := range tables {
		got, err := exec.Command("nsenter", "--net="+ns, "iptables-save", "-t", table).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables-save -t %s: %v: %s", table, err, got)
		}
		out[table] = iptablesByChain(string(got))
	}
	return out
}

func TestIPTablesMatchesKubeProxy(t *testing.T) {
	theirs := iptablesByChain(readDump(t, "kube-proxy-iptables.txt"))
	in, _ := RenderIPTables(realServices("10.96.213.195", "10.96.208.111"), Options{ClusterCIDR: "10.244.0.0/16"})
	mine := listIPTables(t, in, "nat")["nat"]
	if len(theirs[nodePortsChain]) != 1 {
		t.Errorf("kube-proxy's %s has rules: the exception %q does not hold", nodePortsChain, whyNodePortsOff)
	}
	compareDump(t, mine, theirs, merged(iptCanaries, map[string]string{nodePortsChain: whyNodePortsOff}), perService)
}

// TestIPTablesNodePortsMatchKubeProxy compares the rendering of the NodePort recordings for
// node0 and node1 with kube-proxy's nat table on each, and node0's filter table (the only
// one recorded: there np-local-remote has no local endpoint and is dropped).
func TestIPTablesNodePortsMatchKubeProxy(t *testing.T) {
	svcs := nodePortServices([5]string{"10.96.174.58", "10.96.110.159", "10.96.10.193", "10.96.88.191", "10.96.202.248"})
	for _, n := range recordedNodes {
		t.Run(n.name, func(t *testing.T) {
			in, _ := RenderIPTables(svcs, Options{ClusterCIDR: "10.244.0.0/16", NodeName: n.name, NodeIPs: []string{n.ip}})
			mine := listIPTables(t, in, "nat", "filter")
			compareDump(t, mine["nat"], iptablesByChain(readDump(t, "kube-proxy-iptables-nodeport"+n.dump+".txt")), iptCanaries, perService)
			if n.dump == "" {
				compareDump(t, mine["filter"], iptablesByChain(readDump(t, "kube-proxy-iptables-filter-nodeport.txt")),
					merged(iptCanaries, iptFilterNotRendered), perService)
				return
			}
			// Every Local Service has an endpoint on node1: nothing to drop (kube-proxy's
			// filter table there was not recorded).
			if got := mine["filter"][extServicesChain]; len(got) != 1 {
				t.Errorf("%s on %s: %v, want no rules", extServicesChain, n.name, got)
			}
		})
	}
}
