// Package runner runs the cases of a plan in rounds: trial k of every case before trial k+1 of
// any, in an order shuffled per round, with every case's cluster and fixture kept standing
// across rounds, so slow drifts and bursts of hypervisor steal fall on every case alike and
// comparisons inside a run can be paired by round. Every trial is appended to results.jsonl as
// it ends; a trial disturbed by steal is recorded as such and run again; with a CI target,
// rounds are added until each case's interval is narrow enough.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/cnibench/cnibench/internal/stats"
)

// PlanFile records the expanded cases of a run and its settings, so --resume can finish it.
const PlanFile = result.PlanFile

// Orders of the trials.
const (
	// OrderRounds runs trial k of every case before trial k+1 of any, shuffled per round.
	OrderRounds = "rounds"
	// OrderSequential runs all trials of a case back to back, then the next case (the order
	// before rounds existed; kept for comparison).
	OrderSequential = "sequential"
)

// Settings are how a run schedules, judges and stops its trials. They are recorded in
// plan.json: a resumed run goes on with the same ones.
type Settings struct {
	Order string `json:"order"` // OrderRounds (default) or OrderSequential
	Seed  int64  `json:"seed"`  // shuffles the rounds
	// MaxStealPct: a trial whose client node lost more than this share of its CPU to the
	// hypervisor is disturbed (0: DefaultMaxSteal; negative: never).
	MaxStealPct float64 `json:"max_steal_pct"`
	// MaxReruns bounds the re-runs of disturbed trials per case (negative: none; 0: the case's
	// repeat).
	MaxReruns int `json:"max_reruns"`
	// CITargetPct > 0 adds rounds until every case's 95 % CI half-width of its primary metric
	// is within this % of its value, each case up to MaxRepeat trials (0: 4 x repeat), the
	// run up to TimeBudgetS seconds of measurement after the start (0: no bound).
	CITargetPct float64 `json:"ci_target_pct,omitempty"`
	MaxRepeat   int     `json:"max_repeat,omitempty"`
	TimeBudgetS float64 `json:"time_budget_s,omitempty"`
	// NoAccount turns the per-CPU, per-role and per-hop accounting of trials off;
	// UnaccountedCopies turns it off for the second and later copies of a case only (doctor
	// --account-cost pairs a case accounted with the same case unaccounted).
	NoAccount         bool `json:"no_account,omitempty"`
	UnaccountedCopies bool `json:"unaccounted_copies,omitempty"`
	// Trace adds per-hop latency to each trial's accounting (cluster.TraceHops; "": none);
	// UntracedCopies leaves the second and later copies of a case untraced (doctor
	// --trace-cost pairs a case traced with the same case untraced).
	Trace          string `json:"trace,omitempty"`
	UntracedCopies bool   `json:"untraced_copies,omitempty"`
	// AccountAmplify > 1 makes the accounting's sampler look that many times as often
	// (doctor --account-cost --account-amplify; cluster.AccountPath.Amplify).
	AccountAmplify int `json:"account_amplify,omitempty"`
}

// MaxAccountAmplify bounds Settings.AccountAmplify: at 250 times the lab's sampler would look
// every millisecond, about as long as one look takes.
const MaxAccountAmplify = 250

// DefaultMaxSteal is the steal share (%) above which a trial is disturbed.
const DefaultMaxSteal = 5.0

// Check validates the settings; errors name the flag.
func (s Settings) Check() error {
	switch s.Order {
	case "", OrderRounds, OrderSequential:
	default:
		return fmt.Errorf("--order: unknown order %q (valid: %s, %s)", s.Order, OrderRounds, OrderSequential)
	}
	switch {
	case s.MaxStealPct > 100:
		return fmt.Errorf("--max-steal: %g%% is more than all of the CPU (give 0..100; negative turns the check off)", s.MaxStealPct)
	case s.CITargetPct < 0 || s.CITargetPct > 100:
		return fmt.Errorf("--ci-target: %g out of range (0 = off, else a half-width in %% of the value, up to 100)", s.CITargetPct)
	case s.MaxRepeat < 0 || s.MaxRepeat > 10000:
		return fmt.Errorf("--max-repeat: %d out of range (1..10000)", s.MaxRepeat)
	case s.TimeBudgetS < 0:
		return fmt.Errorf("--time-budget: negative")
	case s.MaxReruns > 1000:
		return fmt.Errorf("--max-reruns: %d out of range (up to 1000; negative: never re-run)", s.MaxReruns)
	case s.Trace != "" && s.Trace != cluster.TraceHops:
		return fmt.Errorf("--trace: unknown trace %q (valid: %s)", s.Trace, cluster.TraceHops)
	case s.AccountAmplify < 0 || s.AccountAmplify > MaxAccountAmplify:
		return fmt.Errorf("--account-amplify: %d out of range (1..%d)", s.AccountAmplify, MaxAccountAmplify)
	case s.Trace != "" && s.NoAccount:
		return fmt.Errorf("--trace %s adds to each trial's accounting: drop --no-account", s.Trace)
	}
	return nil
}

