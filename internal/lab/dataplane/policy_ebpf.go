package dataplane

import (
	"encoding/json"
	"fmt"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/policy"
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

var _ PartialPolicy = ebpfPolicy{}

// Render renders the Program for the engine's maps (policy.RenderBPF), as JSON.
func (ebpfPolicy) Render(prog *policy.Program) (Rendering, policy.Counts) {
	b, cnt := policy.RenderBPF(prog)
	return Rendering{marshalBPF(b)}, cnt
}

// RenderPartial renders the Program as Render does, then as a change from prev, the node's
// policy as the last applied rendering left it (the *policy.BPFPolicy it returned): the
// rendering is renumbered to keep prev's endpoint IDs and identities (policy.RenumberLike:
// RenderBPF numbers them by their order, so that isolating one pod would otherwise renumber
// every later one), and the change is the map entries that differ and the keys gone
// (policy.DiffBPF), as JSON {"Partial": change}, so that Apply writes only them. next is the
// whole renumbered policy, which decides every flow as RenderBPF's does and is what the node
// holds once the change is applied. Without prev the rendering is Render's (RenderBPF's
// numbering, replacing whatever the node holds) and next is its policy. Changed counts the
// entries the change writes or deletes; the other Counts are RenderBPF's.
func (ebpfPolicy) RenderPartial(prev any, prog *policy.Program) (Rendering, any, policy.Counts) {
	return renderBPFPartial(prev, prog)
}

func renderBPFPartial(prev any, prog *policy.Program) (Rendering, any, policy.Counts) {
	b, cnt := policy.RenderBPF(prog)
	if p, ok := prev.(*policy.BPFPolicy); ok && p != nil {
		b = policy.RenumberLike(p, b)
		c := policy.DiffBPF(p, b)
		cnt.Changed = c.Size()
		return Rendering{marshalBPF(struct{ Partial *policy.BPFChange }{&c})}, b, cnt
	}
	return Rendering{marshalBPF(b)}, b, cnt
}

// bpfInput is what the eBPF engines' Apply reads: Render's policy (Partial nil), or
// RenderPartial's change alone ({"Partial": ...}).
type bpfInput struct {
	policy.BPFPolicy
	Partial *policy.BPFChange `json:",omitempty"`
}

func marshalBPF(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("policy ebpf: marshal a rendering: %v", err)) // plain structs always marshal
	}
	return data
}

// decodeBPF reads a rendering of an eBPF engine (engine names it in errors).
func decodeBPF(engine string, r Rendering) (bpfInput, error) {
	var in bpfInput
	if len(r) != 1 {
		return in, fmt.Errorf("policy %s: a rendering has one part, got %d", engine, len(r))
	}
	if err := json.Unmarshal(r[0], &in); err != nil {
		return in, fmt.Errorf("policy %s: %w", engine, err)
	}
	return in, nil
}

// Apply attaches the node's policy program wherever it is not attached yet and makes its maps
// hold the rendering: Render's replaces the policy (SetPolicy), RenderPartial's change writes
// only what it names (ChangePolicy). A change needs the policy it was rendered from: on a node
// without one it is an error (the lab renders a full one next).
func (ebpfPolicy) Apply(n Node, r Rendering) error {
	in, err := decodeBPF("ebpf", r)
	if err != nil {
		return err
	}
	bn := bpfNode(n)
	if in.Partial != nil && !bn.HasPolicy() {
		return fmt.Errorf("policy ebpf: a change of the policy of node %s, which has none", n.Name)
	}
	if err := bn.AttachPolicy(); err != nil {
		return err
	}
	if in.Partial != nil {
		return bn.ChangePolicy(*in.Partial)
	}
	return bn.SetPolicy(&in.BPFPolicy)
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
