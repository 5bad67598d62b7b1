package ebpf

import (
	"reflect"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

// TestCloseLeavesNothing starts each kind in a chain, checks that it is attached and pinned,
// closes it and checks that no pin, no attached program and no loaded program is left, that
// the peers' settings are back as they were, and that a second Close is harmless.
func TestCloseLeavesNothing(t *testing.T) {
	for _, name := range []string{"ebpf-tc", "xdp", "ebpf-redirect"} {
		t.Run(name, func(t *testing.T) {
			c := &capture{Kind: nftest.Kind(t, name), t: t}
			ch := nftest.Build(t, c, 1, 10)
			if err := nftest.EchoTCP(ch, int(nftest.Ports[0].Port), 100000, 5*time.Second); err != nil {
				t.Fatalf("allowed TCP through %s: %v", name, err)
			}
			if p := pins(t, c.env.BPFDir); len(p) == 0 {
				t.Errorf("nothing pinned in %s", c.env.BPFDir)
			} else {
				t.Logf("pinned: %v", p)
			}
			var ids []ebpf.ProgramID
			for _, dev := range []string{c.env.In, c.env.Out} {
				h := hooksOf(t, nf.Endpoint{NS: c.env.NS, Dev: dev})
				if h.empty() {
					t.Errorf("nothing attached to %s", dev)
				}
				if h.xdp != 0 {
					ids = append(ids, h.xdp)
				}
				ids = append(ids, h.tcxIn...)
			}
			if name == "xdp" {
				for _, peer := range []nf.Endpoint{c.env.InPeer, c.env.OutPeer} {
					if f := hooksOf(t, peer).features; !f[nf.GRO.String()] || f[nf.TxChecksum.String()] {
						t.Errorf("peer %v not prepared for XDP redirects: %v", peer, f)
					}
				}
			}
			if err := c.inst.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if p := pins(t, c.env.BPFDir); len(p) != 0 {
				t.Errorf("pins left after Close: %v", p)
			}
			for _, ep := range endpoints(c.env) {
				h := hooksOf(t, ep)
				if !h.empty() {
					t.Errorf("%v: programs attached after Close: %+v", ep, h)
				}
				if want := c.before[ep].features; !reflect.DeepEqual(h.features, want) {
					t.Errorf("%v: settings after Close %v, before Start %v", ep, h.features, want)
				}
			}
			waitFreed(t, ids)
			if err := c.inst.Close(); err != nil {
				t.Errorf("second close: %v", err)
			}
		})
	}
}
