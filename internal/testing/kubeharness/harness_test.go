package kubeharness

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/image"
	"github.com/cnibench/cnibench/internal/kube"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
)

// binDir is where scripts/kube-build.sh caches the Kubernetes binaries.
func binDir() string {
	if d := os.Getenv("CNIBENCH_KUBE_BIN"); d != "" {
		return d
	}
	return "/var/cache/cnibench/kube-v1.34.10/bin"
}

// UpForTest brings a cluster up for a test and registers its teardown, which also checks that
// nothing is left behind. It returns the CLI built from this tree, which is also the tools
// image's cnibench (toolsImage).
func upForTest(t *testing.T, mode, cni string) (*Harness, string) {
	t.Helper()
	// make test and make e2e set CNIBENCH_KUBE_E2E=1 after building the binaries: there a
	// missing binary is a failure, not a skip.
	required := os.Getenv("CNIBENCH_KUBE_E2E") == "1"
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// make test starts this package while scripts/kube-build.sh still builds the later pod
	// networks' binaries: a test waits for what its cluster needs (and kwok, which the tests'
	// fake nodes run).
	if err := AwaitBinaries(binDir(), append(Binaries(cni), "kwok"), 5*time.Second, testWriter{t}); err != nil {
		if required {
			t.Fatalf("binaries not built (scripts/kube-build.sh): %v", err)
		}
		t.Skipf("binaries not built (run scripts/kube-build.sh, or make test): %v", err)
	}
	prefix := fmt.Sprintf("cnbtk%03d", rand.Intn(1000))
	bin, img := toolsImage(t)
	// A cluster an interrupted earlier run left is taken down first (Up would do it, but
	// after the host's state below is taken).
	if _, err := CleanStale(testWriter{t}); err != nil {
		t.Fatal(err)
	}
	before := hostState(t)
	h, err := Up(context.Background(), Config{Prefix: prefix, Bin: binDir(), ProxyMode: mode, CNI: cni, Image: img, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, h)
		}
		if err := h.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
		if left := lab.Leftovers(prefix); len(left) > 0 {
			t.Errorf("lab leftovers: %v", left)
		}
		if after := hostState(t); after != before {
			t.Errorf("host state changed:\nbefore: %s\nafter:  %s", before, after)
		}
	})
	return h, bin
}

// dumpLogs logs the end of every cluster daemon's log (they go with Down), for a failure's
// diagnosis.
func dumpLogs(t *testing.T, h *Harness) {
	logs, _ := filepath.Glob(filepath.Join(h.cfg.Dir, "logs", "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		t.Logf("--- %s (last %d lines)\n%s", filepath.Base(f), len(lines), strings.Join(lines, "\n"))
	}
}

// hostState summarises what the harness must leave as it found it: global sysctls, host
// paths, mounts and cgroups with the test prefix.
func hostState(t *testing.T) string {
	var b strings.Builder
	// The host-wide sysctls a CNI agent would set (cilium-agent: unprivileged BPF off for
	// good, timer migration off; the harness keeps them from it) besides the kubelet's.
	for _, s := range append(slices.Clone(hostSysctls), "kernel/unprivileged_bpf_disabled", "kernel/timer_migration", "net/core/bpf_jit_enable") {
		v, _ := os.ReadFile("/proc/sys/" + s)
		fmt.Fprintf(&b, "%s=%s ", s, strings.TrimSpace(string(v)))
	}
	for _, p := range append(slices.Clone(hostPaths), ciliumRuntime) {
		_, err := os.Lstat(p)
		fmt.Fprintf(&b, "%s:%v ", p, err == nil)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	fmt.Fprintf(&b, "kube-mounts:%d ", strings.Count(string(mi), "cnibench-kube"))
	for _, h := range allCgroupHierarchies() {
		ents, _ := os.ReadDir(h)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "cnbtk") {
				fmt.Fprintf(&b, "cgroup:%s/%s ", h, e.Name())
			}
		}
	}
	return b.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestRealCluster brings the two-node cluster up (real Flannel, VXLAN backend; kube-proxy in
// iptables mode), runs the workloads through the kube backend directly and then the whole CLI
// against it, and tears it down to nothing (checked in upForTest's cleanup).
func TestRealCluster(t *testing.T) {
	h, bin := upForTest(t, "iptables", CNIFlannel)
	t.Run("flannel", func(t *testing.T) { flannelOnCluster(t, h) })
	t.Run("flannel-objects", func(t *testing.T) { flannelObjects(t, h) })
	t.Run("backend", func(t *testing.T) { backendOnCluster(t, h) })
	t.Run("cli", func(t *testing.T) { cliOnCluster(t, h, bin, "--plan", "../../../plans/quick.yaml") })
	// p2s's TCP and TCP_CRR through kube-proxy iptables run in the fidelity subtest (across
	// nodes) and every protocol through its nftables mode in TestRealClusterNFTables.
	t.Run("cli-p2s", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "p2s", "--protocol", "udp,rr") })
	t.Run("cli-streams", func(t *testing.T) { streamsOnCluster(t, h, bin) })
	t.Run("cli-hairpin", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "hairpin", "--protocol", "tcp,crr") })
	t.Run("fidelity", func(t *testing.T) { fidelityOnCluster(t, h, bin) })
	t.Run("n2s", func(t *testing.T) { n2sOnCluster(t, h) })
	t.Run("reaction", func(t *testing.T) { reactionOnCluster(t, h, bin) })
	t.Run("rbac", func(t *testing.T) { rbacOnCluster(t, h, bin) })
	t.Run("facts-and-policy-probe", func(t *testing.T) { probeOnCluster(t, h) })
	t.Run("chain", func(t *testing.T) { chainOnCluster(t, h, bin) })
	t.Run("cli-fake-nodes", func(t *testing.T) { cliFakeNodes(t, h, bin) })
	t.Run("cli-scale", func(t *testing.T) { cliScale(t, h, bin) })
	t.Run("fake-nodes", func(t *testing.T) { fakeNodesOnCluster(t, h) })
	t.Run("vnf", func(t *testing.T) { vnfOnCluster(t, h, bin) })
}

