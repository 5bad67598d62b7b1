package dataplane

import "github.com/cnibench/cnibench/internal/engine/policy"

// iptablesPolicy: kube-router's layout (KUBE-ROUTER-FORWARD dispatching each local pod's
// address to its KUBE-POD-FW chain, a KUBE-NWPLCY chain per policy, ipsets for selectors,
// named ports and ipBlocks), applied with one ipset restore and one transaction of the
// filter table as iptables-nft writes it (over netlink: policy.ApplyIPTables); partial syncs
// write only the chains and sets that changed (policy.RenderIPTablesPartial), with
// iptables-nft-restore --noflush.
type iptablesPolicy struct{}

func init() { RegisterPolicy(iptablesPolicy{}) }

func (iptablesPolicy) Name() string    { return "iptables" }
func (iptablesPolicy) Summary() string { return "kube-router's iptables + ipset layout" }
func (iptablesPolicy) Needs() []string { return []string{"iptables-nft", "ipset"} }
func (iptablesPolicy) Usable() error   { return nil }

// Render gives a full rendering: Rendering{ipset input, filter input}.
func (iptablesPolicy) Render(prog *policy.Program) (Rendering, policy.Counts) {
	sets, filter, cnt := policy.RenderIPTables(prog)
	return Rendering{sets, filter}, cnt
}

// Apply installs a full rendering (2 elements: policy.ApplyIPTables) or a partial one (3:
// sets created, filter --noflush, sets destroyed; policy.ApplyIPTablesPartial).
func (iptablesPolicy) Apply(n Node, r Rendering) error {
	if len(r) == 3 {
		return policy.ApplyIPTablesPartial(n.Path, "nft", policy.IPTPartial{SetsBefore: r[0], Filter: r[1], SetsAfter: r[2]})
	}
	return policy.ApplyIPTables(n.Path, "nft", r[0], r[1])
}

var _ PartialPolicy = iptablesPolicy{}

// RenderPartial writes the chains and sets that changed since prev (a *policy.IPTState from
// the last call for this node) as a 3-element Rendering; prev nil, or of another type, gives
// the full 2-element rendering of Render.
func (iptablesPolicy) RenderPartial(prev any, prog *policy.Program) (Rendering, any, policy.Counts) {
	p, _ := prev.(*policy.IPTState)
	r, next, cnt := policy.RenderIPTablesPartial(p, prog)
	if r.Full {
		return Rendering{r.SetsBefore, r.Filter}, next, cnt
	}
	return Rendering{r.SetsBefore, r.Filter, r.SetsAfter}, next, cnt
}
