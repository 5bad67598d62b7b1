package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

const (
	// kubeSystem is where cluster add-ons (the CNI agent, kube-proxy) live.
	kubeSystem = "kube-system"
	// UnknownCNI is the "cni" fact when no DaemonSet of a known CNI is found.
	UnknownCNI = "unknown (no known CNI DaemonSet in kube-system; e.g. the bridge plugin)"
	// KubeProxyUnmanaged is the "kube_proxy_mode" fact when the cluster has neither a
	// kube-proxy DaemonSet nor a kube-proxy ConfigMap (kube-proxy runs outside the cluster's
	// objects, or not at all, e.g. replaced by the CNI).
	KubeProxyUnmanaged = "unknown (kube-proxy not managed in-cluster)"
	// FlannelByAnnotation is the "cni" fact when no known CNI DaemonSet is found but the run's
	// nodes carry flanneld's annotations: flanneld runs outside the cluster's objects (as k3s
	// embeds it, or the project's test cluster runs it).
	FlannelByAnnotation = "flannel (by node annotations; no DaemonSet)"
	// CiliumByNodes is the "cni" fact when no known CNI DaemonSet is found but every one of the
	// run's nodes has a CiliumNode: cilium-agent runs outside the cluster's objects (as the
	// project's test cluster runs it).
	CiliumByNodes = "cilium (by CiliumNode objects; no DaemonSet)"
	// CalicoByAnnotation is the "cni" fact when no known CNI DaemonSet is found but the run's
	// nodes carry the address annotation calico-node's startup writes on its Node
	// (Kubernetes datastore): calico-node runs outside the cluster's objects (as the project's
	// test cluster runs it).
	CalicoByAnnotation = "calico (by node annotations; no DaemonSet)"
	// calicoAddressAnnotation is where calico-node (Kubernetes datastore) records its node's
	// IPv4 address.
	calicoAddressAnnotation = "projectcalico.org/IPv4Address"
	// flannelBackendAnnotation is where flanneld (--kube-subnet-mgr, default prefix) writes
	// its backend type on its Node.
	flannelBackendAnnotation = "flannel.alpha.coreos.com/backend-type"
)

// cniNamespaces are searched for CNI DaemonSets: kube-system first, then the namespaces the
// Calico operator (calico-system) and the current flannel manifest (kube-flannel) install into.
var cniNamespaces = []string{kubeSystem, "calico-system", "kube-flannel"}

// cniRule recognises one CNI by a DaemonSet: its name or a container name equal to one of
// names (or starting with it and a '-', as in kube-flannel-ds-amd64), or a container image
// whose repository path contains one of images.
type cniRule struct {
	cni    string
	names  []string
	images []string
}

var cniRules = []cniRule{
	{"calico", []string{"calico-node"}, []string{"calico/node"}},
	{"cilium", []string{"cilium", "cilium-agent"}, []string{"cilium/cilium"}},
	{"flannel", []string{"kube-flannel-ds", "kube-flannel", "flannel"}, []string{"flannel"}},
	{"antrea", []string{"antrea-agent"}, []string{"antrea/antrea"}},
	{"weave", []string{"weave-net"}, []string{"weave-kube"}},
	{"kube-router", []string{"kube-router"}, []string{"kube-router"}},
	{"ovn-kubernetes", []string{"ovnkube-node"}, []string{"ovn-kubernetes", "ovn-kube"}},
}