// vnfOnCluster runs the vnf scenario on the cluster: the packet engine in pods of the tools
// image, two user-space VNF replicas behind a real ClusterIP Service (kube-proxy), one on each
// node, each a Burstable pod with a 1000m CPU limit, and the same behind an ingress pod; the
// search finds an NDR and a PDR. Exclusive CPUs are asked too: this cluster's kubelets run
// the CPU manager policy none, so the Guaranteed pods get no CPUs of their own, and those cases
// are skipped saying so.
func vnfOnCluster(t *testing.T, h *Harness, bin string) {
	sum := cliSummary(t, h, bin, false, "--scenario", "vnf", "--vnf", "userspace,kernel,xdp", "--placement", "split", "--replicas", "2", "--cpu-limit", "1000",
		"--cpu-isolation", "shared,exclusive", "--lb", "service,ingress", "--repeat", "1")
	if len(sum.Results) != 12 {
		t.Fatalf("%d results, want 12", len(sum.Results))
	}
	for _, r := range sum.Results {
		if r.Case.Word("cpu-isolation") == "exclusive" {
			if r.Status != "skipped" || !strings.Contains(r.Reason, "CPU manager policy must be static") {
				t.Errorf("%s: %s (%s), want skipped: no exclusive CPUs without the static CPU manager", r.Case.ID, r.Status, r.Reason)
			}
			continue
		}
		if r.Case.Word("vnf") != "userspace" {
			// The project's pods are unprivileged: no CAP_NET_ADMIN for NAT rules or XDP.
			if r.Status != "skipped" || !strings.Contains(r.Reason, "CAP_NET_ADMIN") {
				t.Errorf("%s: %s (%s), want skipped: the pods lack CAP_NET_ADMIN", r.Case.ID, r.Status, r.Reason)
			}
			continue
		}
		m := func(k string) float64 { return r.Metrics[k].Mean }
		if r.Status != "ok" || m("ndr_pps") <= 1000 || m("pdr_pps") < m("ndr_pps") || m("latency_p50_us") <= 0 {
			t.Errorf("%s: %s (%s): NDR %.0f PDR %.0f latency p50 %.1f us", r.Case.ID, r.Status, r.Reason, m("ndr_pps"), m("pdr_pps"), m("latency_p50_us"))
		}
		t.Logf("%s: NDR %.0f pps, PDR %.0f pps (%d search trials), generator %.0f pps", r.Case.ID, m("ndr_pps"), m("pdr_pps"), int(m("search_trials_count")), m("generator_max_pps"))
	}
}

// cliScale runs issue 4's scenarios on the real cluster: p2s with 50 extra Services whose
// endpoints are silent pods on kwok fake nodes (kube-proxy programs them all), HTTP through a
// Service to two nginx replicas, and p2p-policies, which Flannel cannot enforce: the
// enforcement probe makes those cases skipped with the reason, never measured as if enforced.
func cliScale(t *testing.T, h *Harness, bin string) {
	cliOnCluster(t, h, bin, "--fake-nodes", "2", "--kwok", filepath.Join(binDir(), "kwok"),
		"--scenario", "p2s", "--placement", "inter", "--protocol", "crr", "--services", "50")
	assertNoFakeNodes(t, h)
	cliOnCluster(t, h, bin, "--scenario", "p2s-replicas", "--replicas", "2")
	sum := cliSummary(t, h, bin, false, "--scenario", "p2p-policies", "--placement", "inter", "--protocol", "tcp", "--pods", "2")
	for _, r := range sum.Results {
		if r.Status != "skipped" || !strings.Contains(r.Reason, kube.NotEnforcedDetail) {
			t.Errorf("%s on Flannel: %s (%s), want skipped: %s", r.Case.ID, r.Status, r.Reason, kube.NotEnforcedDetail)
		}
	}
}