// traceOf is the trace a case's trials ask for.
func (s Settings) traceOf(c result.Case) string {
	if s.UntracedCopies && c.Copy > 1 {
		return ""
	}
	return s.Trace
}

func (s Settings) withDefaults() Settings {
	if s.Order == "" {
		s.Order = OrderRounds
	}
	if s.MaxStealPct == 0 {
		s.MaxStealPct = DefaultMaxSteal
	}
	return s
}

// Options configure a run.
type Options struct {
	Dir   string // run directory
	RunID string
	// NewCluster builds a cluster for a key. Errors wrapping cluster.ErrUnsupported skip the
	// cluster's cases with the reason.
	NewCluster func(ctx context.Context, k cluster.Key) (cluster.Cluster, error)
	// Standing is how the backend's clusters may stand together (Backend.Standing).
	Standing cluster.Standing
	// Standings, for a run holding the cases of several backends (Case.Backend), is how each
	// one's clusters stand; a backend not in it stands as Standing. The first backend's cases
	// are planned into blocks as it stands; a case of another runs in the block of the first's
	// case measuring the same thing (CompareKey) when its standing allows, so a lab case and a
	// real cluster's case measuring the same thing interleave in the same rounds, paired by
	// round; the others run in blocks after.
	Standings map[string]cluster.Standing
	Settings  Settings
	// Environment is recorded in summary.json; each cluster's facts (Facts.Record) are added
	// under "dataplanes", the settings under "runner".
	Environment map[string]any
	Progress    *Progress
}

// plan is plan.json.
type plan struct {
	Run      string            `json:"run"`
	Settings *Settings         `json:"settings,omitempty"`
	Cases    []result.CaseSpec `json:"cases"`
}

// SavePlan writes the expanded cases and the settings into dir/plan.json.
func SavePlan(dir, runID string, cases []result.CaseSpec, s Settings) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s = s.withDefaults()
	b, err := json.MarshalIndent(plan{Run: runID, Settings: &s, Cases: cases}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, PlanFile), b, 0o644)
}

// LoadPlan reads dir/plan.json. A plan written before settings existed gets the sequential
// order it ran with.
func LoadPlan(dir string) (string, []result.CaseSpec, Settings, error) {
	b, err := os.ReadFile(filepath.Join(dir, PlanFile))
	if err != nil {
		return "", nil, Settings{}, fmt.Errorf("%s is not a cnibench run directory (no %s): %w", dir, PlanFile, err)
	}
	var p plan
	if err := json.Unmarshal(b, &p); err != nil {
		return "", nil, Settings{}, fmt.Errorf("%s: %w", filepath.Join(dir, PlanFile), err)
	}
	s := Settings{Order: OrderSequential}
	if p.Settings != nil {
		s = *p.Settings
	}
	return p.Run, p.Cases, s.withDefaults(), nil
}

// skippedTrial marks, in done's map, a case skipped as a whole (it cannot run here).
const skippedTrial = -1

// done returns, per case id, the trial numbers already measured, or skippedTrial for a case
// that cannot run here: what --resume skips. Warm-ups, failed and disturbed trials do not
// count (resume runs them again).
func done(trials []result.Trial) map[string]map[int]bool {
	out := map[string]map[int]bool{}
	for _, t := range trials {
		st := t.EffectiveStatus()
		if t.Warmup || (st != "ok" && st != "skipped") {
			continue
		}
		if out[t.Case.ID] == nil {
			out[t.Case.ID] = map[int]bool{}
		}
		n := t.Trial
		if st == "skipped" {
			n = skippedTrial
		}
		out[t.Case.ID][n] = true
	}
	return out
}

