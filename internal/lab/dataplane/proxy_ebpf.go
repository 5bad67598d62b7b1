package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// ebpfProxy: Services load-balanced by eBPF as Cilium's kube-proxy replacement does.
//
//   - ebpf: per packet, by a program at the tcx ingress of every interface of a node (each
//     pod's host side, the overlay device, the underlay): the first packet to a Service picks a
//     backend at random and is DNATed, an LRU connection table keeps the choice for the
//     connection and turns replies back into the Service's address (bpf/lb.h). A pod given
//     itself as the backend (hairpin) gets the service loopback address as its connection's
//     source (bpfdp.ServiceLoopback), as Cilium's tc load balancer does.
//   - ebpf-sock: at connect time as well (Cilium's socket LB, bpf/sock_lb.c): programs on the
//     cgroup of the node's pod processes connect a socket to a backend instead of the Service,
//     so the connection's packets never carry the Service address; the per-packet program stays
//     for traffic no pod process of the node sent (from other nodes, from outside). Hairpin
//     needs nothing more there: a pod's socket connected to the pod's own address talks to
//     itself over its loopback device, as with Cilium's socket LB.
//
// Lookups are hashes: the cost per connection does not grow with the number of Services. One
// Service table per node, pinned in the node's bpf file system and shared by both programs.
type ebpfProxy struct{ sock bool }

var _ PartialProxy = ebpfProxy{}

func init() {
	RegisterProxy(ebpfProxy{})
	RegisterProxy(ebpfProxy{sock: true})
}

func (p ebpfProxy) Name() string {
	if p.sock {
		return "ebpf-sock"
	}
	return "ebpf"
}

func (p ebpfProxy) Summary() string {
	if p.sock {
		return "eBPF Service load balancing at connect time (cgroup connect4/sendmsg4) and per packet for the rest (Cilium's socket LB)"
	}
	return "eBPF Service load balancing per packet at tc ingress: DNAT with an LRU connection table (Cilium-like)"
}

func (ebpfProxy) Needs() []string { return []string{"bpf"} }

func (p ebpfProxy) Usable() error {
	if err := bpfdp.LBUsable(); err != nil || !p.sock {
		return err
	}
	return bpfdp.SockLBUsable()
}

// Render lists every Service port with its backends (bpfdp.EncodeServices), and a NodePort
// Service's port also at each of the node's addresses: externalTrafficPolicy Local with the
// node's own endpoints only (none: its packets are dropped), Cluster with all of them, those on
// other nodes marked remote. Services without endpoints are kept: their packets are dropped.
func (ebpfProxy) Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts) {
	out, cnt := ebpfTable(svcs, opt)
	return bpfdp.EncodeServices(out), cnt
}

// RenderPartial renders svcs as Render does, then as a change from prev, the node's table as
// the last applied rendering left it (a bpfdp.ServiceTable): the entries that differ, whole,
// and those gone (bpfdp.EncodeServiceChange), so that Apply writes only them. Without prev, or
// when svcs render an entry twice (no change can express that table; Apply refuses it as
// SetServices does), the input is Render's.
func (ebpfProxy) RenderPartial(prev any, svcs []proxy.Service, opt proxy.Options) ([]byte, any, proxy.Counts) {
	out, cnt := ebpfTable(svcs, opt)
	if t, ok := prev.(bpfdp.ServiceTable); ok && t != nil {
		if c, next, touched, err := t.Diff(out); err == nil {
			cnt.Changed = touched
			return bpfdp.EncodeServiceChange(c), next, cnt
		}
	}
	var next any
	if t, err := bpfdp.NewServiceTable(out); err == nil {
		next = t
	}
	return bpfdp.EncodeServices(out), next, cnt
}

// ebpfTable is the load balancer's table for svcs in the node opt names (Render says what it
// holds).
func ebpfTable(svcs []proxy.Service, opt proxy.Options) ([]bpfdp.Service, proxy.Counts) {
	cnt := proxy.Counts{Services: len(svcs)}
	out := make([]bpfdp.Service, 0, len(svcs))
	add := func(addr string, port int, proto string, nodePort bool, eps []proxy.Endpoint) {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return // the lab hands out IPv4 addresses only
		}
		b := bpfdp.Service{Addr: a, Port: uint16(port), Proto: proto, NodePort: nodePort}
		for _, e := range eps {
			if ip, err := netip.ParseAddr(e.IP); err == nil {
				b.Backends = append(b.Backends, bpfdp.Backend{AddrPort: netip.AddrPortFrom(ip, uint16(e.Port)),
					Remote: nodePort && e.Node != opt.NodeName})
			}
		}
		cnt.Elements += 1 + len(b.Backends)
		out = append(out, b)
	}
	for _, s := range svcs {
		cnt.Endpoints += len(s.Endpoints)
		add(s.ClusterIP, s.Port, s.Protocol, false, s.Endpoints)
		if s.NodePort == 0 {
			continue
		}
		for _, ip := range opt.NodeIPs {
			add(ip, s.NodePort, s.Protocol, true, s.ExternalEndpoints(opt.NodeName))
		}
	}
	return out, cnt
}

// Apply attaches the node's load balancers wherever they are not attached yet and makes the
// Service table hold the rendering: Render's replaces the table (SetServices), RenderPartial's
// change writes only what it names (ChangeServices). A change needs the table it was rendered
// from: on a node without one it is an error (the lab renders a full one next).
func (p ebpfProxy) Apply(n Node, input []byte) error {
	c, partial, err := bpfdp.DecodeServiceInput(input)
	if err != nil {
		return err
	}
	bn := bpfNode(n)
	if partial && !bn.HasLB() {
		return fmt.Errorf("proxy %s: a change of the Service table of node %s, which has none", p.Name(), n.Name)
	}
	if err := bn.AttachLB(); err != nil {
		return err
	}
	if p.sock {
		if err := bn.AttachSockLB(n.Cgroup); err != nil {
			return err
		}
	}
	if partial {
		return bn.ChangeServices(c)
	}
	return bn.SetServices(c.Upsert)
}

// Counters are the node's load balancer counters (lb_*: bpfdp.LBStats) and, for ebpf-sock, the
// socket load balancer's (sock_picked, sock_no_backend). Zero before the first Service.
func (p ebpfProxy) Counters(n Node) (map[string]uint64, error) {
	bn := bpfNode(n)
	if !bn.HasLB() {
		return map[string]uint64{}, nil
	}
	s, err := bn.LBStats()
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{"lb_packets": s.Packets, "lb_new": s.New, "lb_forward": s.Forward, "lb_reply": s.Reply,
		"lb_no_backend": s.NoBackend, "lb_nodeport": s.NodePort, "lb_hairpin": s.Hairpin}
	if p.sock && bn.HasSockLB() {
		ss, err := bn.SockLBStats()
		if err != nil {
			return nil, err
		}
		out["sock_picked"], out["sock_no_backend"] = ss.Picked, ss.NoBackend
	}
	return out, nil
}

// PodAdded attaches the node's per-packet load balancer to the pod's host interface.
func (ebpfProxy) PodAdded(n Node, p PodNet) error {
	if p.HostVeth == "" {
		return nil
	}
	return bpfNode(n).AttachLB(p.HostVeth)
}
