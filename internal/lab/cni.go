package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

// calicoGateway is the link-local next hop Calico gives every pod; the host side of the pod's
// veth answers ARP for it by proxy ARP.
var calicoGateway = net.IPv4(169, 254, 1, 1).To4()

// cniConfList is the network configuration a kubelet would find in /etc/cni/net.d on the node:
// the bridge plugin for Flannel-like attachment, ptp for Calico-like routed /32 veths, both with
// host-local IPAM over the node's pod CIDR. IPAM state lives in the lab's state directory.
func (l *Lab) cniConfList(n *node) (*libcni.NetworkConfigList, error) {
	ipam := map[string]any{
		"type":    "host-local",
		"ranges":  [][]map[string]string{{{"subnet": n.podCIDR.String()}}},
		"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
		"dataDir": filepath.Join(l.StateDir(), "ipam", n.name),
	}
	var name string
	var plugin map[string]any
	switch l.preset.Attach {
	case "bridge":
		name = "cbr0"
		plugin = map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
			"hairpinMode": true, "mtu": l.PodMTU(), "ipam": ipam}
	case "routed":
		name = "k8s-pod-network"
		plugin = map[string]any{"type": "ptp", "ipMasq": false, "mtu": l.PodMTU(), "ipam": ipam}
	default:
		return nil, fmt.Errorf("attach %q has no CNI configuration", l.preset.Attach)
	}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{plugin}})
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(b)
}

func (l *Lab) cni() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(l.cfg.CNIPath, filepath.Join(l.StateDir(), "cni-cache"), nil)
}

func runtimeConf(podNS string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: podNS, NetNS: nsPath(podNS), IfName: "eth0"}
}

// attach runs CNI ADD for a pod namespace with the plugin processes started inside the node's
// namespace, exactly where a kubelet on that node would run them.
func (l *Lab) attach(ctx context.Context, n *node, podNS string) (net.IP, error) {
	list, err := l.cniConfList(n)
	if err != nil {
		return nil, err
	}
	var res *types100.Result
	err = inNS(n.ns, func() error {
		r, err := l.cni().AddNetworkList(ctx, list, runtimeConf(podNS))
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(res.IPs) == 0 {
		return nil, fmt.Errorf("CNI result has no IP")
	}
	ip := res.IPs[0].Address.IP.To4()
	if l.preset.Attach == "routed" {
		host := ""
		for _, i := range res.Interfaces {
			if i.Sandbox == "" {
				host = i.Name
			}
		}
		if err := l.calicoRoutes(n, podNS, host, ip); err != nil {
			return nil, fmt.Errorf("calico-style gateway: %w", err)
		}
	}
	return ip, nil
}

// calicoRoutes turns ptp's result into Calico's layout: the host veth keeps no address and
// answers ARP for 169.254.1.1 by proxy ARP; the node routes the pod's /32 to the veth; the pod's
// default route goes via 169.254.1.1.
func (l *Lab) calicoRoutes(n *node, podNS, hostVeth string, ip net.IP) error {
	err := withHandle(n.ns, func(h *netlink.Handle) error {
		v, err := h.LinkByName(hostVeth)
		if err != nil {
			return fmt.Errorf("host veth %q: %w", hostVeth, err)
		}
		addrs, err := h.AddrList(v, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if err := h.AddrDel(v, &a); err != nil {
				return err
			}
		}
		return h.RouteReplace(&netlink.Route{LinkIndex: v.Attrs().Index, Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK})
	})
	if err != nil {
		return err
	}
	if err := writeSysctl(n.ns, "net/ipv4/conf/"+hostVeth+"/proxy_arp", "1"); err != nil {
		return err
	}
	if err := writeSysctl(n.ns, "net/ipv4/neigh/"+hostVeth+"/proxy_delay", "0"); err != nil {
		return err
	}
	return withHandle(podNS, func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
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
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: calicoGateway, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: calicoGateway})
	})
}

// detach runs CNI DEL (releasing the address); a missing namespace is fine for DEL.
func (l *Lab) detach(ctx context.Context, n *node, podNS string) error {
	list, err := l.cniConfList(n)
	if err != nil {
		return err
	}
	return inNS(n.ns, func() error { return l.cni().DelNetworkList(ctx, list, runtimeConf(podNS)) })
}
