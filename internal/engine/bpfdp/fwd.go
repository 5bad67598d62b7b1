package bpfdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Pins of the pod forwarding (bpf/ep_fwd.c) in a node's directory.
const (
	fwdFromPod   = "ep_fwd_from_pod"
	fwdToPod     = "ep_fwd_to_pod"
	fwdEndpoints = "ep_fwd_endpoints"
	fwdConfig    = "ep_fwd_config"
	fwdStats     = "ep_fwd_stats"
)

// FwdUsable says why the pod forwarding cannot run here (nil when it can).
func FwdUsable() error {
	if err := LBUsable(); err != nil { // tc programs and tcx links, as the load balancer
		return err
	}
	var objs epFwdObjects
	if err := loadEpFwdObjects(&objs, nil); err != nil {
		return fmt.Errorf("the eBPF pod forwarding does not load on this kernel: %w", err)
	}
	return objs.Close()
}

// SetupFwd loads the node's pod forwarding for a cluster CIDR, pins it and attaches to_pod,
// last of the hook, to the node's interfaces (the underlay, the overlay device: call it once
// they exist and before any pod).
func (n Node) SetupFwd(cluster netip.Prefix) error {
	defer n.lock()()
	if err := n.mounted(); err != nil {
		return err
	}
	if !n.pinned(fwdFromPod) {
		if !cluster.Addr().Is4() {
			return fmt.Errorf("cluster CIDR %s is not IPv4", cluster)
		}
		spec, err := loadEpFwd()
		if err != nil {
			return err
		}
		a := cluster.Masked().Addr().As4()
		mask := net.CIDRMask(cluster.Bits(), 32)
		for name, v := range map[string]uint32{"cluster_net": binary.NativeEndian.Uint32(a[:]), "cluster_mask": binary.NativeEndian.Uint32(mask)} {
			if err := spec.Variables[name].Set(v); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
		}
		var objs epFwdObjects
		if err := loadSpec(spec, &objs); err != nil {
			return err
		}
		defer objs.Close()
		if err := n.pinAll(map[string]interface{ Pin(string) error }{fwdToPod: objs.ToPod, fwdEndpoints: objs.Endpoints,
			fwdConfig: objs.Config, fwdStats: objs.FwdStats}); err != nil {
			return err
		}
		if err := objs.FromPod.Pin(n.path(fwdFromPod)); err != nil { // last: its pin says the rest is there
			return err
		}
	}
	return n.attachIngress(fwdToPod, nil)
}

// AddEndpoint records a pod of the node (its host interface's index and MAC, its eth0's MAC)
// and attaches from_pod, last of the hook, to its host interface.
func (n Node) AddEndpoint(ip netip.Addr, hostVeth string, podMAC net.HardwareAddr) error {
	defer n.lock()()
	lk, err := n.hostPort(ip, hostVeth, podMAC)
	if err != nil {
		return err
	}
	m, err := ebpf.LoadPinnedMap(n.path(fwdEndpoints), nil)
	if err != nil {
		return fmt.Errorf("map %s: %w", fwdEndpoints, err)
	}
	defer m.Close()
	ep := epFwdEndpoint{Ifindex: uint32(lk.Attrs().Index)}
	copy(ep.Mac[:], podMAC)
	copy(ep.HostMac[:], lk.Attrs().HardwareAddr)
	if err := m.Update(be32(ip), &ep, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("endpoint %s: %w", ip, err)
	}
	return n.attachIngress(fwdFromPod, []string{hostVeth})
}

// SetStackMode makes the forwarding pass every packet up the node's IP stack (on) or redirect
// what it can (off).
func (n Node) SetStackMode(on bool) error {
	m, err := ebpf.LoadPinnedMap(n.path(fwdConfig), nil)
	if err != nil {
		return fmt.Errorf("map %s: %w", fwdConfig, err)
	}
	defer m.Close()
	v := uint32(0)
	if on {
		v = 1
	}
	return m.Update(uint32(0), v, ebpf.UpdateAny)
}

// FwdStats are the pod forwarding's counters in one node, summed over CPUs.
type FwdStats struct {
	Local  uint64 // packets redirected into a pod of the node
	Remote uint64 // packets redirected to the device and next hop of the node's routes
	Stack  uint64 // packets from pods passed up the node's IP stack
}

// FwdStats reads the node's counters.
func (n Node) FwdStats() (FwdStats, error) {
	v, err := n.counters(fwdStats, 3)
	if err != nil {
		return FwdStats{}, err
	}
	return FwdStats{Local: v[0], Remote: v[1], Stack: v[2]}, nil
}
