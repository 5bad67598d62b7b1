package dataplane

import "github.com/cnibench/cnibench/internal/lab/proxy"

// iptablesProxy: kube-proxy's iptables layout (KUBE-SERVICES -> KUBE-SVC-<hash> ->
// KUBE-SEP-<hash>, statistic --mode random), applied with one iptables-restore per node through
// iptables-nft ("iptables", Debian's default) or iptables-legacy.
type iptablesProxy struct {
	name    string
	backend proxy.IPTablesBackend
	need    string
}

func init() {
	RegisterProxy(iptablesProxy{"iptables", "nft", "iptables-nft"})
	RegisterProxy(iptablesProxy{"iptables-legacy", "legacy", "iptables-legacy"})
}

func (p iptablesProxy) Name() string { return p.name }
func (p iptablesProxy) Summary() string {
	return "kube-proxy's iptables layout (iptables-" + string(p.backend) + ")"
}
func (p iptablesProxy) Needs() []string { return []string{p.need} }
func (iptablesProxy) Usable() error     { return nil }

func (iptablesProxy) Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts) {
	return proxy.RenderIPTables(svcs, opt)
}

func (p iptablesProxy) Apply(n Node, input []byte) error {
	return proxy.ApplyIPTables(n.Path, p.backend, input)
}
