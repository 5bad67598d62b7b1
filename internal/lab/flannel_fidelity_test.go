package lab

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/testing/nodedump"
)

// difference is an accepted difference between a lab node and a real one: the lines it covers
// (only in the lab's dump, or only in the real one) and why the lab differs.
type difference struct {
	side   string // "lab" or "real"
	line   *regexp.Regexp
	reason string
}

// TestFlannelFidelity holds the lab's flannel presets against real flanneld (v0.28.10, with
// the configuration flannel's CNI plugin gives the bridge plugin): node0 of a lab with one pod
// on each node, dumped as node0 of the project's test cluster was (testdata/real-flannel-*.txt,
// recorded and kept current by internal/testing/kubeharness), compared object by object. Every
// difference must be one of the accepted ones below, each with its reason, and each accepted
// one must still occur (a stale exception fails too).
func TestFlannelFidelity(t *testing.T) {
	for _, c := range []struct {
		preset, backend string
		accepted        []difference
	}{
		{"flannel", "vxlan", []difference{silentRoute(`via PEER_SUBNET\+0 dev flannel\.1 onlink`)}},
		{"flannel-hostgw", "host-gw", []difference{silentRoute(`via PEER dev eth0`)}},
	} {
		t.Run(c.preset, func(t *testing.T) {
			rec, err := os.ReadFile(filepath.Join("testdata", "real-flannel-"+c.backend+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			real := nodedump.Parse(string(rec))
			l := upLab(t, Config{Dataplane: c.preset})
			ctx := context.Background()
			if _, err := l.CreatePods(ctx, []cluster.PodSpec{{Name: "fid-a", Node: l.nodes[0].name}, {Name: "fid-b", Node: l.nodes[1].name}}); err != nil {
				t.Fatal(err)
			}
			n0, n1 := l.nodes[0], l.nodes[1]
			_, cc, _ := net.ParseCIDR(l.cfg.ClusterCIDR)
			roles := nodedump.Roles{Node: n0.ip, Peer: n1.ip, Subnet: n0.podCIDR, PeerSubnet: n1.podCIDR, Cluster: cc,
				VTEPMAC: linkMAC(t, n0.ns, "flannel.1"), PeerMAC: linkMAC(t, n1.ns, "flannel.1")}
			d, err := nodedump.Take(n0.ns, roles, nodedump.Flannel)
			if err != nil {
				t.Fatal(err)
			}
			onlyLab, onlyReal := nodedump.Diff(d, real)
			used := make([]bool, len(c.accepted))
			check := func(side string, lines []string) {
				for _, line := range lines {
					ok := false
					for i, a := range c.accepted {
						if a.side == side && a.line.MatchString(line) {
							ok, used[i] = true, true
						}
					}
					if !ok {
						t.Errorf("only in the %s node: %s", side, line)
					}
				}
			}
			check("lab", onlyLab)
			check("real", onlyReal)
			for i, a := range c.accepted {
				if !used[i] {
					t.Errorf("accepted difference no longer seen (%s: %s): %s", a.side, a.line, a.reason)
				}
			}
			if t.Failed() {
				t.Logf("lab node0:\n%s", strings.TrimSpace(d.String()))
			}
		})
	}
}

// silentRoute accepts the route to the other node's silent-pod block (lab.silentCIDR, at the
// top of the cluster CIDR), routed as its subnet is: the lab keeps the thousands of pods that
// only load the data plane in a block of their own, a real node has all its pods in its /24.
func silentRoute(via string) difference {
	return difference{"lab", regexp.MustCompile(`^route CLUSTER\+\d+/\d+ ` + via + ` `),
		"the lab routes the other node's silent-pod block as its subnet; a real node's pods are all in its subnet"}
}

// linkMAC is the MAC of link dev in namespace ns ("" when there is no such link).
func linkMAC(t *testing.T, ns, dev string) string {
	t.Helper()
	mac := ""
	_ = netns.WithNetlink(ns, func(h *netlink.Handle) error {
		if l, err := h.LinkByName(dev); err == nil {
			mac = l.Attrs().HardwareAddr.String()
		}
		return nil
	})
	return mac
}
