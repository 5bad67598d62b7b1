package dataplane

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/cnibench/cnibench/internal/lab/bpfdp"
	"github.com/cnibench/cnibench/internal/lab/proxy"
)

// polycubeProxy: the Service tables of seed 003's provider (attach ebpf-chain or ebpf-mono),
// as its operator programs them: every Service's ClusterIP in the internal load balancer
// (internalTrafficPolicy Cluster: every endpoint); a NodePort Service's port in the external
// load balancer, at each of the node's addresses, with the endpoints its
// externalTrafficPolicy gives that node (Local: its own, none: dropped), and in DISC-NAT's
// NodePort table with the policy (Cluster: source NAT to the node's fictitious pod).
type polycubeProxy struct{}

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
	data, err := json.Marshal(out)
	if err != nil {
		panic(fmt.Sprintf("proxy polycube: marshal a rendering: %v", err)) // plain structs always marshal
	}
	return data, cnt
}

// Apply makes the node's ILB, ELB and DISC-NAT hold the rendering.
func (polycubeProxy) Apply(n Node, input []byte) error {
	var s bpfdp.PolycubeServices
	if err := json.Unmarshal(input, &s); err != nil {
		return fmt.Errorf("proxy polycube: %w", err)
	}
	return bpfNode(n).PolycubeSetServices(s)
}

// PodAdded: the ILB is the pod's edge port already (the attach kind's); nothing to do. (Being a
// PodHook says the engine works at the pods' host side, not in the node's IP stack.)
func (polycubeProxy) PodAdded(Node, PodNet) error { return nil }
