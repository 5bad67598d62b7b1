package dataplane

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
)

// ebpfAttach: Cilium's pod attachment with BPF host routing. Pods are routed /32 veths as in
// the routed kind (CNI ptp; the host side answers ARP for the pod's gateway), and tc programs
// forward (bpf/ep_fwd.c): on each pod's host veth, a packet to a pod of the same node is
// bpf_redirect_peer'ed into that pod's namespace, one to another node's pod goes by a FIB
// lookup and bpf_redirect_neigh straight to the overlay device; on the overlay device and the
// underlay, a packet for a local pod is redirected into it. Redirected packets skip the node's
// IP stack: with Services or policies enforced there (iptables, nftables), the programs pass
// everything up the stack instead (Filtered).
type ebpfAttach struct{ routed }

func init() { RegisterAttach(ebpfAttach{}) }

func (ebpfAttach) Name() string { return "ebpf" }
func (ebpfAttach) Summary() string {
	return "routed /32 veths forwarded by tc programs: bpf_redirect_peer into local pods, FIB lookup + bpf_redirect_neigh to other nodes (Cilium-like)"
}
func (a ebpfAttach) Needs() []string { return append(a.routed.Needs(), "bpf") }

func bpfNode(n Node) bpfdp.Node { return bpfdp.Node{NS: n.NS, Dir: n.BPFDir} }

// SetupNode keeps the routed layout's blackhole and loads the forwarding, attached to the
// node's underlay and overlay devices.
func (a ebpfAttach) SetupNode(n Node) error {
	if err := a.routed.SetupNode(n); err != nil {
		return err
	}
	if err := bpfdp.FwdUsable(); err != nil {
		return err
	}
	cc, ok := netip.AddrFromSlice(n.ClusterCIDR.IP.To4())
	if !ok {
		return fmt.Errorf("cluster CIDR %s is not IPv4", n.ClusterCIDR)
	}
	ones, _ := n.ClusterCIDR.Mask.Size()
	return bpfNode(n).SetupFwd(netip.PrefixFrom(cc, ones))
}

// PodAdded lays the pod out as the routed kind does, then records it in the node's endpoint
// table and attaches the forwarding to its host veth.
func (a ebpfAttach) PodAdded(n Node, p PodNet) error {
	if err := a.routed.PodAdded(n, p); err != nil {
		return err
	}
	var mac net.HardwareAddr
	err := p.Netlink(func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err == nil {
			mac = eth.Attrs().HardwareAddr
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pod %s eth0: %w", p.NS, err)
	}
	ip, ok := netip.AddrFromSlice(p.IP.To4())
	if !ok {
		return fmt.Errorf("pod %s: address %s is not IPv4", p.NS, p.IP)
	}
	return bpfNode(n).AddEndpoint(ip, p.HostVeth, mac)
}

// Counters are the node's forwarding counters: fwd_local (redirected into a local pod),
// fwd_remote (to the device and next hop of the node's routes), fwd_stack (passed up the stack).
func (ebpfAttach) Counters(n Node) (map[string]uint64, error) {
	s, err := bpfNode(n).FwdStats()
	if err != nil {
		return nil, err
	}
	return map[string]uint64{"fwd_local": s.Local, "fwd_remote": s.Remote, "fwd_stack": s.Stack}, nil
}

// Filtered makes the forwarding pass pod traffic up the node's IP stack, where the Services or
// policies are.
func (ebpfAttach) Filtered(n Node) error { return bpfNode(n).SetStackMode(true) }
func (ebpfAttach) FilterNeeds() []string { return nil }
