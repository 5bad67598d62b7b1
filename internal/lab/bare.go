package lab

import (
	"context"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cnibench/cnibench/internal/cluster"
)

// BarePair implements cluster.Cluster: two namespaces joined by one veth pair and nothing
// else (seed 000's 1S1C baseline), MTU = the underlay MTU.
func (l *Lab) BarePair(ctx context.Context, client, server string) (cluster.Pod, cluster.Pod, error) {
	l.mu.Lock()
	if err := l.freeNames(client, server); err != nil {
		l.mu.Unlock()
		return cluster.Pod{}, cluster.Pod{}, err
	}
	l.bare++
	k := l.bare
	node := l.nodes[0].name
	c := &pod{Pod: cluster.Pod{Name: client, Node: node, IP: fmt.Sprintf("192.168.%d.1", 200+k%50)}, ns: l.cfg.Prefix + "-p-" + client}
	s := &pod{Pod: cluster.Pod{Name: server, Node: node, IP: fmt.Sprintf("192.168.%d.2", 200+k%50)}, ns: l.cfg.Prefix + "-p-" + server}
	l.pods[client], l.pods[server] = c, s
	l.mu.Unlock()
	err := l.wireBare(c, s)
	if err != nil {
		_ = l.DeletePod(ctx, client)
		_ = l.DeletePod(ctx, server)
		return cluster.Pod{}, cluster.Pod{}, fmt.Errorf("bare veth pair: %w", err)
	}
	return c.Pod, s.Pod, nil
}

func (l *Lab) wireBare(c, s *pod) error {
	for _, p := range []*pod{c, s} {
		if err := createNS(p.ns); err != nil {
			return err
		}
	}
	sns, err := netns.GetFromPath(nsPath(s.ns))
	if err != nil {
		return err
	}
	defer sns.Close()
	if err := withHandle(c.ns, func(h *netlink.Handle) error {
		return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: l.cfg.MTU},
			PeerName: "eth1", PeerNamespace: netlink.NsFd(int(sns))})
	}); err != nil {
		return err
	}
	for _, x := range []struct {
		p   *pod
		dev string
	}{{c, "eth0"}, {s, "eth1"}} {
		err := withHandle(x.p.ns, func(h *netlink.Handle) error {
			lk, err := h.LinkByName(x.dev)
			if err != nil {
				return err
			}
			if err := h.LinkSetMTU(lk, l.cfg.MTU); err != nil {
				return err
			}
			if err := h.AddrAdd(lk, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(x.p.IP).To4(), Mask: net.CIDRMask(30, 32)}}); err != nil {
				return err
			}
			return h.LinkSetUp(lk)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
