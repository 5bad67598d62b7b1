package kubeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/procs"
)

// CNICalico: real Calico (calico-node and the calico CNI plugin, built from the calico module
// by scripts/kube-build.sh) as manifests/calico-vxlan.yaml runs it, outside a pod: the
// Kubernetes datastore (Calico's CRDs registered), Calico IPAM (blocks from the pool, not the
// Nodes' pod CIDRs), VXLAN between the nodes always (no BIRD: confd and BGP are not run),
// felix's iptables data plane (iptables-nft, as the nodes' kube-proxy uses) enforcing
// NetworkPolicy, kube-proxy for Services. Per node: calico-node -startup (registers the node
// and, the first time, the default pool), -allocate-tunnel-addrs once, then -felix, each in a
// private mount namespace where the host paths Calico uses whatever its configuration
// (/var/lib/calico, /run/calico, its cgroup v2 mount at /run/calico/cgroup, the bpffs at
// /sys/fs/bpf) are the node's own and /proc/sys is read-only but for /proc/sys/net. Felix
// cleans up connect-time programs on the cgroup at /run/calico/cgroup even in iptables mode:
// bound there, the node's subtree is all it sees.
const CNICalico = "calico"

var calicoNetwork = podNetwork{
	bins:           []string{"calico-node", "calico", "calico-crds"},
	client:         "calico",
	enforcesPolicy: true,
	nodeCIDRs:      true, // as kubeadm's controller manager does; Calico IPAM does not use them
	podMTU:         calicoMTU,
	hostDirs:       []string{calicoLib, calicoRun},
	cluster:        func(h *Harness) error { return h.registerCRDs("calico-crds", "Calico") },
	containerd: func(h *Harness, n nodeInfo) (string, []string, error) {
		calico := filepath.Join(h.cfg.Bin, "calico")
		dir, err := cniBinDir(calicoDir(n, "cni-bin"), map[string]string{"calico": calico, "calico-ipam": calico})
		return dir, nil, err
	},
	agent:  (*Harness).calico,
	routed: (*Harness).calicoRouted,
}

const (
	// calicoLib and calicoRun are where calico-node keeps its node name and state whatever
	// its flags say: each node's process sees its own.
	// calicoMTU is the pods' MTU: the underlay's 1500 less VXLAN's 50 (felix's own choice).
	calicoMTU = 1450
	calicoLib = "/var/lib/calico"
	calicoRun = "/run/calico"
	// calicoReadyWait is how long felix may take to program its node and say it is ready.
	calicoReadyWait = 120 * time.Second
	// felixReadiness is felix's readiness endpoint (FELIX_HEALTHENABLED, its default port),
	// answered inside the node's namespace.
	felixReadiness = "http://127.0.0.1:9099/readiness"
)

func calicoDir(n nodeInfo, rel string) string { return filepath.Join(n.dir, "calico", rel) }

// calicoMounts is the script between nsenter and calico-node (see CNICalico). Its arguments:
// the node's directories for /var/lib/calico and /run/calico, its cgroup v2 subtree, then the
// command line.
const calicoMounts = `set -e
lib=$1; rt=$2; cg=$3; shift 3
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount --bind /proc/sys/net /proc/sys/net
mount -o remount,bind,rw /proc/sys/net
mount --bind "$lib" ` + calicoLib + `
mount --bind "$rt" ` + calicoRun + `
mkdir -p ` + calicoRun + `/cgroup
mount --bind "$cg" ` + calicoRun + `/cgroup
mount -t bpf bpf /sys/fs/bpf
exec "$@"
`

