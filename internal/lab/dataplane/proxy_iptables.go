package dataplane

import "github.com/cnibench/cnibench/internal/engine/proxy"

// iptablesProxy: kube-proxy's iptables layout (KUBE-SERVICES -> KUBE-SVC-<hash> ->
// KUBE-SEP-<hash>, statistic --mode random), applied per node as one iptables-restore
// --noflush would apply it: with iptables-nft ("iptables", Debian's default) one transaction
// of the objects iptables-nft makes, written over netlink (proxy.ApplyIPTables); with
// iptables-legacy its iptables-restore.
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

// Apply runs the node's iptables-restore with the node's own xtables lock (Node.XTablesLock).
func (p iptablesProxy) Apply(n Node, input []byte) error {
	lock, err := n.XTablesLock()
	if err != nil {
		return err
	}
	return proxy.ApplyIPTables(n.Path, p.backend, lock, input)
}

var _ PartialProxy = iptablesProxy{}

// RenderPartial writes KUBE-SERVICES and the other chains that depend on every Service, the
// chains that changed since prev (a *proxy.IPTState from the last call for this node) and the
// deletion of those that went away (proxy.RenderIPTablesPartial); prev nil, or of another
// type, gives the full rendering, opt.Stale honoured.
func (iptablesProxy) RenderPartial(prev any, svcs []proxy.Service, opt proxy.Options) ([]byte, any, proxy.Counts) {
	p, _ := prev.(*proxy.IPTState)
	in, next, cnt := proxy.RenderIPTablesPartial(p, svcs, opt)
	return in, next, cnt
}
