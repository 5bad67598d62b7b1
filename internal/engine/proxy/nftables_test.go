package proxy

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Chain names must be kube-proxy's. The expected names are copied from kube-proxy's own test
// expectations: kubernetes/kubernetes pkg/proxy/nftables/proxier_test.go,
// TestOverallNFTablesRules (commit 030880a5dc5449403c6d1f0aa146a7dc21d6c6dc), whose
// services ns1/svc1 .. ns5/svc5 have a port "p80" and endpoints 10.180.0.x:80.
func TestNFTChainNamesMatchKubeProxy(t *testing.T) {
	for _, c := range []struct {
		ns, name, ip, svcChain, epChain string
	}{
		{"ns1", "svc1", "10.180.0.1", "service-ULMVA6XW-ns1/svc1/tcp/p80", "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"},
		{"ns2", "svc2", "10.180.0.2", "service-42NFTM6N-ns2/svc2/tcp/p80", "endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80"},
		{"ns3", "svc3", "10.180.0.3", "service-4AT6LBPK-ns3/svc3/tcp/p80", "endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80"},
		{"ns4", "svc4", "10.180.0.4", "service-LAUZTJTB-ns4/svc4/tcp/p80", "endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80"},
		{"ns4", "svc4", "10.180.0.5", "service-LAUZTJTB-ns4/svc4/tcp/p80", "endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80"},
		{"ns5", "svc5", "10.180.0.3", "service-HVFWP5L3-ns5/svc5/tcp/p80", "endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"},
	} {
		s := Service{Namespace: c.ns, Name: c.name, PortName: "p80", Protocol: "tcp", Port: 80}
		if got := s.NFTServiceChain(); got != c.svcChain {
			t.Errorf("service chain of %s: %s, want %s", s.PortKey(), got, c.svcChain)
		}
		if got := s.NFTEndpointChain(Endpoint{IP: c.ip, Port: 80}); got != c.epChain {
			t.Errorf("endpoint chain of %s -> %s: %s, want %s", s.PortKey(), c.ip, got, c.epChain)
		}
	}
	// The hash covers the readable part, so the protocol changes it (kube-proxy differs from
	// the iptables mode here: there the name is only the hash).
	tcp := Service{Namespace: "ns1", Name: "svc1", PortName: "p80", Protocol: "tcp"}
	udp := tcp
	udp.Protocol = "udp"
	if a, b := tcp.NFTServiceChain(), udp.NFTServiceChain(); a[len("service-"):][:8] == b[len("service-"):][:8] {
		t.Errorf("tcp and udp chains share a hash: %s %s", a, b)
	}
	// A name longer than kube-proxy's 240-character base is cut and marked.
	long := Service{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63), PortName: strings.Repeat("p", 63), Protocol: "tcp"}
	ep := long.NFTEndpointChain(Endpoint{IP: "2001:db8::1234:5678:9abc:def0:1234", Port: 65535})
	if len(ep) != len("endpoint-")+240 || !strings.HasSuffix(ep, "...") || strings.Contains(ep, ":") {
		t.Errorf("long endpoint chain name (%d chars): %s", len(ep), ep)
	}
}

func nftTestServices() []Service {
	return []Service{
		{Namespace: "cnb", Name: "server", ClusterIP: "10.96.0.10", Port: 5201, Protocol: "tcp",
			Endpoints: []Endpoint{{IP: "10.244.1.3", Port: 5201}, {IP: "10.244.0.7", Port: 5201}, {IP: "10.244.1.9", Port: 5201}}},
		{Namespace: "cnb", Name: "dns", PortName: "dns", ClusterIP: "10.96.0.12", Port: 53, Protocol: "udp",
			Endpoints: []Endpoint{{IP: "10.244.0.8", Port: 5353}}},
		{Namespace: "cnb", Name: "empty", PortName: "http", ClusterIP: "10.96.0.11", Port: 80, Protocol: "tcp"},
	}
}

