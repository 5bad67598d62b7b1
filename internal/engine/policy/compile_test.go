package policy

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every documentation scenario, compiled with every pod local, decides as the docs say.
func TestCompileScenarios(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			prog, err := Compile(sc.pods, sc.nss, sc.pols)
			if err != nil {
				t.Fatal(err)
			}
			if err := prog.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			ev := prog.Evaluator()
			for _, fw := range sc.flows {
				if got := ev.Allows(fw.f); got != fw.want {
					t.Errorf("%s: Allows = %v, want %v (%s)", flowString(fw.f), got, fw.want, fw.why)
				}
			}
		})
	}
}

func findPolicy(t *testing.T, p *Program, ns, name string) *PolicyChain {
	t.Helper()
	for i := range p.Policies {
		if p.Policies[i].Namespace == ns && p.Policies[i].Policy == name {
			return &p.Policies[i]
		}
	}
	t.Fatalf("policy %s/%s not in the program", ns, name)
	return nil
}

func findSet(t *testing.T, p *Program, name string) *Set {
	t.Helper()
	for i := range p.Sets {
		if p.Sets[i].Name == name {
			return &p.Sets[i]
		}
	}
	t.Fatalf("set %s not in the program", name)
	return nil
}

func TestCompileNames(t *testing.T) {
	pods, nss := docsCluster()
	pol := scenarios()[0].pols // the docs example
	prog, err := Compile(pods, nss, pol)
	if err != nil {
		t.Fatal(err)
	}
	pc := findPolicy(t, prog, "default", "test-network-policy")
	if pc.Name != PolicyChainName("default", "test-network-policy") || len(pc.Name) != 28 || !strings.HasPrefix(pc.Name, "KUBE-NWPLCY-") {
		t.Errorf("policy chain name %q", pc.Name)
	}
	// The hash covers namespace/name: another namespace gives another chain.
	if PolicyChainName("default", "x") == PolicyChainName("other", "x") {
		t.Error("policy chain name ignores the namespace")
	}
	if len(prog.Pods) != 1 || prog.Pods[0].Pod != "default/db" || prog.Pods[0].IP != ipDB ||
		prog.Pods[0].Chain != PodChainName("default", "db") || len(prog.Pods[0].Chain) != 28 ||
		!strings.HasPrefix(prog.Pods[0].Chain, "KUBE-POD-FW-") {
		t.Fatalf("pods = %+v", prog.Pods)
	}
	if !reflect.DeepEqual(prog.Pods[0].IngressOf, []string{pc.Name}) || !reflect.DeepEqual(prog.Pods[0].EgressOf, []string{pc.Name}) {
		t.Errorf("db firewall = %+v", prog.Pods[0])
	}
	for _, s := range prog.Sets {
		if len(s.Name) != 25 || !(strings.HasPrefix(s.Name, "KUBE-SRC-") || strings.HasPrefix(s.Name, "KUBE-DST-")) {
			t.Errorf("set name %q", s.Name)
		}
	}
	// Ingress: one rule, peers = the merged selector set, then the ipBlock; one TCP port.
	if len(pc.Ingress) != 1 || len(pc.Ingress[0].Peers) != 2 || len(pc.Egress) != 1 {
		t.Fatalf("chain = %+v", pc)
	}
	sel := findSet(t, prog, pc.Ingress[0].Peers[0].Set)
	if sel.Kind != SetAddrs || !strings.HasPrefix(sel.Name, SrcSetPrefix) ||
		!reflect.DeepEqual(sel.Members, []Member{{Addr: ipFrontend}, {Addr: ipProj}}) {
		t.Errorf("selector set = %+v", sel)
	}
	blk := findSet(t, prog, pc.Ingress[0].Peers[1].Set)
	if blk.Kind != SetNets || !reflect.DeepEqual(blk.Members, []Member{{Addr: "172.17.0.0/16"}, {Addr: "172.17.1.0/24", Except: true}}) {
		t.Errorf("ipBlock set = %+v", blk)
	}
	if !reflect.DeepEqual(pc.Ingress[0].Ports, []PortMatch{{Protocol: "TCP", Port: 6379, EndPort: 6379}}) {
		t.Errorf("ports = %+v", pc.Ingress[0].Ports)
	}
	eg := findSet(t, prog, pc.Egress[0].Peers[0].Set)
	if !strings.HasPrefix(eg.Name, DstSetPrefix) || eg.Kind != SetNets {
		t.Errorf("egress set = %+v", eg)
	}
}

