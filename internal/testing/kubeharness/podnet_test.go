package kubeharness

import (
	"context"
	"strings"
	"testing"
)

// A cluster asked for a pod network or proxy mode the harness does not have is refused before
// anything is made, saying what would do.
func TestUpRefusesUnknownNetworks(t *testing.T) {
	for _, tc := range []struct {
		cni, proxy, want string
	}{
		{"weave", "", `unknown CNI "weave" (valid: bridge, calico, cilium, flannel, flannel-hostgw, kube-router)`},
		{CNIFlannel, ProxyNone, `proxy mode "none": the flannel network does not replace kube-proxy`},
		{CNIBridge, ProxyNone, `proxy mode "none": the bridge network does not replace kube-proxy`},
		{CNICilium, "ipvs", `unknown proxy mode "ipvs" (valid: iptables, nftables, none)`},
	} {
		dir := t.TempDir()
		h, err := Up(context.Background(), Config{Prefix: "cnbtkbad", Dir: dir, CNI: tc.cni, ProxyMode: tc.proxy})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CNI %q proxy %q: %v, want %q", tc.cni, tc.proxy, err, tc.want)
		}
		if h != nil {
			t.Errorf("CNI %q proxy %q: a harness came back", tc.cni, tc.proxy)
		}
	}
}

// Every pod network says what its pods' MTU is, only Cilium may replace kube-proxy, Cilium,
// kube-router and Calico enforce NetworkPolicy, and every agent has its own client certificate.
func TestPodNetworks(t *testing.T) {
	for name, pn := range podNetworks {
		if pn.podMTU == 0 {
			t.Errorf("%s: no pod MTU", name)
		}
		if pn.replacesProxy != (name == CNICilium) {
			t.Errorf("%s: replacesProxy %v", name, pn.replacesProxy)
		}
		if pn.enforcesPolicy != (name == CNICilium || name == CNIKubeRouter || name == CNICalico) {
			t.Errorf("%s: enforcesPolicy %v", name, pn.enforcesPolicy)
		}
		if (pn.agent == nil) != (pn.client == "") {
			t.Errorf("%s: an agent %v, a client certificate %q: each agent has its own", name, pn.agent != nil, pn.client)
		}
		if pn.nodeCIDRs == pn.staticRoutes {
			t.Errorf("%s: node CIDRs %v, static routes %v: the harness routes its own subnets, an agent the controller manager's", name, pn.nodeCIDRs, pn.staticRoutes)
		}
	}
}
