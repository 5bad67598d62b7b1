package kubeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/nf"
)

// node starts containerd (with the tools image imported), the kubelet and kube-proxy (unless
// the CNI replaces it) of one node inside its namespace; the CNI's agent comes after every
// node's (Up).
func (h *Harness) node(ctx context.Context, n nodeInfo) error {
	d := func(rel string) string { return filepath.Join(n.dir, rel) }
	sock := d("containerd.sock")
	pn := h.podNet()
	if pn.conf != nil {
		if err := pn.conf(h, n); err != nil {
			return err
		}
	} else if err := os.MkdirAll(d("net.d"), 0o755); err != nil { // the agent writes it once ready
		return err
	}
	cniBin, cniEnv := "/usr/lib/cni", []string(nil)
	if pn.containerd != nil {
		var err error
		if cniBin, cniEnv, err = pn.containerd(h, n); err != nil {
			return err
		}
	}
	ctrd := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/cnibench/tools:latest"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, d("containerd/root"), d("containerd/state"), sock, sock+".ttrpc", d("containerd/opt"), cniBin, d("net.d"))
	if err := h.writeFile(d("containerd.toml"), ctrd); err != nil {
		return err
	}
	if err := h.startEnv("containerd-"+n.name, n.ns, cniEnv, "containerd", "--config", d("containerd.toml")); err != nil {
		return err
	}
	if err := waitFile(sock, 30*time.Second); err != nil {
		return fmt.Errorf("containerd: %w (log: %s)", err, h.logTail("containerd-"+n.name))
	}
	if h.cfg.Image != "" {
		if err := run("ctr", "--address", sock, "-n", "k8s.io", "images", "import", "--no-unpack=false", h.cfg.Image); err != nil {
			return fmt.Errorf("import tools image: %w", err)
		}
	}
	if err := makeCgroups(n.cgroupRoot); err != nil {
		return err
	}
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %q
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
resolvConf: ""
podLogsDir: %q
protectKernelDefaults: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "0%%", nodefs.inodesFree: "0%%", imagefs.available: "0%%"}
staticPodPath: ""
localStorageCapacityIsolation: false
allowedUnsafeSysctls: [%s]
`, h.pki.path("ca.crt"), n.cgroupRoot, sock, n.ip, d("pod-logs"), unsafeSysctls())
	if err := h.writeFile(d("kubelet.yaml"), kubelet); err != nil {
		return err
	}
	if err := h.start("kubelet-"+n.name, n.ns, filepath.Join(h.cfg.Bin, "kubelet"), "--config="+d("kubelet.yaml"),
		"--kubeconfig="+h.pki.path("kubelet-"+n.name+".kubeconfig"), "--hostname-override="+n.name, "--node-ip="+n.ip,
		"--root-dir="+d("kubelet"), "--cert-dir="+d("kubelet/pki")); err != nil {
		return err
	}
	if h.cfg.ProxyMode != ProxyNone { // else the CNI's agent serves Services
		if err := h.kubeProxy(n); err != nil {
			return err
		}
	}
	return nil
}

// kubeProxy starts a node's kube-proxy in the cluster's proxy mode.
func (h *Harness) kubeProxy(n nodeInfo) error {
	d := func(rel string) string { return filepath.Join(n.dir, rel) }
	proxy := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: %s
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
`, h.pki.path("kube-proxy.kubeconfig"), h.cfg.ProxyMode, clusterCIDR, n.name, n.ip)
	if err := h.writeFile(d("kube-proxy.yaml"), proxy); err != nil {
		return err
	}
	return h.start("kube-proxy-"+n.name, n.ns, filepath.Join(h.cfg.Bin, "kube-proxy"), "--config="+d("kube-proxy.yaml"))
}

func waitFile(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitNodesReady waits until every node reports Ready.
func (h *Harness) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	client, err := h.nsClient(h.nodes[0].ns)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		ready, msg := map[string]bool{}, ""
		resp, err := client.Get(h.apiURL() + "/api/v1/nodes")
		if err == nil {
			var list struct {
				Items []struct {
					Metadata struct{ Name string }
					Spec     struct {
						Taints []struct{ Key string }
					}
					Status struct {
						Conditions []struct{ Type, Status, Message string }
					}
				}
			}
			_ = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			for _, it := range list.Items {
				// Ready means usable: the node lifecycle controller has also lifted its
				// not-ready taint, so pods pinned to the node are admitted.
				tainted := false
				for _, tn := range it.Spec.Taints {
					tainted = tainted || tn.Key == "node.kubernetes.io/not-ready"
				}
				if tainted {
					msg += it.Metadata.Name + ": not-ready taint; "
					continue
				}
				for _, c := range it.Status.Conditions {
					if c.Type == "Ready" {
						ready[it.Metadata.Name] = c.Status == "True"
						if c.Status != "True" {
							msg += it.Metadata.Name + ": " + c.Message + "; "
						}
					}
				}
			}
		}
		all := true
		for _, n := range h.nodes {
			all = all && ready[n.name]
		}
		if all {
			h.logf("nodes ready")
			return nil
		}
		for _, n := range h.nodes {
			if h.exited("kubelet-" + n.name) {
				return fmt.Errorf("kubelet on %s exited: %s", n.name, h.logTail("kubelet-"+n.name))
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nodes not Ready after %s: %v %s(kubelet log: %s)", timeout, err, msg, h.logTail("kubelet-"+h.nodes[0].name))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unsafeSysctls are the sysctls the kubelets allow beyond the safe set: those the pods of
// network functions need to forward (nf.PodSysctls), as a YAML flow list.
func unsafeSysctls() string {
	var q []string
	for _, n := range nf.PodSysctlNames() {
		q = append(q, strconv.Quote(n))
	}
	return strings.Join(q, ", ")
}
