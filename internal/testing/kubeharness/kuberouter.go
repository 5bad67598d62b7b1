package kubeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CNIKubeRouter: real kube-router (built from its Go module by scripts/kube-build.sh) on every
// node as generic-kuberouter.yaml runs it for a cluster that keeps kube-proxy: its routing
// controller (iBGP full mesh through its built-in gobgp, routes to the other nodes' pod CIDRs
// via their addresses, no overlay: the nodes share one subnet, and this kernel has no ipip)
// and its NetworkPolicy controller (iptables and ipsets); Services stay with kube-proxy (its
// IPVS service proxy needs ip_vs, which this kernel does not have). Pods are attached by the
// bridge and host-local plugins through the CNI configuration kube-router completes.
const CNIKubeRouter = "kube-router"

var kubeRouterNetwork = podNetwork{
	bins:           []string{"kube-router"},
	routed:         (*Harness).kubeRouterRouted,
	client:         "kube-router",
	enforcesPolicy: true,
	nodeCIDRs:      true,
	podMTU:         1500, // kube-bridge takes the node link's MTU (--auto-mtu): no encapsulation
	agent:          (*Harness).kubeRouter,
}

const (
	// kubeRouterHealth is the agent's health endpoint (its default --health-port, 20244),
	// answered inside the node's namespace.
	kubeRouterHealth = "http://127.0.0.1:20244/healthz"
	// kubeRouterReadyWait is how long an agent may take to answer healthy.
	kubeRouterReadyWait = 60 * time.Second
	// rtTables is the host file kube-router adds its routing table to ("77 kube-router") on
	// every start, overlay or not.
	rtTables = "/etc/iproute2/rt_tables"
)

// kubeRouterMounts is the script between nsenter and the agent: a private mount namespace in
// which the node's own copy of rtTables stands in for the host's. Its arguments: the copy,
// then the agent's command line.
const kubeRouterMounts = `set -e
tables=$1; shift
mount --bind "$tables" ` + rtTables + `
exec "$@"
`

// kubeRouter starts a node's kube-router once its Node has a pod CIDR (it exits without one),
// with the node's CNI configuration written first (the file kube-router reads and completes
// with the node's range and MTU, as its DaemonSet's init container installs it), and waits
// until the agent says it is healthy.
func (h *Harness) kubeRouter(n nodeInfo) error {
	d := func(rel string) string { return filepath.Join(n.dir, "kube-router", rel) }
	cidr, err := h.waitPodCIDR(n.name, flannelSubnetWait)
	if err != nil {
		return err
	}
	tables, err := os.ReadFile(rtTables)
	if err != nil {
		return fmt.Errorf("kube-router needs %s to copy: %w", rtTables, err)
	}
	if err := h.writeFile(d("rt_tables"), string(tables)); err != nil {
		return err
	}
	conf := filepath.Join(n.dir, "net.d/10-kuberouter.conflist")
	if err := h.writeFile(conf, kubeRouterConflist(cidr, filepath.Join(n.dir, "ipam"))); err != nil {
		return err
	}
	name := "kube-router-" + n.name
	argv := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", kubeRouterMounts, "sh", d("rt_tables"),
		filepath.Join(h.cfg.Bin, "kube-router"),
		"--kubeconfig=" + h.pki.path("kube-router.kubeconfig"), "--hostname-override=" + n.name,
		"--run-router=true", "--run-firewall=true", "--run-service-proxy=false",
		"--enable-overlay=false", "--bgp-graceful-restart=true", "--service-cluster-ip-range=" + serviceCIDR}
	env := []string{"NODE_NAME=" + n.name, "KUBE_ROUTER_CNI_CONF_FILE=" + conf}
	if err := h.startEnv(name, n.ns, env, argv...); err != nil {
		return err
	}
	if err := h.waitHTTP(context.Background(), n.ns, kubeRouterHealth, name, kubeRouterReadyWait); err != nil {
		return err
	}
	h.logf("kube-router on %s healthy", n.name)
	return nil
}

// bgpWait is how long the agents' BGP sessions may take to bring the routes.
const bgpWait = 30 * time.Second

// kubeRouterRouted waits until every node has a route to every other node's pod CIDR through
// that node's address, learnt by BGP: the sessions take a few seconds to come up after the
// agents start.
func (h *Harness) kubeRouterRouted() error {
	cidrs := map[string]string{}
	for _, n := range h.nodes {
		c, err := h.waitPodCIDR(n.name, 0)
		if err != nil {
			return err
		}
		cidrs[n.name] = c
	}
	return h.awaitRoutes("kube-router BGP routes between the nodes' pod CIDRs", bgpWait, func(_, o nodeInfo) ([]string, func(string) bool) {
		return []string{cidrs[o.name]}, func(out string) bool { return bgpRoute(out, o.ip) }
	})
}

// bgpRoute says whether ip route's line r goes via gw and was installed by gobgp (protocol
// zebra, 17: iproute2 prints the number where its rt_protos does not name it).
func bgpRoute(r, gw string) bool {
	return strings.Contains(r, "via "+gw+" ") && (strings.Contains(r, "proto zebra") || strings.Contains(r, "proto 17 "))
}

// kubeRouterConflist is the node's CNI configuration as kube-router's DaemonSet installs it
// (10-kuberouter.conflist: the bridge plugin on kube-bridge as the pods' default gateway,
// host-local handing out the node's pod CIDR), the range filled in as kube-router would and
// host-local's leases in the node's directory.
func kubeRouterConflist(podCIDR, ipamDir string) string {
	b, _ := json.Marshal(map[string]any{"cniVersion": "0.3.0", "name": "mynet", "plugins": []any{map[string]any{
		"name": "kubernetes", "type": "bridge", "bridge": "kube-bridge", "isDefaultGateway": true,
		"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": podCIDR}}}, "dataDir": ipamDir},
	}}})
	return string(b)
}