// Run runs the cases (skipping trials already in opt.Dir/results.jsonl) and writes the summary.
func Run(ctx context.Context, cases []result.CaseSpec, opt Options) (result.Summary, error) {
	prev, err := result.LoadTrials(opt.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return result.Summary{}, err
	}
	set := opt.Settings.withDefaults()
	if err := set.Check(); err != nil {
		return result.Summary{}, err
	}
	store, err := result.OpenStore(opt.Dir)
	if err != nil {
		return result.Summary{}, err
	}
	defer store.Close()
	r := &run{opt: opt, set: set, store: store, prog: opt.Progress, dataplanes: map[string]any{}, clusters: map[string]*slot{}, start: time.Now()}
	if r.prog == nil {
		r.prog = NewProgress(io.Discard, false)
	}
	d := done(prev)
	for _, cs := range cases {
		r.cases = append(r.cases, newCaseState(cs, d[cs.Case.ID], prev, set))
	}
	r.prog.Begin(r.cases)
	err = r.blocks(ctx)
	r.closeClusters(nil)
	r.prog.End()
	if err != nil {
		return result.Summary{}, err
	}
	if ctx.Err() != nil {
		// An interrupted run has no summary: --resume finishes it and writes one.
		return result.Summary{}, ctx.Err()
	}
	all, err := result.LoadTrials(opt.Dir)
	if err != nil {
		return result.Summary{}, err
	}
	return r.summary(all)
}

// run is one invocation of Run.
type run struct {
	opt        Options
	set        Settings
	store      *result.Store
	prog       *Progress
	cases      []*caseState
	dataplanes map[string]any
	clusters   map[string]*slot // standing clusters by slot key
	start      time.Time
}

// slot is a standing cluster.
type slot struct {
	key     cluster.Key
	variant string // what its cases ran on (the key of its facts in the environment)
	cl      cluster.Cluster
	err     error // building it failed: its cases are recorded as failed or skipped
}

// clusterOf is the slot's cluster (nil: no slot, or none built).
func (s *slot) clusterOf() cluster.Cluster {
	if s == nil {
		return nil
	}
	return s.cl
}

// caseState is what the runner knows of a case during a run.
type caseState struct {
	cs result.CaseSpec
	// done are the trial numbers behind us: measured (now or in an earlier run), or failed or
	// lost in this process (a resume runs those again).
	done     map[int]bool
	values   map[int]float64 // the primary metric of each measured trial
	target   int             // trials wanted (repeat, raised by the CI target)
	max      int             // most trials the CI target may ask for
	finished bool            // skipped, or its set-up failed: nothing more to run in this process
	fx       scenario.Fixture
	warm     bool // its warm-up ran in this process
	reruns   int  // disturbed trials re-run in this process
}

func newCaseState(cs result.CaseSpec, d map[int]bool, prev []result.Trial, set Settings) *caseState {
	c := &caseState{cs: cs, done: map[int]bool{}, values: map[int]float64{}, target: cs.Repeat, max: cs.Repeat}
	for n := range d {
		c.done[n] = true
	}
	if d[skippedTrial] {
		c.finished = true
	}
	pm := cs.Case.Primary()
	for _, t := range prev {
		if t.Case.ID == cs.Case.ID && t.Measured() {
			if v, ok := t.Metrics[pm]; ok {
				c.values[t.Trial] = v
			}
		}
	}
	if set.CITargetPct > 0 {
		c.max = set.MaxRepeat
		if c.max == 0 {
			c.max = 4 * cs.Repeat
		}
		c.max = max(c.max, cs.Repeat)
		c.target = max(cs.Repeat, c.measured())
		if c.converged(set.CITargetPct) {
			c.target = cs.Repeat
		}
	}
	return c
}

// measured is the number of measured trials (with the primary metric).
func (c *caseState) measured() int { return len(c.values) }

// pending are the trial numbers up to the target not measured yet.
func (c *caseState) pending() []int {
	if c.finished {
		return nil
	}
	var out []int
	for t := 1; t <= c.target; t++ {
		if !c.done[t] {
			out = append(out, t)
		}
	}
	return out
}

// halfWidth is the relative 95 % CI half-width (%) of the primary metric so far.
func (c *caseState) halfWidth() float64 {
	vs := make([]float64, 0, len(c.values))
	for _, v := range c.values {
		vs = append(vs, v)
	}
	return stats.HalfWidthPct(stats.Summarize(vs))
}

func (c *caseState) converged(target float64) bool {
	return c.measured() >= c.cs.Repeat && c.halfWidth() <= target
}

// standing is how the clusters of a case's backend stand (Options.Standings).
func (r *run) standing(cs result.CaseSpec) cluster.Standing {
	if st, ok := r.opt.Standings[cs.Case.Backend]; ok {
		return st
	}
	return r.opt.Standing
}

// slotKey is the cluster a case runs in: its own with PerCase, else the one of its key.
func (r *run) slotKey(cs result.CaseSpec) string {
	if r.standing(cs).PerCase {
		return "case " + cs.Case.ID
	}
	return fmt.Sprintf("%+v", cluster.KeyOf(cs))
}

