package kubeharness

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// podNetwork is everything the harness does differently for one pod network (Config.CNI): the
// one owner of each network's needs, so that Up and node ask it instead of switching on names.
type podNetwork struct {
	bins []string // what it needs in Config.Bin beyond Kubernetes' binaries
	// client is the name of its agent's certificate and kubeconfig (PKI path CLIENT.kubeconfig);
	// "" for none.
	client string
	// enforcesPolicy: NetworkPolicy is enforced on this network (the probe must say so).
	enforcesPolicy bool
	nodeCIDRs      bool     // the controller manager gives each Node a pod CIDR
	staticRoutes   bool     // the harness routes the nodes' pod CIDRs (no agent does)
	podMTU         int      // the MTU pods get (the underlay's is 1500)
	hostDirs       []string // host directories it needs; made when missing and removed at Down
	// replacesProxy: its agent can serve Services itself, so the cluster may run without
	// kube-proxy (Config.ProxyMode ProxyNone).
	replacesProxy bool
	// cluster runs once the control plane is up, before the nodes start (nil: nothing).
	cluster func(h *Harness) error
	// containerd returns the node's CNI plugin directory and the environment containerd (and
	// with it the CNI plugins it runs) gets; nil = the host's plugins, no environment.
	containerd func(h *Harness, n nodeInfo) (binDir string, env []string, err error)
	// conf writes the node's CNI configuration before containerd starts (nil: an agent
	// writes it once it is ready).
	conf func(h *Harness, n nodeInfo) error
	// agent starts the network's node agent once the kubelet and kube-proxy run (nil: none).
	agent func(h *Harness, n nodeInfo) error
	// routed waits, once every node's agent is ready, until each node routes to the other
	// nodes' pods (nil: the agents' readiness says so), so that no measurement starts on a
	// half-made mesh.
	routed func(h *Harness) error
}

// ProxyNone is the Config.ProxyMode of a cluster without kube-proxy: the pod network's agent
// serves Services (Cilium's kube-proxy replacement).
const ProxyNone = "none"

// podNetworks are the pod networks a test cluster can run, by Config.CNI.
var podNetworks = map[string]podNetwork{
	CNIBridge:        {staticRoutes: true, podMTU: 1500, conf: bridgeConf},
	CNIFlannel:       {bins: []string{"flanneld"}, client: "flannel", nodeCIDRs: true, podMTU: 1450, agent: (*Harness).flannel},
	CNIFlannelHostGW: {bins: []string{"flanneld"}, client: "flannel", nodeCIDRs: true, podMTU: 1500, agent: (*Harness).flannel},
	CNICilium:        ciliumNetwork,
	CNIKubeRouter:    kubeRouterNetwork,
	CNICalico:        calicoNetwork,
}

// agentClients are the pod networks' agent client names, sorted, each once.
func agentClients() []string {
	var out []string
	for _, pn := range podNetworks {
		if pn.client != "" && !slices.Contains(out, pn.client) {
			out = append(out, pn.client)
		}
	}
	slices.Sort(out)
	return out
}

// CNIs are the pod networks Config.CNI accepts.
var CNIs = func() []string {
	var out []string
	for k := range podNetworks {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}()

// Binaries are what a cluster on pod network cni needs in Config.Bin: Kubernetes' own and the
// network's.
func Binaries(cni string) []string {
	return append([]string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}, podNetworks[cni].bins...)
}

// podNet is the harness's pod network.
func (h *Harness) podNet() podNetwork { return podNetworks[h.cfg.CNI] }

// PodMTU is the MTU pods of the cluster's pod network get.
func (h *Harness) PodMTU() int { return h.podNet().podMTU }

func validCNI(cni string) error {
	if _, ok := podNetworks[cni]; !ok {
		return fmt.Errorf("unknown CNI %q (valid: %s)", cni, strings.Join(CNIs, ", "))
	}
	return nil
}

// bridgeConf is the bridge network's node configuration: the bridge plugin with host-local
// handing out the node's pod CIDR (routed between nodes by the harness).
func bridgeConf(h *Harness, n nodeInfo) error {
	cni := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,
"ipMasq":false,"hairpinMode":true,"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],
"dataDir":%q}}]}`, n.podCIDR, filepath.Join(n.dir, "ipam"))
	return h.writeFile(filepath.Join(n.dir, "net.d/10-bridge.conflist"), cni)
}
