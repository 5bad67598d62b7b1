package dataplane

import (
	"errors"
	"fmt"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// ipvsProxy: kube-proxy's IPVS layout (virtual servers, the kube-ipvs0 dummy device, ipsets),
// rendered as ipvsadm-restore, ipset and address text. Kernels without IPVS (like this
// project's machines: no loadable modules) cannot run it, and the lab does not program it
// yet where IPVS exists: its cases are skipped with the reason.
type ipvsProxy struct{}

func init() { RegisterProxy(ipvsProxy{}) }

func (ipvsProxy) Name() string { return "ipvs" }
func (ipvsProxy) Summary() string {
	return "kube-proxy's IPVS layout (rendered; needs a kernel with IPVS)"
}
func (ipvsProxy) Needs() []string { return nil }

func (ipvsProxy) Usable() error {
	if ok, why := proxy.IPVSAvailable(); !ok {
		return fmt.Errorf("uses proxy ipvs, which this kernel lacks: %s (the rules are rendered and tested as text only)", why)
	}
	return errors.New("uses proxy ipvs, which the lab does not program yet (the kernel has IPVS)")
}

func (ipvsProxy) Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts) {
	return proxy.RenderIPVS(svcs, opt)
}

func (p ipvsProxy) Apply(Node, []byte) error { return p.Usable() }