// calico runs a node's calico-node steps and waits until felix says it is ready, then writes
// the node's CNI configuration (as the install-cni container does).
func (h *Harness) calico(n nodeInfo) error {
	cg := cgroup2Point()
	if cg == "" {
		return fmt.Errorf("calico-node needs a cgroup v2 hierarchy to bind at %s/cgroup and this host mounts none", calicoRun)
	}
	lib, rt, cgroupRoot := calicoDir(n, "lib"), calicoDir(n, "run"), cg+n.cgroupRoot
	for _, d := range []string{lib, rt, cgroupRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	node := func(args ...string) []string {
		return append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", calicoMounts, "sh",
			lib, rt, cgroupRoot, filepath.Join(h.cfg.Bin, "calico-node")}, args...)
	}
	// calico-vxlan.yaml's environment, the node's address given (its autodetection would
	// find it too) and the pool the cluster's pod CIDR.
	env := []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + h.pki.path("calico.kubeconfig"), "NODENAME=" + n.name,
		"WAIT_FOR_DATASTORE=true", "CALICO_NETWORKING_BACKEND=vxlan", "CLUSTER_TYPE=k8s,bgp", "IP=" + n.ip,
		"CALICO_IPV4POOL_CIDR=" + clusterCIDR, "CALICO_IPV4POOL_IPIP=Never", "CALICO_IPV4POOL_VXLAN=Always",
		"CALICO_DISABLE_FILE_LOGGING=true", "FELIX_IPV6SUPPORT=false", "FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT",
		"FELIX_HEALTHENABLED=true", "FELIX_LOGFILEPATH=none", "FELIX_LOGSEVERITYSYS=none",
		"FELIX_FELIXHOSTNAME=" + n.name, "FELIX_DATASTORETYPE=kubernetes",
		// The nodes' iptables is iptables-nft (kube-proxy's rules are there); felix's Auto
		// would find the same.
		"FELIX_IPTABLESBACKEND=NFT"}
	for _, step := range [][]string{{"-startup"}, {"-allocate-tunnel-addrs", "-allocate-tunnel-addrs-run-once"}} {
		if err := h.runStep("calico-node"+step[0]+"-"+n.name, n.ns, env, 60*time.Second, node(step...)...); err != nil {
			return err
		}
	}
	name := "calico-felix-" + n.name
	if err := h.startEnv(name, n.ns, env, node("-felix")...); err != nil {
		return err
	}
	if err := h.waitHTTP(context.Background(), n.ns, felixReadiness, name, calicoReadyWait); err != nil {
		return err
	}
	h.logf("calico felix on %s ready", n.name)
	conf, _ := json.Marshal(map[string]any{"name": "k8s-pod-network", "cniVersion": "0.3.1", "plugins": []any{
		map[string]any{"type": "calico", "log_level": "info", "log_file_path": calicoDir(n, "cni.log"),
			"datastore_type": "kubernetes", "nodename": n.name, "nodename_file_optional": true, "mtu": calicoMTU,
			"ipam": map[string]string{"type": "calico-ipam"}, "policy": map[string]string{"type": "k8s"},
			"kubernetes": map[string]string{"kubeconfig": h.pki.path("calico.kubeconfig")}},
		map[string]any{"type": "portmap", "snat": true, "capabilities": map[string]bool{"portMappings": true}},
	}})
	return h.writeFile(filepath.Join(n.dir, "net.d/10-calico.conflist"), string(conf))
}

// calicoRouted waits until felix on each node routes through vxlan.calico to every other
// node's IPAM block: a node's block is made when its tunnel address is allocated, and the
// other nodes' felix routes to it once it has seen it (after its own readiness, when that
// node came up later).
func (h *Harness) calicoRouted() error {
	return h.awaitRoutes("calico routes between the nodes' blocks", calicoReadyWait, func(n, _ nodeInfo) ([]string, func(string) bool) {
		return []string{"dev", "vxlan.calico"}, func(out string) bool { return strings.Count(out, " onlink") >= len(h.nodes)-1 }
	})
}

// awaitRoutes waits, at most wait in all, until on every node n the routes `ip -4 route show
// ARGS...` lists for each other node o (args and ok from route(n, o)) satisfy ok, and logs what.
func (h *Harness) awaitRoutes(what string, wait time.Duration, route func(n, o nodeInfo) (args []string, ok func(string) bool)) error {
	deadline := time.Now().Add(wait)
	for _, n := range h.nodes {
		for _, o := range h.nodes {
			if o.name == n.name {
				continue
			}
			args, ok := route(n, o)
			for {
				out, err := exec.Command("nsenter", append([]string{"--net=" + netns.Path(n.ns), "--", "ip", "-4", "route", "show"}, args...)...).CombinedOutput()
				if err == nil && ok(string(out)) {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s: no %s to %s after %s: ip route show %s: %v %s", n.name, what, o.name, wait, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	h.logf("%s", what)
	return nil
}

// runStep runs argv inside a node's network namespace to completion (at most timeout),
// logging to DIR/logs/NAME.log.
func (h *Harness) runStep(name, ns string, env []string, timeout time.Duration, argv ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + netns.Path(ns), "--"}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = procs.Attr()
	out, err := cmd.CombinedOutput()
	if werr := h.writeFile(filepath.Join(h.cfg.Dir, "logs", name+".log"), string(out)); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%s: %v: %s", name, err, strings.Join(lines[max(0, len(lines)-5):], "\n"))
	}
	return nil
}