// readFacts returns environment facts of the run's cluster (New records them; Facts reports
// them in its Details):
//
//   - "kubernetes_version": the API server's GitVersion;
//   - "node_kernel", "node_os", "node_cpu" (allocatable/capacity CPU), "container_runtime":
//     maps from each of the run's node names to the value in the node's status;
//   - "cni": the CNI recognised from DaemonSets in cniNamespaces (see cniRules), several
//     joined with "+" (canal is "calico+flannel"), else FlannelByAnnotation when the run's
//     nodes carry flanneld's backend annotation, else CalicoByAnnotation when they carry
//     calico-node's address annotation, else CiliumByNodes when each of them has a
//     CiliumNode, else UnknownCNI; "cni_daemonsets" lists
//     the matching DaemonSets as namespace/name; "flannel_backend" the backend types in the
//     nodes' flannel annotations (vxlan, host-gw, ...), when there are any;
//   - "kube_proxy_mode": from the kube-system/kube-proxy ConfigMap's config.conf (an empty
//     mode is iptables), else from the kube-proxy DaemonSet's --proxy-mode, else
//     KubeProxyUnmanaged;
//   - "pod_mtu": Config.PodMTU, when known.
//
// A fact that cannot be read is recorded as "unknown: <reason>". readFacts fails only when the
// API itself is unreachable.
func (c *Cluster) readFacts(ctx context.Context) (map[string]any, error) {
	facts := map[string]any{}
	fail := func(err error) (map[string]any, error) {
		return nil, fmt.Errorf("kubernetes API unreachable: %w", err)
	}

	v, err := c.serverVersion(ctx)
	switch {
	case apiUnreachable(err):
		return fail(err)
	case err != nil:
		facts["kubernetes_version"] = unknown("server version: %v", err)
	case v.GitVersion == "":
		facts["kubernetes_version"] = unknown("the API server reports no gitVersion")
	default:
		facts["kubernetes_version"] = v.GitVersion
	}

	kernel, osImage, cpu, runtime := map[string]string{}, map[string]string{}, map[string]string{}, map[string]string{}
	var flannelBackends []string
	calico := false
	for _, cn := range c.nodes {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, cn.Name, metav1.GetOptions{})
		if apiUnreachable(err) {
			return fail(err)
		}
		if err != nil {
			u := unknown("get node %s: %v", cn.Name, err)
			kernel[cn.Name], osImage[cn.Name], cpu[cn.Name], runtime[cn.Name] = u, u, u, u
			continue
		}
		if b := n.Annotations[flannelBackendAnnotation]; b != "" && !slices.Contains(flannelBackends, b) {
			flannelBackends = append(flannelBackends, b)
		}
		calico = calico || n.Annotations[calicoAddressAnnotation] != ""
		ni := n.Status.NodeInfo
		kernel[cn.Name] = orUnknown(ni.KernelVersion, "the node status reports no kernel version")
		osImage[cn.Name] = nodeOS(ni)
		cpu[cn.Name] = nodeCPU(n)
		runtime[cn.Name] = orUnknown(ni.ContainerRuntimeVersion, "the node status reports no container runtime")
	}
	facts["node_kernel"], facts["node_os"], facts["node_cpu"], facts["container_runtime"] = kernel, osImage, cpu, runtime

	// DaemonSets: kube-system's decide both the CNI and kube-proxy; the other namespaces are
	// searched for the CNI only, and failing to list them is not worth a mention.
	var sysDS []appsv1.DaemonSet
	var sysErr error
	var all []appsv1.DaemonSet
	for _, ns := range cniNamespaces {
		list, err := c.cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if apiUnreachable(err) {
			return fail(err)
		}
		if ns == kubeSystem {
			sysErr = err
		}
		if err != nil {
			continue
		}
		for _, ds := range list.Items {
			if ds.Namespace != ns && ds.Namespace != "" { // the fake clientset filters; be sure
				continue
			}
			ds.Namespace = ns
			all = append(all, ds)
			if ns == kubeSystem {
				sysDS = append(sysDS, ds)
			}
		}
	}
	cni, matched := detectCNI(all)
	if len(flannelBackends) > 0 {
		slices.Sort(flannelBackends)
		facts["flannel_backend"] = strings.Join(flannelBackends, ",")
	}
	switch {
	case cni != "":
		facts["cni"], facts["cni_daemonsets"] = cni, matched
	case len(flannelBackends) > 0:
		facts["cni"] = FlannelByAnnotation
	case calico:
		facts["cni"] = CalicoByAnnotation
	case c.haveCiliumNodes(ctx):
		facts["cni"] = CiliumByNodes
	case sysErr != nil:
		facts["cni"] = unknown("list DaemonSets in %s: %v", kubeSystem, sysErr)
	default:
		facts["cni"] = UnknownCNI
	}

	cm, cmErr := c.cs.CoreV1().ConfigMaps(kubeSystem).Get(ctx, "kube-proxy", metav1.GetOptions{})
	if apiUnreachable(cmErr) {
		return fail(cmErr)
	}
	if apierrors.IsNotFound(cmErr) {
		cm, cmErr = nil, nil
	}
	facts["kube_proxy_mode"] = kubeProxyMode(cm, cmErr, kubeProxyDaemonSet(sysDS), sysErr)

	if c.cfg.PodMTU > 0 {
		facts["pod_mtu"] = c.cfg.PodMTU
	}
	return facts, nil
}

