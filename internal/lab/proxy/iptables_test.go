package proxy

import (
	"os/exec"
	"strings"
	"testing"
)

// Chain names must be kube-proxy's: these pairs are from a real cluster's iptables-save
// (kube-system/kube-dns and default/kubernetes, the same on every cluster).
func TestChainNamesMatchKubeProxy(t *testing.T) {
	for _, c := range []struct{ ns, name, port, proto, want string }{
		{"default", "kubernetes", "https", "tcp", "KUBE-SVC-NPX46M4PTMTKRN6Y"},
		{"kube-system", "kube-dns", "dns", "udp", "KUBE-SVC-TCOU7JCQXEZGVUNU"},
		{"kube-system", "kube-dns", "dns-tcp", "tcp", "KUBE-SVC-ERIFXISQEP7F7OF4"},
		{"kube-system", "kube-dns", "metrics", "tcp", "KUBE-SVC-JD5MR3NA4I4DYORP"},
	} {
		s := Service{Namespace: c.ns, Name: c.name, PortName: c.port, Protocol: c.proto}
		if got := s.SvcChain(); got != c.want {
			t.Errorf("%s %s: %s, want %s", s.PortKey(), c.proto, got, c.want)
		}
	}
}

func TestRenderIPTables(t *testing.T) {
	svcs := []Service{
		{Namespace: "cnb", Name: "server", ClusterIP: "10.96.0.10", Port: 5201, Protocol: "tcp",
			Endpoints: []Endpoint{{"10.244.1.3", 5201}, {"10.244.0.7", 5201}, {"10.244.1.9", 5201}}},
		{Namespace: "cnb", Name: "empty", ClusterIP: "10.96.0.11", Port: 80, Protocol: "tcp"},
	}
	out, cnt := RenderIPTables(svcs, Options{ClusterCIDR: "10.244.0.0/16"})
	s := string(out)
	if !strings.HasPrefix(s, "*nat\n") || !strings.HasSuffix(s, "COMMIT\n") {
		t.Fatalf("not a restore input:\n%s", s)
	}
	svc := svcs[0].SvcChain()
	for _, want := range []string{
		":" + svc + " - [0:0]",
		`-A KUBE-SERVICES -m comment --comment "cnb/server cluster IP" -m tcp -p tcp -d 10.96.0.10/32 --dport 5201 -j ` + svc,
		`-A ` + svc + ` -m comment --comment "cnb/server cluster IP" -m tcp -p tcp -d 10.96.0.10/32 --dport 5201 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`,
		// 1/3, then 1/2 of the rest, then the last unconditionally: each endpoint 1/3.
		`-m statistic --mode random --probability 0.3333333333 -j ` + svcs[0].SepChain(Endpoint{"10.244.0.7", 5201}),
		`-m statistic --mode random --probability 0.5000000000 -j ` + svcs[0].SepChain(Endpoint{"10.244.1.3", 5201}),
		`-A ` + svc + ` -m comment --comment "cnb/server -> 10.244.1.9:5201" -j ` + svcs[0].SepChain(Endpoint{"10.244.1.9", 5201}),
		`-A ` + svcs[0].SepChain(Endpoint{"10.244.1.9", 5201}) + ` -m comment --comment cnb/server -s 10.244.1.9/32 -j KUBE-MARK-MASQ`,
		`-m tcp -p tcp -j DNAT --to-destination 10.244.1.9:5201`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, "10.96.0.11") {
		t.Error("a Service without endpoints got rules")
	}
	if cnt.Services != 2 || cnt.Endpoints != 3 || cnt.Chains != 3+1+3 || cnt.Rules != 4+1+1+3*3 {
		t.Errorf("counts %+v", cnt)
	}
	again, _ := RenderIPTables([]Service{svcs[1], svcs[0]}, Options{ClusterCIDR: "10.244.0.0/16"})
	if string(again) != s {
		t.Error("rendering depends on input order")
	}
	// A chain of an earlier rendering that is gone is flushed and deleted; one still in use is not.
	gone, _ := RenderIPTables(svcs, Options{Stale: []string{"KUBE-SVC-GONEGONEGONEGONE", svc}})
	if g := string(gone); !strings.Contains(g, ":KUBE-SVC-GONEGONEGONEGONE - [0:0]\n") ||
		!strings.Contains(g, "-X KUBE-SVC-GONEGONEGONEGONE\n") || strings.Contains(g, "-X "+svc) {
		t.Errorf("stale chains:\n%s", g)
	}
}

func TestWholeTableCache(t *testing.T) {
	in := "*nat\n:A - [0:0]\n-A A -j RETURN\nCOMMIT\n*filter\nCOMMIT"
	want := "*nat\n-Z\n:A - [0:0]\n-A A -j RETURN\nCOMMIT\n*filter\n-Z\nCOMMIT"
	if got := string(wholeTableCache([]byte(in))); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Both backends install the rendering (hooks once, however often it is applied) and remove
// stale chains.
func TestApplyIPTables(t *testing.T) {
	for _, backend := range []IPTablesBackend{"nft", "legacy"} {
		t.Run(string(backend), func(t *testing.T) {
			ns := scratchNS(t)
			svcs := nftTestServices()
			in, cnt := RenderIPTables(svcs, Options{ClusterCIDR: "10.244.0.0/16"})
			for i := 0; i < 2; i++ {
				if err := ApplyIPTables(ns, backend, in); err != nil {
					t.Fatal(err)
				}
			}
			save := func() string {
				out, err := exec.Command("nsenter", "--net="+ns, backend.tool(false)+"-save", "-t", "nat").CombinedOutput()
				if err != nil {
					t.Fatalf("save: %v: %s", err, out)
				}
				return string(out)
			}
			s := save()
			if n := strings.Count(s, "\n:KUBE-"); n != cnt.Chains {
				t.Errorf("%d KUBE chains, want %d:\n%s", n, cnt.Chains, s)
			}
			if n := strings.Count(s, "\n-A KUBE-"); n != cnt.Rules {
				t.Errorf("%d KUBE rules, want %d:\n%s", n, cnt.Rules, s)
			}
			if n := strings.Count(s, "-j KUBE-SERVICES"); n != 2 {
				t.Errorf("%d hooks into KUBE-SERVICES, want 2", n)
			}
			small, _ := RenderIPTables(svcs[1:2], Options{ClusterCIDR: "10.244.0.0/16", Stale: cnt.Names})
			if err := ApplyIPTables(ns, backend, small); err != nil {
				t.Fatal(err)
			}
			if s := save(); strings.Contains(s, svcs[0].SvcChain()) || !strings.Contains(s, svcs[1].SvcChain()) {
				t.Errorf("stale chains not removed or live ones lost:\n%s", s)
			}
		})
	}
}
