package kube

import (
	"context"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// ct is a container with an image.
type ct struct{ name, image string }

// daemonSet is a DaemonSet in ns with the containers (and init containers, if given) and the
// args of its first container.
func daemonSet(ns, name string, containers []ct, inits []ct, args ...string) *appsv1.DaemonSet {
	conv := func(cs []ct) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.name, Image: c.image})
		}
		return out
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	ds.Spec.Template.Spec.Containers = conv(containers)
	ds.Spec.Template.Spec.InitContainers = conv(inits)
	if len(args) > 0 {
		ds.Spec.Template.Spec.Containers[0].Args = args
	}
	return ds
}

func sysDS(name string, containers ...ct) *appsv1.DaemonSet {
	return daemonSet(kubeSystem, name, containers, nil)
}

func kubeProxyCM(conf string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: kubeSystem},
		Data: map[string]string{"config.conf": conf, "kubeconfig.conf": "apiVersion: v1\nkind: Config\n"}}
}

// factsCluster is a run on worker-a and worker-b with the extra objects in the cluster.
func factsCluster(t *testing.T, cfg Config, objs ...runtime.Object) (*Cluster, *fake.Clientset) {
	t.Helper()
	opt := func(n *corev1.Node) {
		n.Status.NodeInfo.OSImage = "Debian GNU/Linux 12 (bookworm)"
		n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = "linux", "amd64"
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3800m")}
	}
	objs = append(objs, node("worker-b", "10.0.0.2", opt), node("worker-a", "10.0.0.1", opt, func(n *corev1.Node) {
		n.Status.NodeInfo.KernelVersion = "6.12.0-cloud-amd64"
		n.Status.NodeInfo.ContainerRuntimeVersion = "cri-o://1.31.0"
	}))
	cs := fake.NewClientset(objs...)
	cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.34.1"}
	return newCluster(t, cs, cfg), cs
}

