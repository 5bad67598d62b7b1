package runner

import (
	"context"
	networkingv1 "k8s.io/api/networking/v1"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/result"
)

// fakeCluster answers every command with real tool output recorded under the driver's
// testdata, so the runner is tested end to end without root.
type fakeCluster struct {
	mu       sync.Mutex
	execs    int
	failNext int // number of Exec calls to fail with a tool error
	closed   bool
	cpu      uint64
	pods     map[string]cluster.Pod
}

type fakeProc struct{}

func (fakeProc) Stop() error    { return nil }
func (fakeProc) Output() []byte { return nil }

func newFake() *fakeCluster { return &fakeCluster{pods: map[string]cluster.Pod{}} }

func (f *fakeCluster) Backend() string { return "lab" }
func (f *fakeCluster) Nodes(context.Context) ([]cluster.Node, error) {
	return []cluster.Node{{Name: "node0", IP: "172.30.0.10"}, {Name: "node1", IP: "172.30.0.11"}}, nil
}
func (f *fakeCluster) CreatePod(_ context.Context, s cluster.PodSpec) (cluster.Pod, error) {
	p := cluster.Pod{Name: s.Name, Node: s.Node, IP: "10.244.0.2"}
	f.mu.Lock()
	f.pods[s.Name] = p
	f.mu.Unlock()
	return p, nil
}
func (f *fakeCluster) DeletePod(_ context.Context, n string) error {
	f.mu.Lock()
	delete(f.pods, n)
	f.mu.Unlock()
	return nil
}
func (f *fakeCluster) CreatePods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	var out []cluster.Pod
	for _, s := range specs {
		p, _ := f.CreatePod(ctx, s)
		out = append(out, p)
	}
	return out, nil
}
func (f *fakeCluster) DeletePods(ctx context.Context, names []string) error {
	for _, n := range names {
		_ = f.DeletePod(ctx, n)
	}
	return nil
}
func (f *fakeCluster) CreateService(context.Context, cluster.ServiceSpec) (cluster.Service, error) {
	return cluster.Service{}, cluster.Unsupported("no Services here")
}
func (f *fakeCluster) DeleteService(context.Context, string) error { return nil }
func (f *fakeCluster) CreateServices(context.Context, []cluster.ServiceSpec) ([]cluster.Service, error) {
	return nil, cluster.Unsupported("no Services here")
}
func (f *fakeCluster) DeleteServices(context.Context, []string) error { return nil }
func (f *fakeCluster) CreateNetworkPolicies(context.Context, []networkingv1.NetworkPolicy) error {
	return cluster.Unsupported("no policies here")
}
func (f *fakeCluster) DeleteNetworkPolicies(context.Context, []string) error { return nil }
func (f *fakeCluster) Programmed(context.Context) map[string]float64         { return nil }
func (f *fakeCluster) BarePair(context.Context, string, string) (cluster.Pod, cluster.Pod, error) {
	return cluster.Pod{}, cluster.Pod{}, cluster.Unsupported("no bare pairs here")
}
func (f *fakeCluster) Exec(_ context.Context, _ string, argv []string) (cluster.ExecResult, error) {
	f.mu.Lock()
	f.execs++
	fail := f.failNext > 0
	if fail {
		f.failNext--
	}
	f.mu.Unlock()
	file := "iperf3_tcp.json"
	switch {
	case fail:
		file = "iperf3_refused.json"
	case strings.Contains(strings.Join(argv, " "), "TCP_RR"):
		file = "netperf_tcp_rr.txt"
	}
	b, err := os.ReadFile(filepath.Join("..", "driver", "testdata", file))
	return cluster.ExecResult{Stdout: b}, err
}
func (f *fakeCluster) Start(context.Context, string, []string, cluster.Ready) (cluster.Process, error) {
	return fakeProc{}, nil
}
func (f *fakeCluster) NodeCPU(context.Context, string) (cluster.CPUSample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpu += 100
	return cluster.CPUSample{User: f.cpu, Idle: f.cpu}, nil
}
func (f *fakeCluster) Info() map[string]any { return map[string]any{"pod_mtu": 1500} }
func (f *fakeCluster) Close(context.Context) error {
	f.closed = true
	return nil
}

func spec(scenario, dp, pl, proto string, repeat int) result.CaseSpec {
	c := result.Case{Scenario: scenario, Backend: "lab", Dataplane: dp, Placement: pl, Protocol: proto, Replicas: 1}
	c.ID = c.MakeID()
	return result.CaseSpec{Case: c, Repeat: repeat, Duration: 1, Warmup: 1, CPUs: [2]int{0, 1}, MTU: 1500, Nodes: 2}
}

