package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

// synthetic is a scenario whose measurements come from the test's model of the machine, so
// the runner's scheduling, disturbed trials, stopping and pairing are tested without root in
// milliseconds. It runs on any cluster (it only asks for the nodes).
type synthetic struct{}

func (synthetic) Name() string { return "synthetic" }
func (synthetic) Info() scenario.Info {
	return scenario.Info{Summary: "test model", Placements: []string{"intra", "inter"}, Protocols: []string{"tcp", "crr"},
		Exclusive: func(c result.Case) bool { return c.Placement == "intra" }} // as if intra took the node's ports
}

func (synthetic) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt scenario.Options) (scenario.Fixture, error) {
	w := current()
	w.mu.Lock()
	w.setting++
	w.maxSetting = max(w.maxSetting, w.setting)
	gate := w.setupGate
	w.mu.Unlock()
	if gate != nil {
		gate.Done()
		all := make(chan struct{})
		go func() { gate.Wait(); close(all) }()
		select { // every fixture of the block in Setup at once (else maxSetting says so)
		case <-all:
		case <-time.After(5 * time.Second):
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setting--
	w.names[c.ID] = opt.Name
	if err := w.setupErr[c.ID]; err != nil {
		return nil, err
	}
	if _, err := cl.Nodes(ctx); err != nil {
		return nil, err
	}
	w.fixtures++
	return &synthFixture{w: w, c: c}, nil
}

func init() { scenario.Register(synthetic{}) }

// model is the machine the synthetic scenario measures on: a clock of trials (every trial
// of every case ticks it), each case's true value, its own noise, and the machine's
// disturbance: bursts of steal that slow down whatever runs in them.
type model struct {
	mu       sync.Mutex
	rng      *rand.Rand
	clock    int                     // trials run so far, all cases
	order    []string                // case id of each trial, in the order they ran
	truth    map[string]float64      // case id -> true value of its primary metric
	noise    float64                 // relative noise of one trial
	noiseOf  map[string]float64      // a case's own noise instead
	burst    func(clock int) float64 // steal (%) at this tick; slows the trial by as much
	special  map[int]map[string]float64
	setupErr map[string]error
	names    map[string]string // case id -> fixture name given by the runner
	fixtures int
	closed   int
	// closing and maxClosing count the fixtures in Close at once; closeGate, if set, holds
	// each Close until all it counts have come.
	closing, maxClosing int
	closeGate           *sync.WaitGroup
	// setting and maxSetting count the fixtures in Setup at once; setupGate, if set, holds
	// each Setup until all it counts have come.
	setting, maxSetting int
	setupGate           *sync.WaitGroup
}

var (
	worldMu sync.Mutex
	world   *model
)

func current() *model {
	worldMu.Lock()
	defer worldMu.Unlock()
	return world
}

func newModel(t *testing.T, seed uint64) *model {
	m := &model{rng: rand.New(rand.NewPCG(seed, 99)), truth: map[string]float64{}, special: map[int]map[string]float64{},
		setupErr: map[string]error{}, names: map[string]string{}, burst: func(int) float64 { return 0 }}
	worldMu.Lock()
	world = m
	worldMu.Unlock()
	t.Cleanup(func() {
		worldMu.Lock()
		world = nil
		worldMu.Unlock()
	})
	return m
}

type synthFixture struct {
	w *model
	c result.Case
}

func (f *synthFixture) Trial(ctx context.Context, d int) (scenario.Measurement, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock++
	w.order = append(w.order, f.c.ID)
	steal := w.burst(w.clock)
	v := w.truth[f.c.ID]
	if v == 0 {
		v = 1000
	}
	noise := w.noise
	if n, ok := w.noiseOf[f.c.ID]; ok {
		noise = n
	}
	v *= (1 + noise*w.rng.NormFloat64()) * (1 - steal/100)
	m := map[string]float64{f.c.Primary(): v, "cpu_node_steal_pct": steal}
	for k, x := range w.special[w.clock] {
		m[k] = x
	}
	return scenario.Measurement{Metrics: m, Raw: []byte(fmt.Sprintf("tick %d\n", w.clock))}, nil
}

func (f *synthFixture) Close(context.Context) error {
	f.w.mu.Lock()
	f.w.closed++
	f.w.closing++
	f.w.maxClosing = max(f.w.maxClosing, f.w.closing)
	gate := f.w.closeGate
	f.w.mu.Unlock()
	if gate != nil {
		gate.Done()
		all := make(chan struct{})
		go func() { gate.Wait(); close(all) }()
		select { // every fixture of the block in Close at once (else maxClosing says so)
		case <-all:
		case <-time.After(5 * time.Second):
		}
	} else {
		time.Sleep(10 * time.Millisecond) // room for an overlap, were there one
	}
	f.w.mu.Lock()
	f.w.closing--
	f.w.mu.Unlock()
	return nil
}

func synth(id string, proto string, repeat int, mod func(*result.Case)) result.CaseSpec {
	c := result.Case{Scenario: "synthetic", Backend: "lab", Dataplane: id, Placement: "inter", Protocol: proto, Replicas: 1, MTU: 1500, Nodes: 2}
	if mod != nil {
		mod(&c)
	}
	c.ID = c.MakeID()
	return result.CaseSpec{Case: c, Repeat: repeat, Duration: 1, Warmup: 0, CPUs: [2]int{0, 1}}
}

// clusters counts the clusters a run builds and closes.
type clusters struct {
	mu            sync.Mutex
	built, closed int
	keys          []cluster.Key
	fail          func(k cluster.Key) error
}

type countingCluster struct {
	*clustertest.Fake
	c *clusters
}

func (cc countingCluster) Close(ctx context.Context) error {
	cc.c.mu.Lock()
	cc.c.closed++
	cc.c.mu.Unlock()
	return cc.Fake.Close(ctx)
}

func (c *clusters) new(ctx context.Context, k cluster.Key) (cluster.Cluster, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		if err := c.fail(k); err != nil {
			return nil, err
		}
	}
	c.built++
	c.keys = append(c.keys, k)
	return countingCluster{clustertest.New(clustertest.Config{}), c}, nil
}

func perCase() cluster.Standing {
	return cluster.Standing{PerCase: true, MaxClusters: 64, MaxLoad: 60000}
}

func runOpts(dir string, cl *clusters, st cluster.Standing, set Settings) Options {
	return Options{Dir: dir, RunID: filepath.Base(dir), NewCluster: cl.new, Standing: st, Settings: set}
}

func byID(s result.Summary) map[string]result.CaseResult {
	out := map[string]result.CaseResult{}
	for _, r := range s.Results {
		out[r.Case.ID] = r
	}
	return out
}

func records(t *testing.T, dir string) []result.Trial {
	t.Helper()
	trials, err := result.LoadTrials(dir)
	if err != nil {
		t.Fatal(err)
	}
	return trials
}

// Trial k of every case runs before trial k+1 of any, in an order shuffled per round by the
// seed (the same seed gives the same order; another seed another); every case has its own
// cluster (the lab's standing), all closed at the end.
func TestRoundsInterleaveAndShuffle(t *testing.T) {
	var cases []result.CaseSpec
	for _, dp := range []string{"a", "b", "c", "d", "e", "f"} {
		cases = append(cases, synth(dp, "tcp", 4, nil))
	}
	orderFor := func(seed int64) []string {
		w := newModel(t, 1)
		cl := &clusters{}
		if _, err := Run(context.Background(), cases, runOpts(t.TempDir(), cl, perCase(), Settings{Seed: seed})); err != nil {
			t.Fatal(err)
		}
		if cl.built != 6 || cl.closed != 6 || w.fixtures != 6 || w.closed != 6 {
			t.Errorf("clusters built %d closed %d, fixtures %d closed %d: want one each per case", cl.built, cl.closed, w.fixtures, w.closed)
		}
		for round := 0; round < 4; round++ {
			got := slices.Clone(w.order[6*round : 6*round+6])
			slices.Sort(got)
			if want := []string{"synthetic/a/inter/tcp", "synthetic/b/inter/tcp", "synthetic/c/inter/tcp", "synthetic/d/inter/tcp", "synthetic/e/inter/tcp", "synthetic/f/inter/tcp"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d ran %v: want every case once", round+1, got)
			}
		}
		return w.order
	}
	a, b, c := orderFor(7), orderFor(7), orderFor(8)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the same seed gave two orders:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Errorf("seeds 7 and 8 gave the same order %v", a)
	}
	if reflect.DeepEqual(a[:6], a[6:12]) && reflect.DeepEqual(a[6:12], a[12:18]) {
		t.Errorf("rounds not shuffled: %v", a)
	}
}