func TestRenderNFTables(t *testing.T) {
	svcs := nftTestServices()
	out, cnt := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16"})
	s := string(out)
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	// Atomic replacement: the whole table is dropped and rebuilt in the same batch.
	if lines[0] != `add table ip kube-proxy { comment "rules for kube-proxy" ; }` || lines[1] != "delete table ip kube-proxy" ||
		!strings.HasPrefix(lines[2], "add table ip kube-proxy") {
		t.Errorf("does not start by replacing the table:\n%s", strings.Join(lines[:3], "\n"))
	}
	if strings.Count(s, "delete ") != 1 || strings.Contains(s, "flush ") {
		t.Errorf("only the table itself may be deleted, nothing flushed")
	}
	svc := svcs[0].NFTServiceChain()
	ep := func(s Service, ip string, port int) string { return s.NFTEndpointChain(Endpoint{IP: ip, Port: port}) }
	for _, want := range []string{
		"add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ;",
		"add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }",
		"add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }",
		"add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }",
		"add rule ip kube-proxy nat-prerouting jump services\n",
		"add rule ip kube-proxy nat-output jump services\n",
		"add rule ip kube-proxy nat-postrouting jump masquerading\n",
		"add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips\n",
		"add rule ip kube-proxy mark-for-masquerade mark set mark or 0x4000\n",
		"add rule ip kube-proxy masquerading mark and 0x4000 == 0 return\n",
		"add rule ip kube-proxy masquerading mark set mark xor 0x4000\n",
		"add rule ip kube-proxy masquerading masquerade fully-random\n",
		"add chain ip kube-proxy " + svc + "\n",
		"add rule ip kube-proxy " + svc + " ip daddr 10.96.0.10 ip saddr != 10.244.0.0/16 jump mark-for-masquerade\n",
		// N endpoints: numgen mod N, in address order.
		"add rule ip kube-proxy " + svc + " numgen random mod 3 vmap { 0 : goto " + ep(svcs[0], "10.244.0.7", 5201) +
			", 1 : goto " + ep(svcs[0], "10.244.1.3", 5201) + ", 2 : goto " + ep(svcs[0], "10.244.1.9", 5201) + " }\n",
		"add rule ip kube-proxy " + ep(svcs[0], "10.244.1.9", 5201) + " ip saddr 10.244.1.9 jump mark-for-masquerade\n",
		"add rule ip kube-proxy " + ep(svcs[0], "10.244.1.9", 5201) + " meta l4proto tcp dnat to 10.244.1.9:5201\n",
		"add rule ip kube-proxy " + svcs[1].NFTServiceChain() + " ip daddr 10.96.0.12 ip saddr != 10.244.0.0/16 jump mark-for-masquerade\n",
		// One endpoint: a plain goto, as kube-proxy 1.37+ does (no anonymous map).
		"add rule ip kube-proxy " + svcs[1].NFTServiceChain() + " goto " + ep(svcs[1], "10.244.0.8", 5353) + "\n",
		"add rule ip kube-proxy " + ep(svcs[1], "10.244.0.8", 5353) + " meta l4proto udp dnat to 10.244.0.8:5353\n",
		// Sorted by port key: cnb/dns:dns, cnb/empty:http, cnb/server.
		"add element ip kube-proxy cluster-ips { 10.96.0.12, 10.96.0.11, 10.96.0.10 }\n",
		"add element ip kube-proxy service-ips { 10.96.0.12 . udp . 53 : goto " + svcs[1].NFTServiceChain() + ", 10.96.0.10 . tcp . 5201 : goto " + svc + " }\n",
		// No endpoints: no chain, rejected through the no-endpoint map (as kube-proxy does).
		`add element ip kube-proxy no-endpoint-services { 10.96.0.11 . tcp . 80 comment "cnb/empty:http" : goto reject-chain }` + "\n",
		"add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services\n",
		"add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check\n",
		"add rule ip kube-proxy filter-output ct state new jump service-endpoints-check\n",
		"add rule ip kube-proxy reject-chain reject\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(s, svcs[2].NFTServiceChain()) || strings.Contains(s, "ip daddr 10.96.0.11 ") {
		t.Error("a Service without endpoints got a chain or rules")
	}
	// Every chain a rule or a verdict names is declared before it is used.
	declared := map[string]bool{}
	for _, n := range cnt.Names {
		declared[n] = true
	}
	ref := regexp.MustCompile(`(?:goto|jump) ([A-Za-z0-9_./-]+)`)
	seen := map[string]bool{}
	for i, l := range lines {
		if f := strings.Fields(l); len(f) >= 5 && f[0] == "add" && f[1] == "chain" {
			seen[f[4]] = true
		}
		for _, m := range ref.FindAllStringSubmatch(l, -1) {
			if !declared[m[1]] || !seen[m[1]] {
				t.Errorf("line %d names chain %s before declaring it (declared at all: %v)", i+1, m[1], declared[m[1]])
			}
		}
	}
	// 6 base + 6 helper chains; 1+3 chains for server, 1+1 for dns.
	// Rules: 16 base; server: masq + numgen + 3*2; dns: masq + numgen + 2.
	if cnt.Services != 3 || cnt.Endpoints != 4 || cnt.Chains != 12+4+2 || cnt.Rules != 16+8+4 || cnt.Elements != 3+2+1 || len(cnt.Names) != cnt.Chains {
		t.Errorf("counts %+v", cnt)
	}
	if n := strings.Count(s, "\nadd rule "); n != cnt.Rules {
		t.Errorf("%d rules in the text, counts say %d", n, cnt.Rules)
	}
	if n := strings.Count(s, "\nadd chain "); n != cnt.Chains {
		t.Errorf("%d chains in the text, counts say %d", n, cnt.Chains)
	}
	rev := []Service{svcs[2], svcs[1], svcs[0]}
	rev[2].Endpoints = []Endpoint{svcs[0].Endpoints[2], svcs[0].Endpoints[0], svcs[0].Endpoints[1]}
	if again, _ := RenderNFTables(rev, Options{ClusterCIDR: "10.244.0.0/16"}); string(again) != s {
		t.Error("rendering depends on input order")
	}
	// Without a cluster CIDR there is no off-cluster masquerade rule; hairpin marking stays.
	plain, _ := RenderNFTables(svcs, Options{})
	if strings.Contains(string(plain), "ip saddr !=") || !strings.Contains(string(plain), "ip saddr 10.244.1.9 jump mark-for-masquerade") {
		t.Error("masquerade rules without a cluster CIDR")
	}
	// kube-proxy up to 1.36: a numgen map even for one endpoint.
	mod1, mcnt := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16", NFTMod1Maps: true})
	if !strings.Contains(string(mod1), "add rule ip kube-proxy "+svcs[1].NFTServiceChain()+" numgen random mod 1 vmap { 0 : goto "+ep(svcs[1], "10.244.0.8", 5353)+" }\n") ||
		strings.Count(string(mod1), "numgen random mod") != 2 || mcnt.Rules != cnt.Rules {
		t.Errorf("NFTMod1Maps: no mod 1 map or wrong counts (%+v)", mcnt)
	}
	if strings.Count(s, "numgen random mod") != 1 {
		t.Errorf("want one numgen map (the 3-endpoint Service) without NFTMod1Maps")
	}
	// Stale chains need no handling: the table is rebuilt whole.
	gone, _ := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16", Stale: []string{"service-GONEGONE-x/y/tcp/"}})
	if string(gone) != s {
		t.Error("Stale changed the nftables rendering")
	}
}