// n2sOnCluster runs n2s through the kube backend: real Services of type NodePort with
// externalTrafficPolicy Cluster and Local (kube-proxy as the harness runs it), the external
// client a host-network pod on the node it does not target. Every case is measured but Local
// inter (the targeted node has no endpoint: skipped saying so); the server sees the client's
// own address with Local and the node's with Cluster. (Not through the CLI: a CLI run waits
// while another run measures on the host.)
func n2sOnCluster(t *testing.T, h *Harness) {
	ctx := context.Background()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: h.Kubeconfig, RunID: "n2s-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	cs := clientset(t, h.Kubeconfig)
	nodes, err := cl.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	sc, err := scenario.Get("n2s")
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range []string{"intra", "inter"} {
		for _, proto := range []string{"tcp", "crr"} {
			for _, etp := range []string{"cluster", "local"} {
				c := result.Case{Scenario: "n2s", Backend: "kube", Dataplane: "cluster", Placement: pl, Protocol: proto, ExternalTrafficPolicy: etp}
				c.ID = c.MakeID()
				start := time.Now()
				f, err := sc.Setup(ctx, cl, c, scenario.Options{CPUs: [2]int{0, 1}})
				if etp == "local" && pl == "inter" {
					if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "no endpoint") {
						t.Errorf("%s: %v, want skipped: no endpoint on the targeted node", c.ID, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: setup: %v", c.ID, err)
					continue
				}
				svc, err := cs.CoreV1().Services(cl.Namespace()).Get(ctx, "server", metav1.GetOptions{})
				if err != nil || svc.Spec.Type != corev1.ServiceTypeNodePort || !strings.EqualFold(string(svc.Spec.ExternalTrafficPolicy), etp) {
					t.Errorf("%s: Service %+v (%v), want type NodePort, externalTrafficPolicy %s", c.ID, svc.Spec, err, etp)
				}
				client, err := cs.CoreV1().Pods(cl.Namespace()).Get(ctx, "client", metav1.GetOptions{})
				want := map[string]string{"intra": nodes[1].Name, "inter": nodes[0].Name}[pl]
				if err != nil || !client.Spec.HostNetwork || client.Spec.NodeName != want {
					t.Errorf("%s: client pod on %s (%v), want a host-network pod on %s", c.ID, client.Spec.NodeName, err, want)
				}
				m, err := f.Trial(ctx, 2)
				if err != nil {
					t.Errorf("%s: trial: %v\n%s", c.ID, err, m.Raw)
				} else if m.Metrics[c.Primary()] <= 0 || (m.Metrics["client_ip_preserved"] == 1) != (etp == "local") {
					t.Errorf("%s: %s = %v, client_ip_preserved = %v", c.ID, c.Primary(), m.Metrics[c.Primary()], m.Metrics["client_ip_preserved"])
				}
				if err := f.Close(ctx); err != nil {
					t.Errorf("%s: close: %v", c.ID, err)
				}
				t.Logf("%s: %s = %.4g, client_ip_preserved = %v (%.1f s)", c.ID, c.Primary(), m.Metrics[c.Primary()], m.Metrics["client_ip_preserved"], time.Since(start).Seconds())
			}
		}
	}
}

// cliFakeNodes runs a p2p case with 200 silent pods on kwok fake nodes through the CLI.
func cliFakeNodes(t *testing.T, h *Harness, bin string) {
	cliOnCluster(t, h, bin, "--fake-nodes", "4", "--kwok", filepath.Join(binDir(), "kwok"),
		"--scenario", "p2p", "--placement", "inter", "--protocol", "rr", "--pods", "200")
	assertNoFakeNodes(t, h)
}

// fakeNodesOnCluster: 1,000 silent pods on kwok fake nodes, Running (with IPs) within 60 s;
// Close deletes them, the namespace and the fake nodes, and stops kwok.
func fakeNodesOnCluster(t *testing.T, h *Harness) {
	ctx := context.Background()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: h.Kubeconfig, RunID: "fake-nodes-test", FakeNodes: 10, Kwok: filepath.Join(binDir(), "kwok")})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pods, err := cl.CreatePods(ctx, scenario.SilentPods(1000, "silent", map[string]string{"role": "silent"}))
	el := time.Since(start)
	if err != nil {
		_ = cl.Close(ctx)
		t.Fatal(err)
	}
	t.Logf("1000 silent pods on 10 kwok fake nodes Running in %.1f s", el.Seconds())
	if el > 60*time.Second {
		t.Errorf("1000 silent pods took %s, want < 60 s", el)
	}
	nodes := map[string]int{}
	ips := map[string]bool{}
	for _, p := range pods {
		nodes[p.Node]++
		ips[p.IP] = true
	}
	if len(nodes) != 10 || len(ips) != 1000 {
		t.Errorf("pods on %d nodes with %d distinct IPs, want 10 and 1000", len(nodes), len(ips))
	}
	if info := cl.Facts().Record(); info["fake_nodes"] != 10 {
		t.Errorf("info fake_nodes %v", info["fake_nodes"])
	}
	start = time.Now()
	if err := cl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("close (namespace with 1000 pods, fake nodes, kwok) in %.1f s", time.Since(start).Seconds())
	assertNoFakeNodes(t, h)
}

// assertNoFakeNodes checks that only the two real nodes are left.
func assertNoFakeNodes(t *testing.T, h *Harness) {
	t.Helper()
	list, err := clientset(t, h.Kubeconfig).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		var names []string
		for _, n := range list.Items {
			names = append(names, n.Name)
		}
		t.Errorf("nodes after the run: %v, want the 2 real ones", names)
	}
}

