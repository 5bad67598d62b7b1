package dataplane

import "github.com/cnibench/cnibench/internal/lab/policy"

// nftablesPolicy: one table whose forward chain dispatches with address-keyed verdict maps
// (one lookup whatever the pod count), interval sets for ipBlocks; one nft transaction.
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

func (nftablesPolicy) Apply(n Node, r Rendering) error {
	return policy.ApplyNFTables(n.Path, r[0])
}