// serverVersion is Discovery().ServerVersion() bounded by ctx (ServerVersion itself takes
// none); a clientset without a discovery REST client (the fake one) falls back to it.
func (c *Cluster) serverVersion(ctx context.Context) (*version.Info, error) {
	d := c.cs.Discovery()
	if rc := d.RESTClient(); rc != nil {
		body, err := rc.Get().AbsPath("/version").Do(ctx).Raw()
		if err != nil {
			return nil, err
		}
		var info version.Info
		if err := json.Unmarshal(body, &info); err != nil {
			return nil, fmt.Errorf("unable to parse the server version: %w", err)
		}
		return &info, nil
	}
	return d.ServerVersion()
}

// apiUnreachable tells a failure to reach the API server (connection, TLS, timeout,
// cancellation) from an answer of the server (forbidden, not found, ...), which is an error
// of one fact only.
func apiUnreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED)
}

func unknown(format string, args ...any) string {
	return "unknown: " + fmt.Sprintf(format, args...)
}

func orUnknown(v, reason string) string {
	if v == "" {
		return unknown("%s", reason)
	}
	return v
}

// nodeOS is the node's OS image with its OS and architecture, e.g. "Debian GNU/Linux 12
// (bookworm) (linux/amd64)".
func nodeOS(ni corev1.NodeSystemInfo) string {
	s := ni.OSImage
	var plat []string
	for _, p := range []string{ni.OperatingSystem, ni.Architecture} {
		if p != "" {
			plat = append(plat, p)
		}
	}
	switch {
	case s == "" && len(plat) == 0:
		return unknown("the node status reports no OS")
	case s == "":
		return strings.Join(plat, "/")
	case len(plat) > 0:
		return s + " (" + strings.Join(plat, "/") + ")"
	}
	return s
}

// nodeCPU is "ALLOCATABLE/CAPACITY (allocatable/capacity)" in CPUs, e.g. "3800m/4
// (allocatable/capacity)"; a side the status does not report is "?".
func nodeCPU(n *corev1.Node) string {
	alloc, aok := n.Status.Allocatable[corev1.ResourceCPU]
	capa, cok := n.Status.Capacity[corev1.ResourceCPU]
	if !aok && !cok {
		return unknown("the node status reports no CPU capacity")
	}
	a, c := "?", "?"
	if aok {
		a = alloc.String()
	}
	if cok {
		c = capa.String()
	}
	return a + "/" + c + " (allocatable/capacity)"
}

// haveCiliumNodes tells whether every one of the run's nodes has a CiliumNode object (which
// cilium-agent creates for its node).
func (c *Cluster) haveCiliumNodes(ctx context.Context) bool {
	rc := c.cs.Discovery().RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() || len(c.nodes) == 0 { // a fake clientset has none
		return false
	}
	for _, n := range c.nodes {
		if err := rc.Get().AbsPath("/apis/cilium.io/v2/ciliumnodes", n.Name).Do(ctx).Error(); err != nil {
			return false
		}
	}
	return true
}

// detectCNI returns the CNIs the DaemonSets show, in cniRules order joined with "+", and the
// matching DaemonSets as namespace/name; "" if none.
func detectCNI(dss []appsv1.DaemonSet) (string, []string) {
	var cnis, matched []string
	for _, r := range cniRules {
		for _, ds := range dss {
			if !r.matches(ds) {
				continue
			}
			if !slices.Contains(cnis, r.cni) {
				cnis = append(cnis, r.cni)
			}
			if id := ds.Namespace + "/" + ds.Name; !slices.Contains(matched, id) {
				matched = append(matched, id)
			}
		}
	}
	slices.Sort(matched)
	return strings.Join(cnis, "+"), matched
}

