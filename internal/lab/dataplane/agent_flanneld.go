package dataplane

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/netns"
)

// flanneld: the iptables rules flanneld (v0.28, --ip-masq, iptables-forward-rules on by
// default) keeps on every node, in its order (pkg/trafficmngr/iptables): FORWARD accepts the
// cluster's pod network both ways (FLANNEL-FWD), and POSTROUTING masquerades what leaves the
// pod network (FLANNEL-POSTRTG), but not what kube-proxy marked for its own masquerade, nor
// traffic between pods, nor traffic to the node's pods from outside. The lab's fidelity test
// holds them against a real flanneld's (internal/lab/testdata/real-flannel-*.txt).
type flanneld struct{}

func init() { RegisterAgent(flanneld{}) }

func (flanneld) Name() string { return "flanneld" }
func (flanneld) Summary() string {
	return "flanneld's forward and masquerade rules (FLANNEL-FWD, FLANNEL-POSTRTG)"
}
func (flanneld) Needs() []string { return []string{"iptables-nft"} }

// kubeProxyMark is kube-proxy's masquerade mark, which flanneld leaves to kube-proxy.
const kubeProxyMark = "0x4000/0x4000"

func (flanneld) SetupNode(n Node) error {
	cc, pod := n.ClusterCIDR.String(), n.PodCIDR.String()
	fwd, masq := `-m comment --comment "flanneld forward"`, `-m comment --comment "flanneld masq"`
	input := fmt.Sprintf(`*filter
:FLANNEL-FWD - [0:0]
-A FORWARD %[3]s -j FLANNEL-FWD
-A FLANNEL-FWD -s %[1]s %[3]s -j ACCEPT
-A FLANNEL-FWD -d %[1]s %[3]s -j ACCEPT
COMMIT
*nat
:FLANNEL-POSTRTG - [0:0]
-A POSTROUTING %[4]s -j FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark %[5]s %[4]s -j RETURN
-A FLANNEL-POSTRTG -s %[2]s -d %[1]s %[4]s -j RETURN
-A FLANNEL-POSTRTG -s %[1]s -d %[2]s %[4]s -j RETURN
-A FLANNEL-POSTRTG ! -s %[1]s -d %[2]s %[4]s -j RETURN
-A FLANNEL-POSTRTG -s %[1]s ! -d 224.0.0.0/4 %[4]s -j MASQUERADE --random-fully
-A FLANNEL-POSTRTG ! -s %[1]s -d %[1]s %[4]s -j MASQUERADE --random-fully
COMMIT
`, cc, pod, fwd, masq, kubeProxyMark)
	if _, err := netns.Output(n.Path, "iptables-restore", []string{"--noflush"}, []byte(input)); err != nil {
		return fmt.Errorf("flanneld rules: %w", err)
	}
	return nil
}
