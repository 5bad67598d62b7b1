package lab

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

const underlayBridge = "underlay"

func nthIP(base net.IP, n int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, base.To4())
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += uint32(n)
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
}

// buildUnderlay creates the fabric namespace with its bridge and one namespace per node.
func (l *Lab) buildUnderlay() error {
	_, ul, _ := net.ParseCIDR(l.cfg.UnderlayCIDR)
	_, cc, _ := net.ParseCIDR(l.cfg.ClusterCIDR)
	l.ulMask = ul.Mask
	l.gw = nthIP(ul.IP, 1)
	if err := createNS(l.fabric); err != nil {
		return err
	}
	err := withHandle(l.fabric, func(h *netlink.Handle) error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: underlayBridge, MTU: l.cfg.MTU}}
		if err := h.LinkAdd(br); err != nil {
			return fmt.Errorf("underlay bridge: %w", err)
		}
		if err := h.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: l.gw, Mask: ul.Mask}}); err != nil {
			return err
		}
		return h.LinkSetUp(br)
	})
	if err != nil {
		return err
	}
	mask := l.cfg.NodeCIDRMaskSize
	for i := 0; i < l.cfg.Nodes; i++ {
		n := &node{index: i, name: fmt.Sprintf("node%d", i), ns: fmt.Sprintf("%s-n%d", l.cfg.Prefix, i), ip: nthIP(ul.IP, 10+i),
			podCIDR: nodePodCIDR(cc, mask, i), silentCIDR: silentBlock(cc, l.cfg.Nodes, mask, i)}
		l.nodes = append(l.nodes, n)
		if err := createNS(n.ns); err != nil {
			return err
		}
		if err := makeCgroup(l.nodeCgroup(n)); err != nil {
			return fmt.Errorf("node %s: cgroup: %w", n.name, err)
		}
		if err := l.plugNode(i, n); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		// A node forwards for its pods, as every Kubernetes node does.
		if err := writeSysctl(n.ns, "net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
	}
	return nil
}

// nodePodCIDR is node i's pod CIDR: the i-th /mask block of the cluster CIDR cc.
func nodePodCIDR(cc *net.IPNet, mask, i int) *net.IPNet {
	return &net.IPNet{IP: nthIP(cc.IP, i<<(32-mask)), Mask: net.CIDRMask(mask, 32)}
}

// NodeLink is the name of a node's link to the underlay, inside the node's namespace.
const NodeLink = "eth0"

// plugNode joins a node namespace to the underlay bridge with a veth pair created inside the
// fabric namespace (its peer goes straight into the node: nothing touches the root namespace).
func (l *Lab) plugNode(i int, n *node) error {
	nodeNS, err := netns.GetFromPath(nsPath(n.ns))
	if err != nil {
		return err
	}
	defer nodeNS.Close()
	err = withHandle(l.fabric, func(h *netlink.Handle) error {
		br, err := h.LinkByName(underlayBridge)
		if err != nil {
			return err
		}
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("n%d", i), MTU: l.cfg.MTU},
			PeerName: NodeLink, PeerNamespace: netlink.NsFd(int(nodeNS))}
		if err := h.LinkAdd(v); err != nil {
			return fmt.Errorf("underlay veth: %w", err)
		}
		fl, err := h.LinkByName(v.Name)
		if err != nil {
			return err
		}
		if err := h.LinkSetMaster(fl, br); err != nil {
			return err
		}
		return h.LinkSetUp(fl)
	})
	if err != nil {
		return err
	}
	return withHandle(n.ns, func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := h.LinkSetMTU(eth, l.cfg.MTU); err != nil {
			return err
		}
		if err := h.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: n.ip, Mask: l.ulMask}}); err != nil {
			return err
		}
		if err := h.LinkSetUp(eth); err != nil {
			return err
		}
		// Like a real node: a default route to the underlay gateway.
		return h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: l.gw})
	})
}

func (l *Lab) clusterCIDR() *net.IPNet {
	_, cc, _ := net.ParseCIDR(l.cfg.ClusterCIDR)
	return cc
}

// buildPodNetwork programs what the emulated CNI's node agent programs: the overlay devices
// in every node first, then in each node what the attach kind keeps there and the way to
// every other node (over the overlay device, or native routes).
func (l *Lab) buildPodNetwork() error {
	nodes := l.views()
	for _, n := range nodes {
		if err := l.dp.Overlay.SetupNode(n, l.dp.Preset, l.cfg.MTU); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, n := range nodes {
		if err := l.dp.Attach.SetupNode(n); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if err := l.dp.Agent.SetupNode(n); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		for _, m := range nodes {
			if m.Name == n.Name {
				continue
			}
			if err := l.dp.Overlay.Remote(n, m, l.dp.Preset); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
	}
	return nil
}

// blocks are the address blocks other nodes route to this node: its pod CIDR and its
// silent-pod block.
// nodeOfIP is the name of the node whose pod address blocks hold ip, "" if none: where a pod
// with that address lives (every pod on the pod network has its address from its node's
// blocks; the routes between the nodes rely on it).
func (l *Lab) nodeOfIP(ip string) string {
	a := net.ParseIP(ip)
	for _, n := range l.nodes {
		for _, b := range n.blocks() {
			if b.Contains(a) {
				return n.name
			}
		}
	}
	return ""
}

func (n *node) blocks() []*net.IPNet {
	if n.silentCIDR == nil {
		return []*net.IPNet{n.podCIDR}
	}
	return []*net.IPNet{n.podCIDR, n.silentCIDR}
}