// plan groups the cases into blocks whose clusters stand together; each block runs its own
// rounds. Sequential order makes every case a block.
func (r *run) plan() [][]*caseState {
	var blocks [][]*caseState
	if r.set.Order == OrderSequential {
		for _, c := range r.cases {
			blocks = append(blocks, []*caseState{c})
		}
		return blocks
	}
	if len(r.cases) == 0 {
		return nil
	}
	// The cases of each backend (in order of first appearance). The first backend's are
	// planned as it stands; a case of another joins the block of the first's case measuring
	// the same thing (CompareKey) when its own standing allows, so the two run in the same
	// rounds; the rest are planned as their backend stands, in blocks after those.
	var backends []string
	by := map[string][]*caseState{}
	for _, c := range r.cases {
		b := c.cs.Case.Backend
		if _, ok := by[b]; !ok {
			backends = append(backends, b)
		}
		by[b] = append(by[b], c)
	}
	blocks = planBlocks(by[backends[0]], r.standing(by[backends[0]][0].cs))
	home := map[string]int{} // CompareKey -> the block of the first backend's case
	for i, b := range blocks {
		for _, c := range b {
			if _, ok := home[c.cs.Case.CompareKey()]; !ok {
				home[c.cs.Case.CompareKey()] = i
			}
		}
	}
	for _, b := range backends[1:] {
		st := r.standing(by[b][0].cs)
		joined := map[int][]*caseState{}
		var rest []*caseState
		for _, c := range by[b] {
			i, ok := home[c.cs.Case.CompareKey()]
			if ok && fits(st, joined[i], c) {
				joined[i] = append(joined[i], c)
				blocks[i] = append(blocks[i], c)
				continue
			}
			rest = append(rest, c)
		}
		blocks = append(blocks, planBlocks(rest, st)...)
	}
	return blocks
}

// fits tells whether case c may stand beside the cases in, of its backend, in one block:
// within the budget with PerCase, else (one shared cluster) only light cases together.
func fits(st cluster.Standing, in []*caseState, c *caseState) bool {
	if len(in) == 0 {
		return true
	}
	if !st.PerCase {
		return scenario.Shares(c.cs.Case) && scenario.Shares(in[0].cs.Case)
	}
	load := costOf(st, c)
	for _, o := range in {
		load += costOf(st, o)
	}
	return (st.MaxClusters <= 0 || len(in) < st.MaxClusters) && (st.MaxLoad <= 0 || load <= st.MaxLoad)
}

// costOf is what a case counts against st's MaxLoad (Standing.Cost; nil: Case.Load).
func costOf(st cluster.Standing, c *caseState) int {
	if st.Cost != nil {
		return st.Cost(c.cs.Case)
	}
	return c.cs.Case.Load()
}

// planBlocks groups one backend's cases into blocks whose clusters stand together as st says.
func planBlocks(cases []*caseState, st cluster.Standing) [][]*caseState {
	var blocks [][]*caseState
	if st.PerCase {
		var cur []*caseState
		load := 0
		for _, c := range cases {
			l := costOf(st, c)
			if len(cur) > 0 && ((st.MaxClusters > 0 && len(cur) >= st.MaxClusters) || (st.MaxLoad > 0 && load+l > st.MaxLoad)) {
				blocks, cur, load = append(blocks, cur), nil, 0
			}
			cur, load = append(cur, c), load+l
		}
		if len(cur) > 0 {
			blocks = append(blocks, cur)
		}
		return blocks
	}
	// Shared clusters: the cases that load nothing stand together, each loaded case alone
	// (in plan order; consecutive blocks on one key keep its cluster).
	var light []*caseState
	for _, c := range cases {
		if scenario.Shares(c.cs.Case) {
			light = append(light, c)
		}
	}
	if len(light) > 0 {
		blocks = append(blocks, light)
	}
	for _, c := range cases {
		if !scenario.Shares(c.cs.Case) {
			blocks = append(blocks, []*caseState{c})
		}
	}
	return blocks
}

