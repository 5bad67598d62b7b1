package lab

import "github.com/cnibench/cnibench/internal/cluster"

// nodePortServer is what a proxy engine that may not serve NodePort Services says about it. An
// engine without the method serves them (kube-proxy's iptables and nftables layouts program
// them on every node); one whose method says false programs ClusterIPs only, and the lab
// reports NodePort cases on it as skipped.
type nodePortServer interface {
	ServesNodePorts() bool
}

var _ cluster.NodePortChecker = (*Lab)(nil)

// NodePorts implements cluster.NodePortChecker: the lab serves NodePort Services where its
// proxy engine programs Services here at all and does not say it lacks NodePorts.
func (l *Lab) NodePorts() error {
	if err := l.proxyUsable(); err != nil {
		return err
	}
	if s, ok := l.dp.Proxy.(nodePortServer); ok && !s.ServesNodePorts() {
		return cluster.Unsupported("proxy %s does not serve NodePorts (yet): it programs ClusterIPs only", l.dp.Proxy.Name())
	}
	return nil
}
