package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
)

func spec(scenario, dp, pl, proto string, repeat int) result.CaseSpec {
	c := result.Case{Scenario: scenario, Backend: "lab", Dataplane: dp, Placement: pl, Protocol: proto, Replicas: 1}
	c.ID = c.MakeID()
	return result.CaseSpec{Case: c, Repeat: repeat, Duration: 1, Warmup: 1, CPUs: [2]int{0, 1}, MTU: 1500, Nodes: 2}
}

func TestRunRecordsResumesAndSkips(t *testing.T) {
	dir := t.TempDir()
	// Answers every command with real tool output recorded under the driver's testdata, so
	// the runner is tested end to end without root.
	fc := clustertest.New(clustertest.Config{Fail: clustertest.Failures{ToolRuns: 2}}) // the warm-up and trial 1 of the first case fail
	cases := []result.CaseSpec{
		spec("p2p", "flannel", "inter", "tcp", 3),
		spec("p2p", "flannel", "intra", "rr", 3),
		spec("baseline", "bare", "intra", "tcp", 3), // no bare pairs on the fake: skipped
	}
	var built int
	opt := Options{Dir: dir, RunID: "t1", NewCluster: func(context.Context, cluster.Key) (cluster.Cluster, error) {
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
	if fc.Closed() == 0 {
		t.Error("cluster not closed")
	}
	fc.AssertEmpty(t) // every case's fixture deleted what it created
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
	if r := st["baseline/bare/intra/tcp"]; r.Status != "skipped" || !strings.Contains(r.Reason, "which backend fake cannot make") {
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
	execs := len(fc.Execs())
	sum, err = Run(context.Background(), cases, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fc.Execs()) - execs; got != 2 {
		t.Errorf("resume ran %d commands, want 2 (warm-up + the failed trial)", got)
	}
	for _, r := range sum.Results {
		if r.Case.ID == "p2p/flannel/inter/tcp" && (r.Status != "ok" || r.Metrics["throughput_bps"].N != 3) {
			t.Errorf("after resume: %+v", r)
		}
	}
	// A third run has nothing left to do and builds no cluster.
	built, execs = 0, len(fc.Execs())
	if _, err := Run(context.Background(), cases, opt); err != nil {
		t.Fatal(err)
	}
	if built != 0 || len(fc.Execs()) != execs {
		t.Errorf("complete run rebuilt %d clusters, ran %d commands", built, len(fc.Execs())-execs)
	}
}

func TestRunCancelledRecordsNothingPartial(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, []result.CaseSpec{spec("p2p", "flannel", "inter", "tcp", 2)}, Options{Dir: dir, RunID: "t2",
		NewCluster: func(context.Context, cluster.Key) (cluster.Cluster, error) {
			return clustertest.New(clustertest.Config{}), nil
		}})
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

// The environment records each cluster's facts under "dataplanes", keyed by the case's
// variant, as Facts.Record gives them.
func TestRunRecordsClusterFacts(t *testing.T) {
	dir := t.TempDir()
	facts := cluster.Facts{Backend: "lab", Dataplane: "flannel", PodMTU: 1450, Details: map[string]any{"overlay": "vxlan"}}
	_, err := Run(context.Background(), []result.CaseSpec{spec("p2p", "flannel", "intra", "rr", 1)}, Options{Dir: dir, RunID: "t3",
		NewCluster: func(context.Context, cluster.Key) (cluster.Cluster, error) {
			return clustertest.New(clustertest.Config{Facts: facts}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Environment struct {
			Dataplanes map[string]map[string]any `json:"dataplanes"`
		} `json:"environment"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"backend": "lab", "dataplane": "flannel", "pod_mtu": float64(1450), "overlay": "vxlan"}
	if got := sum.Environment.Dataplanes["flannel"]; !reflect.DeepEqual(got, want) {
		t.Errorf("environment dataplanes[flannel] = %v, want %v", got, want)
	}
}

// done counts measured trials only: warm-ups and failed trials are not done (resume runs them
// again), a trial recorded twice counts once, and a skipped case is marked as a whole.
func TestDone(t *testing.T) {
	trial := func(id string, n int, status string) result.Trial {
		return result.Trial{Case: result.Case{ID: id}, Trial: n, Status: status, Metrics: map[string]float64{"x": 1}}
	}
	warm := trial("a", 0, "ok")
	warm.Warmup = true
	failed := trial("b", 2, "failed")
	failed.Error = "timeout"
	legacyFailed := trial("b", 3, "") // written before Status existed: an error means failed
	legacyFailed.Error = "timeout"
	trials := []result.Trial{warm, trial("a", 1, "ok"), trial("a", 2, "ok"), trial("a", 2, "ok"), failed, legacyFailed,
		trial("b", 1, ""), trial("c", 0, "skipped")}
	got := done(trials)
	want := map[string]map[int]bool{
		"a": {1: true, 2: true},
		"b": {1: true},
		"c": {skippedTrial: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("done = %v, want %v", got, want)
	}
	if got := done(nil); len(got) != 0 {
		t.Errorf("done(nil) = %v", got)
	}
}
