package kubeharness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// calicoOnCluster checks the real Calico the harness runs: felix ready on each node, its VXLAN
// device (VNI 4096 on port 4789, calico-vxlan.yaml's defaults), a route through it to the
// other node's IPAM block, felix's chains hooked into the filter table through iptables-nft,
// the node's CNI configuration naming the calico plugin with calico-ipam, and the host's
// /var/lib/calico and /run/calico left as the harness made them (calico-node wrote into the
// node's own).
func calicoOnCluster(t *testing.T, h *Harness) {
	for _, n := range h.nodes {
		if out := nodeOut(t, n, "curl", "-fsS", felixReadiness); out == "" {
			t.Errorf("%s: felix readiness: empty", n.name)
		}
		if l := nodeOut(t, n, "ip", "-d", "link", "show", "vxlan.calico"); !strings.Contains(l, "vxlan id 4096") || !strings.Contains(l, "dstport 4789") {
			t.Errorf("%s: vxlan.calico: %s", n.name, l)
		}
		if r := nodeOut(t, n, "ip", "-4", "route", "show", "dev", "vxlan.calico"); !strings.Contains(r, " onlink") {
			t.Errorf("%s: no route to the other node's block through vxlan.calico: %q", n.name, r)
		}
		if f := nodeOut(t, n, "iptables-nft-save", "-t", "filter"); !strings.Contains(f, "-j cali-FORWARD") {
			t.Errorf("%s: felix's cali-FORWARD not hooked in the filter table (iptables-nft)", n.name)
		}
		conf, err := os.ReadFile(filepath.Join(n.dir, "net.d/10-calico.conflist"))
		if err != nil || !strings.Contains(string(conf), `"type":"calico"`) || !strings.Contains(string(conf), `"calico-ipam"`) {
			t.Errorf("%s: CNI configuration: %v: %s", n.name, err, conf)
		}
		if b, err := os.ReadFile(calicoDir(n, "lib/nodename")); err != nil || strings.TrimSpace(string(b)) != n.name {
			t.Errorf("%s: calico-node's nodename file in the node's directory: %v %q", n.name, err, b)
		}
	}
	for _, d := range []string{calicoLib, calicoRun} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("host %s: %v, %d entries: calico-node wrote outside its node's directory", d, err, len(ents))
		}
	}
}