// --order sequential keeps the old order: all trials of a case back to back, in plan order.
func TestSequentialOrder(t *testing.T) {
	w := newModel(t, 1)
	cases := []result.CaseSpec{synth("a", "tcp", 3, nil), synth("b", "tcp", 3, nil)}
	if _, err := Run(context.Background(), cases, runOpts(t.TempDir(), &clusters{}, perCase(), Settings{Order: OrderSequential})); err != nil {
		t.Fatal(err)
	}
	a, b := cases[0].Case.ID, cases[1].Case.ID
	if want := []string{a, a, a, b, b, b}; !reflect.DeepEqual(w.order, want) {
		t.Errorf("order %v, want %v", w.order, want)
	}
}

// On a backend whose clusters share one data plane, the cases that load nothing stand
// together in one cluster per key with fixtures of their own names; a loaded case, and one
// its scenario says is exclusive, has the cluster to itself, in a block of its own, and the
// cluster of its key is not rebuilt.
func TestSharedStanding(t *testing.T) {
	w := newModel(t, 1)
	cl := &clusters{}
	cases := []result.CaseSpec{
		synth("x", "tcp", 2, nil),
		synth("x", "crr", 2, nil),
		synth("x", "tcp", 2, func(c *result.Case) { c.Services = 10 }),
		synth("x", "tcp", 2, func(c *result.Case) { c.Placement = "intra" }),
	}
	for i := range cases {
		cases[i].Case.Dataplane = "cluster"
		cases[i].Case.ID = cases[i].Case.MakeID()
	}
	sum, err := Run(context.Background(), cases, runOpts(t.TempDir(), cl, cluster.Standing{}, Settings{Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if cl.built != 1 || cl.closed != 1 {
		t.Errorf("clusters built %d, closed %d: want one, kept across blocks", cl.built, cl.closed)
	}
	if w.names[cases[0].Case.ID] == w.names[cases[1].Case.ID] || w.names[cases[0].Case.ID] == "" || w.names[cases[2].Case.ID] != "" || w.names[cases[3].Case.ID] != "" {
		t.Errorf("fixture names %v: the two light cases need names of their own, the loaded case none", w.names)
	}
	loaded, excl := cases[2].Case.ID, cases[3].Case.ID
	if i := slices.Index(w.order, loaded); i != 4 || w.order[5] != loaded || w.order[6] != excl || w.order[7] != excl {
		t.Errorf("order %v: the loaded and the exclusive case run alone after the light ones", w.order)
	}
	for _, r := range sum.Results {
		if r.Status != "ok" {
			t.Errorf("%s: %s %s", r.Case.ID, r.Status, r.Reason)
		}
	}
}

// A trial whose steal exceeds --max-steal is recorded as disturbed, left out and run again at
// the end of its round; past --max-reruns the trial is lost and the summary says so.
func TestDisturbedTrialsRerun(t *testing.T) {
	w := newModel(t, 1)
	w.burst = func(clock int) float64 {
		switch clock {
		case 1, 3: // the first trial of round 1, then its re-run at the end of the round
			return 30
		}
		return 1
	}
	dir := t.TempDir()
	cases := []result.CaseSpec{synth("a", "tcp", 2, nil), synth("b", "tcp", 2, nil)}
	sum, err := Run(context.Background(), cases, runOpts(dir, &clusters{}, perCase(), Settings{Seed: 3, MaxReruns: 1}))
	if err != nil {
		t.Fatal(err)
	}
	first := w.order[0]
	if w.order[2] != first {
		t.Errorf("order %v: the disturbed trial must run again at the end of round 1", w.order)
	}
	var dist []result.Trial
	for _, tr := range records(t, dir) {
		if tr.Status == "disturbed" {
			dist = append(dist, tr)
		}
	}
	if len(dist) != 2 || dist[0].Case.ID != first || dist[0].Trial != 1 || !strings.Contains(dist[0].Error, "30.0%") || dist[0].Raw == "" {
		t.Fatalf("disturbed records %+v", dist)
	}
	r := byID(sum)[first]
	if r.Disturbed != 2 || r.Lost != 1 || r.Metrics["throughput_bps"].N != 1 {
		t.Errorf("%s: disturbed %d lost %d n %d, want 2, 1 (bound 1 re-run), 1 trial", first, r.Disturbed, r.Lost, r.Metrics["throughput_bps"].N)
	}
	if st := r.Metrics["cpu_node_steal_pct"]; st.Max > 5 {
		t.Errorf("a disturbed trial reached the statistics: steal max %g", st.Max)
	}
	// With the check off (negative --max-steal) nothing is disturbed.
	w = newModel(t, 1)
	w.burst = func(int) float64 { return 30 }
	sum, err = Run(context.Background(), cases, runOpts(t.TempDir(), &clusters{}, perCase(), Settings{MaxStealPct: -1}))
	if err != nil {
		t.Fatal(err)
	}
	if r := byID(sum)[first]; r.Disturbed != 0 || r.Metrics["throughput_bps"].N != 2 {
		t.Errorf("check off: %+v", r)
	}
}

// A value no metric can have fails that trial with the reason (it used to abort the whole run
// at the store); a host-wide share above 100 % is left out with a note.
func TestNonFiniteFailsTrialAndNotes(t *testing.T) {
	w := newModel(t, 1)
	w.special[2] = map[string]float64{"latency_p99_us": math.NaN()}
	w.special[3] = map[string]float64{"cpu_server_host_pct": 512, "cpu_client_host_pct": 40}
	dir := t.TempDir()
	sum, err := Run(context.Background(), []result.CaseSpec{synth("a", "crr", 3, nil)}, runOpts(dir, &clusters{}, perCase(), Settings{}))
	if err != nil {
		t.Fatalf("run aborted: %v", err)
	}
	r := sum.Results[0]
	if r.Status != "ok" || !strings.Contains(r.Reason, "1 of 3 trials failed") || !strings.Contains(r.Reason, "latency_p99_us = NaN") {
		t.Errorf("status %s, reason %q", r.Status, r.Reason)
	}
	if _, ok := r.Metrics["cpu_server_host_pct"]; ok || r.Metrics["cpu_client_host_pct"].N != 1 {
		t.Errorf("host pct: %+v", r.Metrics)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "cpu_server_host_pct = 512 left out") {
		t.Errorf("notes %q", r.Notes)
	}
}

// A negative duration (any scenario's: a time in s, ms or us) is a measurement error: that
// trial fails with the figure named; a rate per second may be anything it is.
func TestNegativeDurationFailsTrial(t *testing.T) {
	w := newModel(t, 1)
	w.special[2] = map[string]float64{"add_data_p50_ms": -6.6}
	w.special[3] = map[string]float64{"probe_clock_offset_ms": -250}
	sum, err := Run(context.Background(), []result.CaseSpec{synth("a", "crr", 3, nil)}, runOpts(t.TempDir(), &clusters{}, perCase(), Settings{}))
	if err != nil {
		t.Fatalf("run aborted: %v", err)
	}
	r := sum.Results[0]
	if r.Status != "ok" || !strings.Contains(r.Reason, "1 of 3 trials failed") || !strings.Contains(r.Reason, "add_data_p50_ms = -6.6, a negative duration") {
		t.Errorf("status %s, reason %q", r.Status, r.Reason)
	}
	if m := r.Metrics["probe_clock_offset_ms"]; m.N != 1 || m.Min != -250 {
		t.Errorf("a clock offset (signed, not a duration) was not kept: %+v", m)
	}
}

// A case whose cluster failed to build is recorded at the first trial it stands for; a
// resume that measures every trial leaves no stale failure behind. A case the host cannot
// run is skipped as a whole and not retried.
func TestResumeReplacesSetupFailure(t *testing.T) {
	newModel(t, 1)
	dir := t.TempDir()
	cases := []result.CaseSpec{synth("a", "tcp", 2, nil), synth("b", "tcp", 2, nil), synth("c", "tcp", 2, nil)}
	cl := &clusters{fail: func(k cluster.Key) error {
		switch k.Dataplane {
		case "b":
			return errors.New("no route to host")
		case "c":
			return cluster.Unsupported("c needs a kernel feature this host lacks")
		}
		return nil
	}}
	sum, err := Run(context.Background(), cases, runOpts(dir, cl, perCase(), Settings{Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if r := byID(sum)["synthetic/b/inter/tcp"]; r.Status != "failed" || r.Reason != "no route to host" {
		t.Errorf("b: %+v", r)
	}
	for _, tr := range records(t, dir) {
		if tr.Trial == 0 && !tr.Warmup {
			t.Errorf("a failure recorded as trial 0 survives any resume: %+v", tr)
		}
	}
	cl.fail = func(k cluster.Key) error {
		if k.Dataplane == "c" {
			t.Error("a skipped case was retried")
		}
		return nil
	}
	sum, err = Run(context.Background(), cases, runOpts(dir, cl, perCase(), Settings{Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	res := byID(sum)
	if r := res["synthetic/b/inter/tcp"]; r.Status != "ok" || r.Reason != "" || r.Metrics["throughput_bps"].N != 2 {
		t.Errorf("b after resume: status %s, reason %q, n %d", r.Status, r.Reason, r.Metrics["throughput_bps"].N)
	}
	if r := res["synthetic/c/inter/tcp"]; r.Status != "skipped" || !strings.Contains(r.Reason, "kernel feature") {
		t.Errorf("c: %+v", r)
	}
	if r := res["synthetic/a/inter/tcp"]; r.Metrics["throughput_bps"].N != 2 {
		t.Errorf("a measured again: %+v", r.Metrics["throughput_bps"])
	}
}

// An interrupted run records nothing partial; its resume goes on in rounds with the recorded
// settings and ends with every trial.
func TestInterruptAndResume(t *testing.T) {
	w := newModel(t, 1)
	dir := t.TempDir()
	cases := []result.CaseSpec{synth("a", "tcp", 3, nil), synth("b", "tcp", 3, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	w.burst = func(clock int) float64 {
		if clock == 3 {
			cancel() // during the first trial of round 2
		}
		return 0
	}
	if err := SavePlan(dir, "r", cases, Settings{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := Run(ctx, cases, runOpts(dir, &clusters{}, perCase(), Settings{Seed: 5}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	if n := len(records(t, dir)); n != 2 {
		t.Errorf("%d trials recorded, want the 2 of round 1 (the interrupted one is not)", n)
	}
	if _, err := os.Stat(filepath.Join(dir, result.SummaryJSONFile)); err == nil {
		t.Error("an interrupted run wrote a summary")
	}
	_, got, set, err := LoadPlan(dir)
	if err != nil || set.Seed != 5 || set.Order != OrderRounds || len(got) != 2 {
		t.Fatalf("plan: %v %+v %d cases", err, set, len(got))
	}
	w.burst = func(int) float64 { return 0 }
	sum, err := Run(context.Background(), got, runOpts(dir, &clusters{}, perCase(), set))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sum.Results {
		if r.Metrics["throughput_bps"].N != 3 {
			t.Errorf("%s: %d trials after resume", r.Case.ID, r.Metrics["throughput_bps"].N)
		}
	}
}

// With a CI target, rounds are added until each case's interval is within the target; a case
// too noisy to get there stops at --max-repeat and says so.
func TestCITargetAddsRounds(t *testing.T) {
	w := newModel(t, 11)
	quiet, noisy := synth("quiet", "tcp", 4, nil), synth("noisy", "tcp", 4, nil)
	w.noiseOf = map[string]float64{quiet.Case.ID: 0.03, noisy.Case.ID: 0.4}
	sum, err := Run(context.Background(), []result.CaseSpec{quiet, noisy}, runOpts(t.TempDir(), &clusters{}, perCase(), Settings{Seed: 2, CITargetPct: 3, MaxRepeat: 12}))
	if err != nil {
		t.Fatal(err)
	}
	r := byID(sum)
	q, n := r[quiet.Case.ID], r[noisy.Case.ID]
	if q.Convergence == nil || !q.Convergence.Converged || q.Convergence.HalfWidthPct > 3 {
		t.Errorf("quiet: %+v", q.Convergence)
	}
	if k := q.Metrics["throughput_bps"].N; k <= 4 || k >= 12 {
		t.Errorf("quiet: %d trials, want more than the 4 of --repeat and fewer than 12", k)
	}
	if n.Convergence == nil || n.Convergence.Converged || n.Metrics["throughput_bps"].N != 12 || !strings.Contains(n.Convergence.Reason, "--max-repeat 12") {
		t.Errorf("noisy: %+v after %d trials", n.Convergence, n.Metrics["throughput_bps"].N)
	}
	// Without a target the cases stop at --repeat and say nothing of convergence.
	newModel(t, 11)
	sum, err = Run(context.Background(), []result.CaseSpec{quiet}, runOpts(t.TempDir(), &clusters{}, perCase(), Settings{}))
	if err != nil {
		t.Fatal(err)
	}
	if r := sum.Results[0]; r.Convergence != nil || r.Metrics["throughput_bps"].N != 4 {
		t.Errorf("no target: %+v", r)
	}
}

// stealBursts models this machine's hypervisor: bursts of about ten trials during which it
// takes 5-40 % of the CPU, slowing whatever runs by as much.
func stealBursts(rng *rand.Rand) func(int) float64 {
	left, steal := 0, 0.0
	return func(int) float64 {
		if left == 0 && rng.Float64() < 1.0/25 {
			left, steal = 5+rng.IntN(11), 5+35*rng.Float64()
		}
		if left == 0 {
			return 0.5 * rng.Float64()
		}
		left--
		return steal
	}
}

// On that machine an A/A pair (two copies of one case) must read "no difference": with trials
// in rounds it does about 95 % of the time, with all trials of a case back to back (the old
// order) a burst lands on one copy only and the pair differs far more often; re-running the
// disturbed trials keeps rounds at the nominal rate.
func TestAAPairOnStealBursts(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	const runs = 120
	differ := func(order string, maxSteal float64) float64 {
		n := 0
		for i := 0; i < runs; i++ {
			w := newModel(t, uint64(i+1))
			w.noise = 0.02
			w.burst = stealBursts(rand.New(rand.NewPCG(uint64(i), 7)))
			cases := []result.CaseSpec{synth("a", "crr", 12, func(c *result.Case) { c.Copy = 1 }), synth("a", "crr", 12, func(c *result.Case) { c.Copy = 2 })}
			sum, err := Run(context.Background(), cases, runOpts(t.TempDir(), &clusters{}, perCase(), Settings{Order: order, Seed: int64(i), MaxStealPct: maxSteal}))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range sum.Comparisons {
				if c.Kind == "copy" && c.Differs() {
					n++
				}
			}
		}
		return float64(n) / runs
	}
	rounds, roundsRerun, seq := differ(OrderRounds, -1), differ(OrderRounds, 5), differ(OrderSequential, -1)
	t.Logf("A/A pairs that differ: rounds %.3f, rounds with re-runs %.3f, sequential %.3f", rounds, roundsRerun, seq)
	if rounds > 0.08 || roundsRerun > 0.08 {
		t.Errorf("rounds: %.3f (re-runs %.3f) of A/A pairs differ, want about 0.05", rounds, roundsRerun)
	}
	if seq < 2*max(rounds, 0.05) {
		t.Errorf("sequential: %.3f of A/A pairs differ: the model should show what rounds are for", seq)
	}
}

// More cases than may stand at once run in blocks, each with its own rounds; the clusters of
// a block are closed before the next block builds its own.
func TestBlocksWithinTheStandingBudget(t *testing.T) {
	w := newModel(t, 1)
	cl := &clusters{}
	cases := []result.CaseSpec{synth("a", "tcp", 2, nil), synth("b", "tcp", 2, nil), synth("c", "tcp", 2, nil),
		synth("d", "tcp", 2, func(c *result.Case) { c.Services = 500 })}
	st := cluster.Standing{PerCase: true, MaxClusters: 2, MaxLoad: 400}
	if _, err := Run(context.Background(), cases, runOpts(t.TempDir(), cl, st, Settings{Seed: 4})); err != nil {
		t.Fatal(err)
	}
	block := func(from, to int) []string {
		got := slices.Clone(w.order[from:to])
		slices.Sort(got)
		return slices.Compact(got)
	}
	if b := block(0, 4); !reflect.DeepEqual(b, []string{cases[0].Case.ID, cases[1].Case.ID}) {
		t.Errorf("block 1 ran %v", w.order[0:4])
	}
	if b := block(4, 6); !reflect.DeepEqual(b, []string{cases[2].Case.ID}) {
		t.Errorf("block 2 ran %v (c: d's load 500 is over the budget with it)", w.order[4:6])
	}
	if b := block(6, 8); !reflect.DeepEqual(b, []string{cases[3].Case.ID}) {
		t.Errorf("block 3 ran %v", w.order[6:8])
	}
	if cl.built != 4 || cl.closed != 4 {
		t.Errorf("built %d closed %d", cl.built, cl.closed)
	}
}

// The environment records each cluster's facts under "dataplanes", keyed by the case's
// variant, as Facts.Record gives them when the cluster closes (a backend may learn facts while
// it runs), and the run's settings under "runner".
func TestRunRecordsClusterFacts(t *testing.T) {
	newModel(t, 1)
	dir := t.TempDir()
	facts := cluster.Facts{Backend: "lab", Dataplane: "flannel", PodMTU: 1450, Details: map[string]any{"overlay": "vxlan"}}
	_, err := Run(context.Background(), []result.CaseSpec{synth("flannel", "tcp", 1, nil)}, Options{Dir: dir, RunID: "t3", Standing: perCase(),
		Settings: Settings{Seed: 9}, NewCluster: func(context.Context, cluster.Key) (cluster.Cluster, error) {
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
			Runner     Settings                  `json:"runner"`
		} `json:"environment"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"backend": "lab", "dataplane": "flannel", "pod_mtu": float64(1450), "overlay": "vxlan"}
	if got := sum.Environment.Dataplanes["flannel"]; !reflect.DeepEqual(got, want) {
		t.Errorf("environment dataplanes[flannel] = %v, want %v", got, want)
	}
	if r := sum.Environment.Runner; r.Seed != 9 || r.Order != OrderRounds || r.MaxStealPct != DefaultMaxSteal {
		t.Errorf("runner settings %+v", r)
	}
}

// done counts measured trials only: warm-ups, failed and disturbed trials are not done (resume
// runs them again), a trial recorded twice counts once, and a skipped case is marked as a
// whole.
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
		trial("b", 1, ""), trial("b", 4, "disturbed"), trial("c", 1, "skipped")}
	got := done(trials)
	want := map[string]map[int]bool{
		"a": {1: true, 2: true},
		"b": {1: true},
		"c": {skippedTrial: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("done = %v, want %v", got, want)
	}
}

// plan.json written before settings existed resumes in the order it ran with.
func TestLoadPlanWithoutSettings(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, PlanFile), []byte(`{"run":"old","cases":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	id, _, set, err := LoadPlan(dir)
	if err != nil || id != "old" || set.Order != OrderSequential || set.MaxStealPct != DefaultMaxSteal {
		t.Errorf("LoadPlan = %q %+v %v", id, set, err)
	}
	if _, _, _, err := LoadPlan(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a cnibench run directory") {
		t.Errorf("missing plan: %v", err)
	}
}

// restingCluster is a cluster whose data plane rests between trials (cluster.Resting): it
// writes its wakes and rests into the model's order beside the trials.
type restingCluster struct {
	*clustertest.Fake
	dp string
}

func (r restingCluster) Wake() error { return r.note("wake") }
func (r restingCluster) Rest() error { return r.note("rest") }

func (r restingCluster) note(what string) error {
	w := current()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.order = append(w.order, what+" "+r.dp)
	return nil
}

// A resting cluster is woken for each trial of its case (the warm-up too) and rests after it:
// no trial of any case runs while another case's cluster is awake.
func TestRunWakesRestingClusters(t *testing.T) {
	w := newModel(t, 3)
	cases := []result.CaseSpec{synth("A", "tcp", 3, nil), synth("B", "tcp", 3, nil)}
	cases[0].Warmup = 1
	_, err := Run(context.Background(), cases, Options{Dir: t.TempDir(), RunID: "rest", Standing: perCase(),
		Settings: Settings{Seed: 1}, NewCluster: func(_ context.Context, k cluster.Key) (cluster.Cluster, error) {
			return restingCluster{clustertest.New(clustertest.Config{}), k.Dataplane}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	trials, awake := 0, ""
	for i, e := range w.order {
		what, dp, _ := strings.Cut(e, " ")
		switch what {
		case "wake":
			if awake != "" {
				t.Fatalf("%s woken at %d while %s is awake: %v", dp, i, awake, w.order)
			}
			awake = dp
		case "rest":
			if awake != dp {
				t.Fatalf("%s rests at %d, awake is %q: %v", dp, i, awake, w.order)
			}
			awake = ""
		default:
			trials++
			if dp := strings.Split(e, "/")[1]; awake != dp {
				t.Fatalf("trial %s at %d with %q awake: %v", e, i, awake, w.order)
			}
		}
	}
	if awake != "" {
		t.Errorf("%s left awake: %v", awake, w.order)
	}
	if trials != 7 { // 3 + 3 and A's warm-up
		t.Errorf("%d trials, want 7: %v", trials, w.order)
	}
}

// A run holding the cases of two backends (--backend kube,lab) plans each backend's cases as
// it stands (the real cluster's shared, the lab's one cluster per case), runs each lab case in
// the rounds of the cluster's case measuring the same thing and pairs the two: a "backend"
// comparison, the cluster's case the reference. A lab case without a partner runs too.
func TestMixedBackends(t *testing.T) {
	w := newModel(t, 5)
	w.noise = 0.01
	kube := func(c *result.Case) { c.Backend, c.Dataplane, c.MTU, c.Nodes = "kube", "cluster", 0, 0 }
	cases := []result.CaseSpec{
		synth("", "tcp", 3, kube),
		synth("", "crr", 3, kube),
		synth("", "tcp", 3, func(c *result.Case) { kube(c); c.Services = 10 }),
		synth("flannel", "tcp", 3, nil),
		synth("flannel", "crr", 3, nil),
		synth("flannel", "tcp", 3, func(c *result.Case) { c.Services = 10 }),
		synth("flannel", "crr", 3, func(c *result.Case) { c.Services = 10 }),
	}
	w.truth[cases[0].Case.ID], w.truth[cases[3].Case.ID] = 1000, 800
	w.truth[cases[1].Case.ID], w.truth[cases[4].Case.ID] = 500, 600
	cl := &clusters{}
	opt := runOpts(t.TempDir(), cl, cluster.Standing{}, Settings{Seed: 2})
	opt.Standings = map[string]cluster.Standing{"kube": {}, "lab": perCase()}
	sum, err := Run(context.Background(), cases, opt)
	if err != nil {
		t.Fatal(err)
	}
	byBackend := map[string]int{}
	for _, k := range cl.keys {
		byBackend[k.Backend]++
	}
	if byBackend["kube"] != 1 || byBackend["lab"] != 4 || cl.closed != cl.built {
		t.Errorf("clusters %v (closed %d of %d): want the cluster's one shared, one per lab case, all closed", byBackend, cl.closed, cl.built)
	}
	if w.names[cases[0].Case.ID] == "" || w.names[cases[0].Case.ID] == w.names[cases[1].Case.ID] || w.names[cases[3].Case.ID] != "" || w.names[cases[2].Case.ID] != "" {
		t.Errorf("fixture names %v: the cluster's two light cases share it under names of their own; the lab's and the loaded case need none", w.names)
	}
	// Block 1: the cluster's light cases and the lab's, round by round; block 2: the loaded
	// case of the cluster with the lab's; then the lab's case no cluster case measures.
	ids := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, cases[i].Case.ID)
		}
		slices.Sort(out)
		return out
	}
	if len(w.order) != 21 {
		t.Fatalf("%d trials ran (%v), want 21", len(w.order), w.order)
	}
	at := 0
	for _, blk := range [][]string{ids(0, 1, 3, 4), ids(2, 5), ids(6)} {
		for r := 0; r < 3; r++ {
			round := slices.Clone(w.order[at : at+len(blk)])
			slices.Sort(round)
			if !slices.Equal(round, blk) {
				t.Errorf("round %d ran %v, want %v once each", r+1, w.order[at:at+len(blk)], blk)
			}
			at += len(blk)
		}
	}
	want := map[string]float64{cases[3].Case.ID: 0.8, cases[4].Case.ID: 1.2, cases[5].Case.ID: 1}
	for _, c := range sum.Comparisons {
		if c.Kind != "backend" {
			continue
		}
		r, ok := want[c.Case]
		if !ok {
			t.Errorf("backend comparison of %s, want only the lab's cases", c.Case)
			continue
		}
		delete(want, c.Case)
		ref := map[string]string{cases[3].Case.ID: cases[0].Case.ID, cases[4].Case.ID: cases[1].Case.ID, cases[5].Case.ID: cases[2].Case.ID}[c.Case]
		if c.Reference != ref || c.N != 3 || c.CI95Low > r || c.CI95High < r || math.Abs(c.Ratio-r) > 0.05 {
			t.Errorf("%s vs %s: %+v, want against %s over 3 rounds, ratio %.2f inside its interval", c.Case, c.Reference, c.RatioSummary, ref, r)
		}
	}
	if len(want) > 0 {
		t.Errorf("no backend comparison for %v (comparisons %+v)", want, sum.Comparisons)
	}
}

// A run with no case plans nothing and builds nothing (the plan of several backends starts
// from the first case's).
func TestRunWithoutCases(t *testing.T) {
	cl := &clusters{}
	opt := runOpts(t.TempDir(), cl, cluster.Standing{}, Settings{Seed: 1})
	opt.Standings = map[string]cluster.Standing{"kube": {}, "lab": perCase()}
	sum, err := Run(context.Background(), nil, opt)
	if err != nil || len(sum.Results) != 0 || cl.built != 0 {
		t.Errorf("no cases: %d results, %d clusters, error %v; want none and no error", len(sum.Results), cl.built, err)
	}
}

// concurrentCluster is a cluster whose fixtures may be torn down at the same time.
type concurrentCluster struct{ countingCluster }

func (concurrentCluster) ConcurrentFixtures() bool { return true }

// A block's fixtures are set up together and torn down together where their cluster allows it
// (cluster.ConcurrentFixtures: every Setup, then every Close, in flight at once), one after the
// other where it does not; either way each once, with names of their own, and the run
// measures them all.
func TestFixturesTogether(t *testing.T) {
	for _, concurrent := range []bool{true, false} {
		w := newModel(t, 1)
		cases := []result.CaseSpec{synth("x", "tcp", 1, nil), synth("x", "crr", 1, nil), synth("x", "tcp", 1, func(c *result.Case) { c.MsgSize = 512 })}
		for i := range cases {
			cases[i].Case.Dataplane = "cluster"
			cases[i].Case.ID = cases[i].Case.MakeID()
		}
		cl := &clusters{}
		opts := runOpts(t.TempDir(), cl, cluster.Standing{}, Settings{Seed: 1})
		if concurrent {
			w.setupGate, w.closeGate = &sync.WaitGroup{}, &sync.WaitGroup{}
			w.setupGate.Add(len(cases))
			w.closeGate.Add(len(cases))
			opts.NewCluster = func(ctx context.Context, k cluster.Key) (cluster.Cluster, error) {
				c, err := cl.new(ctx, k)
				return concurrentCluster{c.(countingCluster)}, err
			}
		}
		sum, err := Run(context.Background(), cases, opts)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if concurrent {
			want = len(cases)
		}
		if w.fixtures != len(cases) || w.maxSetting != want {
			t.Errorf("concurrent set-up %v: %d fixtures set up, at most %d at once; want %d, %d", concurrent, w.fixtures, w.maxSetting, len(cases), want)
		}
		if w.closed != len(cases) || w.maxClosing != want {
			t.Errorf("concurrent teardown %v: %d fixtures closed, at most %d at once; want %d, %d", concurrent, w.closed, w.maxClosing, len(cases), want)
		}
		names := map[string]bool{}
		for _, n := range w.names {
			names[n] = true
		}
		if len(names) != len(cases) || names[""] {
			t.Errorf("fixture names %v: want one of its own each", w.names)
		}
		for _, r := range sum.Results {
			if r.Status != "ok" {
				t.Errorf("%s: %s %s", r.Case.ID, r.Status, r.Reason)
			}
		}
	}
}