// probeOnCluster checks the environment facts and the NetworkPolicy enforcement probe on the
// harness cluster: the agents run outside DaemonSets, so flanneld and calico-node are known by
// their node annotations, cilium-agent by its CiliumNodes and kube-router (which writes nothing to the
// API) not at all; the probe sees policies enforced where the network enforces them
// (podNetwork.enforcesPolicy) and says so where it does not (Flannel).
func probeOnCluster(t *testing.T, h *Harness) {
	ctx := context.Background()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: h.Kubeconfig, RunID: "probe-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	info := cl.Facts().Record()
	if v, _ := info["kubernetes_version"].(string); v != "v1.34.10" {
		t.Errorf("kubernetes_version %v", info["kubernetes_version"])
	}
	wantCNI := map[string]string{CNIFlannel: kube.FlannelByAnnotation, CNIFlannelHostGW: kube.FlannelByAnnotation,
		CNICilium: kube.CiliumByNodes, CNIKubeRouter: kube.UnknownCNI, CNICalico: kube.CalicoByAnnotation}[h.cfg.CNI]
	if info["cni"] != wantCNI {
		t.Errorf("cni %q, want %q: the harness runs the %s agents outside DaemonSets", info["cni"], wantCNI, h.cfg.CNI)
	}
	if b := flannelBackend(h.cfg.CNI); b != "" && info["flannel_backend"] != b {
		t.Errorf("flannel_backend %v, want %s", info["flannel_backend"], b)
	}
	enforced, detail, err := cl.ProbePolicyEnforcement(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := h.podNet().enforcesPolicy; enforced != want || (!want && detail != kube.NotEnforcedDetail) {
		t.Errorf("probe on %s: enforced=%v %q, want enforced=%v", h.cfg.CNI, enforced, detail, want)
	}
	t.Logf("facts: cni=%v kube_proxy_mode=%v; probe: %s", info["cni"], info["kube_proxy_mode"], detail)
}

// TestRealClusterNFTables runs the CLI against the cluster with kube-proxy in nftables mode
// and real Flannel's host-gw backend. (It runs second, as its binaries are built first: under
// make test, scripts/kube-build.sh may still be building Cilium's, kube-router's and Calico's.)
func TestRealClusterNFTables(t *testing.T) {
	h, bin := upForTest(t, "nftables", CNIFlannelHostGW)
	t.Run("flannel", func(t *testing.T) { flannelOnCluster(t, h) })
	t.Run("flannel-objects", func(t *testing.T) { flannelObjects(t, h) })
	cliOnCluster(t, h, bin, "--scenario", "p2p", "--protocol", "tcp,rr")
	// Services through kube-proxy's nftables mode: every protocol, intra and inter node; and a
	// pod through its own Service (the nftables endpoint chain's hairpin masquerade).
	cliOnCluster(t, h, bin, "--scenario", "p2s")
	cliOnCluster(t, h, bin, "--scenario", "hairpin", "--protocol", "tcp,crr")
	// NodePorts through it, from outside.
	t.Run("n2s", func(t *testing.T) { n2sOnCluster(t, h) })
	// How fast kube-proxy's nftables mode follows endpoints.
	t.Run("reaction", func(t *testing.T) { reactionOnCluster(t, h, bin) })
}

// TestRealClusterCilium runs the cluster on real Cilium (VXLAN tunnel, kube-proxy replaced:
// no kube-proxy runs): the agents up with their datapath compiled, the socket LB on the nodes'
// cgroups and the host's global sysctls untouched (upForTest's host check), Services served by
// Cilium alone to pods attached by cilium-cni, measured through the CLI, and NetworkPolicy
// really enforced: the probe says so, and p2p-policies is measured with an outsider denied.
func TestRealClusterCilium(t *testing.T) {
	h, bin := upForTest(t, ProxyNone, CNICilium)
	t.Run("cilium", func(t *testing.T) { ciliumOnCluster(t, h) })
	t.Run("facts-and-policy-probe", func(t *testing.T) { probeOnCluster(t, h) })
	cliOnCluster(t, h, bin, "--scenario", "p2s", "--protocol", "tcp,crr")
	// Hairpin through Cilium's socket LB (no kube-proxy).
	t.Run("hairpin", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "hairpin", "--protocol", "tcp,crr") })
	t.Run("p2p-policies", func(t *testing.T) {
		cliOnCluster(t, h, bin, "--scenario", "p2p-policies", "--placement", "inter", "--protocol", "tcp,rr", "--pods", "2")
	})
}

// TestRealClusterKubeRouter runs the cluster on real kube-router (routes by iBGP, its
// iptables and ipset NetworkPolicy controller) with kube-proxy in iptables mode for Services:
// the agents up with their BGP routes to the other node's pod CIDR, pods attached to
// kube-bridge, NetworkPolicy really enforced (the probe), and p2p, p2s and p2p-policies
// measured through the CLI.
func TestRealClusterKubeRouter(t *testing.T) {
	h, bin := upForTest(t, "iptables", CNIKubeRouter)
	t.Run("kube-router", func(t *testing.T) { kubeRouterOnCluster(t, h) })
	measuredOnCluster(t, h, bin)
}