func (r *run) blocks(ctx context.Context) error {
	blocks := r.plan()
	for bi, b := range blocks {
		var todo []*caseState
		for _, c := range b {
			if len(c.pending()) > 0 || (r.set.CITargetPct > 0 && !c.finished && !c.converged(r.set.CITargetPct) && c.target < c.max) {
				todo = append(todo, c)
			}
		}
		if len(todo) == 0 {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if len(blocks) > 1 && r.set.Order != OrderSequential {
			r.prog.Log("block %d/%d: %d cases", bi+1, len(blocks), len(todo))
		}
		need := map[string]bool{}
		for _, c := range todo {
			need[r.slotKey(c.cs)] = true
		}
		r.closeClusters(need)
		err := r.block(ctx, bi, todo)
		r.closeFixtures(todo)
		if err != nil {
			return err
		}
	}
	return nil
}

// cluster returns the standing cluster of a case, building it when needed.
func (r *run) cluster(ctx context.Context, cs result.CaseSpec) *slot {
	sk := r.slotKey(cs)
	if s, ok := r.clusters[sk]; ok {
		return s
	}
	k := cluster.KeyOf(cs)
	parts := ""
	if k.Proxy != "" || k.Policy != "" {
		parts = fmt.Sprintf(" (proxy %s, policy %s)", k.Proxy, k.Policy)
	}
	if k.Nodes > 0 {
		parts += fmt.Sprintf(", %d nodes, MTU %d", k.Nodes, k.MTU)
	}
	start := time.Now()
	s := &slot{key: k, variant: cs.Case.Variant()}
	s.cl, s.err = r.opt.NewCluster(ctx, k)
	if s.err != nil {
		r.clusters[sk] = s
		return s
	}
	f := s.cl.Facts()
	r.dataplanes[s.variant] = f.Record()
	name := ""
	if f.Name != "" {
		name = " " + f.Name
	}
	forCase := ""
	if r.standing(cs).PerCase {
		forCase = " for " + cs.Case.ID
	}
	r.prog.Log("%s cluster%s%s: dataplane %s%s, ready in %.2f s", k.Backend, name, forCase, k.Dataplane, parts, time.Since(start).Seconds())
	r.clusters[sk] = s
	return s
}

// closeClusters closes the standing clusters not in keep (nil: all).
func (r *run) closeClusters(keep map[string]bool) {
	for sk, s := range r.clusters {
		if keep[sk] {
			continue
		}
		delete(r.clusters, sk)
		if s.cl == nil {
			continue
		}
		// Again at the end: a backend may learn facts while it runs (the kube pod MTU).
		f := s.cl.Facts()
		r.dataplanes[s.variant] = f.Record()
		if err := s.cl.Close(context.Background()); err != nil {
			r.prog.Log("teardown %s %s: %v", s.key.Backend, f.Name, err)
		}
	}
}

// concurrent says whether the fixtures of cluster cl may be set up and torn down at once
// (cluster.ConcurrentFixtures).
func concurrent(cl cluster.Cluster) bool {
	cf, ok := cl.(cluster.ConcurrentFixtures)
	return ok && cf.ConcurrentFixtures()
}

// closeFixtures tears the block's fixtures down: at the same time where their cluster allows
// it (cluster.ConcurrentFixtures), else one after the other.
func (r *run) closeFixtures(cases []*caseState) {
	var together []*caseState
	for _, c := range cases {
		s := r.clusters[r.slotKey(c.cs)]
		if c.fx != nil && concurrent(s.clusterOf()) {
			together = append(together, c)
			continue
		}
		r.closeFixture(c)
	}
	var wg sync.WaitGroup
	for _, c := range together {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.closeFixture(c) // (writes only c's fields; Progress.Log locks)
		}()
	}
	wg.Wait()
}

func (r *run) closeFixture(c *caseState) {
	if c.fx == nil {
		return
	}
	if err := c.fx.Close(context.Background()); err != nil {
		r.prog.Log("teardown %s: %v", c.cs.Case.ID, err)
	}
	c.fx, c.warm = nil, false
}

// setup builds a case's cluster and fixture; a failure is recorded (skipped or failed) and
// finishes the case for this run.
func (r *run) setup(ctx context.Context, c *caseState, name string) error {
	start := time.Now()
	sc, err := scenario.Get(c.cs.Case.Scenario)
	if err != nil {
		return err
	}
	var fx scenario.Fixture
	s := r.cluster(ctx, c.cs)
	if err = s.err; err == nil {
		fx, err = r.setupIn(ctx, sc, s, c, name)
	}
	return r.setUp(ctx, c, fx, err, time.Since(start))
}

// setupIn sets case c's fixture up in the standing cluster s; it writes nothing the run
// shares, so the fixtures of one cluster may be set up at once (setupTogether).
func (r *run) setupIn(ctx context.Context, sc scenario.Scenario, s *slot, c *caseState, name string) (scenario.Fixture, error) {
	return sc.Setup(ctx, s.cl, c.cs.Case, scenario.Options{CPUs: c.cs.CPUs, Name: name,
		NoAccount: r.set.NoAccount || (r.set.UnaccountedCopies && c.cs.Case.Copy > 1),
		Trace:     r.set.traceOf(c.cs.Case), Amplify: r.set.AccountAmplify})
}

