package kubeharness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/netns"
)

// kubeRouterOnCluster checks the real kube-router the harness runs: each node's agent healthy,
// a route to every other node's pod CIDR through that node's address learnt by BGP (protocol
// zebra, 17, as gobgp installs them), every node's pod CIDR in the set its pod-egress
// masquerading spares, kube-bridge made, its
// policy chains hooked into the filter table, the CNI configuration completed by the agent
// (its range and MTU), and the host's rt_tables untouched (the agent wrote to its node's copy).
func kubeRouterOnCluster(t *testing.T, h *Harness) {
	hostTables, err := os.ReadFile(rtTables)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(hostTables), "kube-router") {
		t.Errorf("the host's %s names kube-router:\n%s", rtTables, hostTables)
	}
	cidrs := map[string]string{}
	for _, n := range h.nodes {
		c, err := h.waitPodCIDR(n.name, 0)
		if err != nil {
			t.Fatal(err)
		}
		cidrs[n.name] = c
	}
	for _, n := range h.nodes {
		for _, o := range h.nodes {
			if o.name == n.name {
				continue
			}
			// Up waited for them (kubeRouterRouted).
			if r := nodeOut(t, n, "ip", "-4", "route", "show", cidrs[o.name]); !bgpRoute(r, o.ip) {
				t.Errorf("%s: route to %s's pod CIDR %s: %q, want via %s proto zebra (BGP)", n.name, o.name, cidrs[o.name], r, o.ip)
			}
		}
		// The pod CIDRs its pod-egress masquerading spares: every node's, so that traffic
		// between pods on two nodes keeps the pods' addresses (which the policies match).
		for _, o := range h.nodes {
			ip, _, _ := strings.Cut(cidrs[o.name], "/")
			nodeOut(t, n, "ipset", "test", "kube-router-pod-subnets", ip)
		}
		nodeOut(t, n, "ip", "link", "show", "kube-bridge")
		if f := nodeOut(t, n, "iptables-nft-save", "-t", "filter"); !strings.Contains(f, "-j KUBE-ROUTER-FORWARD") || !strings.Contains(f, "-j KUBE-ROUTER-INPUT") {
			t.Errorf("%s: no jumps to kube-router's policy chains in the filter table:\n%s", n.name, f)
		}
		conf, err := os.ReadFile(filepath.Join(n.dir, "net.d/10-kuberouter.conflist"))
		if err != nil || !strings.Contains(string(conf), `"mtu":`) || !strings.Contains(string(conf), cidrs[n.name]) {
			t.Errorf("%s: CNI configuration not completed by the agent (mtu, range %s): %v: %s", n.name, cidrs[n.name], err, conf)
		}
	}
}

// nodeOut runs argv in node n's network namespace and returns its output; a failure is a
// test error naming the node and the command.
func nodeOut(t *testing.T, n nodeInfo, argv ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + netns.Path(n.ns), "--"}, argv...)...).CombinedOutput()
	if err != nil {
		t.Errorf("%s: %s: %v: %s", n.name, strings.Join(argv, " "), err, out)
	}
	return string(out)
}
