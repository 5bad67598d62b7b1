package kubeharness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/lab"
)

// The pod networks a test cluster can run (Config.CNI).
const (
	// CNIBridge: the CNI bridge plugin on every node and static routes between the nodes' pod
	// CIDRs, set by the harness (no agent).
	CNIBridge = "bridge"
	// CNIFlannel: real Flannel, VXLAN backend: flanneld (built from its Go module by
	// scripts/kube-build.sh) on every node with --kube-subnet-mgr, programming the VXLAN
	// device, FDB, neighbours, routes and its iptables rules itself; the node's CNI
	// configuration is what flannel's CNI plugin hands to the bridge plugin.
	CNIFlannel = "flannel"
	// CNIFlannelHostGW: real Flannel, host-gw backend (routes via the other nodes' addresses).
	CNIFlannelHostGW = "flannel-hostgw"
	// CNICilium: real Cilium, VXLAN tunnel: cilium-agent (built from its Go module by
	// scripts/kube-build.sh) on every node, its datapath compiled with clang at start,
	// NetworkPolicy enforced in eBPF, Services by kube-proxy or, with ProxyMode ProxyNone, by
	// the agent itself; cilium-cni attaches the pods (cilium.go).
	CNICilium = "cilium"
)

// flannelBackend is the flannel backend type of a CNI ("" when it is not flannel).
func flannelBackend(cni string) string {
	switch cni {
	case CNIFlannel:
		return "vxlan"
	case CNIFlannelHostGW:
		return "host-gw"
	}
	return ""
}

// flannelSubnetWait is how long a node's flanneld may take to write its subnet file (it waits
// for the node to register and for the controller manager to give it a pod CIDR).
const flannelSubnetWait = 60 * time.Second

// flannel starts flanneld on a node and, once it has written the node's subnet file, writes
// the node's CNI configuration from it, as flannel's CNI plugin (not served as a module here)
// would configure the bridge plugin it delegates to.
func (h *Harness) flannel(n nodeInfo) error {
	d := func(rel string) string { return filepath.Join(n.dir, rel) }
	conf, err := json.Marshal(map[string]any{"Network": clusterCIDR, "Backend": map[string]any{"Type": flannelBackend(h.cfg.CNI)}})
	if err != nil {
		return err
	}
	if err := h.writeFile(d("flannel/net-conf.json"), string(conf)); err != nil {
		return err
	}
	// flanneld exits when its Node has no pod CIDR yet (a DaemonSet would restart it): it
	// starts once the node has registered and the controller manager has given it one.
	if _, err := h.waitPodCIDR(n.name, flannelSubnetWait); err != nil {
		return err
	}
	subnetFile := d("flannel/subnet.env")
	// As kube-flannel.yml runs it (--ip-masq --kube-subnet-mgr), with the node's name in
	// NODE_NAME instead of the pod's, its interface named, and files in the node's directory.
	if err := h.startEnv("flanneld-"+n.name, n.ns, []string{"NODE_NAME=" + n.name}, filepath.Join(h.cfg.Bin, "flanneld"),
		"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file="+h.pki.path("flannel.kubeconfig"), "--iface="+lab.NodeLink,
		"--net-config-path="+d("flannel/net-conf.json"), "--subnet-file="+subnetFile); err != nil {
		return err
	}
	deadline := time.Now().Add(flannelSubnetWait)
	for {
		env, err := readSubnetEnv(subnetFile)
		if err == nil {
			return h.writeFile(d("net.d/10-flannel.conflist"), flannelConflist(env, d("ipam")))
		}
		if h.exited("flanneld-" + n.name) {
			return fmt.Errorf("flanneld exited: %s", h.logTail("flanneld-"+n.name))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("flanneld wrote no usable %s within %s (%v): %s", subnetFile, flannelSubnetWait, err, h.logTail("flanneld-"+n.name))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// subnetEnv is what flanneld writes into its subnet file.
type subnetEnv struct {
	Network, Subnet *net.IPNet
	MTU             int
	IPMasq          bool
}

// readSubnetEnv reads a flannel subnet file (FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU,
// FLANNEL_IPMASQ) the way flannel's CNI plugin does: the subnet is its network address.
func readSubnetEnv(path string) (subnetEnv, error) {
	f, err := os.Open(path)
	if err != nil {
		return subnetEnv{}, err
	}
	defer f.Close()
	var env subnetEnv
	seen := map[string]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(s.Text()), "=")
		if !ok {
			continue
		}
		switch k {
		case "FLANNEL_NETWORK":
			_, env.Network, err = net.ParseCIDR(strings.Split(v, ",")[0])
		case "FLANNEL_SUBNET":
			_, env.Subnet, err = net.ParseCIDR(v)
		case "FLANNEL_MTU":
			env.MTU, err = strconv.Atoi(v)
		case "FLANNEL_IPMASQ":
			env.IPMasq = v == "true"
		default:
			continue
		}
		if err != nil {
			return subnetEnv{}, fmt.Errorf("%s: %s: %w", path, k, err)
		}
		seen[k] = true
	}
	if err := s.Err(); err != nil {
		return subnetEnv{}, err
	}
	for _, k := range []string{"FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU", "FLANNEL_IPMASQ"} {
		if !seen[k] {
			return subnetEnv{}, fmt.Errorf("%s: no %s (yet)", path, k)
		}
	}
	return env, nil
}

// flannelConflist is the node's CNI configuration: kube-flannel.yml's cni-conf.json (flannel
// with the delegate hairpinMode and isDefaultGateway, then portmap) with the flannel plugin's
// work done: its delegate is the bridge plugin (cni0, the gateway, masquerading when flanneld
// does not, the MTU flanneld chose) with host-local handing out the node's subnet and a route
// to the cluster network. host-local keeps its leases in the node's directory.
func flannelConflist(env subnetEnv, ipamDir string) string {
	bridge := map[string]any{
		"type": "bridge", "hairpinMode": true, "isDefaultGateway": true, "isGateway": true,
		"ipMasq": !env.IPMasq, "mtu": env.MTU,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": env.Subnet.String()}}},
			"routes":  []map[string]string{{"dst": env.Network.String()}},
			"dataDir": ipamDir,
		},
	}
	portmap := map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}}
	b, _ := json.Marshal(map[string]any{"cniVersion": "0.3.1", "name": "cbr0", "plugins": []any{bridge, portmap}})
	return string(b)
}

// waitPodCIDR waits until node has a pod CIDR in its Node object, and returns it.
func (h *Harness) waitPodCIDR(node string, timeout time.Duration) (string, error) {
	client, err := h.nsClient(h.nodes[0].ns)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(timeout)
	for {
		var n struct {
			Spec struct{ PodCIDR string }
		}
		resp, err := client.Get(h.apiURL() + "/api/v1/nodes/" + node)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&n)
			resp.Body.Close()
		}
		if err == nil && n.Spec.PodCIDR != "" {
			return n.Spec.PodCIDR, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("node %s has no pod CIDR after %s (%v): is the controller manager allocating node CIDRs?", node, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
