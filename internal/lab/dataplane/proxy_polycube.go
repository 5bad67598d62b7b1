package dataplane

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// polycubeProxy: the Service tables of seed 003's provider (attach ebpf-chain or ebpf-mono),
// as its operator programs them: every Service's ClusterIP in the internal load balancer
// (internalTrafficPolicy Cluster: every endpoint); a NodePort Service's port in the external
// load balancer, at each of the node's addresses, with the endpoints its
// externalTrafficPolicy gives that node (Local: its own, none: dropped), and in DISC-NAT's
// NodePort table with the policy (Cluster: source NAT to the node's fictitious pod).
type polycubeProxy struct{}

var _ PartialProxy = polycubeProxy{}

func init() { RegisterProxy(polycubeProxy{}) }

func (polycubeProxy) Name() string { return "polycube" }
func (polycubeProxy) Summary() string {
	return "seed 003's eBPF load balancers: ClusterIPs in the ILB, NodePorts in the ELB and DISC-NAT (attach ebpf-chain/ebpf-mono only)"
}
func (polycubeProxy) Needs() []string { return []string{"bpf"} }
func (polycubeProxy) Usable() error   { return bpfdp.PolycubeUsable() }

// Combines: the tables are the provider's; another attach kind has no provider to fill.
func (polycubeProxy) Combines(p Parts) error {
	if _, ok := p.Attach.(ebpfChain); !ok {
		return fmt.Errorf("proxy polycube fills the tables of seed 003's provider: it needs attach ebpf-chain or ebpf-mono, not %s", p.Attach.Name())
	}
	return nil
}

// Render renders the node's tables (bpfdp.PolycubeServices) as JSON.
func (polycubeProxy) Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts) {
	out, cnt := polycubeTables(svcs, opt)
	return marshalPolycube(out), cnt
}

// RenderPartial renders svcs as Render does, then as a change from prev, the node's tables as
// the last applied rendering left them (a bpfdp.PolycubeTable): the ILB and ELB entries that
// differ, whole, those gone, and DISC-NAT's ports gone with their last NodePort, as JSON
// {"Partial": bpfdp.PolycubeChange}, so that Apply writes only them. Without prev, or when
// svcs do not render to tables (an entry twice, a NodePort Local and Cluster at once: Apply
// refuses them as PolycubeSetServices does), the input is Render's.
func (polycubeProxy) RenderPartial(prev any, svcs []proxy.Service, opt proxy.Options) ([]byte, any, proxy.Counts) {
	out, cnt := polycubeTables(svcs, opt)
	if t, ok := prev.(bpfdp.PolycubeTable); ok && t.ClusterIPs != nil {
		if c, next, touched, err := t.Diff(out); err == nil {
			cnt.Changed = touched
			return marshalPolycube(struct{ Partial *bpfdp.PolycubeChange }{&c}), next, cnt
		}
	}
	var next any
	if t, err := bpfdp.NewPolycubeTable(out); err == nil {
		next = t
	}
	return marshalPolycube(out), next, cnt
}

// polycubeInput is what Apply reads: Render's tables (Partial nil), or RenderPartial's change
// alone ({"Partial": ...}).
type polycubeInput struct {
	bpfdp.PolycubeServices
	Partial *bpfdp.PolycubeChange `json:",omitempty"`
}

func marshalPolycube(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("proxy polycube: marshal a rendering: %v", err)) // plain structs always marshal
	}
	return data
}

// polycubeTables are the node's tables for svcs in the node opt names (the type's comment says
// what they hold).
func polycubeTables(svcs []proxy.Service, opt proxy.Options) (bpfdp.PolycubeServices, proxy.Counts) {
	cnt := proxy.Counts{Services: len(svcs)}
	var out bpfdp.PolycubeServices
	backends := func(eps []proxy.Endpoint) []netip.AddrPort {
		var bs []netip.AddrPort
		for _, e := range eps {
			if ip, err := netip.ParseAddr(e.IP); err == nil {
				bs = append(bs, netip.AddrPortFrom(ip, uint16(e.Port)))
			}
		}
		return bs
	}
	for _, s := range svcs {
		cnt.Endpoints += len(s.Endpoints)
		addr, err := netip.ParseAddr(s.ClusterIP)
		if err != nil {
			continue // the lab hands out IPv4 addresses only
		}
		c := bpfdp.Service{Addr: addr, Port: uint16(s.Port), Proto: s.Protocol}
		for _, b := range backends(s.Endpoints) {
			c.Backends = append(c.Backends, bpfdp.Backend{AddrPort: b})
		}
		out.ClusterIPs = append(out.ClusterIPs, c)
		cnt.Elements += 1 + len(c.Backends)
		if s.NodePort == 0 {
			continue
		}
		ext := backends(s.ExternalEndpoints(opt.NodeName))
		for _, ip := range opt.NodeIPs {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			out.NodePorts = append(out.NodePorts, bpfdp.PolycubeNodePort{Addr: a, Port: uint16(s.NodePort), Proto: s.Protocol,
				Local: s.ExternalLocal, Backends: ext})
			cnt.Elements += 2 + len(ext) // the ELB's Service and backends, DISC-NAT's NodePort
		}
	}
	return out, cnt
}

// Apply makes the node's ILB, ELB and DISC-NAT hold the rendering: Render's replaces the
// tables (PolycubeSetServices), RenderPartial's change writes only what it names
// (PolycubeChangeServices).
func (polycubeProxy) Apply(n Node, input []byte) error {
	var in polycubeInput
	if err := json.Unmarshal(input, &in); err != nil {
		return fmt.Errorf("proxy polycube: %w", err)
	}
	if in.Partial != nil {
		return bpfNode(n).PolycubeChangeServices(*in.Partial)
	}
	return bpfNode(n).PolycubeSetServices(in.PolycubeServices)
}

// PodAdded: the ILB is the pod's edge port already (the attach kind's); nothing to do. (Being a
// PodHook says the engine works at the pods' host side, not in the node's IP stack.)
func (polycubeProxy) PodAdded(Node, PodNet) error { return nil }
