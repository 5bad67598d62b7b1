package dataplane

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/proxy"
	"github.com/cnibench/cnibench/internal/names"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

// partialSvcs are n ClusterIP Services with one endpoint each (on node0 or node1), the last
// two with NodePorts: externalTrafficPolicy Cluster and Local.
func partialSvcs(n int) []proxy.Service {
	svcs := make([]proxy.Service, n)
	for i := range svcs {
		svcs[i] = proxy.Service{Namespace: "t", Name: fmt.Sprintf("s%d", i), ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			Port: 80, Protocol: "tcp", Endpoints: []proxy.Endpoint{{IP: fmt.Sprintf("10.244.%d.%d", i%2, i%250+2), Port: 8080, Node: fmt.Sprintf("node%d", i%2)}}}
	}
	svcs[n-2].NodePort, svcs[n-1].NodePort, svcs[n-1].ExternalLocal = 30001, 30002, true
	return svcs
}

var partialOpt = proxy.Options{NodeName: "node0", NodeIPs: []string{"172.30.0.10"}}

// withEndpoint is svcs with an endpoint on node1 added to Service i.
func withEndpoint(svcs []proxy.Service, i int) []proxy.Service {
	out := append([]proxy.Service(nil), svcs...)
	out[i].Endpoints = append(append([]proxy.Endpoint(nil), out[i].Endpoints...), proxy.Endpoint{IP: "10.244.1.200", Port: 8080, Node: "node1"})
	return out
}

// The eBPF proxies' partial renderings: without a previous state the input is Render's (and
// Changed 0); adding one Service to 100 is a change of that one (its entry and backend); a
// removal names the entry; an endpoint added upserts the Service's entries that hold it (a
// Local NodePort's entry on another node's rendering does not), with Changed counting the
// entries and slots written; no change is an empty change. Counts are always the whole
// table's, as Render's. A state of another engine, or Services rendering an entry twice, give
// a full rendering.
func TestEBPFRenderPartial(t *testing.T) {
	for _, p := range []ebpfProxy{{}, {sock: true}} {
		t.Run(p.Name(), func(t *testing.T) { testEBPFRenderPartial(t, p) })
	}
}

