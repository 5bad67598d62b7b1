package lab

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	cnbnetns "github.com/cnibench/cnibench/internal/netns"
	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Silent pods in the lab are addresses, not namespaces.
//
// Seed 001 loads the data plane with thousands of pods that run nothing; what they cost the
// data plane is their addresses: the endpoints of Services, the members of policy sets, the
// per-pod rules. A namespace per silent pod would cost the host far more than it costs the
// data plane being measured (10,000 namespaces and CNI runs). So each node has one holder: a
// real pod namespace attached through CNI like any pod, holding the node's silent addresses on
// its loopback. The addresses come from the node's silent block (the upper half of the cluster
// CIDR, split between the nodes); every node routes a node's silent block the way it routes that
// node's pod CIDR (via the holder on its own node, over the overlay or the native routes to the
// others), so a silent pod is reachable from every pod, through Services and policies, like a
// real one. The holder answers on every TCP port silent pods declare, each connection with a
// short HTTP response whose body is the address it was reached on: an extra Service's endpoint
// really answers, and says which one it is.
type holder struct {
	ns    string
	ip    net.IP // the holder's own pod address (next hop of the silent block)
	block *net.IPNet
	h     *netlink.Handle
	lo    netlink.Link

	mu        sync.Mutex
	next      uint32   // next unused offset in block
	free      []uint32 // offsets released by deleted silent pods
	listeners map[int]net.Listener
}

// silentBlock is node i's block of silent-pod addresses: the upper half of the cluster CIDR,
// split evenly between the nodes (nil when the cluster CIDR has no room for it: the lower half
// holds the nodes' pod CIDRs, a /nodeMask each).
func silentBlock(cc *net.IPNet, nodes, nodeMask, i int) *net.IPNet {
	ones, bits := cc.Mask.Size()
	half := bits - ones - 1 // host bits of the upper half
	per := half - bitsFor(nodes)
	if per < 4 || nodes<<(bits-nodeMask) > 1<<half {
		return nil
	}
	base := nthIP(cc.IP.To4(), 1<<half+i<<per)
	return &net.IPNet{IP: base, Mask: net.CIDRMask(bits-per, bits)}
}

// holderOf returns the node's holder, creating it on first use.
func (l *Lab) holderOf(ctx context.Context, n *node) (*holder, error) {
	l.holdMu.Lock()
	defer l.holdMu.Unlock()
	if h := l.holders[n.name]; h != nil {
		return h, nil
	}
	if n.silentCIDR == nil {
		return nil, fmt.Errorf("cluster CIDR %s has no room for silent pods (needs a /%d per node in its lower half): give a larger cluster CIDR", l.cfg.ClusterCIDR, l.cfg.NodeCIDRMaskSize)
	}
	ns := l.cfg.Prefix + "-s-" + n.name
	if err := createNS(ns); err != nil {
		return nil, err
	}
	ip, err := l.attach(ctx, n, ns)
	if err != nil {
		_ = l.detach(ctx, n, ns)
		_ = deleteNS(ns)
		return nil, fmt.Errorf("silent-pod holder on %s: %w", n.name, err)
	}
	h := &holder{ns: ns, ip: ip, block: n.silentCIDR, next: 1, listeners: map[int]net.Listener{}}
	fail := func(err error) (*holder, error) {
		h.close()
		_ = l.detach(ctx, n, ns)
		_ = deleteNS(ns)
		return nil, fmt.Errorf("silent-pod holder on %s: %w", n.name, err)
	}
	if h.h, err = cnbnetns.Netlink(ns); err != nil {
		return fail(err)
	}
	if h.lo, err = h.h.LinkByName("lo"); err != nil {
		return fail(err)
	}
	// The node sends the block to the holder as it sends a pod's traffic to the pod.
	err = withHandle(n.ns, func(nh *netlink.Handle) error {
		return nh.RouteAdd(&netlink.Route{Dst: h.block, Gw: ip})
	})
	if err != nil {
		return fail(fmt.Errorf("route %s via %s: %w", h.block, ip, err))
	}
	l.holders[n.name] = h
	return h, nil
}

// add gives a silent pod an address of the block and opens its declared TCP ports.
func (h *holder) add(ports []cluster.ContainerPort) (net.IP, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ones, bits := h.block.Mask.Size()
	var off uint32
	if n := len(h.free); n > 0 {
		off, h.free = h.free[n-1], h.free[:n-1]
	} else {
		if h.next >= 1<<(bits-ones)-1 {
			return nil, fmt.Errorf("silent block %s is full", h.block)
		}
		off = h.next
		h.next++
	}
	ip := nthIP(h.block.IP.To4(), int(off))
	if err := h.h.AddrAdd(h.lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}); err != nil {
		h.free = append(h.free, off)
		return nil, fmt.Errorf("address %s: %w", ip, err)
	}
	for _, p := range ports {
		if p.Protocol != "" && p.Protocol != "tcp" {
			continue
		}
		if err := h.listen(p.Port); err != nil {
			return ip, err
		}
	}
	return ip, nil
}

// remove takes a silent pod's address away.
func (h *holder) remove(ip net.IP) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.h.AddrDel(h.lo, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}})
	off := ipOffset(h.block.IP, ip)
	h.free = append(h.free, off)
	return err
}

func ipOffset(base, ip net.IP) uint32 {
	b, i := base.To4(), ip.To4()
	return (uint32(i[0])<<24 | uint32(i[1])<<16 | uint32(i[2])<<8 | uint32(i[3])) -
		(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
}

// listen opens a TCP port in the holder (once) and answers every connection. Caller holds mu.
func (h *holder) listen(port int) error {
	if _, ok := h.listeners[port]; ok {
		return nil
	}
	var ln net.Listener
	err := inNS(h.ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		return fmt.Errorf("silent pods' port %d: %w", port, err)
	}
	h.listeners[port] = ln
	go serveSilent(ln)
	return nil
}

// serveSilent answers each connection with a minimal HTTP response naming the address reached.
func serveSilent(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			r := bufio.NewReader(c)
			for { // the request head, if any, up to its blank line
				line, err := r.ReadString('\n')
				if err != nil || line == "\r\n" || line == "\n" {
					break
				}
			}
			addr := c.LocalAddr().(*net.TCPAddr).IP.String() + "\n"
			fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(addr), addr)
		}()
	}
}

// close stops the holder's listeners and releases its netlink handle (the namespace goes with
// the lab).
func (h *holder) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, ln := range h.listeners {
		_ = ln.Close()
		delete(h.listeners, p)
	}
	if h.h != nil {
		h.h.Close()
		h.h = nil
	}
}

// createSilent creates a silent pod: an address in its node's holder.
func (l *Lab) createSilent(ctx context.Context, p *pod, n *node, ports []cluster.ContainerPort) error {
	h, err := l.holderOf(ctx, n)
	if err != nil {
		return err
	}
	ip, err := h.add(ports)
	if err != nil {
		return err
	}
	p.ns, p.IP, p.silent = h.ns, ip.String(), true
	return nil
}

// closeHolders stops every holder's listeners.
func (l *Lab) closeHolders() {
	l.holdMu.Lock()
	defer l.holdMu.Unlock()
	for name, h := range l.holders {
		h.close()
		delete(l.holders, name)
	}
}
