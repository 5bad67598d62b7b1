package dataplane

import "github.com/cnibench/cnibench/internal/engine/policy"

// nftablesPolicy: one table whose forward chain dispatches with address-keyed verdict maps
// (one lookup whatever the pod count), interval sets for ipBlocks; one nft transaction.
// Partial syncs write only the chains, sets and map elements that changed, in one
// transaction that keeps the table (policy.RenderNFTablesPartial).
type nftablesPolicy struct{}

func init() { RegisterPolicy(nftablesPolicy{}) }

func (nftablesPolicy) Name() string    { return "nftables" }
func (nftablesPolicy) Summary() string { return "nftables with address-keyed verdict maps" }
func (nftablesPolicy) Needs() []string { return []string{"nftables"} }
func (nftablesPolicy) Usable() error   { return nil }

func (nftablesPolicy) Render(prog *policy.Program) (Rendering, policy.Counts) {
	input, cnt := policy.RenderNFTables(prog)
	return Rendering{input}, cnt
}

// Apply installs a rendering, full or partial (one nft transaction either way; a partial one
// with nothing to change is empty, which nft applies as a no-op).
func (nftablesPolicy) Apply(n Node, r Rendering) error {
	return policy.ApplyNFTables(n.Path, r[0])
}

var _ PartialPolicy = nftablesPolicy{}

// RenderPartial writes only what changed since prev (a *policy.NFTState from the last call
// for this node), in one transaction that keeps the table (policy.RenderNFTablesPartial);
// prev nil, or of another type, gives the full rendering of Render.
func (nftablesPolicy) RenderPartial(prev any, prog *policy.Program) (Rendering, any, policy.Counts) {
	p, _ := prev.(*policy.NFTState)
	input, next, cnt := policy.RenderNFTablesPartial(p, prog)
	return Rendering{input}, next, cnt
}
