package dataplane

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// VXLAN are a preset's VXLAN parameters (its device name, VNI and UDP port differ between
// the CNIs it emulates).
type VXLAN struct {
	Dev  string
	VNI  int
	Port int
}

// vxlan: a VXLAN device per node with learning off, and per remote node the three entries
// flanneld (and Calico's VXLAN mode) writes: a permanent neighbour (remote VTEP IP -> MAC), an
// FDB entry (MAC -> remote underlay IP) and onlink routes of the remote blocks via the remote
// VTEP IP. The VTEP's address is the first of the node's pod CIDR.
type vxlan struct{}

func init() { RegisterOverlay(vxlan{}) }

func (vxlan) Name() string { return "vxlan" }
func (vxlan) Summary() string {
	return "VXLAN between nodes (static FDB and neighbours, as flanneld writes them)"
}
func (vxlan) Needs() []string { return []string{"vxlan"} }

// Overhead of VXLAN over IPv4: outer IP 20 + UDP 8 + VXLAN 8 + inner Ethernet 14.
func (vxlan) Overhead() int { return 50 }

// vtepMAC is node i's VTEP address.
func vtepMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x0a, 0xcb, 0, 0, byte(i >> 8), byte(i)}
}

func (o vxlan) SetupNode(n Node, p Preset, underlayMTU int) error {
	err := n.Netlink(func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		vx := &netlink.Vxlan{
			LinkAttrs:    netlink.LinkAttrs{Name: p.VXLAN.Dev, MTU: underlayMTU - o.Overhead(), HardwareAddr: vtepMAC(n.Index)},
			VxlanId:      p.VXLAN.VNI,
			VtepDevIndex: eth.Attrs().Index,
			SrcAddr:      n.IP,
			Port:         p.VXLAN.Port,
			Learning:     false,
		}
		if err := h.LinkAdd(vx); err != nil {
			return err
		}
		if err := h.AddrAdd(vx, &netlink.Addr{IPNet: &net.IPNet{IP: n.PodCIDR.IP, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		return h.LinkSetUp(vx)
	})
	if err != nil {
		return fmt.Errorf("vxlan: %w", err)
	}
	return nil
}

func (vxlan) Remote(n, m Node, p Preset) error {
	return n.Netlink(func(h *netlink.Handle) error {
		vtep, err := h.LinkByName(p.VXLAN.Dev)
		if err != nil {
			return err
		}
		idx := vtep.Attrs().Index
		if err := h.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: m.PodCIDR.IP, HardwareAddr: vtepMAC(m.Index)}); err != nil {
			return fmt.Errorf("neighbour %s: %w", m.PodCIDR.IP, err)
		}
		if err := h.NeighAppend(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: m.IP, HardwareAddr: vtepMAC(m.Index)}); err != nil {
			return fmt.Errorf("fdb %s -> %s: %w", vtepMAC(m.Index), m.IP, err)
		}
		for _, dst := range m.Blocks {
			if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: dst, Gw: m.PodCIDR.IP, Flags: int(netlink.FLAG_ONLINK)}); err != nil {
				return fmt.Errorf("route %s via %s: %w", dst, m.PodCIDR.IP, err)
			}
		}
		return nil
	})
}

func (vxlan) Facts(p Preset) map[string]any {
	return map[string]any{"vxlan_device": p.VXLAN.Dev, "vxlan_port": p.VXLAN.Port, "vni": p.VXLAN.VNI}
}