func facts(t *testing.T, c *Cluster) map[string]any {
	t.Helper()
	f, err := c.readFacts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFactsNodesAndVersion(t *testing.T) {
	c, _ := factsCluster(t, Config{PodMTU: 1450})
	f := facts(t, c)
	want := map[string]any{
		"kubernetes_version": "v1.34.1",
		"node_kernel":        map[string]string{"worker-a": "6.12.0-cloud-amd64", "worker-b": "6.1.0"},
		"node_os": map[string]string{"worker-a": "Debian GNU/Linux 12 (bookworm) (linux/amd64)",
			"worker-b": "Debian GNU/Linux 12 (bookworm) (linux/amd64)"},
		"node_cpu":          map[string]string{"worker-a": "3800m/4 (allocatable/capacity)", "worker-b": "3800m/4 (allocatable/capacity)"},
		"container_runtime": map[string]string{"worker-a": "cri-o://1.31.0", "worker-b": "containerd://2.0.0"},
		"cni":               UnknownCNI,
		"kube_proxy_mode":   KubeProxyUnmanaged,
		"pod_mtu":           1450,
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("facts\n%#v\nwant\n%#v", f, want)
	}

	// Only the run's nodes; PodMTU unknown: no pod_mtu.
	c, _ = factsCluster(t, Config{Nodes: []string{"worker-b"}})
	f = facts(t, c)
	if k := f["node_kernel"]; !reflect.DeepEqual(k, map[string]string{"worker-b": "6.1.0"}) {
		t.Errorf("node_kernel %v", k)
	}
	if _, ok := f["pod_mtu"]; ok {
		t.Errorf("pod_mtu %v reported while unknown", f["pod_mtu"])
	}
}

func TestFactsCNI(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ds       []*appsv1.DaemonSet
		cni      string
		matchedD []string
	}{
		{"calico", []*appsv1.DaemonSet{sysDS("calico-node", ct{"calico-node", "docker.io/calico/node:v3.29.1"})}, "calico", []string{"kube-system/calico-node"}},
		{"calico operator", []*appsv1.DaemonSet{daemonSet("calico-system", "calico-node", []ct{{"calico-node", "quay.io/calico/node:v3.29.1"}}, nil)}, "calico", []string{"calico-system/calico-node"}},
		{"cilium", []*appsv1.DaemonSet{
			daemonSet(kubeSystem, "cilium", []ct{{"cilium-agent", "quay.io/cilium/cilium:v1.16.5@sha256:758ca0793f5995bb938a2fa219dcce63dc0b3fa7345f7b7f6ba4fc2eeba3a1e6"}},
				[]ct{{"config", "quay.io/cilium/cilium:v1.16.5"}, {"install-cni-binaries", "quay.io/cilium/cilium:v1.16.5"}}),
			sysDS("cilium-envoy", ct{"cilium-envoy", "quay.io/cilium/cilium-envoy:v1.30.8"}),
		}, "cilium", []string{"kube-system/cilium", "kube-system/cilium-envoy"}},
		{"flannel by DaemonSet name", []*appsv1.DaemonSet{sysDS("kube-flannel-ds", ct{"kube-flannel", "example.com/mirror/fl:v0.26"})}, "flannel", []string{"kube-system/kube-flannel-ds"}},
		{"flannel by image", []*appsv1.DaemonSet{sysDS("overlay", ct{"agent", "docker.io/flannel/flannel:v0.26.1"})}, "flannel", []string{"kube-system/overlay"}},
		{"old flannel", []*appsv1.DaemonSet{sysDS("kube-flannel-ds-amd64", ct{"kube-flannel", "quay.io/coreos/flannel:v0.11.0-amd64"})}, "flannel", []string{"kube-system/kube-flannel-ds-amd64"}},
		{"antrea", []*appsv1.DaemonSet{sysDS("antrea-agent", ct{"antrea-agent", "antrea/antrea-agent-ubuntu:v2.2.0"}, ct{"antrea-ovs", "antrea/antrea-agent-ubuntu:v2.2.0"})}, "antrea", []string{"kube-system/antrea-agent"}},
		{"weave", []*appsv1.DaemonSet{sysDS("weave-net", ct{"weave", "weaveworks/weave-kube:2.8.1"}, ct{"weave-npc", "weaveworks/weave-npc:2.8.1"})}, "weave", []string{"kube-system/weave-net"}},
		{"kube-router", []*appsv1.DaemonSet{sysDS("kube-router", ct{"kube-router", "docker.io/cloudnativelabs/kube-router:v2.4.1"})}, "kube-router", []string{"kube-system/kube-router"}},
		{"ovn-kubernetes", []*appsv1.DaemonSet{sysDS("ovnkube-node", ct{"ovnkube-controller", "ghcr.io/ovn-org/ovn-kubernetes/ovn-kube-ubuntu:master"})}, "ovn-kubernetes", []string{"kube-system/ovnkube-node"}},
		{"canal", []*appsv1.DaemonSet{sysDS("canal", ct{"calico-node", "docker.io/calico/node:v3.29.1"}, ct{"kube-flannel", "quay.io/coreos/flannel:v0.15.1"})}, "calico+flannel", []string{"kube-system/canal"}},
		{"none", []*appsv1.DaemonSet{
			sysDS("kube-proxy", ct{"kube-proxy", "registry.k8s.io/kube-proxy:v1.34.1"}),
			sysDS("node-exporter", ct{"node-exporter", "quay.io/prometheus/node-exporter:v1.8.2"}),
			daemonSet("default", "calico-node", []ct{{"calico-node", "docker.io/calico/node:v3.29.1"}}, nil), // not a system namespace
		}, UnknownCNI, nil},
		{"no DaemonSets", nil, UnknownCNI, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, ds := range tc.ds {
				objs = append(objs, ds)
			}
			c, _ := factsCluster(t, Config{}, objs...)
			f := facts(t, c)
			if f["cni"] != tc.cni {
				t.Errorf("cni %q, want %q", f["cni"], tc.cni)
			}
			got, _ := f["cni_daemonsets"].([]string)
			if !slices.Equal(got, tc.matchedD) {
				t.Errorf("cni_daemonsets %q, want %q", got, tc.matchedD)
			}
		})
	}
}