// setUp takes case c's fixture (or the error that kept it from standing), set up in took:
// a case that cannot stand is reported and recorded.
func (r *run) setUp(ctx context.Context, c *caseState, fx scenario.Fixture, err error, took time.Duration) error {
	c.fx = fx
	if ctx.Err() != nil {
		return nil
	}
	r.prog.SetupDone(c.cs, took, err != nil, len(c.pending()))
	if err == nil {
		return nil
	}
	r.prog.Skip(c.cs, err)
	// The failure is recorded at the first trial it stands for, so a resume that measures
	// that trial replaces it (a skip stands for the whole case).
	n := 1
	if p := c.pending(); len(p) > 0 {
		n = p[0]
	}
	c.finished = true
	return r.record(c.cs, n, false, time.Now(), scenario.Measurement{}, err)
}

// setupTogether sets up at once the fixtures of cases that share a standing cluster that
// allows it (cluster.ConcurrentFixtures: on a real cluster each waits a second or two for its
// pods to start), at most setupsAtOnce at a time, then takes them in plan order.
func (r *run) setupTogether(ctx context.Context, cases []*caseState, names []string) error {
	slots := make([]*slot, len(cases))
	scs := make([]scenario.Scenario, len(cases))
	for i, c := range cases {
		var err error
		if scs[i], err = scenario.Get(c.cs.Case.Scenario); err != nil {
			return err
		}
		slots[i] = r.cluster(ctx, c.cs)
	}
	fxs := make([]scenario.Fixture, len(cases))
	errs := make([]error, len(cases))
	start := time.Now()
	_ = cluster.Parallel(ctx, len(cases), setupsAtOnce, func(i int) error {
		if errs[i] = slots[i].err; errs[i] == nil {
			fxs[i], errs[i] = r.setupIn(ctx, scs[i], slots[i], cases[i], names[i])
		}
		return nil
	})
	took := time.Since(start) / time.Duration(len(cases))
	for i, c := range cases {
		if err := r.setUp(ctx, c, fxs[i], errs[i], took); err != nil {
			return err
		}
	}
	return nil
}

// setupsAtOnce is how many fixtures of one standing cluster are set up at once.
const setupsAtOnce = 8

// block runs the rounds of one block of cases.
func (r *run) block(ctx context.Context, bi int, cases []*caseState) error {
	// Clusters, then fixtures, then a warm-up of each: all stand before the first round.
	// Fixtures sharing a cluster with others get names of their own.
	shares := map[string]int{} // backend -> its cases in the block
	for _, c := range cases {
		shares[c.cs.Case.Backend]++
	}
	var together []*caseState
	var names []string
	for i, c := range cases {
		if ctx.Err() != nil {
			return nil
		}
		name := ""
		if !r.standing(c.cs).PerCase && shares[c.cs.Case.Backend] > 1 {
			name = fmt.Sprintf("f%d", i)
			if s := r.cluster(ctx, c.cs); s.err == nil && concurrent(s.cl) {
				together, names = append(together, c), append(names, name)
				continue
			}
		}
		if err := r.setup(ctx, c, name); err != nil {
			return err
		}
	}
	if len(together) > 0 {
		if err := r.setupTogether(ctx, together, names); err != nil {
			return err
		}
	}
	for round := 1; ; round++ {
		if ctx.Err() != nil {
			return nil
		}
		var due []*caseState
		for _, c := range cases {
			if p := c.pending(); len(p) > 0 && c.fx != nil {
				due = append(due, c)
			}
		}
		if len(due) == 0 {
			if !r.extend(cases) {
				return nil
			}
			continue
		}
		r.order(due, bi, round)
		var again []*caseState
		for _, c := range due {
			if ctx.Err() != nil {
				return nil
			}
			redo, err := r.trial(ctx, c, c.pending()[0])
			if err != nil {
				return err
			}
			if redo {
				again = append(again, c)
			}
		}
		// Disturbed trials again at the end of the round (the burst that disturbed them has
		// had the round's other trials to pass), as long as the case's bound allows.
		for len(again) > 0 && ctx.Err() == nil {
			var next []*caseState
			for _, c := range again {
				redo, err := r.trial(ctx, c, c.pending()[0])
				if err != nil {
					return err
				}
				if redo {
					next = append(next, c)
				}
			}
			again = next
		}
	}
}

// order arranges one round's cases: plan order when sequential, else shuffled by the run's
// seed, the block and the round (the same on resume).
func (r *run) order(due []*caseState, block, round int) {
	if r.set.Order == OrderSequential {
		return
	}
	rng := newRand(r.set.Seed, int64(block), int64(round))
	for i := len(due) - 1; i > 0; i-- {
		j := rng.intn(i + 1)
		due[i], due[j] = due[j], due[i]
	}
}

