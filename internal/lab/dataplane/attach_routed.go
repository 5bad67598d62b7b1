package dataplane

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routed: Calico's layout. Each pod has a /32 on a veth whose host side keeps no address and
// answers ARP for the link-local gateway 169.254.1.1 by proxy ARP; the node routes the pod's
// /32 to the veth and keeps a blackhole for its own block. Built with the CNI ptp plugin,
// then rearranged as Calico's agent leaves it.
type routed struct{}

func init() { RegisterAttach(routed{}) }

// calicoGateway is the link-local next hop Calico gives every pod.
var calicoGateway = net.IPv4(169, 254, 1, 1).To4()

func (routed) Name() string { return "routed" }
func (routed) Summary() string {
	return "routed /32 veths, proxy ARP for 169.254.1.1 (CNI ptp, Calico's layout)"
}
func (routed) Needs() []string  { return []string{"cni ptp", "cni host-local"} }
func (routed) PodNetwork() bool { return true }

func (routed) CNI(podMTU int, ipam map[string]any) (string, map[string]any) {
	return "k8s-pod-network", map[string]any{"type": "ptp", "ipMasq": false, "mtu": podMTU, "ipam": ipam}
}

// SetupNode adds the blackhole Calico keeps for the node's own block; /32 pod routes are more
// specific.
func (routed) SetupNode(n Node) error {
	return n.Netlink(func(h *netlink.Handle) error {
		if err := h.RouteAdd(&netlink.Route{Dst: n.PodCIDR, Type: unix.RTN_BLACKHOLE}); err != nil {
			return fmt.Errorf("blackhole route: %w", err)
		}
		return nil
	})
}

// PodAdded turns ptp's result into Calico's layout: the host veth keeps no address and
// answers ARP for 169.254.1.1 by proxy ARP; the node routes the pod's /32 to the veth; the
// pod's default route goes via 169.254.1.1.
func (routed) PodAdded(n Node, p PodNet) error {
	if _, err := routedHostSide(n, p); err != nil {
		return fmt.Errorf("calico-style gateway: %w", err)
	}
	if err := n.Sysctl("net/ipv4/conf/"+p.HostVeth+"/proxy_arp", "1"); err != nil {
		return err
	}
	if err := n.Sysctl("net/ipv4/neigh/"+p.HostVeth+"/proxy_delay", "0"); err != nil {
		return err
	}
	return p.Netlink(func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := flushIPv4(h, eth, false); err != nil {
			return err
		}
		idx := eth.Attrs().Index
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: calicoGateway, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: calicoGateway})
	})
}

// routedHostSide leaves a pod's host veth without an address and routes the pod's /32 to it
// (ptp gave it the gateway address and a route of the pod's range); it returns the veth's MAC.
func routedHostSide(n Node, p PodNet) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := n.Netlink(func(h *netlink.Handle) error {
		v, err := h.LinkByName(p.HostVeth)
		if err != nil {
			return fmt.Errorf("host veth %q: %w", p.HostVeth, err)
		}
		mac = v.Attrs().HardwareAddr
		addrs, err := h.AddrList(v, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if err := h.AddrDel(v, &a); err != nil {
				return err
			}
		}
		return h.RouteReplace(&netlink.Route{LinkIndex: v.Attrs().Index, Dst: &net.IPNet{IP: p.IP, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK})
	})
	return mac, err
}

func (routed) Filtered(Node) error   { return nil }
func (routed) FilterNeeds() []string { return nil }

// flushIPv4 deletes a link's IPv4 routes and, with addrs, its IPv4 addresses (what a CNI
// plugin left, before an attach kind lays out its own).
func flushIPv4(h *netlink.Handle, link netlink.Link, addrs bool) error {
	routes, err := h.RouteList(link, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if err := h.RouteDel(&r); err != nil {
			return err
		}
	}
	if !addrs {
		return nil
	}
	as, err := h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, a := range as {
		if err := h.AddrDel(link, &a); err != nil {
			return err
		}
	}
	return nil
}
