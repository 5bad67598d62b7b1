package kubeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/mounts"
)

// Real Cilium on the test cluster: cilium-agent per node, outside a pod, as the DaemonSet of
// Cilium's Helm chart runs it in tunnel mode, with kube-proxy replacement when the cluster runs
// no kube-proxy (ProxyNone) and without socket LB otherwise, Kubernetes IPAM (the Node's pod
// CIDR), no L7 proxy, Hubble or health
// checking (each needs a separate binary or image). Two agents share one kernel here, so each
// gets a private state: its own bpffs (mounted in the node's directory), state and library
// directories, API socket, and cgroup v2 subtree (the node's, where runc puts the node's pods:
// the socket LB of kube-proxy replacement attaches there). What an agent would change
// beyond its node's network namespace is kept from it: it runs in a private mount namespace
// where /proc/sys is read-only but for /proc/sys/net (Cilium sets
// kernel.unprivileged_bpf_disabled=1, which cannot be undone until reboot, and
// kernel.timer_migration=0, both host-wide; it ignores a refusal of either, logging a
// warning), and where /run/cilium, which it uses whatever its flags say, is the node's own.
var ciliumNetwork = podNetwork{
	bins:           []string{"cilium-agent", "cilium-cni", "cilium-bpf", "cilium-crds"},
	client:         "cilium",
	enforcesPolicy: true,
	nodeCIDRs:      true,
	podMTU:         1450, // the underlay's 1500 less VXLAN's 50
	hostDirs:       []string{ciliumRuntime},
	// kube-proxy replacement: Services by socket LB (connect-time, on the node's cgroup v2
	// subtree where runc puts its pods) and per packet, BPF masquerading and host routing.
	replacesProxy: true,
	cluster:       (*Harness).ciliumCRDs,
	containerd: func(h *Harness, n nodeInfo) (string, []string, error) {
		dir, err := h.ciliumCNIBin(n)
		return dir, []string{"CILIUM_SOCK=" + ciliumSock(n)}, err
	},
	agent: (*Harness).cilium,
}

const (
	// ciliumRuntime is where cilium-agent keeps its pid file, monitor and shell sockets and
	// cilium-cni its delete queue, whatever the flags say: each agent sees its node's own.
	ciliumRuntime = "/run/cilium"
	// ciliumReadyWait is how long an agent may take to compile and load its datapath.
	ciliumReadyWait = 180 * time.Second
	// ciliumIsReady is what ciliumReady says of an agent up with its datapath loaded.
	ciliumIsReady = "host endpoint ready"
)

func ciliumDir(n nodeInfo, rel string) string { return filepath.Join(n.dir, "cilium", rel) }
func ciliumSock(n nodeInfo) string            { return ciliumDir(n, "state/cilium.sock") }

// ciliumMounts is the script between nsenter and the agent: a private mount namespace with
// /proc/sys read-only but for net, the node's runtime directory at /run/cilium, and the node's
// cgroup v2 subtree bound onto itself. The agent mounts cgroup2 at its --cgroup-root unless a
// cgroup2 mount is there already, and a fresh mount is the whole hierarchy: its socket LB
// would attach to the host's root cgroup. Bound, the subtree is a mount whose root is the
// node's cgroup. Its arguments: the runtime directory, the cgroup, then the agent's command
// line.
const ciliumMounts = `set -e
rt=$1; cg=$2; shift 2
mount --bind "$cg" "$cg"
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount --bind /proc/sys/net /proc/sys/net
mount -o remount,bind,rw /proc/sys/net
mount --bind "$rt" /run/cilium
exec "$@"
`

// ciliumCRDs registers Cilium's CustomResourceDefinitions, as cilium-operator (not run here:
// Kubernetes IPAM needs none of its work) would; the agent waits for them.
func (h *Harness) ciliumCRDs() error { return h.registerCRDs("cilium-crds", "Cilium") }