// 200 policies whose peers select the same two pods share one source set and one destination
// set; a third set appears only when the content differs.
func TestCompileSetDedup(t *testing.T) {
	var pods []Pod
	for i := 0; i < 200; i++ {
		pods = append(pods, pod("default", "p"+itoa(i), "10.9."+itoa(i/250)+"."+itoa(1+i%250), "id", itoa(i)))
	}
	pods = append(pods, pod("default", "c1", "10.9.9.1", "role", "client"), pod("default", "c2", "10.9.9.2", "role", "client"))
	var pols []networkingv1.NetworkPolicy
	for i := 0; i < 200; i++ {
		pols = append(pols, netpol("default", "pol-"+itoa(i), networkingv1.NetworkPolicySpec{
			PodSelector: *ml("id", itoa(i)),
			PolicyTypes: types(ingressT, egressT),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "client"))}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{podPeer(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client"}}}})}}},
		}))
	}
	prog, err := Compile(pods, []Namespace{ns("default")}, pols)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog.Sets) != 2 {
		t.Fatalf("%d sets, want 2 (one SRC, one DST): %+v", len(prog.Sets), prog.Sets)
	}
	src, dst := prog.Sets[0], prog.Sets[1]
	if src.Name[len(SrcSetPrefix):] != dst.Name[len(DstSetPrefix):] {
		t.Errorf("same content, different hashes: %s %s", src.Name, dst.Name)
	}
	if len(prog.Policies) != 200 || len(prog.Pods) != 200 {
		t.Errorf("%d policies, %d pods", len(prog.Policies), len(prog.Pods))
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// Only local pods get a firewall; only the chains they use (and those chains' sets) are in
// the Program; sets still hold every pod of the cluster.
func TestCompileLocalOnly(t *testing.T) {
	pods, nss := docsCluster()
	for i := range pods {
		pods[i].Local = pods[i].Name == "frontend" || pods[i].Name == "stranger"
	}
	pols := []networkingv1.NetworkPolicy{
		netpol("default", "db-in", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{blockPeer("198.51.100.0/24")}}},
		}),
		netpol("default", "frontend-in", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "frontend"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: ml(), PodSelector: ml("role", "frontend")}}}},
		}),
	}
	prog, err := Compile(pods, nss, pols)
	if err != nil {
		t.Fatal(err)
	}
	if err := prog.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(prog.Pods) != 1 || prog.Pods[0].Pod != "default/frontend" {
		t.Fatalf("pods = %+v", prog.Pods)
	}
	if len(prog.Policies) != 1 || prog.Policies[0].Policy != "frontend-in" {
		t.Fatalf("policies = %+v", prog.Policies)
	}
	if len(prog.Sets) != 1 || !reflect.DeepEqual(prog.Sets[0].Members, []Member{{Addr: ipFrontend}, {Addr: ipStranger}}) {
		t.Fatalf("sets = %+v", prog.Sets)
	}
	// This node does not protect db: the flow passes here (db's node would drop it).
	if !prog.Allows(fl(ipOther, ipDB, "TCP", 1)) {
		t.Error("a remote pod's ingress is checked on this node")
	}
	if prog.Allows(fl(ipOther, ipFrontend, "TCP", 1)) || !prog.Allows(fl(ipStranger, ipFrontend, "TCP", 1)) {
		t.Error("frontend's ingress is not enforced as written")
	}
}