func (r cniRule) matches(ds appsv1.DaemonSet) bool {
	nameMatch := func(s string) bool {
		for _, n := range r.names {
			if s == n || strings.HasPrefix(s, n+"-") {
				return true
			}
		}
		return false
	}
	if nameMatch(ds.Name) {
		return true
	}
	spec := ds.Spec.Template.Spec
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		if nameMatch(ct.Name) {
			return true
		}
		repo := imageRepo(ct.Image)
		for _, im := range r.images {
			if strings.Contains(repo, im) {
				return true
			}
		}
	}
	return false
}

// imageRepo is an image reference without its tag and digest, lowercased:
// "docker.io/calico/node:v3.27@sha256:..." is "docker.io/calico/node".
func imageRepo(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return strings.ToLower(ref)
}

// kubeProxyDaemonSet is the kube-proxy DaemonSet among kube-system's: the one named
// kube-proxy, else one with a container named kube-proxy; nil if none.
func kubeProxyDaemonSet(dss []appsv1.DaemonSet) *appsv1.DaemonSet {
	for i := range dss {
		if dss[i].Name == "kube-proxy" {
			return &dss[i]
		}
	}
	for i := range dss {
		for _, ct := range dss[i].Spec.Template.Spec.Containers {
			if ct.Name == "kube-proxy" {
				return &dss[i]
			}
		}
	}
	return nil
}

// kubeProxyMode decides the kube_proxy_mode fact from the kube-proxy ConfigMap (nil: none;
// cmErr: reading it failed) and DaemonSet (nil: none; dsErr: listing kube-system's failed).
func kubeProxyMode(cm *corev1.ConfigMap, cmErr error, ds *appsv1.DaemonSet, dsErr error) string {
	var reasons []string
	if cmErr != nil {
		reasons = append(reasons, fmt.Sprintf("get ConfigMap %s/kube-proxy: %v", kubeSystem, cmErr))
	}
	if cm != nil {
		conf, ok := cm.Data["config.conf"]
		if ok {
			var kpc struct {
				Mode string `yaml:"mode"`
			}
			if err := yaml.Unmarshal([]byte(conf), &kpc); err != nil {
				reasons = append(reasons, fmt.Sprintf("parse config.conf of ConfigMap %s/kube-proxy: %v", kubeSystem, err))
			} else {
				return proxyModeName(kpc.Mode)
			}
		} else {
			reasons = append(reasons, fmt.Sprintf("ConfigMap %s/kube-proxy has no config.conf", kubeSystem))
		}
	}
	if ds != nil {
		spec := ds.Spec.Template.Spec
		for _, ct := range spec.Containers {
			args := slices.Concat(ct.Command, ct.Args)
			if mode, ok := flagValue(args, "proxy-mode"); ok {
				return proxyModeName(mode)
			}
		}
		for _, ct := range spec.Containers {
			if cfg, ok := flagValue(slices.Concat(ct.Command, ct.Args), "config"); ok {
				reasons = append(reasons, fmt.Sprintf("DaemonSet %s/%s runs kube-proxy with --config=%s and no --proxy-mode", kubeSystem, ds.Name, cfg))
				return unknown("%s", strings.Join(reasons, "; "))
			}
		}
		// Neither a flag nor a config file: kube-proxy's default.
		return proxyModeName("")
	}
	if dsErr != nil {
		reasons = append(reasons, fmt.Sprintf("list DaemonSets in %s: %v", kubeSystem, dsErr))
	}
	if len(reasons) > 0 {
		return unknown("%s", strings.Join(reasons, "; "))
	}
	return KubeProxyUnmanaged
}

// proxyModeName maps kube-proxy's mode setting to the mode it runs: empty is the default,
// iptables (on Linux).
func proxyModeName(mode string) string {
	if mode = strings.TrimSpace(mode); mode == "" {
		return "iptables"
	}
	return mode
}

// flagValue finds --name=VALUE or --name VALUE (or with a single dash) in args, each split
// at white space (a DaemonSet may start kube-proxy through "sh -c 'kube-proxy ...'").
func flagValue(args []string, name string) (string, bool) {
	var words []string
	for _, a := range args {
		words = append(words, strings.Fields(a)...)
	}
	for i, a := range words {
		a = strings.Trim(a, `"'`)
		for _, p := range []string{"--" + name, "-" + name} {
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return strings.Trim(v, `"'`), true
			}
			if a == p && i+1 < len(words) {
				return strings.Trim(words[i+1], `"'`), true
			}
		}
	}
	return "", false
}