func testEBPFRenderPartial(t *testing.T, p ebpfProxy) {
	svcs := partialSvcs(100)
	in, state, cnt := p.RenderPartial(nil, svcs, partialOpt)
	want, wantCnt := p.Render(svcs, partialOpt)
	if !bytes.Equal(in, want) || !reflect.DeepEqual(cnt, wantCnt) || cnt.Changed != 0 {
		t.Fatalf("RenderPartial(nil) differs from Render: counts %+v, want %+v", cnt, wantCnt)
	}
	if _, ok := state.(bpfdp.ServiceTable); !ok {
		t.Fatalf("state %T, want a bpfdp.ServiceTable", state)
	}
	change := func(prev any, svcs []proxy.Service) (bpfdp.ServiceChange, any, proxy.Counts) {
		t.Helper()
		in, next, cnt := p.RenderPartial(prev, svcs, partialOpt)
		c, partial, err := bpfdp.DecodeServiceInput(in)
		if err != nil || !partial {
			t.Fatalf("RenderPartial: partial %v, %v:\n%s", partial, err, in)
		}
		if _, full := p.Render(svcs, partialOpt); cnt.Services != full.Services || cnt.Endpoints != full.Endpoints || cnt.Elements != full.Elements {
			t.Errorf("counts %+v, want the whole table's %+v", cnt, full)
		}
		return c, next, cnt
	}
	if c, _, cnt := change(state, svcs); len(c.Upsert)+len(c.Remove) != 0 || cnt.Changed != 0 {
		t.Errorf("no change: %+v, Changed %d", c, cnt.Changed)
	}
	added := append(append([]proxy.Service(nil), svcs...), proxy.Service{Namespace: "t", Name: "new", ClusterIP: "10.96.9.9", Port: 443,
		Protocol: "tcp", Endpoints: []proxy.Endpoint{{IP: "10.244.0.9", Port: 8443, Node: "node0"}}})
	c, plus, cnt := change(state, added)
	if len(c.Remove) != 0 || len(c.Upsert) != 1 || c.Upsert[0].Addr.String() != "10.96.9.9" || len(c.Upsert[0].Backends) != 1 || cnt.Changed != 2 || cnt.Services != 101 {
		t.Errorf("one Service added to 100: %+v, counts %+v; want it alone, Changed 2", c, cnt)
	}
	c, _, cnt = change(plus, svcs)
	if len(c.Upsert) != 0 || len(c.Remove) != 1 || c.Remove[0].Addr.String() != "10.96.9.9" || cnt.Changed != 2 {
		t.Errorf("one Service removed: %+v, Changed %d", c, cnt.Changed)
	}
	c, _, cnt = change(state, withEndpoint(svcs, 5))
	if len(c.Remove) != 0 || len(c.Upsert) != 1 || len(c.Upsert[0].Backends) != 2 || cnt.Changed != 3 {
		t.Errorf("an endpoint added to a ClusterIP Service: %+v, Changed %d; want its entry, 2 backends, Changed 3", c, cnt.Changed)
	}
	c, _, _ = change(state, withEndpoint(svcs, 98)) // NodePort, Cluster: both entries
	if len(c.Upsert) != 2 || !c.Upsert[1].NodePort || len(c.Upsert[1].Backends) != 2 || !c.Upsert[1].Backends[1].Remote {
		t.Errorf("an endpoint on node1 added to a Cluster NodePort Service: %+v; want its ClusterIP and NodePort entries, the new backend remote", c)
	}
	c, _, _ = change(state, withEndpoint(svcs, 99)) // NodePort, Local: node0's NodePort entry keeps its own endpoints
	if len(c.Upsert) != 1 || c.Upsert[0].NodePort {
		t.Errorf("an endpoint on node1 added to a Local NodePort Service, rendered for node0: %+v; want its ClusterIP entry only", c)
	}

	for what, prev := range map[string]any{"polycube's state": bpfdp.PolycubeTable{}, "a string": "x"} {
		if in, next, cnt := p.RenderPartial(prev, added, partialOpt); !bytes.Equal(in, first(p.Render(added, partialOpt))) || cnt.Changed != 0 || next == nil {
			t.Errorf("prev %s: not a full rendering (Changed %d, next %T)", what, cnt.Changed, next)
		}
	}
	dup := append(append([]proxy.Service(nil), svcs...), svcs[3])
	if in, next, _ := p.RenderPartial(state, dup, partialOpt); !bytes.Equal(in, first(p.Render(dup, partialOpt))) || next != nil {
		t.Errorf("a Service twice: not a full rendering without state (next %v)", next)
	}
}

func first[A, B any](a A, _ B) A { return a }

