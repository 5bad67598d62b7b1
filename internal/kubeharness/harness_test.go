package kubeharness

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/image"
	"github.com/cnibench/cnibench/internal/kube"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

// binDir is where scripts/kube-build.sh caches the Kubernetes binaries.
func binDir() string {
	if d := os.Getenv("CNIBENCH_KUBE_BIN"); d != "" {
		return d
	}
	return "/var/cache/cnibench/kube-v1.34.10/bin"
}

// UpForTest brings a cluster up for a test and registers its teardown, which also checks that
// nothing is left behind.
func upForTest(t *testing.T, mode string) *Harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(binDir(), "kubelet")); err != nil {
		t.Skipf("Kubernetes binaries not built (scripts/kube-build.sh): %v", err)
	}
	prefix := fmt.Sprintf("cnbtk%03d", rand.Intn(1000))
	img := filepath.Join(t.TempDir(), "tools.tar")
	if _, err := image.Build(img, image.Options{}); err != nil {
		t.Fatalf("tools image: %v", err)
	}
	before := hostState(t)
	h, err := Up(context.Background(), Config{Prefix: prefix, Bin: binDir(), ProxyMode: mode, Image: img, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
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
	return h
}

// hostState summarises what the harness must leave as it found it: global sysctls, host
// paths, mounts and cgroups with the test prefix.
func hostState(t *testing.T) string {
	var b strings.Builder
	for _, s := range hostSysctls {
		v, _ := os.ReadFile("/proc/sys/" + s)
		fmt.Fprintf(&b, "%s=%s ", s, strings.TrimSpace(string(v)))
	}
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		fmt.Fprintf(&b, "%s:%v ", p, err == nil)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	fmt.Fprintf(&b, "kube-mounts:%d ", strings.Count(string(mi), "cnibench-kube"))
	for _, h := range cgroupHierarchies() {
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

func TestClusterUpDown(t *testing.T) {
	h := upForTest(t, "iptables")
	if h.Kubeconfig == "" {
		t.Fatal("no kubeconfig")
	}
}

// TestKubeBackendOnRealCluster runs the p2p and node2node workloads through the kube backend
// (client-go, pods pinned to nodes, exec) on the real two-node cluster.
func TestKubeBackendOnRealCluster(t *testing.T) {
	h := upForTest(t, "iptables")
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
			m, err := f.Trial(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if m.Metrics[tc.metric] <= 0 {
				t.Errorf("%s = %v: %v", tc.metric, m.Metrics[tc.metric], m.Metrics)
			}
			t.Logf("%s %s %s: %s=%.4g", tc.sc, tc.pl, tc.proto, tc.metric, m.Metrics[tc.metric])
		})
	}
}
