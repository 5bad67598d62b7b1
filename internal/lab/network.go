package lab

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const underlayBridge = "underlay"

// nsHandle opens a netlink handle operating inside the named namespace.
func nsHandle(name string) (*netlink.Handle, netns.NsHandle, error) {
	ns, err := netns.GetFromPath(nsPath(name))
	if err != nil {
		return nil, 0, fmt.Errorf("open netns %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, 0, fmt.Errorf("netlink in %s: %w", name, err)
	}
	return h, ns, nil
}

// withHandle runs fn with a netlink handle in the named namespace.
func withHandle(name string, fn func(h *netlink.Handle) error) error {
	h, ns, err := nsHandle(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	defer h.Close()
	return fn(h)
}

func linkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

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
	for i := 0; i < l.cfg.Nodes; i++ {
		n := &node{name: fmt.Sprintf("node%d", i), ns: fmt.Sprintf("%s-n%d", l.cfg.Prefix, i), ip: nthIP(ul.IP, 10+i),
			podCIDR: &net.IPNet{IP: nthIP(cc.IP, 256*i), Mask: net.CIDRMask(24, 32)}, silentCIDR: silentBlock(cc, l.cfg.Nodes, i)}
		l.nodes = append(l.nodes, n)
		if err := createNS(n.ns); err != nil {
			return err
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
			PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nodeNS))}
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

// buildPodNetwork programs what the emulated CNI's node agent programs: the overlay device with
// its FDB and neighbour entries, or native routes between nodes.
func (l *Lab) buildPodNetwork() error {
	if l.preset.Overlay == "vxlan" {
		for i, n := range l.nodes {
			n.vtepMAC = net.HardwareAddr{0x0a, 0xcb, 0, 0, byte(i >> 8), byte(i)}
			if err := l.addVTEP(n); err != nil {
				return fmt.Errorf("node %s: vxlan: %w", n.name, err)
			}
		}
	}
	for _, n := range l.nodes {
		err := withHandle(n.ns, func(h *netlink.Handle) error {
			eth, err := h.LinkByName("eth0")
			if err != nil {
				return err
			}
			if l.preset.Attach == "routed" {
				// Calico keeps a blackhole for the node's own block; /32 pod routes are more specific.
				if err := h.RouteAdd(&netlink.Route{Dst: n.podCIDR, Type: unix.RTN_BLACKHOLE}); err != nil {
					return fmt.Errorf("blackhole route: %w", err)
				}
			}
			var vtep netlink.Link
			if l.preset.Overlay == "vxlan" {
				if vtep, err = h.LinkByName(l.preset.VXLANDev); err != nil {
					return err
				}
			}
			for _, m := range l.nodes {
				if m == n {
					continue
				}
				if vtep == nil {
					// Native routing (flannel host-gw, Calico BGP): the remote pod CIDR via the remote node.
					for _, dst := range m.blocks() {
						if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: dst, Gw: m.ip}); err != nil {
							return fmt.Errorf("route %s via %s: %w", dst, m.ip, err)
						}
					}
					continue
				}
				if err := l.programRemoteVTEP(h, vtep, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
	}
	return nil
}

// addVTEP creates the node's VXLAN device (learning off, as flanneld and Calico create it) with
// the first address of the node's pod CIDR as its /32.
func (l *Lab) addVTEP(n *node) error {
	return withHandle(n.ns, func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		vx := &netlink.Vxlan{
			LinkAttrs:    netlink.LinkAttrs{Name: l.preset.VXLANDev, MTU: l.cfg.MTU - l.preset.Overhead(), HardwareAddr: n.vtepMAC},
			VxlanId:      l.preset.VNI,
			VtepDevIndex: eth.Attrs().Index,
			SrcAddr:      n.ip,
			Port:         l.preset.VXLANPort,
			Learning:     false,
		}
		if err := h.LinkAdd(vx); err != nil {
			return err
		}
		if err := h.AddrAdd(vx, &netlink.Addr{IPNet: &net.IPNet{IP: n.podCIDR.IP, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		return h.LinkSetUp(vx)
	})
}

// programRemoteVTEP writes the three entries flanneld writes for a remote node: a permanent
// neighbour (remote VTEP IP -> MAC), an FDB entry (MAC -> remote underlay IP) and an onlink
// route of the remote pod CIDR via the remote VTEP IP.
func (l *Lab) programRemoteVTEP(h *netlink.Handle, vtep netlink.Link, m *node) error {
	idx := vtep.Attrs().Index
	if err := h.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: m.podCIDR.IP, HardwareAddr: m.vtepMAC}); err != nil {
		return fmt.Errorf("neighbour %s: %w", m.podCIDR.IP, err)
	}
	if err := h.NeighAppend(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
		Flags: netlink.NTF_SELF, IP: m.ip, HardwareAddr: m.vtepMAC}); err != nil {
		return fmt.Errorf("fdb %s -> %s: %w", m.vtepMAC, m.ip, err)
	}
	for _, dst := range m.blocks() {
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: dst, Gw: m.podCIDR.IP, Flags: int(netlink.FLAG_ONLINK)}); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, m.podCIDR.IP, err)
		}
	}
	return nil
}

// blocks are the address blocks other nodes route to this node: its pod CIDR and its
// silent-pod block.
func (n *node) blocks() []*net.IPNet {
	if n.silentCIDR == nil {
		return []*net.IPNet{n.podCIDR}
	}
	return []*net.IPNet{n.podCIDR, n.silentCIDR}
}