// flanneld run outside DaemonSets (k3s, the project's test cluster) is known by the backend
// annotation it writes on its Node; with a flannel DaemonSet the backend is reported too;
// calico-node outside DaemonSets by its address annotation.
func TestFactsFlannelAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name          string
		backend       string
		objs          []runtime.Object
		cni, backends string
	}{
		{"annotations only", "vxlan", nil, FlannelByAnnotation, "vxlan"},
		{"with its DaemonSet", "host-gw", []runtime.Object{sysDS("kube-flannel-ds", ct{"kube-flannel", "docker.io/flannel/flannel:v0.28.10"})}, "flannel", "host-gw"},
		{"another CNI's DaemonSet wins", "vxlan", []runtime.Object{sysDS("calico-node", ct{"calico-node", "docker.io/calico/node:v3.29.1"})}, "calico", "vxlan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cs := factsCluster(t, Config{}, tc.objs...)
			n, err := cs.CoreV1().Nodes().Get(context.Background(), "worker-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Annotations = map[string]string{"flannel.alpha.coreos.com/backend-type": tc.backend, "flannel.alpha.coreos.com/kube-subnet-manager": "true"}
			if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			f := facts(t, c)
			if f["cni"] != tc.cni || f["flannel_backend"] != tc.backends {
				t.Errorf("cni %q flannel_backend %v, want %q %q", f["cni"], f["flannel_backend"], tc.cni, tc.backends)
			}
		})
	}
	// calico-node's startup outside a DaemonSet (the test cluster) leaves its address
	// annotation.
	c, cs := factsCluster(t, Config{})
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "worker-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = map[string]string{"projectcalico.org/IPv4Address": "172.30.0.10/24", "projectcalico.org/IPv4VXLANTunnelAddr": "10.244.97.0"}
	if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if f := facts(t, c); f["cni"] != CalicoByAnnotation {
		t.Errorf("calico annotations: cni %q, want %q", f["cni"], CalicoByAnnotation)
	}
	c, _ = factsCluster(t, Config{})
	if b, ok := facts(t, c)["flannel_backend"]; ok {
		t.Errorf("flannel_backend %v without annotations", b)
	}
}

func TestFactsKubeProxyMode(t *testing.T) {
	kp := func(args ...string) *appsv1.DaemonSet {
		return daemonSet(kubeSystem, "kube-proxy", []ct{{"kube-proxy", "registry.k8s.io/kube-proxy:v1.34.1"}}, nil, args...)
	}
	kubeadmDS := kp("--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)")
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"kubeadm default", []runtime.Object{kubeadmDS, kubeProxyCM("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: \"\"\nipvs:\n  scheduler: \"\"\n")}, "iptables"},
		{"ConfigMap ipvs", []runtime.Object{kubeadmDS, kubeProxyCM("kind: KubeProxyConfiguration\nmode: ipvs\n")}, "ipvs"},
		{"ConfigMap nftables, no DaemonSet", []runtime.Object{kubeProxyCM("mode: nftables\n")}, "nftables"},
		{"ConfigMap without mode", []runtime.Object{kubeProxyCM("kind: KubeProxyConfiguration\n")}, "iptables"},
		{"ConfigMap wins over args", []runtime.Object{kp("--proxy-mode=iptables"), kubeProxyCM("mode: ipvs\n")}, "ipvs"},
		{"args", []runtime.Object{kp("--proxy-mode=ipvs", "--v=2")}, "ipvs"},
		{"args, separate value", []runtime.Object{kp("--v=2", "--proxy-mode", "nftables")}, "nftables"},
		{"args in a shell command", []runtime.Object{kp("/bin/sh", "-c", "exec kube-proxy --proxy-mode='ipvs' --v=2")}, "ipvs"},
		{"args, empty mode", []runtime.Object{kp("--proxy-mode=")}, "iptables"},
		{"DaemonSet without flags", []runtime.Object{kp()}, "iptables"},
		{"ConfigMap without config.conf, args", []runtime.Object{kp("--proxy-mode=ipvs"), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: kubeSystem}}}, "ipvs"},
		{"none", nil, KubeProxyUnmanaged},
		{"kube-proxy elsewhere", []runtime.Object{daemonSet("default", "kube-proxy", []ct{{"kube-proxy", "x"}}, nil, "--proxy-mode=ipvs")}, KubeProxyUnmanaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := factsCluster(t, Config{}, tc.objs...)
			if got := facts(t, c)["kube_proxy_mode"]; got != tc.want {
				t.Errorf("kube_proxy_mode %q, want %q", got, tc.want)
			}
		})
	}

	// Unreadable: unknown with the reason.
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []string
	}{
		{"config file, no ConfigMap", []runtime.Object{kubeadmDS}, []string{"unknown: ", "--config=/var/lib/kube-proxy/config.conf"}},
		{"bad YAML", []runtime.Object{kubeProxyCM("mode: [ipvs\n")}, []string{"unknown: ", "parse config.conf"}},
		{"no config.conf, no DaemonSet", []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: kubeSystem}}}, []string{"unknown: ", "no config.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := factsCluster(t, Config{}, tc.objs...)
			got, _ := facts(t, c)["kube_proxy_mode"].(string)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("kube_proxy_mode %q does not contain %q", got, w)
				}
			}
		})
	}
}