// The polycube proxy's partial renderings: without a previous state the input is Render's; a
// ClusterIP Service added is an ILB entry; a NodePort Service added is an ILB entry, an ELB
// entry and a DISC-NAT port, and removed, their deletions; externalTrafficPolicy Local on a
// node without local endpoints empties the NodePort's ELB entry. Counts are the whole
// tables', Changed what the change writes or deletes.
func TestPolycubeRenderPartial(t *testing.T) {
	p := polycubeProxy{}
	svcs := partialSvcs(100)
	in, state, cnt := p.RenderPartial(nil, svcs, partialOpt)
	want, wantCnt := p.Render(svcs, partialOpt)
	if !bytes.Equal(in, want) || !reflect.DeepEqual(cnt, wantCnt) {
		t.Fatalf("RenderPartial(nil) differs from Render: counts %+v, want %+v", cnt, wantCnt)
	}
	change := func(prev any, svcs []proxy.Service) (bpfdp.PolycubeChange, any, proxy.Counts) {
		t.Helper()
		in, next, cnt := p.RenderPartial(prev, svcs, partialOpt)
		var got polycubeInput
		if err := json.Unmarshal(in, &got); err != nil || got.Partial == nil || got.ClusterIPs != nil || got.NodePorts != nil {
			t.Fatalf("RenderPartial: %v:\n%s", err, in)
		}
		if _, full := p.Render(svcs, partialOpt); cnt.Services != full.Services || cnt.Elements != full.Elements {
			t.Errorf("counts %+v, want the whole tables' %+v", cnt, full)
		}
		return *got.Partial, next, cnt
	}
	if c, _, cnt := change(state, svcs); !reflect.DeepEqual(c, bpfdp.PolycubeChange{}) || cnt.Changed != 0 {
		t.Errorf("no change: %+v, Changed %d", c, cnt.Changed)
	}
	added := append(append([]proxy.Service(nil), svcs...), proxy.Service{Namespace: "t", Name: "new", ClusterIP: "10.96.9.9", Port: 443,
		Protocol: "tcp", Endpoints: []proxy.Endpoint{{IP: "10.244.0.9", Port: 8443, Node: "node0"}}})
	if c, _, cnt := change(state, added); len(c.ClusterIPs) != 1 || len(c.NodePorts)+len(c.GoneClusterIPs)+len(c.GoneNodePorts) != 0 || cnt.Changed != 2 {
		t.Errorf("a ClusterIP Service added: %+v, Changed %d; want its ILB entry, Changed 2", c, cnt.Changed)
	}
	added[100].NodePort = 30003
	c, plus, cnt := change(state, added)
	if len(c.ClusterIPs) != 1 || len(c.NodePorts) != 1 || c.NodePorts[0].Port != 30003 || len(c.NodePorts[0].Backends) != 1 || cnt.Changed != 5 {
		t.Errorf("a NodePort Service added: %+v, Changed %d; want its ILB and ELB entries, Changed 5 (ILB 2, ELB 2, DISC-NAT 1)", c, cnt.Changed)
	}
	c, _, cnt = change(plus, svcs)
	wantGone := bpfdp.PolycubeChange{GoneClusterIPs: []bpfdp.ServiceKey{{Addr: netip.MustParseAddr("10.96.9.9"), Port: 443, Proto: "tcp"}},
		GoneNodePorts: []bpfdp.ServiceKey{{Addr: netip.MustParseAddr("172.30.0.10"), Port: 30003, Proto: "tcp"}},
		GoneNATPorts:  []bpfdp.PolycubeNATPort{{Port: 30003, Proto: "tcp"}}}
	if !reflect.DeepEqual(c, wantGone) || cnt.Changed != 5 {
		t.Errorf("the NodePort Service removed: %+v, Changed %d; want %+v, Changed 5", c, cnt.Changed, wantGone)
	}
	local := append([]proxy.Service(nil), svcs...)
	local[98].ExternalLocal = true // its one endpoint is on node0 (98 % 2): kept
	local[97].NodePort, local[97].ExternalLocal = 30004, true
	local[97].Endpoints[0].Node = "node1" // none on node0: an empty ELB entry
	c, _, _ = change(state, local)
	if len(c.ClusterIPs) != 0 || len(c.NodePorts) != 2 {
		t.Fatalf("two NodePorts turned Local: %+v", c)
	}
	for _, np := range c.NodePorts {
		if !np.Local || (np.Port == 30004) != (len(np.Backends) == 0) {
			t.Errorf("Local NodePort %+v: want node0's own endpoints", np)
		}
	}
	if in, next, cnt := p.RenderPartial(bpfdp.ServiceTable{}, svcs, partialOpt); !bytes.Equal(in, want) || cnt.Changed != 0 || next == nil {
		t.Errorf("prev of the ebpf proxy: not a full rendering")
	}
}