func TestCompileIPBlockSets(t *testing.T) {
	pods, nss := docsCluster()
	pols := []networkingv1.NetworkPolicy{netpol("default", "blocks", networkingv1.NetworkPolicySpec{
		PodSelector: *ml("role", "db"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{blockPeer("0.0.0.0/0", "0.0.0.0/1", "192.168.0.0/16")}},
			{From: []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.7/8", "10.1.0.0/16", "10.1.0.0/16")}},
			{From: []networkingv1.NetworkPolicyPeer{blockPeer("2001:db8::/32")}},
			{From: []networkingv1.NetworkPolicyPeer{blockPeer("2001:db8::/32"), blockPeer("203.0.113.0/24")}},
		},
	})}
	prog, err := Compile(pods, nss, pols)
	if err != nil {
		t.Fatal(err)
	}
	if err := prog.Validate(); err != nil {
		t.Fatal(err)
	}
	pc := findPolicy(t, prog, "default", "blocks")
	if len(pc.Ingress) != 3 {
		t.Fatalf("%d ingress rules, want 3 (the IPv6-only rule is dropped): %+v", len(pc.Ingress), pc.Ingress)
	}
	want := [][]Member{
		{{Addr: "0.0.0.0/1", Except: true}, {Addr: "128.0.0.0/1"}, {Addr: "192.168.0.0/16", Except: true}},
		{{Addr: "10.0.0.0/8"}, {Addr: "10.1.0.0/16", Except: true}},
		{{Addr: "203.0.113.0/24"}},
	}
	for i, w := range want {
		if len(pc.Ingress[i].Peers) != 1 {
			t.Fatalf("rule %d peers %+v", i, pc.Ingress[i].Peers)
		}
		if s := findSet(t, prog, pc.Ingress[i].Peers[0].Set); !reflect.DeepEqual(s.Members, w) {
			t.Errorf("rule %d: members %+v, want %+v", i, s.Members, w)
		}
	}
	for _, c := range []struct {
		src  string
		want bool
	}{{"8.8.8.8", false}, {"200.0.0.1", true}, {"192.168.3.3", false}, {"10.2.0.1", true}, {"10.1.0.1", false}, {"203.0.113.9", true}} {
		if got := prog.Allows(fl(c.src, ipDB, "TCP", 80)); got != c.want {
			t.Errorf("from %s: %v, want %v", c.src, got, c.want)
		}
	}
}

func TestCompileNamedPortSets(t *testing.T) {
	sc := scenarios()
	var in, out scenario
	for _, s := range sc {
		switch s.name {
		case "named ports (ingress)":
			in = s
		case "named ports (egress)":
			out = s
		}
	}
	prog, err := Compile(in.pods, in.nss, in.pols)
	if err != nil {
		t.Fatal(err)
	}
	pc := findPolicy(t, prog, "default", "named-in")
	http := findSet(t, prog, pc.Ingress[0].Ports[0].Set)
	if http.Kind != SetAddrPorts || !reflect.DeepEqual(http.Members, []Member{
		{Addr: "10.3.0.1", Protocol: "TCP", Port: 8080}, {Addr: "10.3.0.2", Protocol: "TCP", Port: 80}}) {
		t.Errorf("http set = %+v", http)
	}
	if dns := findSet(t, prog, pc.Ingress[0].Ports[2].Set); len(dns.Members) != 0 {
		t.Errorf("TCP dns resolves to %+v, want nothing (dns is UDP)", dns.Members)
	}

	prog, err = Compile(out.pods, out.nss, out.pols)
	if err != nil {
		t.Fatal(err)
	}
	pc = findPolicy(t, prog, "default", "named-out")
	// Empty "to": every pod of the cluster is a candidate destination.
	if s := findSet(t, prog, pc.Egress[0].Ports[0].Set); len(s.Members) != 3 {
		t.Errorf("egress http to anyone = %+v, want web, web2, api", s.Members)
	}
	if s := findSet(t, prog, pc.Egress[1].Ports[0].Set); !reflect.DeepEqual(s.Members, []Member{{Addr: "10.3.0.1", Protocol: "UDP", Port: 5353}}) {
		t.Errorf("egress dns to web = %+v", s.Members)
	}
}

