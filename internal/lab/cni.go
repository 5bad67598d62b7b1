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

	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

// cniConfList is the network configuration a kubelet would find in /etc/cni/net.d on the node:
// the attach kind's plugin (bridge for Flannel-like attachment, ptp for Calico-like routed /32
// veths, ...) with host-local IPAM over the node's pod CIDR. IPAM state lives in the lab's
// state directory.
func (l *Lab) cniConfList(n *node) (*libcni.NetworkConfigList, error) {
	ipam := map[string]any{
		"type":    "host-local",
		"ranges":  [][]map[string]string{{{"subnet": n.podCIDR.String()}}},
		"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
		"dataDir": filepath.Join(l.StateDir(), "ipam", n.name),
	}
	name, plugin := l.dp.Attach.CNI(l.PodMTU(), ipam)
	if plugin == nil {
		return nil, fmt.Errorf("attach %q has no CNI configuration", l.dp.Attach.Name())
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
	host := ""
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			host = i.Name
		}
	}
	pn := dataplane.PodNet{NS: podNS, IP: ip, HostVeth: host,
		Netlink: func(fn func(h *netlink.Handle) error) error { return withHandle(podNS, fn) }}
	if err := l.dp.Attach.PodAdded(l.view(n), pn); err != nil {
		return nil, err
	}
	for _, part := range []any{l.dp.Proxy, l.dp.Policy} {
		if h, ok := part.(dataplane.PodHook); ok {
			if err := h.PodAdded(l.view(n), pn); err != nil {
				return nil, err
			}
		}
	}
	return ip, nil
}

// detach runs CNI DEL (releasing the address); a missing namespace is fine for DEL.
func (l *Lab) detach(ctx context.Context, n *node, podNS string) error {
	list, err := l.cniConfList(n)
	if err != nil {
		return err
	}
	return inNS(n.ns, func() error { return l.cni().DelNetworkList(ctx, list, runtimeConf(podNS)) })
}
