package ebpf

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

// TestFilter attaches the XDP firewall in pass mode to both ends of a veth pair between two
// namespaces: allowed TCP and UDP arrive, denied is dropped; after Close nothing is attached
// or pinned and the denied port is reachable again.
func TestFilter(t *testing.T) {
	needUsable(t, xdpKind{})
	p := newPair(t)
	dir := bpfDir(t, p.prefix)
	a, _ := netip.AddrFromSlice(p.aIP)
	b, _ := netip.AddrFromSlice(p.bIP)
	rules, err := nf.Build(nf.Flow{Client: a, Server: b, Ports: nftest.Ports}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var insts []nf.Instance
	t.Cleanup(func() {
		for _, in := range insts {
			_ = in.Close()
		}
	})
	for _, ns := range []string{p.a, p.b} {
		env := nf.Env{NS: ns, Name: ns, BPFDir: filepath.Join(dir, ns)}
		if err := mkdir(env.BPFDir); err != nil {
			t.Fatal(err)
		}
		in, err := Filter(env, rules, []string{"eth0"})
		if err != nil {
			t.Fatalf("filter in %s: %v", ns, err)
		}
		insts = append(insts, in)
		if h := hooksOf(t, nf.Endpoint{NS: ns, Dev: "eth0"}); h.xdp == 0 {
			t.Fatalf("no XDP program on eth0 in %s", ns)
		}
	}
	ch := &nf.Chain{Spec: nf.ChainSpec{Kind: stubKind("xdp filter"), Client: p.a, Server: p.b}, ClientIP: a, ServerIP: b}
	nftest.Traffic(t, ch)
	for _, in := range insts {
		if err := in.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	for _, ns := range []string{p.a, p.b} {
		if h := hooksOf(t, nf.Endpoint{NS: ns, Dev: "eth0"}); !h.empty() {
			t.Errorf("programs attached in %s after Close: %+v", ns, h)
		}
		if l := pins(t, filepath.Join(dir, ns)); len(l) != 0 {
			t.Errorf("pins left in %s after Close: %v", ns, l)
		}
	}
	if err := nftest.EchoTCP(ch, 5299, 1000, 3*time.Second); err != nil {
		t.Errorf("denied port after Close (filter detached): %v", err)
	}
}
