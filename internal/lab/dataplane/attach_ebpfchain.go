package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
)

// ebpfChain: seed 003's Kubernetes network provider (Polycube's polykube), its router,
// internal and external load balancers, firewall and Linux-stack discriminator/NAT as eBPF
// functions of one C source (bpf/polycube.h), built two ways:
//
//   - ebpf-chain: disaggregated, as Polycube runs it: one program per cube with its own maps
//     and forward-chain map, cubes chained by tail calls (bpf/polycube_chain.c);
//   - ebpf-mono: the same functions and maps in one monolithic program per hook, one parse, no
//     tail call (bpf/polycube_mono.c), so that what disaggregation costs is measured directly.
//
// Pods get a /32 on a veth (CNI ptp) and a static ARP entry for their gateway (169.254.1.1, the
// host veth's MAC): pods never ARP. The pod's host veth is an ILB edge port (its tcx ingress
// runs the ILB, or the monolith's pod entry), the node's VXLAN device feeds the router, the
// underlay eth0 feeds DISC-NAT; VXLAN encapsulation is the kernel's (the vxlan overlay's
// device, neighbours and FDB). Services are the polycube proxy's tables, policies the polycube
// policy engine's (the firewall cube): other proxies and policy engines would judge or
// translate packets the chain has already forwarded, so they are refused.
type ebpfChain struct{ mono bool }

func init() {
	RegisterAttach(ebpfChain{})
	RegisterAttach(ebpfChain{mono: true})
}

// pcGateway is the pods' gateway: link-local, answered by nobody (the pods' static ARP entry
// points at their host veth).
var pcGateway = net.IPv4(169, 254, 1, 1).To4()

func (a ebpfChain) Name() string {
	if a.mono {
		return "ebpf-mono"
	}
	return "ebpf-chain"
}

func (a ebpfChain) Summary() string {
	if a.mono {
		return "seed 003's eBPF provider built monolithic: router, ILB, ELB, DISC-NAT, firewall functions called in sequence by one program per hook"
	}
	return "seed 003's disaggregated eBPF provider: router, ILB, ELB, DISC-NAT, firewall cubes chained by tail calls (Polycube)"
}

func (ebpfChain) Needs() []string  { return []string{"cni ptp", "cni host-local", "bpf"} }
func (ebpfChain) PodNetwork() bool { return true }

func (a ebpfChain) build() bpfdp.PolycubeBuild {
	if a.mono {
		return bpfdp.PolycubeMono
	}
	return bpfdp.PolycubeChain
}

func (ebpfChain) CNI(podMTU int, ipam map[string]any) (string, map[string]any) {
	return "polycube", map[string]any{"type": "ptp", "ipMasq": false, "mtu": podMTU, "ipam": ipam}
}

// Combines: the router's VXLAN port needs the vxlan overlay; Services and policies must be
// the provider's own cubes.
func (a ebpfChain) Combines(p Parts) error {
	if _, ok := p.Overlay.(vxlan); !ok {
		return fmt.Errorf("attach %s routes other nodes' pods to a VXLAN device: it needs the vxlan overlay, not %s", a.Name(), p.Overlay.Name())
	}
	if _, ok := p.Proxy.(polycubeProxy); !ok && p.Proxy.Name() != None {
		return fmt.Errorf("attach %s forwards packets past the node's IP stack and other programs: its Services are its own load balancers (proxy polycube), not proxy %s", a.Name(), p.Proxy.Name())
	}
	if _, ok := p.Policy.(polycubePolicy); !ok && p.Policy.Name() != None {
		return fmt.Errorf("attach %s forwards packets past the node's IP stack and other programs: its policies are its own firewall cube (policy polycube), not policy %s", a.Name(), p.Policy.Name())
	}
	return nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, error) {
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%s is not IPv4", n)
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones), nil
}

// SetupNode keeps a blackhole for the node's pod CIDR (an address of it without a pod goes
// nowhere), finds the overlay's VXLAN device and loads the provider.
func (a ebpfChain) SetupNode(n Node) error {
	cfg := bpfdp.PolycubeConfig{Underlay: "eth0"}
	var err error
	if cfg.NodeIP, err = netip.ParseAddr(n.IP.String()); err != nil || !cfg.NodeIP.Is4() {
		return fmt.Errorf("node address %s is not IPv4", n.IP)
	}
	if cfg.PodCIDR, err = prefixOf(n.PodCIDR); err != nil {
		return err
	}
	if cfg.ClusterCIDR, err = prefixOf(n.ClusterCIDR); err != nil {
		return err
	}
	for _, b := range n.Blocks {
		p, err := prefixOf(b)
		if err != nil {
			return err
		}
		cfg.Blocks = append(cfg.Blocks, p)
	}
	err = n.Netlink(func(h *netlink.Handle) error {
		if err := h.RouteAdd(&netlink.Route{Dst: n.PodCIDR, Type: unix.RTN_BLACKHOLE}); err != nil {
			return fmt.Errorf("blackhole route: %w", err)
		}
		links, err := h.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Type() == "vxlan" {
				cfg.Overlay = l.Attrs().Name
			}
		}
		if cfg.Overlay == "" {
			return errors.New("no VXLAN device: the router's VXLAN port needs the vxlan overlay")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := bpfdp.PolycubeUsable(); err != nil {
		return err
	}
	return bpfNode(n).SetupPolycube(a.build(), cfg)
}

// PodAdded lays the pod out as seed 003's CNI plugin does (its host veth keeps no address and
// no proxy ARP; the node routes the pod's /32 to it, for the node's own traffic to the pod; the
// pod has a /32, a default route via 169.254.1.1 and a static ARP entry for it), then gives it
// its ILB edge port.
func (ebpfChain) PodAdded(n Node, p PodNet) error {
	hostMAC, err := routedHostSide(n, p)
	if err != nil {
		return fmt.Errorf("pod %s host side: %w", p.NS, err)
	}
	var podMAC net.HardwareAddr
	err = p.Netlink(func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		podMAC = eth.Attrs().HardwareAddr
		routes, err := h.RouteList(eth, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if err := h.RouteDel(&r); err != nil {
				return err
			}
		}
		idx := eth.Attrs().Index
		if err := h.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: pcGateway, HardwareAddr: hostMAC}); err != nil {
			return fmt.Errorf("static ARP entry for %s: %w", pcGateway, err)
		}
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: pcGateway, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: pcGateway})
	})
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.NS, err)
	}
	ip, ok := netip.AddrFromSlice(p.IP.To4())
	if !ok {
		return fmt.Errorf("pod %s: address %s is not IPv4", p.NS, p.IP)
	}
	return bpfNode(n).PolycubeAddPod(ip, p.HostVeth, podMAC)
}

// Filtered: Combines admits no engine that filters in the node's IP stack.
func (a ebpfChain) Filtered(Node) error {
	return fmt.Errorf("attach %s cannot let Services or policies in the node's IP stack see pod traffic", a.Name())
}
func (ebpfChain) FilterNeeds() []string { return nil }

// Counters are the node's per-cube counters ("<cube>_<counter>", bpfdp.PolycubeCounters).
func (ebpfChain) Counters(n Node) (map[string]uint64, error) { return bpfNode(n).PolycubeCounters() }
