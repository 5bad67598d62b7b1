package proxy

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The dumps in testdata/real were taken from kube-proxy v1.34.10 on this project's harness
// cluster (see testdata/real/README.md): Service cnbrec/web (port "http" 80/TCP -> 8080, two
// endpoints), cnbrec/dns (port "dns" 53/UDP, no endpoints) and default/kubernetes (port
// "https" 443/TCP, no endpoints there). The tests below program the same Services with this
// package into a scratch namespace and compare what the kernel then lists with kube-proxy's
// dump, object by object. Features this package does not render (NodePorts, load-balancer
// firewalls, the canary chains) are left out of the comparison by name.

func realServices(webIP, dnsIP string) []Service {
	return []Service{
		{Namespace: "cnbrec", Name: "web", PortName: "http", ClusterIP: webIP, Port: 80, Protocol: "tcp",
			Endpoints: []Endpoint{{"10.244.0.2", 8080}, {"10.244.1.2", 8080}}},
		{Namespace: "cnbrec", Name: "dns", PortName: "dns", ClusterIP: dnsIP, Port: 53, Protocol: "udp"},
		{Namespace: "default", Name: "kubernetes", PortName: "https", ClusterIP: "10.96.0.1", Port: 443, Protocol: "tcp"},
	}
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

// notRendered says whether an object of kube-proxy's dump is a feature this package leaves
// out (NodePorts, load-balancer source ranges and their pre-DNAT filter chains).
func notRendered(object string) bool {
	for _, f := range []string{"nodeport", "firewall", "pre-dnat"} {
		if strings.Contains(object, f) {
			return true
		}
	}
	return false
}

// refersNotRendered says whether a rule of kube-proxy's dump uses such an object.
func refersNotRendered(rule string) bool {
	for _, f := range []string{"@nodeport-ips", "nodeport-endpoints-check", "@service-nodeports", "firewall-check"} {
		if strings.Contains(rule, f) {
			return true
		}
	}
	return false
}

func TestNFTablesMatchesKubeProxy(t *testing.T) {
	want, err := os.ReadFile("testdata/real/kube-proxy-nftables.txt")
	if err != nil {
		t.Fatal(err)
	}
	ns := scratchNS(t)
	in, _ := RenderNFTables(realServices("10.96.76.206", "10.96.91.42"), Options{ClusterCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16"})
	if err := ApplyNFTables(ns, in); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("nsenter", "--net="+ns, "nft", "list", "table", "ip", NFTable).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, got)
	}
	mine, theirs := nftObjects(string(got)), nftObjects(string(want))
	for name, lines := range theirs {
		if notRendered(name) {
			continue
		}
		ours, ok := mine[name]
		if !ok {
			t.Errorf("kube-proxy has %s, this rendering not", name)
			continue
		}
		var kept []string
		for _, l := range lines {
			if !refersNotRendered(l) {
				kept = append(kept, l)
			}
		}
		if !slices.Equal(ours, kept) {
			t.Errorf("%s differs:\nours:\n\t%s\nkube-proxy:\n\t%s", name, strings.Join(ours, "\n\t"), strings.Join(kept, "\n\t"))
		}
	}
	for name := range mine {
		if _, ok := theirs[name]; !ok {
			t.Errorf("this rendering has %s, kube-proxy not", name)
		}
	}
	if len(mine) < 15 {
		t.Errorf("only %d objects compared", len(mine))
	}
}

// iptablesChains groups `iptables-save -t nat` output by chain: the declaration and the
// rules in order, for the KUBE- chains and the hooks in the built-in ones.
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

func TestIPTablesMatchesKubeProxy(t *testing.T) {
	want, err := os.ReadFile("testdata/real/kube-proxy-iptables.txt")
	if err != nil {
		t.Fatal(err)
	}
	ns := scratchNS(t)
	in, _ := RenderIPTables(realServices("10.96.213.195", "10.96.208.111"), Options{ClusterCIDR: "10.244.0.0/16"})
	if err := ApplyIPTables(ns, "nft", in); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("nsenter", "--net="+ns, "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v: %s", err, got)
	}
	mine, theirs := iptablesByChain(string(got)), iptablesByChain(string(want))
	skip := func(s string) bool { return strings.Contains(s, "NODEPORTS") || strings.Contains(s, "CANARY") }
	for name, lines := range theirs {
		if skip(name) {
			continue
		}
		var kept []string
		for _, l := range lines {
			if !skip(l) {
				kept = append(kept, l)
			}
		}
		if ours := mine[name]; !slices.Equal(ours, kept) {
			t.Errorf("chain %s differs:\nours:\n\t%s\nkube-proxy:\n\t%s", name, strings.Join(ours, "\n\t"), strings.Join(kept, "\n\t"))
		}
	}
	for name := range mine {
		if _, ok := theirs[name]; !ok {
			t.Errorf("this rendering has chain %s, kube-proxy not", name)
		}
	}
}
