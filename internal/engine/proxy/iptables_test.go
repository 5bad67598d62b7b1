package proxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
			Endpoints: []Endpoint{{IP: "10.244.1.3", Port: 5201}, {IP: "10.244.0.7", Port: 5201}, {IP: "10.244.1.9", Port: 5201}}},
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
		`-m statistic --mode random --probability 0.3333333333 -j ` + svcs[0].SepChain(Endpoint{IP: "10.244.0.7", Port: 5201}),
		`-m statistic --mode random --probability 0.5000000000 -j ` + svcs[0].SepChain(Endpoint{IP: "10.244.1.3", Port: 5201}),
		`-A ` + svc + ` -m comment --comment "cnb/server -> 10.244.1.9:5201" -j ` + svcs[0].SepChain(Endpoint{IP: "10.244.1.9", Port: 5201}),
		`-A ` + svcs[0].SepChain(Endpoint{IP: "10.244.1.9", Port: 5201}) + ` -m comment --comment cnb/server -s 10.244.1.9/32 -j KUBE-MARK-MASQ`,
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
				if err := ApplyIPTables(ns, backend, "", in); err != nil {
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
			// The hooks, written into the restore's input, are the rules `iptables -A` wrote.
			for _, want := range []string{
				`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
				`-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
				`-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`,
			} {
				if n := strings.Count(s, "\n"+want+"\n"); n != 1 {
					t.Errorf("hook %q %d times, want once:\n%s", want, n, s)
				}
			}
			small, _ := RenderIPTables(svcs[1:2], Options{ClusterCIDR: "10.244.0.0/16", Stale: cnt.Names})
			if err := ApplyIPTables(ns, backend, "", small); err != nil {
				t.Fatal(err)
			}
			if s := save(); strings.Contains(s, svcs[0].SvcChain()) || !strings.Contains(s, svcs[1].SvcChain()) {
				t.Errorf("stale chains not removed or live ones lost:\n%s", s)
			}
		})
	}
}

// What the recorded dumps do not show: a NodePort Service without endpoints is rejected, a
// rendering for no node has no local endpoint, and without a cluster CIDR there is no
// pod short-circuit.
func TestRenderIPTablesNodePorts(t *testing.T) {
	local := Service{Namespace: "cnb", Name: "local", ClusterIP: "10.96.0.20", Port: 80, Protocol: "tcp", NodePort: 30001, ExternalLocal: true,
		Endpoints: []Endpoint{{IP: "10.244.0.5", Port: 8080, Node: "node0"}}}
	empty := Service{Namespace: "cnb", Name: "empty", ClusterIP: "10.96.0.21", Port: 80, Protocol: "tcp", NodePort: 30002}
	svcs := []Service{local, empty}
	out, cnt := RenderIPTables(svcs, Options{NodeName: "node0"})
	s := string(out)
	for _, want := range []string{
		`-A KUBE-EXTERNAL-SERVICES -m comment --comment "cnb/empty has no endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30002 -j REJECT`,
		"-A " + local.ExtChain() + " -j " + local.SvlChain() + "\n",
		"*filter\n:KUBE-EXTERNAL-SERVICES - [0:0]\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, "pod traffic") || strings.Contains(s, "KUBE-EXT-"+empty.SvcChain()[len("KUBE-SVC-"):]) {
		t.Errorf("a pod rule without cluster CIDR, or a chain for a Service without endpoints:\n%s", s)
	}
	// nat: 4 base chains (with KUBE-NODEPORTS), SVC + SEP + EXT + SVL; filter: 1.
	// Rules: 4 base + the NODEPORTS jump; local: 2 + 1 pick + 2 SEP + 1 NODEPORTS + 3 EXT + 1 SVL;
	// empty: 1 REJECT.
	if cnt.Services != 2 || cnt.Endpoints != 1 || cnt.Chains != 4+4+1 || cnt.Rules != 5+1+1+2+1+3+1+1 || len(cnt.Names) != cnt.Chains {
		t.Errorf("counts %+v", cnt)
	}
	nowhere, _ := RenderIPTables(svcs, Options{})
	if n := string(nowhere); strings.Contains(n, "KUBE-SVL-") || !strings.Contains(n, `"cnb/local has no local endpoints"`) {
		t.Errorf("a rendering for no node has a local endpoint:\n%s", n)
	}
}

