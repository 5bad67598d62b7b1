package pktengine

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// Path is how the generator reaches its destination from the current network namespace.
type Path struct {
	Iface   Iface
	SrcMAC  [6]byte
	Src     netip.Addr // the interface's address towards the destination
	NextHop netip.Addr // the gateway, or the destination itself when it is on link
	DstMAC  [6]byte
}

// neighUsable are the neighbour states whose MAC address can be used.
const neighUsable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// ResolvePath finds the interface, source address and next hop towards dst with the kernel's
// routing table (dev, if given, must be the route's interface), and the next hop's MAC address:
// dstMAC if given, else from the neighbour table, after a UDP datagram to dst's discard port
// made the kernel resolve it (ARP), waiting up to timeout. Call it inside the generator's
// namespace.
func ResolvePath(dst netip.Addr, dev string, dstMAC net.HardwareAddr, timeout time.Duration) (Path, error) {
	var p Path
	if !dst.Is4() {
		return p, fmt.Errorf("destination %s is not an IPv4 address", dst)
	}
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return p, fmt.Errorf("no route to %s: %v", dst, err)
	}
	rt := routes[0]
	link, err := netlink.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return p, fmt.Errorf("interface %d of the route to %s: %w", rt.LinkIndex, dst, err)
	}
	a := link.Attrs()
	if dev != "" && dev != a.Name {
		return p, fmt.Errorf("the route to %s goes out of %s, not %s", dst, a.Name, dev)
	}
	if len(a.HardwareAddr) != 6 {
		return p, fmt.Errorf("interface %s has no Ethernet address", a.Name)
	}
	p.Iface = Iface{Name: a.Name, Index: a.Index, MTU: a.MTU}
	p.SrcMAC = [6]byte(a.HardwareAddr)
	var ok bool
	if p.Src, ok = netip.AddrFromSlice(rt.Src.To4()); !ok {
		return p, fmt.Errorf("the route to %s has no IPv4 source address", dst)
	}
	p.NextHop = dst
	if gw, ok := netip.AddrFromSlice(rt.Gw.To4()); ok && gw.IsValid() && !gw.IsUnspecified() {
		p.NextHop = gw
	}
	if dstMAC != nil {
		if len(dstMAC) != 6 {
			return p, fmt.Errorf("destination MAC %s is not an Ethernet address", dstMAC)
		}
		p.DstMAC = [6]byte(dstMAC)
		return p, nil
	}
	if mac, ok := neighbour(p.Iface.Index, p.NextHop); ok {
		p.DstMAC = mac
		return p, nil
	}
	if err := nudge(dst); err != nil {
		return p, err
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if mac, ok := neighbour(p.Iface.Index, p.NextHop); ok {
			p.DstMAC = mac
			return p, nil
		}
	}
	return p, fmt.Errorf("no MAC address for next hop %s on %s after %v (no ARP reply; give --dst-mac)", p.NextHop, a.Name, timeout)
}

// neighbour looks ip up in the neighbour table of interface index.
func neighbour(index int, ip netip.Addr) ([6]byte, bool) {
	neighs, err := netlink.NeighList(index, netlink.FAMILY_V4)
	if err != nil {
		return [6]byte{}, false
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP.To4()); ok && a == ip && n.State&neighUsable != 0 && len(n.HardwareAddr) == 6 {
			return [6]byte(n.HardwareAddr), true
		}
	}
	return [6]byte{}, false
}

// nudge sends one UDP datagram to dst's discard port, so that the kernel resolves the next
// hop's MAC address.
func nudge(dst netip.Addr) error {
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return fmt.Errorf("resolve the next hop to %s: %w", dst, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("cnibench")); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("resolve the next hop to %s: %w", dst, err)
	}
	return nil
}

// IfaceByName looks an interface of the current namespace up.
func IfaceByName(name string) (Iface, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return Iface{}, fmt.Errorf("interface %s: %w", name, err)
	}
	a := l.Attrs()
	return Iface{Name: a.Name, Index: a.Index, MTU: a.MTU}, nil
}

// DefaultIface is the only interface of the current namespace other than loopback, for a
// receiver not told which one to use.
func DefaultIface() (Iface, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return Iface{}, fmt.Errorf("list interfaces: %w", err)
	}
	var found []Iface
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback == 0 {
			found = append(found, Iface{Name: a.Name, Index: a.Index, MTU: a.MTU})
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return Iface{}, errors.New("no interface other than loopback here")
	}
	var names []string
	for _, f := range found {
		names = append(names, f.Name)
	}
	return Iface{}, fmt.Errorf("several interfaces (%v): say which with --dev", names)
}