// registerCRDs registers the CustomResourceDefinitions in Config.Bin's directory dir (YAML
// files, one CRD each), those of what.
func (h *Harness) registerCRDs(dir, what string) error {
	client, err := h.nsClient(h.nodes[0].ns)
	if err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(h.cfg.Bin, dir, "*.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: run scripts/kube-build.sh", filepath.Join(h.cfg.Bin, dir))
	}
	for _, f := range files {
		y, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd map[string]any
		if err := yaml.Unmarshal(y, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		j, err := json.Marshal(crd)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		resp, err := client.Post(h.apiURL()+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", strings.NewReader(string(j)))
		if err != nil {
			return fmt.Errorf("create CRD %s: %w", filepath.Base(f), err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
			return fmt.Errorf("create CRD %s: %s: %s", filepath.Base(f), resp.Status, strings.TrimSpace(string(body)))
		}
	}
	h.logf("registered %d %s CRDs", len(files), what)
	return nil
}

// ciliumCNIBin is the node's CNI plugin directory: the host's plugins and cilium-cni.
func (h *Harness) ciliumCNIBin(n nodeInfo) (string, error) {
	return cniBinDir(ciliumDir(n, "cni-bin"), map[string]string{"cilium-cni": filepath.Join(h.cfg.Bin, "cilium-cni")})
}

// cniBinDir makes dir a CNI plugin directory: the host's plugins (/usr/lib/cni) and own
// (name: the binary), as symbolic links.
func cniBinDir(dir string, own map[string]string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ents, err := os.ReadDir("/usr/lib/cni")
	if err != nil {
		return "", err
	}
	links := maps.Clone(own)
	for _, e := range ents {
		if _, ok := links[e.Name()]; !ok {
			links[e.Name()] = filepath.Join("/usr/lib/cni", e.Name())
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil && !os.IsExist(err) {
			return "", err
		}
	}
	return dir, nil
}

// cgroup2Point is where the host mounts its cgroup v2 hierarchy ("" when it does not).
func cgroup2Point() string {
	for _, m := range mounts.List() {
		if m.Type == "cgroup2" && m.Root == "/" {
			return m.Point
		}
	}
	return ""
}

// cilium starts a node's agent once its Node has a pod CIDR, waits until the agent reports
// itself healthy, then writes the node's CNI configuration (as the chart's install step
// does once the agent is up).
func (h *Harness) cilium(n nodeInfo) error {
	cg := cgroup2Point()
	if cg == "" {
		return fmt.Errorf("cilium-agent needs a cgroup v2 hierarchy and this host mounts none")
	}
	cgroupRoot := cg + n.cgroupRoot
	bpffs, state, lib, rt := ciliumDir(n, "bpffs"), ciliumDir(n, "state"), ciliumDir(n, "lib"), ciliumDir(n, "runtime")
	for _, d := range []string{bpffs, state, lib, rt, cgroupRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", bpffs, err)
	}
	if err := os.Symlink(filepath.Join(h.cfg.Bin, "cilium-bpf"), filepath.Join(lib, "bpf")); err != nil && !os.IsExist(err) {
		return err
	}
	if _, err := h.waitPodCIDR(n.name, flannelSubnetWait); err != nil {
		return err
	}
	argv := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", ciliumMounts, "sh", rt, cgroupRoot,
		filepath.Join(h.cfg.Bin, "cilium-agent"),
		"--k8s-kubeconfig-path=" + h.pki.path("cilium.kubeconfig"),
		"--bpf-root=" + bpffs, "--cgroup-root=" + cgroupRoot, "--state-dir=" + state, "--lib-dir=" + lib,
		"--socket-path=" + ciliumSock(n), "--devices=" + lab.NodeLink,
		"--ipam=kubernetes", "--k8s-require-ipv4-pod-cidr=true", "--routing-mode=tunnel", "--tunnel-protocol=vxlan",
		"--enable-ipv4=true", "--enable-ipv6=false", "--enable-ipv4-masquerade=true", "--identity-allocation-mode=crd",
		"--cluster-name=cnibench", "--cluster-id=0", "--enable-policy=default",
		"--enable-l7-proxy=false", "--enable-envoy-config=false", "--enable-hubble=false",
		"--enable-health-checking=false", "--enable-endpoint-health-checking=false", "--agent-health-port=0",
		"--enable-gateway-api=false", "--enable-ingress-controller=false",
		// What the chart's ConfigMap sets for a new install where the agent's own default
		// differs, each changing the datapath's per-packet work: trace events aggregated per
		// connection (the agent's default, None, sends one per packet to the monitor ring),
		// the jiffies clock, maps allocated on use.
		"--monitor-aggregation=medium", "--monitor-aggregation-interval=5s", "--monitor-aggregation-flags=all",
		"--enable-bpf-clock-probe=true", "--preallocate-bpf-maps=false"}
	if h.cfg.ProxyMode == ProxyNone {
		argv = append(argv, "--kube-proxy-replacement=true", "--bpf-lb-sock=true", "--enable-bpf-masquerade=true")
	} else { // kube-proxy serves Services; no socket LB (it would attach to the cgroup root)
		argv = append(argv, "--kube-proxy-replacement=false", "--bpf-lb-sock=false", "--enable-bpf-masquerade=false")
	}
	env := []string{"K8S_NODE_NAME=" + n.name, "CILIUM_K8S_NAMESPACE=kube-system"}
	name := "cilium-agent-" + n.name
	if err := h.startEnv(name, n.ns, env, argv...); err != nil {
		return err
	}
	deadline := time.Now().Add(ciliumReadyWait)
	for {
		state, err := ciliumReady(ciliumSock(n))
		if err == nil && state == ciliumIsReady {
			break
		}
		if h.exited(name) {
			return fmt.Errorf("cilium-agent exited: %s", h.logTail(name))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cilium-agent not healthy within %s (state %q, %v): %s", ciliumReadyWait, state, err, h.logTail(name))
		}
		time.Sleep(500 * time.Millisecond)
	}
	h.logf("cilium-agent on %s healthy", n.name)
	conf := fmt.Sprintf(`{"cniVersion":"0.3.1","name":"cilium","plugins":[{"type":"cilium-cni","enable-debug":false,"log-file":%q}]}`,
		ciliumDir(n, "cni.log"))
	return h.writeFile(filepath.Join(n.dir, "net.d/05-cilium.conflist"), conf)
}

// ciliumReady asks an agent's API whether it is up with its datapath loaded: the agent
// reports itself Ok and its host endpoint (identity 1, whose programs it loads last at start)
// is ready. It returns ciliumIsReady or the state it saw.
func ciliumReady(sock string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	get := func(path string, v any) error {
		resp, err := c.Get("http://cilium/v1" + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
		}
		return nil
	}
	var st struct {
		Cilium struct{ State, Msg string }
	}
	if err := get("/healthz", &st); err != nil {
		return "", err
	}
	if st.Cilium.State != "Ok" {
		return "agent " + st.Cilium.State, fmt.Errorf("%s", st.Cilium.Msg)
	}
	var eps []struct {
		Status struct {
			State    string
			Identity struct{ ID int64 }
		}
	}
	if err := get("/endpoint", &eps); err != nil {
		return "", err
	}
	for _, ep := range eps {
		if ep.Status.Identity.ID == 1 {
			return "host endpoint " + ep.Status.State, nil
		}
	}
	return "no host endpoint yet", nil
}