// Many elements are split over several "add element" commands.
func TestRenderNFTablesElementBatches(t *testing.T) {
	var svcs []Service
	for i := 0; i < 2500; i++ {
		svcs = append(svcs, Service{Namespace: "cnb", Name: fmt.Sprintf("s%05d", i), ClusterIP: fmt.Sprintf("10.96.%d.%d", i/256, i%256),
			Port: 80, Protocol: "tcp", Endpoints: []Endpoint{{IP: fmt.Sprintf("10.244.%d.%d", i/256, i%256), Port: 80}}})
	}
	out, cnt := RenderNFTables(svcs, Options{})
	if n := strings.Count(string(out), "add element ip kube-proxy service-ips {"); n != 3 {
		t.Errorf("%d service-ips element commands, want 3", n)
	}
	if cnt.Elements != 5000 || cnt.Chains != 12+5000 || cnt.Services != 2500 || cnt.Endpoints != 2500 {
		t.Errorf("counts %+v", cnt)
	}
}

var scratchSeq int

// scratchNS creates a network namespace for a root test and deletes it at the end.
func scratchNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	scratchSeq++
	name := fmt.Sprintf("cnbtq%04d-unit%d", os.Getpid()%10000, scratchSeq)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return "/run/netns/" + name
}

func nftChains(t *testing.T, nsPath string) []string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+nsPath, "nft", "list", "chains", "ip").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list chains: %v: %s", err, out)
	}
	var names []string
	for _, m := range regexp.MustCompile(`chain (\S+) \{`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	return names
}

