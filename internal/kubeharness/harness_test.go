package kubeharness

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
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
	if os.Getenv("CNIBENCH_KUBE_E2E") != "1" {
		t.Skip("the real-cluster test runs with `make e2e` (CNIBENCH_KUBE_E2E=1): it builds Kubernetes from Go modules")
	}
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

// TestRealCluster brings the two-node cluster up (kube-proxy in iptables mode), runs the
// workloads through the kube backend directly and then the whole CLI against it, and tears it
// down to nothing (checked in upForTest's cleanup).
func TestRealCluster(t *testing.T) {
	h := upForTest(t, "iptables")
	t.Run("backend", func(t *testing.T) { backendOnCluster(t, h) })
	t.Run("cli", func(t *testing.T) { cliOnCluster(t, h) })
}

// cliOnCluster runs `cnibench run --backend kube` with the demo plan's cases on the cluster.
func cliOnCluster(t *testing.T, h *Harness) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cnibench")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/cnibench").CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	runDir := filepath.Join(dir, "run")
	cmd := exec.Command(bin, "run", "--backend", "kube", "--kubeconfig", h.Kubeconfig, "--plan", "../../plans/quick.yaml",
		"--repeat", "2", "--duration", "1", "--warmup", "0", "--out", runDir)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("cnibench run --backend kube: %v", err)
	}
	sum, err := result.ReadSummary(runDir)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, r := range sum.Results {
		status[r.Case.ID] = r.Status
		if r.Case.Backend != "kube" {
			t.Errorf("%s: backend %q", r.Case.ID, r.Case.Backend)
		}
	}
	for _, pl := range []string{"intra", "inter"} {
		for _, proto := range []string{"tcp", "udp", "rr", "crr"} {
			for _, id := range []string{"p2p/cluster/" + pl + "/" + proto, "baseline/node2node/" + pl + "/" + proto} {
				if status[id] != "ok" {
					t.Errorf("%s: status %q", id, status[id])
				}
			}
		}
	}
	if status["baseline/bare/intra/tcp"] != "skipped" {
		t.Errorf("bare baseline on kube: %q, want skipped", status["baseline/bare/intra/tcp"])
	}
	// The run deleted its namespaces; kube clean finds nothing left.
	out, err = exec.Command(bin, "kube", "clean", "--kubeconfig", h.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0 namespaces deleted") {
		t.Errorf("kube clean after a run: %v: %s", err, out)
	}
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