// NodePort chains are installed in both tables, with their hooks once however often applied;
// a rendering without NodePorts removes their chains and empties KUBE-EXTERNAL-SERVICES.
func TestApplyIPTablesNodePorts(t *testing.T) {
	for _, backend := range []IPTablesBackend{"nft", "legacy"} {
		t.Run(string(backend), func(t *testing.T) {
			ns := scratchNS(t)
			svcs := nodePortServices([5]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14"})
			opt := Options{ClusterCIDR: "10.244.0.0/16", NodeName: "node0"}
			in, cnt := RenderIPTables(svcs, opt)
			for i := 0; i < 2; i++ {
				if err := ApplyIPTables(ns, backend, "", in); err != nil {
					t.Fatal(err)
				}
			}
			save := func() string {
				var b strings.Builder
				for _, table := range []string{"nat", "filter"} {
					out, err := exec.Command("nsenter", "--net="+ns, backend.tool(false)+"-save", "-t", table).CombinedOutput()
					if err != nil {
						t.Fatalf("save: %v: %s", err, out)
					}
					b.Write(out)
				}
				return b.String()
			}
			s := save()
			if n := strings.Count(s, "\n:KUBE-"); n != cnt.Chains {
				t.Errorf("%d KUBE chains, want %d:\n%s", n, cnt.Chains, s)
			}
			if n := strings.Count(s, "\n-A KUBE-"); n != cnt.Rules {
				t.Errorf("%d KUBE rules, want %d:\n%s", n, cnt.Rules, s)
			}
			if n := strings.Count(s, "-j KUBE-EXTERNAL-SERVICES"); n != 2 {
				t.Errorf("%d hooks into KUBE-EXTERNAL-SERVICES, want 2 (INPUT, FORWARD)", n)
			}
			opt.Stale = cnt.Names
			plain, pcnt := RenderIPTables(svcs[:3], opt)
			if err := ApplyIPTables(ns, backend, "", plain); err != nil {
				t.Fatal(err)
			}
			s = save()
			if strings.Contains(s, "KUBE-EXT-") || strings.Contains(s, "KUBE-SVL-") || strings.Contains(s, "KUBE-NODEPORTS") ||
				strings.Contains(s, "-A KUBE-EXTERNAL-SERVICES") || !strings.Contains(s, ":KUBE-EXTERNAL-SERVICES") {
				t.Errorf("NodePort chains left, or KUBE-EXTERNAL-SERVICES gone or not emptied:\n%s", s)
			}
			if n := strings.Count(s, "\n:KUBE-"); n != pcnt.Chains {
				t.Errorf("%d KUBE chains, want %d:\n%s", n, pcnt.Chains, s)
			}
		})
	}
}

// ApplyIPTables takes the xtables lock it is given: iptables-legacy waits while another holds
// that file, and not for a lock on another file (the host's, another node's).
func TestApplyIPTablesOwnLock(t *testing.T) {
	ns := scratchNS(t)
	in, _ := RenderIPTables(nftTestServices(), Options{})
	dir := t.TempDir()
	held, other := filepath.Join(dir, "held.lock"), filepath.Join(dir, "other.lock")
	f, err := os.Create(held)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := ApplyIPTables(ns, "legacy", other, in); err != nil {
		t.Fatalf("with a lock of its own: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- ApplyIPTables(ns, "legacy", held, in) }()
	select {
	case err := <-done:
		t.Fatalf("applied while its lock was held (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("once the lock was free: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10 s after the lock was freed")
	}
}