// extend raises the targets of the cases that have not converged, when the run has a CI
// target; false when nothing is left to do.
func (r *run) extend(cases []*caseState) bool {
	if r.set.CITargetPct <= 0 {
		return false
	}
	if r.set.TimeBudgetS > 0 && time.Since(r.start).Seconds() >= r.set.TimeBudgetS {
		return false
	}
	more := false
	for _, c := range cases {
		if c.finished || c.fx == nil || c.converged(r.set.CITargetPct) || c.target >= c.max {
			continue
		}
		c.target++
		more = true
	}
	return more
}

// maxReruns is a case's bound on re-runs of disturbed trials.
func (r *run) maxReruns(c *caseState) int {
	switch {
	case r.set.MaxReruns < 0:
		return 0
	case r.set.MaxReruns == 0:
		return c.cs.Repeat
	}
	return r.set.MaxReruns
}

// trial runs trial n of a case (after its warm-up, the first time) and records it. redo says
// that it was disturbed and may run again; a failed trial is recorded and not retried here.
func (r *run) trial(ctx context.Context, c *caseState, n int) (redo bool, err error) {
	if rc, ok := r.cluster(ctx, c.cs).cl.(cluster.Resting); ok {
		if err := rc.Wake(); err != nil {
			return false, fmt.Errorf("waking the cluster of %s: %w", c.cs.Case.ID, err)
		}
		defer func() {
			if rerr := rc.Rest(); rerr != nil && err == nil {
				err = fmt.Errorf("letting the cluster of %s rest: %w", c.cs.Case.ID, rerr)
			}
		}()
	}
	if !c.warm && c.cs.Warmup > 0 {
		start := time.Now()
		m, terr := c.fx.Trial(ctx, c.cs.Warmup)
		if ctx.Err() != nil {
			return false, nil
		}
		wt := r.trialRecord(c.cs, 0, true, start, m, terr)
		if err := r.store.Append(wt); err != nil {
			return false, err
		}
		r.prog.WarmupDone(c.cs, wt, time.Since(start))
	}
	c.warm = true
	r.prog.Trial(c.cs, n, c.target)
	start := time.Now()
	m, terr := c.fx.Trial(ctx, c.cs.Duration)
	if ctx.Err() != nil {
		return false, nil // an interrupted trial is not recorded: resume runs it again
	}
	t := r.trialRecord(c.cs, n, false, start, m, terr)
	if err := r.store.Append(t); err != nil {
		return false, err
	}
	switch t.Status {
	case "ok":
		c.done[n] = true
		if v, ok := t.Metrics[c.cs.Case.Primary()]; ok {
			c.values[n] = v
		}
	case "disturbed":
		if c.reruns < r.maxReruns(c) {
			c.reruns++
			redo = true
			break
		}
		// Past the bound the trial is lost: the case goes on with fewer trials.
		c.done[n] = true
	default:
		c.done[n] = true // failed: recorded; a resume runs it again
	}
	r.prog.TrialDone(c.cs, n, c.target, t, redo)
	return redo, nil
}

// record appends one trial (with its raw output under trials/) to results.jsonl.
func (r *run) record(cs result.CaseSpec, n int, warmup bool, start time.Time, m scenario.Measurement, terr error) error {
	return r.store.Append(r.trialRecord(cs, n, warmup, start, m, terr))
}