// A partial rendering applied to a node that does not hold the table it was rendered from is
// an error, and writes nothing: the lab then forgets its state and renders a full one.
func TestPartialApplyWithoutTable(t *testing.T) {
	dir := t.TempDir()
	n := Node{Name: "node0", NS: "cnbtnone", BPFDir: dir}
	svcs := partialSvcs(3)
	for _, p := range []PartialProxy{ebpfProxy{}, ebpfProxy{sock: true}, polycubeProxy{}} {
		var prev any
		if p.Name() == "polycube" {
			prev, _ = bpfdp.NewPolycubeTable(bpfdp.PolycubeServices{})
		} else {
			prev = bpfdp.ServiceTable{}
		}
		in, _, _ := p.RenderPartial(prev, svcs, partialOpt)
		if err := p.Apply(n, in); err == nil || !strings.Contains(err.Error(), "node") {
			t.Errorf("%s: a change applied to a node without a table: %v", p.Name(), err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the node's bpf directory holds %d entries after the refused changes", len(ents))
	}
}

// scratchBPFNode is a lab-like node of its own: a scratch namespace "cnbtpp..." (deleted at
// the end) and a bpf file system in a scratch directory (unmounted at the end).
func scratchBPFNode(t *testing.T, name string) Node {
	t.Helper()
	n := Node{Name: name, NS: "cnbtpp" + names.Random(names.Lower, 5), BPFDir: filepath.Join(t.TempDir(), "bpf")}
	t.Cleanup(func() {
		if err := nf.Unmount(n.BPFDir); err != nil {
			t.Error(err)
		}
	})
	if err := netns.Create(n.NS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(n.NS); err != nil {
			t.Error(err)
		}
	})
	return n
}

// pinnedMaps reads every map pinned in a node's bpf directory, whole (programs and links are
// skipped): hex key -> hex value per pin.
func pinnedMaps(t *testing.T, n Node) map[string]map[string]string {
	t.Helper()
	ents, err := os.ReadDir(n.BPFDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(filepath.Join(n.BPFDir, e.Name()), nil)
		if err != nil {
			continue // a program or a link
		}
		if m.Type() == ebpf.ProgramArray || m.Type() == ebpf.PerCPUArray {
			m.Close() // programs' own numbers, counters
			continue
		}
		entries := map[string]string{}
		k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
		it := m.Iterate()
		for it.Next(&k, &v) {
			entries[hex.EncodeToString(k)] = hex.EncodeToString(v)
		}
		err = it.Err()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = entries
	}
	return out
}

// Through the proxies, on the real kernel: a node programmed with RenderPartial and Apply
// (a full rendering, then changes: a Service added, an endpoint added, a NodePort turned
// Local, a Service removed) holds in every map pinned in its bpf directory what a node
// programmed with Render and Apply holds.
func TestPartialApply(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF programs)")
	}
	steps := [][]proxy.Service{partialSvcs(20)}
	added := append(append([]proxy.Service(nil), steps[0]...), proxy.Service{Namespace: "t", Name: "new", ClusterIP: "10.96.9.9", Port: 443,
		Protocol: "udp", Endpoints: []proxy.Endpoint{{IP: "10.244.0.9", Port: 8443, Node: "node0"}}, NodePort: 30009})
	steps = append(steps, added, withEndpoint(added, 18))
	local := append([]proxy.Service(nil), steps[2]...)
	local[18].ExternalLocal = true
	steps = append(steps, local, local[1:20])
	for _, p := range []PartialProxy{ebpfProxy{}, polycubeProxy{}} {
		t.Run(p.Name(), func(t *testing.T) {
			if err := p.Usable(); err != nil {
				t.Skip(err)
			}
			part, full := scratchBPFNode(t, "node0"), scratchBPFNode(t, "node0")
			if _, ok := p.(polycubeProxy); ok {
				for _, n := range []Node{part, full} {
					setupPolycube(t, n)
				}
			}
			var state any
			for i, svcs := range steps {
				in, next, cnt := p.RenderPartial(state, svcs, partialOpt)
				if err := p.Apply(part, in); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if i > 0 && (cnt.Changed == 0 || cnt.Changed > 10) {
					t.Errorf("step %d: Changed %d, want a few elements", i, cnt.Changed)
				}
				state = next
				in, _ = p.Render(svcs, partialOpt)
				if err := p.Apply(full, in); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got, want := pinnedMaps(t, part), pinnedMaps(t, full)
				if len(want) == 0 || !reflect.DeepEqual(got, want) {
					for pin := range want {
						if !reflect.DeepEqual(got[pin], want[pin]) {
							t.Errorf("step %d: map %s holds %d entries, %d after a full rendering", i, pin, len(got[pin]), len(want[pin]))
						}
					}
					t.FailNow()
				}
			}
		})
	}
}

// setupPolycube loads the provider's disaggregated build into a scratch node, on two veths
// standing for its overlay and underlay devices.
func setupPolycube(t *testing.T, n Node) {
	t.Helper()
	h, err := netns.Netlink(n.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, v := range []*netlink.Veth{
		{LinkAttrs: netlink.LinkAttrs{Name: "ovl"}, PeerName: "ovlp"},
		{LinkAttrs: netlink.LinkAttrs{Name: "ul"}, PeerName: "ulp"},
	} {
		if err := h.LinkAdd(v); err != nil {
			t.Fatal(err)
		}
	}
	err = bpfNode(n).SetupPolycube(bpfdp.PolycubeChain, bpfdp.PolycubeConfig{NodeIP: netip.MustParseAddr("172.30.0.10"),
		PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"), Overlay: "ovl", Underlay: "ul"})
	if err != nil {
		t.Fatal(err)
	}
}
