package dataplane

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/policy"
)

// polycubePolicy: NetworkPolicies enforced by the firewall cube of seed 003's provider (the
// eBPF policy engine's logic, bpf/pol.h, as a cube between the ILB and the router: it judges
// packets leaving local pods after the ILB's DNAT and packets towards local pods before its
// reverse NAT, once per node). Rendering as the ebpf engine's (policy.RenderBPF).
type polycubePolicy struct{}

func init() { RegisterPolicy(polycubePolicy{}) }

func (polycubePolicy) Name() string { return "polycube" }
func (polycubePolicy) Summary() string {
	return "seed 003's provider with a firewall cube (the eBPF engine's identities, LPM rules, connection table) between ILB and router (attach ebpf-chain/ebpf-mono only)"
}
func (polycubePolicy) Needs() []string { return []string{"bpf"} }
func (polycubePolicy) Usable() error   { return bpfdp.PolycubeUsable() }

func (polycubePolicy) Combines(p Parts) error {
	if _, ok := p.Attach.(ebpfChain); !ok {
		return fmt.Errorf("policy polycube is a cube of seed 003's provider: it needs attach ebpf-chain or ebpf-mono, not %s", p.Attach.Name())
	}
	return nil
}

var _ PartialPolicy = polycubePolicy{}

func (polycubePolicy) Render(prog *policy.Program) (Rendering, policy.Counts) {
	return ebpfPolicy{}.Render(prog)
}

// RenderPartial renders as the ebpf engine's RenderPartial (a change from prev, the
// *policy.BPFPolicy the last applied rendering returned, the rendering renumbered like it by
// policy.RenumberLike; without it, Render's).
func (polycubePolicy) RenderPartial(prev any, prog *policy.Program) (Rendering, any, policy.Counts) {
	return renderBPFPartial(prev, prog)
}

// Apply connects the firewall cube (if it is not yet) and makes its maps hold the rendering:
// Render's replaces the policy (PolycubeSetPolicy), RenderPartial's change writes only what it
// names (PolycubeChangePolicy; the cube is connected already, by the full rendering the change
// follows).
func (polycubePolicy) Apply(n Node, r Rendering) error {
	in, err := decodeBPF("polycube", r)
	if err != nil {
		return err
	}
	if in.Partial != nil {
		return bpfNode(n).PolycubeChangePolicy(*in.Partial)
	}
	return bpfNode(n).PolycubeSetPolicy(&in.BPFPolicy)
}

// PodAdded connects the node's firewall cube (once): with this engine, every packet of the
// node's pods crosses it, with policies or not, as every packet of a cilium pod crosses its
// policy program.
func (polycubePolicy) PodAdded(n Node, p PodNet) error { return bpfNode(n).PolycubeFirewall() }