// trialRecord makes a trial's record and writes its raw output: a tool's failure or a value
// no metric can have (NaN, ±Inf) fails the trial with the reason, a host-wide share outside
// 0..100 % is left out with a note, and a trial whose node lost more CPU to the hypervisor
// than the run allows is disturbed.
func (r *run) trialRecord(cs result.CaseSpec, n int, warmup bool, start time.Time, m scenario.Measurement, terr error) result.Trial {
	t := result.Trial{Run: r.opt.RunID, Case: cs.Case, Trial: n, Warmup: warmup, Start: start.UTC().Format(time.RFC3339),
		DurationS: float64(cs.Duration), Metrics: map[string]float64{}, Status: "ok",
		Conditions: map[string]any{"client_cpu": cs.CPUs[0], "server_cpu": cs.CPUs[1], "underlay_mtu": cs.Case.MTU, "nodes": cs.Case.Nodes}}
	if warmup {
		t.DurationS = float64(cs.Warmup)
	}
	for k, v := range m.Metrics {
		t.Metrics[k] = v
	}
	t.Accounting = m.Accounting
	if len(m.Server) > 0 {
		t.Conditions[result.ServerCommandKey] = strings.Join(m.Server, " ")
	}
	if len(m.Client) > 0 {
		t.Conditions[result.ClientCommandKey] = strings.Join(m.Client, " ")
	}
	if terr == nil {
		t.Notes, terr = sanitize(t.Metrics)
	}
	if terr != nil {
		t.Status, t.Error, t.Metrics = "failed", oneLine(terr.Error()), map[string]float64{}
		if errors.Is(terr, cluster.ErrUnsupported) {
			t.Status = "skipped"
		}
	} else if st, ok := t.Metrics["cpu_node_steal_pct"]; ok && r.set.MaxStealPct >= 0 && st > r.set.MaxStealPct {
		t.Status = "disturbed"
		t.Error = fmt.Sprintf("the hypervisor took %.1f%% of the CPU (steal) during the trial, more than --max-steal %g%%", st, r.set.MaxStealPct)
	}
	if len(m.Raw) > 0 {
		name := fmt.Sprintf("%d", n)
		if warmup {
			name = "warmup"
		} else if t.Status == "disturbed" {
			name += fmt.Sprintf("-disturbed-%d", start.UnixMilli())
		}
		rel := filepath.Join("trials", cs.Case.Slug(), name+".out")
		p := filepath.Join(r.opt.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil && os.WriteFile(p, m.Raw, 0o644) == nil {
			t.Raw = rel
		} else {
			t.Notes = append(t.Notes, "raw output not saved: "+fmt.Sprint(err))
		}
	}
	return t
}

// sanitize checks a trial's figures: a non-finite value fails the trial (the tool's output
// cannot be trusted; JSON cannot even hold it), and so does a negative duration (a bug); a host-wide CPU share (suffix _host_pct)
// outside 0..100 is impossible and left out, with a note saying so.
func sanitize(m map[string]float64) ([]string, error) {
	var notes []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("the tool reported %s = %v, not a number: trial failed", k, v)
		}
		if result.IsDuration(k) && v < 0 {
			return nil, fmt.Errorf("%s = %g, a negative duration: the measurement split time at points out of order; trial failed (please report it)", k, v)
		}
		if strings.HasSuffix(k, "_host_pct") && (v < 0 || v > 100) {
			notes = append(notes, fmt.Sprintf("%s = %g left out: a share of the whole host must be within 0..100 %%", k, v))
			delete(m, k)
		}
	}
	return notes, nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// summary aggregates every trial of the run into summary.json.
func (r *run) summary(all []result.Trial) (result.Summary, error) {
	env := map[string]any{}
	for k, v := range r.opt.Environment {
		env[k] = v
	}
	env["dataplanes"] = r.dataplanes
	env["runner"] = r.set
	var cs []result.Case
	for _, c := range r.cases {
		cs = append(cs, c.cs.Case)
	}
	res := stats.Aggregate(cs, all)
	if t := r.set.CITargetPct; t > 0 {
		for i, c := range r.cases {
			res[i].Convergence = r.convergence(c, res[i])
		}
	}
	sum := result.Summary{Run: r.opt.RunID, Environment: env, Results: res, Comparisons: stats.Compare(cs, all)}
	return sum, result.WriteSummary(r.opt.Dir, sum)
}

// convergence says whether a case reached the CI target, and why not.
func (r *run) convergence(c *caseState, cr result.CaseResult) *result.Convergence {
	if cr.Status != "ok" {
		return nil
	}
	m := cr.Metrics[c.cs.Case.Primary()]
	cv := &result.Convergence{TargetPct: r.set.CITargetPct, HalfWidthPct: stats.HalfWidthPct(m), Trials: m.N}
	cv.Converged = cv.HalfWidthPct <= cv.TargetPct
	if math.IsInf(cv.HalfWidthPct, 0) {
		cv.HalfWidthPct = 0
	}
	switch {
	case cv.Converged:
	case c.target >= c.max:
		cv.Reason = fmt.Sprintf("reached --max-repeat %d trials", c.max)
	case r.set.TimeBudgetS > 0 && time.Since(r.start).Seconds() >= r.set.TimeBudgetS:
		cv.Reason = fmt.Sprintf("--time-budget %s spent", fmtDur(r.set.TimeBudgetS))
	default:
		cv.Reason = "the run stopped before it converged"
	}
	return cv
}

// rng is the shuffle of one round: deterministic in the run's seed, the block and the round,
// so a resumed run takes the same order.
type rng struct{ r *rand.Rand }

func newRand(seed, block, round int64) rng {
	return rng{rand.New(rand.NewPCG(uint64(seed), uint64(block)<<32|uint64(round)))}
}

func (g rng) intn(n int) int { return g.r.IntN(n) }