func TestFactsUnknown(t *testing.T) {
	ctx := context.Background()
	forbid := func(resource string) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
		}
	}
	c, cs := factsCluster(t, Config{}, kubeProxyCM("mode: ipvs\n"))
	cs.PrependReactor("get", "version", forbid("version"))
	cs.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "worker-b" {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "worker-b")
		}
		return false, nil, nil
	})
	cs.PrependReactor("list", "daemonsets", forbid("daemonsets"))
	f, err := c.readFacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(key, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %q does not contain %q", key, got, w)
			}
		}
	}
	check("kubernetes_version", f["kubernetes_version"].(string), "unknown: ", "forbidden")
	check("cni", f["cni"].(string), "unknown: ", "list DaemonSets in kube-system", "forbidden")
	if f["kube_proxy_mode"] != "ipvs" {
		t.Errorf("kube_proxy_mode %v: the ConfigMap is readable", f["kube_proxy_mode"])
	}
	for _, key := range []string{"node_kernel", "node_os", "node_cpu", "container_runtime"} {
		m := f[key].(map[string]string)
		check(key+"[worker-b]", m["worker-b"], "unknown: ", "get node worker-b", "not found")
		if strings.HasPrefix(m["worker-a"], "unknown") {
			t.Errorf("%s[worker-a] = %q", key, m["worker-a"])
		}
	}

	// A node whose status reports nothing.
	c, cs = factsCluster(t, Config{Nodes: []string{"worker-a"}})
	n, _ := cs.CoreV1().Nodes().Get(ctx, "worker-a", metav1.GetOptions{})
	n.Status.NodeInfo, n.Status.Capacity, n.Status.Allocatable = corev1.NodeSystemInfo{}, nil, nil
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f = facts(t, c)
	for _, key := range []string{"node_kernel", "node_os", "node_cpu", "container_runtime"} {
		check(key, f[key].(map[string]string)["worker-a"], "unknown: ", "reports no")
	}

	// Forbidden ConfigMap and DaemonSets: kube_proxy_mode unknown with both reasons.
	c, cs = factsCluster(t, Config{})
	cs.PrependReactor("get", "configmaps", forbid("configmaps"))
	cs.PrependReactor("list", "daemonsets", forbid("daemonsets"))
	check("kube_proxy_mode", facts(t, c)["kube_proxy_mode"].(string), "unknown: ", "ConfigMap kube-system/kube-proxy", "list DaemonSets")
}

func TestFactsAPIUnreachable(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/version", Err: syscall.ECONNREFUSED}
	for _, verb := range [][2]string{{"get", "version"}, {"get", "nodes"}, {"list", "daemonsets"}, {"get", "configmaps"}} {
		c, cs := factsCluster(t, Config{})
		cs.PrependReactor(verb[0], verb[1], func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, refused })
		f, err := c.readFacts(context.Background())
		if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s %s refused: facts %v, error %v", verb[0], verb[1], f, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, cs := factsCluster(t, Config{})
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, ctx.Err() })
	if _, err := c.readFacts(ctx); err == nil {
		t.Error("cancelled: no error")
	}
}

func TestImageRepoAndFlags(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/calico/node:v3.29.1":                    "docker.io/calico/node",
		"localhost:5000/Flannel/flannel":                   "localhost:5000/flannel/flannel",
		"quay.io/cilium/cilium:v1.16@sha256:0123456789abc": "quay.io/cilium/cilium",
		"kube-router": "kube-router",
	} {
		if got := imageRepo(in); got != want {
			t.Errorf("imageRepo(%q) = %q, want %q", in, got, want)
		}
	}
	if v, ok := flagValue([]string{"-proxy-mode", "ipvs"}, "proxy-mode"); !ok || v != "ipvs" {
		t.Errorf("single dash: %q %v", v, ok)
	}
	if _, ok := flagValue([]string{"--proxy-mode-x=1", "--proxy-mode"}, "proxy-mode"); ok {
		t.Error("found a flag without a value or with another name")
	}
}