// TestRealClusterCalico runs the cluster on real Calico (VXLAN always, Calico IPAM, felix's
// iptables data plane) with kube-proxy in iptables mode: felix ready on both nodes with its
// VXLAN device and routes, NetworkPolicy really enforced (the probe), and p2p, p2s and
// p2p-policies measured through the CLI.
func TestRealClusterCalico(t *testing.T) {
	h, bin := upForTest(t, "iptables", CNICalico)
	t.Run("calico", func(t *testing.T) { calicoOnCluster(t, h) })
	measuredOnCluster(t, h, bin)
}

// measuredOnCluster runs what every real pod network that enforces policies is held to: the
// facts and the enforcement probe, then p2p, p2s and p2p-policies (across nodes, an outsider
// denied) through the CLI.
func measuredOnCluster(t *testing.T, h *Harness, bin string) {
	t.Run("facts-and-policy-probe", func(t *testing.T) { probeOnCluster(t, h) })
	t.Run("p2p", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "p2p", "--protocol", "tcp,rr") })
	t.Run("p2s", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "p2s", "--protocol", "tcp,crr") })
	t.Run("p2p-policies", func(t *testing.T) {
		cliOnCluster(t, h, bin, "--scenario", "p2p-policies", "--placement", "inter", "--protocol", "tcp,rr", "--pods", "2")
	})
}

// reactionOnCluster runs the reaction scenario through the CLI on the cluster, one trial per
// placement (three scale ups and downs each): real pods answering with their address, the
// EndpointSlice controller and kube-proxy following them. Every change is seen, with its
// control-plane part (the EndpointSlices updated) and the data-plane rest.
func reactionOnCluster(t *testing.T, h *Harness, bin string) {
	start := time.Now()
	sum := cliSummary(t, h, bin, true, "--scenario", "reaction", "--repeat", "1")
	if len(sum.Results) != 2 {
		t.Errorf("%d results, want intra and inter", len(sum.Results))
	}
	for _, r := range sum.Results {
		if r.Status != "ok" {
			t.Errorf("%s: %s (%s)", r.Case.ID, r.Status, r.Reason)
			continue
		}
		m := func(k string) float64 { return r.Metrics[k].Mean }
		for _, k := range []string{"reaction_up_ms", "reaction_down_ms", "reaction_up_control_ms", "reaction_down_control_ms", "endpoint_ready_ms"} {
			if v := m(k); v <= 0 || v > 30000 {
				t.Errorf("%s: %s = %v", r.Case.ID, k, v)
			}
		}
		if m("reaction_changes_count") < 3 || r.Case.Tool != "nc" {
			t.Errorf("%s: %v changes, tool %q", r.Case.ID, m("reaction_changes_count"), r.Case.Tool)
		}
		t.Logf("%s: up %.1f ms (control %.1f + data %.1f), down %.1f ms (control %.1f + data %.1f), pod ready %.0f ms after the create call, %v failed probes, probe every %.2f ms, clock ±%.1f ms",
			r.Case.ID, m("reaction_up_ms"), m("reaction_up_control_ms"), m("reaction_up_data_ms"), m("reaction_down_ms"), m("reaction_down_control_ms"),
			m("reaction_down_data_ms"), m("endpoint_ready_ms"), m("probe_failed_count"), m("probe_interval_ms"), m("probe_clock_uncertainty_ms"))
	}
	t.Logf("reaction on the cluster: %.0f s", time.Since(start).Seconds())
}

// built holds the CLI and the tools image of this package's run: every test's cluster imports
// the same image, built once (TestMain removes them).
var built struct {
	once     sync.Once
	dir      string
	bin, img string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildCLI returns the cnibench CLI built from this tree, once per package run.
func buildCLI(t *testing.T) string {
	bin, _ := toolsImage(t)
	return bin
}

// toolsImage returns the CLI built from this tree and the tools image around it (the packet
// engine runs that cnibench in pods), built once per package run.
func toolsImage(t *testing.T) (bin, img string) {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "kubeharness-tools-"); built.err != nil {
			return
		}
		built.bin, built.img = filepath.Join(built.dir, "cnibench"), filepath.Join(built.dir, "tools.tar")
		if out, err := exec.Command("go", "build", "-o", built.bin, "../../../cmd/cnibench").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build: %v: %s", err, out)
			return
		}
		if _, err := image.Build(built.img, image.Options{Self: built.bin}); err != nil {
			built.err = fmt.Errorf("tools image: %w", err)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin, built.img
}

