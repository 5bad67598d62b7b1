package lab

// What the lab's data-plane parts see of its nodes (view), and what the lab asks of every part
// that answers it: packet counters, rest and wake between trials, readying nodes for filtering.

import (
	"fmt"
	"path/filepath"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

var _ cluster.CounterReader = (*Lab)(nil)

// DataplaneCounters reads the packet counters the data plane's parts keep in each node (parts
// implementing dataplane.Counting: the polycube provider's per-cube packets, drops and
// decisions; the eBPF load balancer's, forwarding's and policy engine's), by node name; nil
// when no part keeps any. The counters are cumulative: a caller that wants a trial's figures
// reads them before and after it.
func (l *Lab) DataplaneCounters() (map[string]map[string]uint64, error) {
	if !l.dp.Attach.PodNetwork() {
		return nil, nil
	}
	var parts []dataplane.Counting
	for _, p := range []any{l.dp.Attach, l.dp.Overlay, l.dp.Proxy, l.dp.Policy} {
		if c, ok := p.(dataplane.Counting); ok {
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	out := map[string]map[string]uint64{}
	for _, n := range l.nodes {
		all := map[string]uint64{}
		for _, c := range parts {
			m, err := c.Counters(l.view(n))
			if err != nil {
				return nil, fmt.Errorf("counters of %s: %w", n.name, err)
			}
			for k, v := range m {
				all[k] = v
			}
		}
		out[n.name] = all
	}
	return out, nil
}

// view is what the data-plane engines see of a node.
func (l *Lab) view(n *node) dataplane.Node {
	return dataplane.Node{Index: n.index, Name: n.name, NS: n.ns, Path: nsPath(n.ns), IP: n.ip, PodCIDR: n.podCIDR, Blocks: n.blocks(),
		BPFDir: filepath.Join(l.StateDir(), "bpf-"+n.name), Dir: filepath.Join(l.StateDir(), "node-"+n.name), PodMTU: l.PodMTU(), ClusterCIDR: l.clusterCIDR(), Cgroup: l.nodeCgroup(n),
		Netlink: func(fn func(h *netlink.Handle) error) error { return withHandle(n.ns, fn) },
		Sysctl:  func(key, value string) error { return writeSysctl(n.ns, key, value) }}
}

// views are the engines' views of every node, in node order.
func (l *Lab) views() []dataplane.Node {
	out := make([]dataplane.Node, len(l.nodes))
	for i, n := range l.nodes {
		out[i] = l.view(n)
	}
	return out
}

var _ cluster.Resting = (*Lab)(nil)

// Wake wakes every node's parts that rest between trials (dataplane.Resting); nothing when the
// data plane has none.
func (l *Lab) Wake() error { return l.resting(dataplane.Resting.Wake) }

// Rest lets them rest again.
func (l *Lab) Rest() error { return l.resting(dataplane.Resting.Rest) }

func (l *Lab) resting(fn func(dataplane.Resting, dataplane.Node) error) error {
	for _, p := range []any{l.dp.Attach, l.dp.Overlay, l.dp.Proxy, l.dp.Policy} {
		r, ok := p.(dataplane.Resting)
		if !ok {
			continue
		}
		for _, n := range l.nodes {
			if err := fn(r, l.view(n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// filtered readies every node, once, for Services and policies that filter pod traffic in the
// node's IP stack (the attach kind knows what that takes: bridged traffic must pass the IP
// hooks, redirected traffic must not skip them).
func (l *Lab) filtered() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.filtering || !l.dp.StackFiltered() {
		return nil
	}
	for _, n := range l.nodes {
		if err := l.dp.Attach.Filtered(l.view(n)); err != nil {
			return err
		}
	}
	l.filtering = true
	return nil
}