// The rendering is accepted by the kernel, re-applying it is idempotent, applying a smaller
// one leaves nothing of the bigger one, and a broken input changes nothing.
func TestApplyNFTablesReplaces(t *testing.T) {
	ns := scratchNS(t)
	svcs := nftTestServices()
	full, cnt := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16"})
	for i := 0; i < 2; i++ {
		if err := ApplyNFTables(ns, full); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	if got := nftChains(t, ns); len(got) != cnt.Chains {
		t.Errorf("%d chains installed, want %d: %v", len(got), cnt.Chains, got)
	}
	mod1, _ := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16", NFTMod1Maps: true})
	if err := ApplyNFTables(ns, mod1); err != nil {
		t.Fatalf("apply with mod 1 maps: %v", err)
	}
	small, scnt := RenderNFTables(svcs[2:], Options{ClusterCIDR: "10.244.0.0/16"})
	if err := ApplyNFTables(ns, small); err != nil {
		t.Fatal(err)
	}
	got := nftChains(t, ns)
	if len(got) != scnt.Chains {
		t.Errorf("%d chains after shrinking, want %d: %v", len(got), scnt.Chains, got)
	}
	for _, c := range got {
		if strings.Contains(c, "/") {
			t.Errorf("stale Service chain %s survived", c)
		}
	}
	elems, _ := exec.Command("nsenter", "--net="+ns, "nft", "list", "map", "ip", "kube-proxy", "service-ips").CombinedOutput()
	if strings.Contains(string(elems), "10.96.0.10") {
		t.Errorf("stale map element survived:\n%s", elems)
	}
	// A failing batch is rolled back whole: the previous ruleset stays.
	bad := append(append([]byte(nil), full...), "add rule ip kube-proxy no-such-chain accept\n"...)
	if err := ApplyNFTables(ns, bad); err == nil {
		t.Error("a broken input was accepted")
	}
	if got := nftChains(t, ns); len(got) != scnt.Chains {
		t.Errorf("a failed apply changed the ruleset: %d chains, want %d", len(got), scnt.Chains)
	}
	if err := ApplyNFTables(ns, DeleteNFTables()); err != nil {
		t.Fatal(err)
	}
	if got := nftChains(t, ns); len(got) != 0 {
		t.Errorf("chains left after delete: %v", got)
	}
	if err := ApplyNFTables(ns, DeleteNFTables()); err != nil {
		t.Errorf("deleting an absent table: %v", err)
	}
}

// DeleteNFTables is the `nft -f` input that removes kube-proxy's table (and with it every
// chain, rule, set and map it holds), and does nothing if the table does not exist. Only
// tests clear the table: the lab replaces it, and deletes the namespace at the end.
func DeleteNFTables() []byte {
	return []byte("add table ip " + NFTable + "\ndelete table ip " + NFTable + "\n")
}

// The NodePort objects: counted, in the text as declared, and a NodePort Service without
// endpoints rejected (the recorded dumps have none).
func TestRenderNFTablesNodePorts(t *testing.T) {
	svcs := nodePortServices([5]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14"})
	svcs = append(svcs, Service{Namespace: "cnb", Name: "empty", ClusterIP: "10.96.0.15", Port: 80, Protocol: "tcp", NodePort: 30009})
	out, cnt := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16", NodeName: "node0", NodeIPs: []string{"172.30.0.10", "10.244.0.1"}})
	s := string(out)
	for _, want := range []string{
		"add element ip kube-proxy nodeport-ips { 172.30.0.10, 10.244.0.1 }\n",
		`add element ip kube-proxy no-endpoint-nodeports { tcp . 30009 comment "cnb/empty" : goto reject-chain, tcp . 30082 comment "cnbrec/np-local-remote:http" : drop }` + "\n",
		"add rule ip kube-proxy filter-input ct state new jump nodeport-endpoints-check\n",
		"add rule ip kube-proxy " + svcs[4].NFTExternalChain() + " goto " + svcs[4].NFTLocalChain() + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, svcs[5].NFTLocalChain()) || strings.Contains(s, svcs[6].NFTExternalChain()) {
		t.Error("a local chain without local endpoints, or an external chain without endpoints")
	}
	// 12 base + nodeport-endpoints-check; web 3, np-cluster 4, np-local 5, np-local-remote 3.
	// Rules: 16 base + 3 NodePort; web 6, np-cluster 6+2 (external), np-local 6+4+1 (local),
	// np-local-remote 4+3. Elements: 7 ClusterIPs, 4 service-ips, 3 no-endpoint-services,
	// 2 nodeport-ips, 3 service-nodeports, 2 no-endpoint-nodeports.
	if cnt.Services != 7 || cnt.Endpoints != 7 || cnt.Chains != 13+15 || cnt.Rules != 19+6+8+11+7 || cnt.Elements != 7+4+3+2+3+2 {
		t.Errorf("counts %+v", cnt)
	}
	if n := strings.Count(s, "\nadd rule "); n != cnt.Rules {
		t.Errorf("%d rules in the text, counts say %d", n, cnt.Rules)
	}
	if n := strings.Count(s, "\nadd chain "); n != cnt.Chains {
		t.Errorf("%d chains in the text, counts say %d", n, cnt.Chains)
	}
	if err := ApplyNFTables(scratchNS(t), out); err != nil {
		t.Errorf("the kernel refuses it: %v", err)
	}
}