func TestCompileErrors(t *testing.T) {
	pods, nss := docsCluster()
	spec := func(mod func(*networkingv1.NetworkPolicySpec)) []networkingv1.NetworkPolicy {
		s := networkingv1.NetworkPolicySpec{PodSelector: *ml("role", "db")}
		mod(&s)
		return []networkingv1.NetworkPolicy{netpol("default", "bad", s)}
	}
	in := func(peers []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) func(*networkingv1.NetworkPolicySpec) {
		return func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers, Ports: ports}}
		}
	}
	cases := []struct {
		name string
		pols []networkingv1.NetworkPolicy
		pods []Pod
		want string
	}{
		{"bad selector operator", spec(func(s *networkingv1.NetworkPolicySpec) {
			s.PodSelector = *expr("a", "Near", "b")
		}), nil, "spec.podSelector"},
		{"In without values", spec(in([]networkingv1.NetworkPolicyPeer{podPeer(expr("a", metav1.LabelSelectorOpIn))})), nil, "spec.ingress[0].from[0].podSelector"},
		{"bad label value", spec(in([]networkingv1.NetworkPolicyPeer{nsPeer(ml("a", "not valid!"))})), nil, "spec.ingress[0].from[0].namespaceSelector"},
		{"bad policyType", spec(func(s *networkingv1.NetworkPolicySpec) { s.PolicyTypes = types("Sideways") }), nil, "spec.policyTypes[0]"},
		{"bad protocol", spec(in(nil, networkingv1.NetworkPolicyPort{Protocol: protoPtr("ICMP")})), nil, "spec.ingress[0].ports[0].protocol"},
		{"lowercase protocol", spec(in(nil, networkingv1.NetworkPolicyPort{Protocol: protoPtr("tcp")})), nil, "spec.ingress[0].ports[0].protocol"},
		{"port 0 with endPort", spec(in(nil, networkingv1.NetworkPolicyPort{Port: intPort(0), EndPort: i32(10)})), nil, "spec.ingress[0].ports[0].port"},
		{"port 0", spec(in(nil, networkingv1.NetworkPolicyPort{Port: intPort(0)})), nil, "spec.ingress[0].ports[0].port"},
		{"port too big", spec(in(nil, networkingv1.NetworkPolicyPort{Port: intPort(70000)})), nil, "spec.ingress[0].ports[0].port"},
		{"endPort below port", spec(in(nil, networkingv1.NetworkPolicyPort{Port: intPort(100), EndPort: i32(99)})), nil, "spec.ingress[0].ports[0].endPort"},
		{"endPort without port", spec(in(nil, networkingv1.NetworkPolicyPort{EndPort: i32(99)})), nil, "spec.ingress[0].ports[0].endPort"},
		{"endPort with named port", spec(in(nil, networkingv1.NetworkPolicyPort{Port: namedPort("http"), EndPort: i32(99)})), nil, "spec.ingress[0].ports[0].endPort"},
		{"bad port name", spec(in(nil, networkingv1.NetworkPolicyPort{Port: namedPort("Not_A_Name")})), nil, "spec.ingress[0].ports[0].port"},
		{"empty peer", spec(in([]networkingv1.NetworkPolicyPeer{{}})), nil, "spec.ingress[0].from[0]"},
		{"ipBlock and selector", spec(in([]networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}, PodSelector: ml()}})), nil, "spec.ingress[0].from[0]"},
		{"bad cidr", spec(func(s *networkingv1.NetworkPolicySpec) {
			s.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/33")}}}
		}), nil, "spec.egress[0].to[0].ipBlock.cidr"},
		{"except outside cidr", spec(in([]networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/16", "10.1.0.0/24")})), nil, "spec.ingress[0].from[0].ipBlock.except[0]"},
		{"except equal to cidr", spec(in([]networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/16", "10.0.0.0/24", "10.0.0.0/16")})), nil, "spec.ingress[0].from[0].ipBlock.except[1]"},
		{"except of the other family", spec(in([]networkingv1.NetworkPolicyPeer{blockPeer("0.0.0.0/0", "::/1")})), nil, "ipBlock.except[0]"},
		{"bad except", spec(in([]networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/16", "x")})), nil, "ipBlock.except[0]"},
		{"no namespace", []networkingv1.NetworkPolicy{netpol("", "bad", networkingv1.NetworkPolicySpec{})}, nil, "metadata.namespace"},
		{"duplicate policy", []networkingv1.NetworkPolicy{netpol("default", "bad", networkingv1.NetworkPolicySpec{}), netpol("default", "bad", networkingv1.NetworkPolicySpec{})}, nil, "declared twice"},
		{"bad pod ip", nil, []Pod{pod("default", "bad", "10.0.0.300")}, "pod default/bad"},
		{"IPv6 pod", nil, []Pod{pod("default", "bad", "2001:db8::1")}, "pod default/bad"},
		{"duplicate pod ip", nil, []Pod{pod("default", "a", "10.0.0.1"), pod("default", "bad", "10.0.0.1")}, "pod default/bad: ip 10.0.0.1 already belongs to pod default/a"},
		{"unknown namespace", nil, []Pod{pod("nowhere", "bad", "10.0.0.1")}, "pod nowhere/bad: unknown namespace"},
		{"bad container port protocol", nil, []Pod{{Name: "bad", Namespace: "default", IP: "10.0.0.1", Ports: []NamedPort{{Name: "x", Protocol: "ICMP", Port: 1}}}}, "pod default/bad: ports[0].protocol"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := pods
			if c.pods != nil {
				p = c.pods
			}
			_, err := Compile(p, nss, c.pols)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if c.pols != nil && !strings.Contains(err.Error(), "/bad") {
				t.Errorf("error %q does not name the policy", err)
			}
		})
	}
}

// Pods without an address (not running yet) are skipped, not rejected.
func TestCompileSkipsPodsWithoutIP(t *testing.T) {
	pods, nss := docsCluster()
	pods = append(pods, pod("default", "pending", "", "role", "db"))
	prog, err := Compile(pods, nss, scenarios()[0].pols)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog.Pods) != 1 || prog.Pods[0].Pod != "default/db" {
		t.Errorf("pods = %+v", prog.Pods)
	}
}

// The output does not depend on the order of the input.
func TestCompileDeterministic(t *testing.T) {
	for _, sc := range scenarios() {
		want, err := Compile(sc.pods, sc.nss, sc.pols)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 5 {
			pods := append([]Pod(nil), sc.pods...)
			nss := append([]Namespace(nil), sc.nss...)
			pols := append([]networkingv1.NetworkPolicy(nil), sc.pols...)
			rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
			rng.Shuffle(len(nss), func(i, j int) { nss[i], nss[j] = nss[j], nss[i] })
			rng.Shuffle(len(pols), func(i, j int) { pols[i], pols[j] = pols[j], pols[i] })
			got, err := Compile(pods, nss, pols)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: output depends on input order:\n%+v\n%+v", sc.name, got, want)
			}
		}
	}
}

// The evaluator's SetNets semantics (longest prefix wins, Except = nomatch) on a hand-written
// Program, independent of the compiler.
func TestEvaluatorLongestPrefix(t *testing.T) {
	prog := &Program{
		Sets: []Set{{Name: "KUBE-SRC-NETS", Kind: SetNets, Members: []Member{
			{Addr: "10.0.0.0/8"}, {Addr: "10.1.0.0/16", Except: true}, {Addr: "10.1.2.0/24"}, {Addr: "10.1.2.128/25", Except: true},
		}}},
		Policies: []PolicyChain{{Name: "KUBE-NWPLCY-X", Namespace: "n", Policy: "x", Ingress: []Rule{{
			Peers: []Peer{{Set: "KUBE-SRC-NETS"}},
			Ports: []PortMatch{{Protocol: "UDP", Port: 0}, {Protocol: "TCP", Port: 10, EndPort: 20}},
		}}}},
		Pods: []PodFirewall{{Pod: "n/p", IP: "10.9.9.9", Chain: "KUBE-POD-FW-P", IngressOf: []string{"KUBE-NWPLCY-X"}}},
	}
	if err := prog.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f    Flow
		want bool
	}{
		{fl("10.0.0.1", "10.9.9.9", "TCP", 10), true},
		{fl("10.1.0.1", "10.9.9.9", "TCP", 10), false},
		{fl("10.1.2.1", "10.9.9.9", "TCP", 20), true},
		{fl("10.1.2.200", "10.9.9.9", "TCP", 20), false},
		{fl("11.0.0.1", "10.9.9.9", "TCP", 20), false},
		{fl("10.0.0.1", "10.9.9.9", "TCP", 21), false},
		{fl("10.0.0.1", "10.9.9.9", "UDP", 65535), true},
		{fl("10.0.0.1", "10.9.9.9", "SCTP", 10), false},
		{fl("10.9.9.9", "10.9.9.9", "SCTP", 10), true},
		{fl("10.9.9.9", "10.0.0.1", "SCTP", 10), true},
	} {
		if got := prog.Allows(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", flowString(c.f), got, c.want)
		}
	}
}

func TestValidateCatches(t *testing.T) {
	good := func() *Program {
		return &Program{
			Sets: []Set{{Name: "KUBE-SRC-A", Kind: SetAddrs, Members: []Member{{Addr: "10.0.0.1"}, {Addr: "10.0.0.2"}}}},
			Policies: []PolicyChain{{Name: "KUBE-NWPLCY-X", Namespace: "n", Policy: "x",
				Ingress: []Rule{{Peers: []Peer{{Set: "KUBE-SRC-A"}}, Ports: []PortMatch{{Any: true}}}}}},
			Pods: []PodFirewall{{Pod: "n/p", IP: "10.0.0.3", Chain: "KUBE-POD-FW-P", IngressOf: []string{"KUBE-NWPLCY-X"}}},
		}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(p *Program){
		"unsorted members":  func(p *Program) { p.Sets[0].Members[0].Addr = "10.0.0.9" },
		"duplicate members": func(p *Program) { p.Sets[0].Members[1].Addr = "10.0.0.1" },
		"long set name": func(p *Program) {
			p.Sets[0].Name = strings.Repeat("S", 32)
			p.Policies[0].Ingress[0].Peers[0].Set = p.Sets[0].Name
		},
		"missing set":    func(p *Program) { p.Policies[0].Ingress[0].Peers[0].Set = "KUBE-SRC-B" },
		"wrong set kind": func(p *Program) { p.Sets[0].Kind = SetAddrPorts },
		"long chain":     func(p *Program) { p.Pods[0].Chain = strings.Repeat("C", 29) },
		"missing chain":  func(p *Program) { p.Pods[0].IngressOf[0] = "KUBE-NWPLCY-Y" },
		"no direction":   func(p *Program) { p.Pods[0].IngressOf = nil },
		"no ports":       func(p *Program) { p.Policies[0].Ingress[0].Ports = nil },
		"zero net": func(p *Program) {
			p.Sets[0] = Set{Name: "KUBE-SRC-A", Kind: SetNets, Members: []Member{{Addr: "0.0.0.0/0"}}}
		},
		"bad range": func(p *Program) { p.Policies[0].Ingress[0].Ports[0] = PortMatch{Protocol: "TCP", Port: 9, EndPort: 8} },
	} {
		p := good()
		mod(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: not caught", name)
		}
	}
}

// An egress named port with an ipBlock peer resolves on the pods inside the block (ipBlocks
// match pod addresses literally); external addresses have no named ports.
func TestCompileEgressNamedPortThroughIPBlock(t *testing.T) {
	pods := []Pod{
		{Name: "client", Namespace: "default", IP: "10.4.0.1", Labels: map[string]string{"app": "client"}, Local: true},
		{Name: "web", Namespace: "default", IP: "10.4.0.2", Local: true, Ports: []NamedPort{{Name: "http", Port: 8080}}},
		{Name: "far", Namespace: "default", IP: "10.5.0.2", Local: true, Ports: []NamedPort{{Name: "http", Port: 8080}}},
	}
	nss := []Namespace{ns("default")}
	pols := []networkingv1.NetworkPolicy{netpol("default", "out", networkingv1.NetworkPolicySpec{
		PodSelector: *ml("app", "client"),
		PolicyTypes: types(egressT),
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{blockPeer("10.4.0.0/16")},
			Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("http")}},
		}},
	})}
	prog, err := Compile(pods, nss, pols)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f    Flow
		want bool
	}{
		{fl("10.4.0.1", "10.4.0.2", "TCP", 8080), true},
		{fl("10.4.0.1", "10.4.0.3", "TCP", 8080), false},
		{fl("10.4.0.1", "10.5.0.2", "TCP", 8080), false},
	} {
		if ref := Reference(pods, nss, pols, c.f); ref != c.want {
			t.Fatalf("%s: Reference %v, want %v", flowString(c.f), ref, c.want)
		}
		if got := prog.Allows(c.f); got != c.want {
			t.Errorf("%s: Allows %v, want %v", flowString(c.f), got, c.want)
		}
	}
	pc := findPolicy(t, prog, "default", "out")
	if s := findSet(t, prog, pc.Egress[0].Ports[0].Set); !reflect.DeepEqual(s.Members, []Member{{Addr: "10.4.0.2", Protocol: "TCP", Port: 8080}}) {
		t.Errorf("named port set %+v", s.Members)
	}
}