func TestRunRecordsResumesAndSkips(t *testing.T) {
	dir := t.TempDir()
	fc := newFake()
	fc.failNext = 2 // the warm-up and trial 1 of the first case fail
	cases := []result.CaseSpec{
		spec("p2p", "flannel", "inter", "tcp", 3),
		spec("p2p", "flannel", "intra", "rr", 3),
		spec("baseline", "bare", "intra", "tcp", 3), // BarePair unsupported: skipped
	}
	var built int
	opt := Options{Dir: dir, RunID: "t1", NewCluster: func(context.Context, ClusterKey) (cluster.Cluster, error) {
		built++
		return fc, nil
	}}
	sum, err := Run(context.Background(), cases, opt)
	if err != nil {
		t.Fatal(err)
	}
	if built != 2 {
		t.Errorf("clusters built: %d, want 2 (one per dataplane)", built)
	}
	if !fc.closed {
		t.Error("cluster not closed")
	}
	st := map[string]result.CaseResult{}
	for _, r := range sum.Results {
		st[r.Case.ID] = r
	}
	tcp := st["p2p/flannel/inter/tcp"]
	if tcp.Status != "ok" || tcp.Metrics["throughput_bps"].N != 2 {
		t.Errorf("tcp: %+v", tcp)
	}
	if r := st["p2p/flannel/intra/rr"]; r.Status != "ok" || r.Metrics["transactions_per_s"].N != 3 {
		t.Errorf("rr: %+v", r)
	}
	if r := st["baseline/bare/intra/tcp"]; r.Status != "skipped" || !strings.Contains(r.Reason, "no bare pairs") {
		t.Errorf("bare: %+v", r)
	}
	trials, err := result.LoadTrials(dir)
	if err != nil {
		t.Fatal(err)
	}
	// 2 warm-ups + 6 trials + 1 skip record.
	if len(trials) != 9 {
		t.Fatalf("%d trials recorded", len(trials))
	}
	for _, tr := range trials {
		if tr.Status == "ok" && tr.Raw == "" {
			t.Errorf("trial without raw output: %+v", tr)
		}
		if tr.Status == "ok" && (tr.Conditions["client_cpu"] != float64(0) || tr.Conditions["server_cpu"] != float64(1)) {
			t.Errorf("conditions: %v", tr.Conditions)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.csv")); err != nil {
		t.Error(err)
	}

	// Resume: only the failed trial 1 of the tcp case runs again (plus its warm-up).
	execs := fc.execs
	sum, err = Run(context.Background(), cases, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got := fc.execs - execs; got != 2 {
		t.Errorf("resume ran %d commands, want 2 (warm-up + the failed trial)", got)
	}
	for _, r := range sum.Results {
		if r.Case.ID == "p2p/flannel/inter/tcp" && (r.Status != "ok" || r.Metrics["throughput_bps"].N != 3) {
			t.Errorf("after resume: %+v", r)
		}
	}
	// A third run has nothing left to do and builds no cluster.
	built, execs = 0, fc.execs
	if _, err := Run(context.Background(), cases, opt); err != nil {
		t.Fatal(err)
	}
	if built != 0 || fc.execs != execs {
		t.Errorf("complete run rebuilt %d clusters, ran %d commands", built, fc.execs-execs)
	}
}

func TestRunCancelledRecordsNothingPartial(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, []result.CaseSpec{spec("p2p", "flannel", "inter", "tcp", 2)}, Options{Dir: dir, RunID: "t2",
		NewCluster: func(context.Context, ClusterKey) (cluster.Cluster, error) { return newFake(), nil }})
	if err == nil {
		t.Fatal("cancelled run returned no error")
	}
	trials, _ := result.LoadTrials(dir)
	if len(trials) != 0 {
		t.Errorf("cancelled run recorded %d trials", len(trials))
	}
}

func TestPlanRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cases := []result.CaseSpec{spec("p2p", "calico", "inter", "crr", 4)}
	if err := SavePlan(dir, "r", cases); err != nil {
		t.Fatal(err)
	}
	id, got, err := LoadPlan(dir)
	if err != nil || id != "r" || len(got) != 1 || got[0] != cases[0] {
		t.Fatalf("%v %q %+v", err, id, got)
	}
	if _, _, err := LoadPlan(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a cnibench run directory") {
		t.Errorf("missing plan: %v", err)
	}
}
