package dataplane

import "github.com/cnibench/cnibench/internal/lab/policy"

// iptablesPolicy: kube-router's layout (KUBE-ROUTER-FORWARD dispatching each local pod's
// address to its KUBE-POD-FW chain, a KUBE-NWPLCY chain per policy, ipsets for selectors,
// named ports and ipBlocks), applied with one ipset restore and one filter-table restore
// (iptables-nft).
type iptablesPolicy struct{}

func init() { RegisterPolicy(iptablesPolicy{}) }

func (iptablesPolicy) Name() string    { return "iptables" }
func (iptablesPolicy) Summary() string { return "kube-router's iptables + ipset layout" }
func (iptablesPolicy) Needs() []string { return []string{"iptables-nft", "ipset"} }
func (iptablesPolicy) Usable() error   { return nil }

func (iptablesPolicy) Render(prog *policy.Program) (Rendering, policy.Counts) {
	sets, filter, cnt := policy.RenderIPTables(prog)
	return Rendering{sets, filter}, cnt
}

func (iptablesPolicy) Apply(n Node, r Rendering) error {
	return policy.ApplyIPTables(n.Path, "nft", r[0], r[1])
}
