package lab

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// External clients (cluster.PodSpec.External) stand for machines outside the cluster on the
// nodes' network, as seed 003's external client does: each is a namespace "<prefix>-x-<name>"
// plugged into the underlay bridge of the fabric namespace like a node (a veth "x<N>" there,
// "eth0" inside), with an address of the underlay subnet no node has, taken from the top of the
// subnet down (the gateway is .1, nodes .10 and up), and a default route to the underlay
// gateway. It is on no node: its traffic reaches the cluster only through the nodes' addresses
// (NodePorts), it is never a Service endpoint, and its processes run outside the nodes'
// cgroups (what hooks a node's sockets, such as socket load balancing, does not see them).
// Its Node is the node named in its spec (the first one when none): the node a trial samples
// the CPU of (host-wide in the lab anyway).

// externalNS is the namespace of an external client.
func (l *Lab) externalNS(name string) string { return l.cfg.Prefix + "-x-" + name }

// allocExternal reserves the highest free address of the underlay subnet above the nodes' and
// a fabric link name (caller holds mu).
func (l *Lab) allocExternal() (net.IP, string, error) {
	_, ul, _ := net.ParseCIDR(l.cfg.UnderlayCIDR)
	ones, bits := ul.Mask.Size()
	top := 1<<(bits-ones) - 2 // the last address is the broadcast
	for k := top; k >= 10+len(l.nodes); k-- {
		ip := nthIP(ul.IP, k)
		if !l.extIPs[ip.String()] {
			l.extIPs[ip.String()] = true
			l.extSeq++
			return ip, fmt.Sprintf("x%d", l.extSeq), nil
		}
	}
	return nil, "", fmt.Errorf("no free address for an external client in %s (nodes take .10 to .%d)", l.cfg.UnderlayCIDR, 9+len(l.nodes))
}

// createExternal makes pod p an external client (p.Name and p.Node set; p is reserved in
// l.pods). On an error what it made is removed again.
func (l *Lab) createExternal(p *pod) (err error) {
	l.mu.Lock()
	ip, link, err := l.allocExternal()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	p.ns, p.veth, p.External, p.IP = l.externalNS(p.Name), link, true, ip.String()
	defer func() {
		if err != nil {
			err = errors.Join(err, l.deleteExternal(p))
		}
	}()
	if err := createNS(p.ns); err != nil {
		return err
	}
	target, err := netns.GetFromPath(nsPath(p.ns))
	if err != nil {
		return err
	}
	defer target.Close()
	err = withHandle(l.fabric, func(h *netlink.Handle) error {
		br, err := h.LinkByName(underlayBridge)
		if err != nil {
			return err
		}
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link, MTU: l.cfg.MTU, MasterIndex: br.Attrs().Index},
			PeerName: "eth0", PeerNamespace: netlink.NsFd(int(target))}
		if err := h.LinkAdd(v); err != nil {
			return fmt.Errorf("underlay veth: %w", err)
		}
		return h.LinkSetUp(v)
	})
	if err != nil {
		return err
	}
	err = withHandle(p.ns, func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := h.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: l.ulMask}}); err != nil {
			return err
		}
		if err := h.LinkSetUp(eth); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: l.gw})
	})
	return err
}

// deleteExternal removes an external client: its processes, its fabric link (at once, so its
// name can be used again; the namespace's own devices go with it later) and its namespace, and
// frees its address.
func (l *Lab) deleteExternal(p *pod) error {
	errs := []error{killNSProcs(p.ns)}
	if p.veth != "" {
		errs = append(errs, withHandle(l.fabric, func(h *netlink.Handle) error {
			v, err := h.LinkByName(p.veth)
			var missing netlink.LinkNotFoundError
			if errors.As(err, &missing) {
				return nil
			}
			if err != nil {
				return err
			}
			return h.LinkDel(v)
		}))
	}
	errs = append(errs, deleteNS(p.ns))
	if p.IP != "" {
		l.mu.Lock()
		delete(l.extIPs, p.IP)
		l.mu.Unlock()
	}
	return errors.Join(errs...)
}
