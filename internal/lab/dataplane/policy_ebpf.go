package dataplane

import (
	"encoding/json"
	"fmt"

	"github.com/cnibench/cnibench/internal/lab/bpfdp"
	"github.com/cnibench/cnibench/internal/lab/policy"
)

// ebpfPolicy: NetworkPolicies enforced by an eBPF program at the tcx ingress of every interface
// of a node (each pod's host side, the overlay device, the underlay), Cilium's way: addresses
// map to security identities through an LPM IP cache, rules are keyed by (endpoint, direction,
// identity, protocol, port) in an LPM map, admitted connections go into an LRU connection table
// (bpf/policy.c). A decision is a few lookups whatever the number of pods and policies. The
// input is the project's policy compiler's Program (policy.RenderBPF), as for the iptables
// and nftables engines.
type ebpfPolicy struct{}

func init() { RegisterPolicy(ebpfPolicy{}) }

func (ebpfPolicy) Name() string { return "ebpf" }
func (ebpfPolicy) Summary() string {
	return "eBPF at tc ingress: security identities, LPM policy map, connection table (Cilium-like)"
}
func (ebpfPolicy) Needs() []string { return []string{"bpf"} }
func (ebpfPolicy) Usable() error   { return bpfdp.PolicyUsable() }

// Combines: the program judges packets at tc ingress, before the node's IP stack; Services
// translated in the stack (iptables, nftables) would reach it with their Service address.
func (ebpfPolicy) Combines(p Parts) error {
	if _, hooked := p.Proxy.(PodHook); p.Proxy.Name() != None && !hooked {
		return fmt.Errorf("policy ebpf judges packets at tc ingress, before proxy %s translates Service addresses in the node's IP stack: use an eBPF proxy", p.Proxy.Name())
	}
	return nil
}

// Render renders the Program for the engine's maps (policy.RenderBPF), as JSON.
func (ebpfPolicy) Render(prog *policy.Program) (Rendering, policy.Counts) {
	b, cnt := policy.RenderBPF(prog)
	data, err := json.Marshal(b)
	if err != nil {
		panic(fmt.Sprintf("policy ebpf: marshal a rendering: %v", err)) // plain structs always marshal
	}
	return Rendering{data}, cnt
}

// Apply attaches the node's policy program wherever it is not attached yet and makes its maps
// hold the rendering.
func (ebpfPolicy) Apply(n Node, r Rendering) error {
	if len(r) != 1 {
		return fmt.Errorf("policy ebpf: a rendering has one part, got %d", len(r))
	}
	var b policy.BPFPolicy
	if err := json.Unmarshal(r[0], &b); err != nil {
		return fmt.Errorf("policy ebpf: %w", err)
	}
	bn := bpfNode(n)
	if err := bn.AttachPolicy(); err != nil {
		return err
	}
	return bn.SetPolicy(&b)
}

// Counters are the node's policy counters: policy_admitted, policy_denied (first packets),
// policy_established (packets of admitted connections).
func (ebpfPolicy) Counters(n Node) (map[string]uint64, error) {
	bn := bpfNode(n)
	if !bn.HasPolicy() {
		return map[string]uint64{}, nil
	}
	s, err := bn.PolicyStats()
	if err != nil {
		return nil, err
	}
	return map[string]uint64{"policy_admitted": s.Admitted, "policy_denied": s.Denied, "policy_established": s.Established}, nil
}

// PodAdded attaches the node's policy program to the pod's host interface.
func (ebpfPolicy) PodAdded(n Node, p PodNet) error {
	if p.HostVeth == "" {
		return nil
	}
	return bpfNode(n).AttachPolicy(p.HostVeth)
}