// rbacOnCluster applies deploy/rbac.yaml, then runs cnibench as a user bound only to that role
// (impersonated through the kubeconfig's "as"), and checks the role grants nothing beyond.
func rbacOnCluster(t *testing.T, h *Harness, bin string) {
	ctx := context.Background()
	admin := clientset(t, h.Kubeconfig)
	f, err := os.Open("../../../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	binding := applyRole(t, dec, admin)
	kc, err := os.ReadFile(h.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	user := binding.Subjects[0].Name
	imp := filepath.Join(t.TempDir(), "impersonated.kubeconfig")
	if err := os.WriteFile(imp, []byte(strings.Replace(string(kc), "  user:\n", "  user:\n    as: "+user+"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	runner := clientset(t, imp)
	for _, c := range []struct {
		verb, resource, group, sub string
		want                       bool
	}{
		{"create", "pods", "", "", true},
		{"create", "pods", "", "exec", true},
		{"create", "networkpolicies", "networking.k8s.io", "", true},
		{"list", "secrets", "", "", false},
		{"create", "clusterrolebindings", "rbac.authorization.k8s.io", "", false},
		{"delete", "nodes", "", "", false},
	} {
		r, err := runner.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "cnibench-x", Verb: c.verb, Resource: c.resource, Group: c.group, Subresource: c.sub}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.want {
			t.Errorf("%s may %s %s/%s: %v, want %v", user, c.verb, c.resource, c.sub, r.Status.Allowed, c.want)
		}
	}
	cliOnCluster(t, h, bin, "--kubeconfig", imp, "--scenario", "p2p", "--placement", "inter", "--protocol", "tcp,crr")
	cliOnCluster(t, h, bin, "--kubeconfig", imp, "--scenario", "p2s", "--placement", "inter", "--protocol", "rr")
	// A chain's pods (NET_ADMIN, forwarding sysctls, exec with stdin) need no more rights.
	cliOnCluster(t, h, bin, "--kubeconfig", imp, "--scenario", "chain", "--protocol", "rr")

	// --fake-nodes needs the second role: without it the run fails (a user error, not a
	// half-made cluster); with it, cnibench and its kwok work as that user.
	fake := []string{"--kubeconfig", imp, "--fake-nodes", "2", "--kwok", filepath.Join(binDir(), "kwok"),
		"--scenario", "p2p", "--placement", "inter", "--protocol", "rr", "--pods", "20"}
	argv := append([]string{"run", "--backend", "kube", "--repeat", "1", "--duration", "1", "--warmup", "0", "--out", filepath.Join(t.TempDir(), "denied")}, fake...)
	if out, err := exec.Command(bin, argv...).CombinedOutput(); err == nil || !strings.Contains(string(out), "forbidden") {
		t.Errorf("--fake-nodes without the fake-nodes role: %v: %s", err, out)
	}
	applyRole(t, dec, admin)
	cliOnCluster(t, h, bin, fake...)
	assertNoFakeNodes(t, h)
}

// applyRole reads the next ClusterRole and its ClusterRoleBinding from dec and creates them.
func applyRole(t *testing.T, dec *utilyaml.YAMLOrJSONDecoder, admin kubernetes.Interface) rbacv1.ClusterRoleBinding {
	t.Helper()
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	if err := dec.Decode(&role); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&binding); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return binding
}

func clientset(t *testing.T, kubeconfig string) kubernetes.Interface {
	rc, err := kube.LoadConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// cliOnCluster runs `cnibench run --backend kube` on the cluster with the given case flags
// (a later --kubeconfig overrides the admin one) and checks every planned case ran.
func cliOnCluster(t *testing.T, h *Harness, bin string, args ...string) {
	sum := cliSummary(t, h, bin, true, args...)
	for _, r := range sum.Results {
		want := "ok"
		if r.Case.Dataplane == "bare" {
			want = "skipped" // no bare veth pair on a cluster
		}
		if r.Status != want {
			t.Errorf("%s: status %q (%s), want %s", r.Case.ID, r.Status, r.Reason, want)
		}
	}
}

// streamsOnCluster measures parallel streams through a Service across nodes: iperf3 -P 3, and
// three netperf instances at once, each on its own data port (the Service carries them all),
// with 512-byte messages; the instances' rates add up and their percentiles come out as a range.
func streamsOnCluster(t *testing.T, h *Harness, bin string) {
	sum := cliSummary(t, h, bin, true, "--scenario", "p2s", "--placement", "inter", "--protocol", "tcp,rr", "--streams", "3", "--msg-size", "512")
	for _, r := range sum.Results {
		if r.Status != "ok" || r.Case.Streams != 3 || r.Case.MsgSize != 512 {
			t.Errorf("%s: status %q (%s), streams %d, msg size %d", r.Case.ID, r.Status, r.Reason, r.Case.Streams, r.Case.MsgSize)
			continue
		}
		if m := r.Metrics[result.MsgSizeMetric]; m.N == 0 || m.Min != 512 || m.Max != 512 {
			t.Errorf("%s: the tool used %v-byte messages, want 512", r.Case.ID, m)
		}
		if r.Case.Protocol == "rr" {
			lo, hi := r.Metrics["latency_p99_low_us"], r.Metrics["latency_p99_high_us"]
			if _, one := r.Metrics["latency_p99_us"]; one || lo.N == 0 || hi.N == 0 || lo.Min > hi.Max {
				t.Errorf("%s: concurrent instances' P99: one figure %v, range %v..%v", r.Case.ID, one, lo, hi)
			}
		}
	}
}

// fidelityOnCluster runs plans/fidelity.yaml (cut to inter node, TCP and TCP_CRR, two short
// trials) on the cluster's real Flannel and on the lab's flannel preset in one run
// (--backend kube,lab): every lab case is paired by round with the cluster's case measuring
// the same thing, and the Markdown report states each ratio lab/real with its interval.
func fidelityOnCluster(t *testing.T, h *Harness, bin string) {
	runDir := filepath.Join(t.TempDir(), "run")
	out, err := exec.Command(bin, "run", "--backend", "kube,lab", "--kubeconfig", h.Kubeconfig, "--plan", "../../../plans/fidelity.yaml",
		"--placement", "inter", "--protocol", "tcp,crr", "--repeat", "2", "--duration", "1", "--warmup", "0", noStealCheck, "--out", runDir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("cnibench run --backend kube,lab: %v", err)
	}
	sum, err := result.ReadSummary(runDir)
	if err != nil {
		t.Fatal(err)
	}
	ref := map[string]string{} // CompareKey -> the cluster's case
	var lab []result.Case
	for i, r := range sum.Results {
		if r.Status != "ok" {
			t.Errorf("%s on %s: %s (%s)", r.Case.ID, r.Case.Backend, r.Status, r.Reason)
		}
		switch {
		case r.Case.Backend == "kube" && i < 4 && r.Case.Dataplane == "cluster":
			ref[r.Case.CompareKey()] = r.Case.ID
		case r.Case.Backend == "lab" && i >= 4 && r.Case.Dataplane == "flannel":
			lab = append(lab, r.Case)
		default:
			t.Errorf("result %d: %s on %s, want the cluster's 4 cases, then the lab's flannel ones", i, r.Case.ID, r.Case.Backend)
		}
	}
	if len(ref) != 4 || len(lab) != 4 {
		t.Fatalf("%d cluster cases and %d lab cases, want 4 of each", len(ref), len(lab))
	}
	md, err := os.ReadFile(filepath.Join(runDir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range lab {
		var cmp *result.Comparison
		for i, x := range sum.Comparisons {
			if x.Case == c.ID && x.Kind == "backend" {
				cmp = &sum.Comparisons[i]
			}
		}
		switch {
		case cmp == nil:
			t.Errorf("%s: no backend comparison", c.ID)
		case cmp.Reference != ref[c.CompareKey()] || cmp.N != 2 || !(cmp.Ratio > 0.2 && cmp.Ratio < 5) || cmp.CI95Low > cmp.Ratio || cmp.CI95High < cmp.Ratio:
			t.Errorf("%s vs %s: %+v, want against %s over 2 rounds, a ratio within a factor 5 inside its interval", c.ID, cmp.Reference, cmp.RatioSummary, ref[c.CompareKey()])
		case !strings.Contains(string(md), fmt.Sprintf("| %s | %s | backend | %s | 2 | %.3f [", c.ID, cmp.Reference, cmp.Metric, cmp.Ratio)):
			t.Errorf("report.md does not state %s against %s:\n%s", c.ID, cmp.Reference, md)
		default:
			t.Logf("lab/real %s: %.3f [%.3f, %.3f]", c.CompareKey(), cmp.Ratio, cmp.CI95Low, cmp.CI95High)
		}
	}
}

// noStealCheck turns the runner's disturbed-trial check off in the cluster tests' runs: they
// check that every case runs on the cluster, not its figures, and a burst of hypervisor steal
// (a CI run saw 31 %) would otherwise leave two-trial cases with no undisturbed trial, failed.
// The check itself is tested in internal/runner (TestDisturbedTrialsRerun).
const noStealCheck = "--max-steal=-1"

// cliSummary runs `cnibench run --backend kube` with args (mustSucceed: a non-zero exit fails
// the test; a run with skipped cases only exits non-zero), checks that every case ran on the
// cluster and that kube clean finds nothing left, and returns the summary.
func cliSummary(t *testing.T, h *Harness, bin string, mustSucceed bool, args ...string) result.Summary {
	runDir := filepath.Join(t.TempDir(), "run")
	argv := append([]string{"run", "--backend", "kube", "--kubeconfig", h.Kubeconfig, "--repeat", "2", "--duration", "1", "--warmup", "0", noStealCheck, "--out", runDir}, args...)
	kubeconfig := h.Kubeconfig
	for i, a := range argv {
		if a == "--kubeconfig" {
			kubeconfig = argv[i+1]
		}
	}
	out, err := exec.Command(bin, argv...).CombinedOutput()
	t.Logf("%s", out)
	if err != nil && mustSucceed {
		t.Fatalf("cnibench run --backend kube: %v", err)
	}
	sum, err := result.ReadSummary(runDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Results) == 0 {
		t.Fatal("no results")
	}
	for _, r := range sum.Results {
		if r.Case.Backend != "kube" {
			t.Errorf("%s: backend %q", r.Case.ID, r.Case.Backend)
		}
	}
	// The run deleted its namespaces; kube clean finds nothing left.
	out, err = exec.Command(bin, "kube", "clean", "--kubeconfig", kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0 namespaces deleted") {
		t.Errorf("kube clean after a run: %v: %s", err, out)
	}
	return sum
}

// kubeAccounting checks a trial's accounting on the cluster: the CPUs of each node of the
// trial (this harness's nodes share one kernel: one machine named after both), the client's
// and the server's pods as roles with their tools' CPU time on the CPUs they were pinned to
// (from the containers' cgroups: netserver's child per test comes and goes between the
// window's edges), the client's eth0 carrying what the tool measured, and a verdict.
func kubeAccounting(t *testing.T, c result.Case, m scenario.Measurement, durationS int) {
	t.Helper()
	a := m.Accounting
	if a == nil {
		t.Fatal("trial not accounted")
	}
	nodes, covered := map[string]int{"intra": 1, "inter": 2}[c.Placement], 0
	for _, h := range a.Hosts {
		covered += len(strings.Split(h.Name, "+"))
	}
	if covered != nodes || len(a.Hosts) == 0 || len(a.Hosts[0].CPUs) == 0 {
		t.Errorf("accounted the CPUs of %d nodes (%+v), want %d; notes %q", covered, a.Hosts, nodes, a.Notes)
	}
	tool := map[string]string{"tcp": "iperf3", "udp": "iperf3", "rr": "netperf", "crr": "netperf"}[c.Protocol]
	roles := map[string]account.Role{}
	for _, r := range a.Roles {
		roles[r.Name] = r
	}
	cl := roles["client"]
	if !slices.Contains(cl.Commands, tool) || cl.UserS+cl.SystemS <= 0 || cl.Host == "" || !slices.ContainsFunc(cl.RanOn, func(s account.Share) bool { return s.CPU == 0 && s.Pct > 0 }) {
		t.Errorf("client role %+v: want %s's CPU time on its node's CPU 0 (pinned there); roles %+v", cl, tool, a.Roles)
	}
	server := map[string]string{"tcp": "iperf3", "udp": "iperf3", "rr": "netserver", "crr": "netserver"}[c.Protocol]
	if sv := roles["server"]; !slices.Contains(sv.Commands, server) || !slices.ContainsFunc(sv.RanOn, func(s account.Share) bool { return s.CPU == 1 && s.Pct > 0 }) {
		t.Errorf("server role %+v: want %s's CPU time on CPU 1 (pinned there); notes %q", sv, server, a.Notes)
	}
	if c.Protocol == "tcp" && c.Scenario == "p2p" {
		sent := 0.0
		for _, h := range a.Hops {
			if h.Where == "client" && h.Dev == "eth0" {
				sent = h.TxBytes
			}
		}
		if want := 0.9 * m.Metrics["throughput_bps"] / 8 * float64(durationS); sent < want {
			t.Errorf("client eth0 sent %.0f bytes in the window, want at least %.0f (what the tool measured); hops %+v", sent, want, a.Hops)
		}
	}
	v := account.Judge(a)
	if v.Bottleneck == "" {
		t.Error("no verdict")
	}
	t.Logf("accounted: %d nodes, roles %d, hops %d; verdict: %s; findings %q", len(a.Hosts), len(a.Roles), len(a.Hops), v.Bottleneck, v.Findings)
}

// backendOnCluster runs the p2p and node2node workloads through the kube backend (client-go,
// pods pinned to nodes, exec) on the real cluster.
func backendOnCluster(t *testing.T, h *Harness) {
	ctx := context.Background()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: h.Kubeconfig, RunID: "harness-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	nodes, err := cl.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	for _, tc := range []struct{ sc, dp, pl, proto, metric string }{
		{"p2p", "cluster", "inter", "tcp", "throughput_bps"},
		{"p2p", "cluster", "intra", "rr", "transactions_per_s"},
		{"p2p", "cluster", "inter", "udp", "throughput_bps"},
		{"p2p", "cluster", "inter", "crr", "transactions_per_s"},
		{"baseline", "node2node", "inter", "tcp", "throughput_bps"},
	} {
		t.Run(tc.sc+"/"+tc.pl+"/"+tc.proto, func(t *testing.T) {
			sc, _ := scenario.Get(tc.sc)
			c := result.Case{Scenario: tc.sc, Dataplane: tc.dp, Placement: tc.pl, Protocol: tc.proto, Backend: "kube"}
			f, err := sc.Setup(ctx, cl, c, scenario.Options{CPUs: [2]int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			start := time.Now()
			m, err := f.Trial(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			// netserver's TCP_CRR test process is ended in the pod once the test is over
			// (cluster.IdleChildSignaler): waited out, the trial would take 2 s + PadTime.
			if took := time.Since(start); tc.proto == "crr" && took >= 2*time.Second+driver.PadTime-time.Second {
				t.Errorf("a 2 s TCP_CRR trial took %v: the server's wait past the test (%v) was not ended", took, driver.PadTime)
			}
			if m.Metrics[tc.metric] <= 0 {
				t.Errorf("%s = %v: %v", tc.metric, m.Metrics[tc.metric], m.Metrics)
			}
			t.Logf("%s %s %s: %s=%.4g", tc.sc, tc.pl, tc.proto, tc.metric, m.Metrics[tc.metric])
			kubeAccounting(t, c, m, 2)
		})
	}
	// The pod MTU was read in the first pod: 1500 less VXLAN's 50 bytes on Flannel's and
	// Cilium's VXLAN, the underlay's 1500 on the others (a held cluster's network is not known).
	want := h.PodMTU()
	if mtu := cl.Facts().Record()["pod_mtu"]; want != 0 && mtu != want {
		t.Errorf("pod_mtu %v, want %d", mtu, want)
	}
}
