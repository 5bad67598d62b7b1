package dataplane

import "github.com/cnibench/cnibench/internal/engine/proxy"

// nftablesProxy: kube-proxy's nftables layout (table ip kube-proxy, the service-ips verdict
// map, numgen random to endpoint chains), one nft transaction per node.
type nftablesProxy struct{}

func init() { RegisterProxy(nftablesProxy{}) }

func (nftablesProxy) Name() string    { return "nftables" }
func (nftablesProxy) Summary() string { return "kube-proxy's nftables layout (verdict maps)" }
func (nftablesProxy) Needs() []string { return []string{"nftables"} }
func (nftablesProxy) Usable() error   { return nil }

func (nftablesProxy) Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts) {
	return proxy.RenderNFTables(svcs, opt)
}

func (nftablesProxy) Apply(n Node, input []byte) error {
	return proxy.ApplyNFTables(n.Path, input)
}

var _ PartialProxy = nftablesProxy{}

// RenderPartial writes only what changed since prev (a *proxy.NFTState from the last call
// for this node), in one transaction that keeps the table (proxy.RenderNFTablesPartial);
// prev nil, or of another type, gives the full rendering.
func (nftablesProxy) RenderPartial(prev any, svcs []proxy.Service, opt proxy.Options) ([]byte, any, proxy.Counts) {
	p, _ := prev.(*proxy.NFTState)
	in, next, cnt := proxy.RenderNFTablesPartial(p, svcs, opt)
	return in, next, cnt
}
