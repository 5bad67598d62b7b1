// Package runner walks the cases: builds each cluster, sets each case up, runs the warm-up and
// the trials, appends every trial to results.jsonl as it ends, tears down, and aggregates.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/cnibench/cnibench/internal/stats"
)

// PlanFile records the expanded cases of a run, so --resume can finish it.
const PlanFile = "plan.json"

// Options configure a run.
type Options struct {
	Dir   string // run directory
	RunID string
	// NewCluster builds a cluster for a key. Errors wrapping cluster.ErrUnsupported skip the
	// key's cases with the reason.
	NewCluster func(ctx context.Context, k cluster.Key) (cluster.Cluster, error)
	// Environment is recorded in summary.json; each cluster's facts (Facts.Record) are added
	// under "dataplanes".
	Environment map[string]any
	Progress    *Progress
}

// SavePlan writes the expanded cases into dir/plan.json.
func SavePlan(dir, runID string, cases []result.CaseSpec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(struct {
		Run   string            `json:"run"`
		Cases []result.CaseSpec `json:"cases"`
	}{runID, cases}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, PlanFile), b, 0o644)
}

// LoadPlan reads dir/plan.json.
func LoadPlan(dir string) (string, []result.CaseSpec, error) {
	b, err := os.ReadFile(filepath.Join(dir, PlanFile))
	if err != nil {
		return "", nil, fmt.Errorf("%s is not a cnibench run directory (no %s): %w", dir, PlanFile, err)
	}
	var p struct {
		Run   string            `json:"run"`
		Cases []result.CaseSpec `json:"cases"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return "", nil, fmt.Errorf("%s: %w", filepath.Join(dir, PlanFile), err)
	}
	return p.Run, p.Cases, nil
}

// skippedTrial marks, in done's map, a case skipped as a whole (it cannot run here).
const skippedTrial = -1

// done returns, per case id, the trial numbers already measured, or skippedTrial for a case
// that cannot run here: what --resume skips. Warm-ups and failed trials do not count (failed
// trials are run again on resume).
func done(trials []result.Trial) map[string]map[int]bool {
	out := map[string]map[int]bool{}
	for _, t := range trials {
		st := stats.TrialStatus(t)
		if t.Warmup || st == "failed" {
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
	store, err := result.OpenStore(opt.Dir)
	if err != nil {
		return result.Summary{}, err
	}
	defer store.Close()
	r := &run{opt: opt, store: store, done: done(prev), prog: opt.Progress, dataplanes: map[string]any{}}
	if r.prog == nil {
		r.prog = NewProgress(io.Discard, false)
	}
	r.prog.Begin(cases, r.done)
	for i := 0; i < len(cases); {
		j := i
		for j < len(cases) && cluster.KeyOf(cases[j]) == cluster.KeyOf(cases[i]) {
			j++
		}
		if err := r.group(ctx, cases[i:j]); err != nil {
			return result.Summary{}, err
		}
		i = j
	}
	r.prog.End()
	if ctx.Err() != nil {
		// An interrupted run has no summary: --resume finishes it and writes one.
		return result.Summary{}, ctx.Err()
	}
	all, err := result.LoadTrials(opt.Dir)
	if err != nil {
		return result.Summary{}, err
	}
	env := map[string]any{}
	for k, v := range opt.Environment {
		env[k] = v
	}
	env["dataplanes"] = r.dataplanes
	var cs []result.Case
	for _, c := range cases {
		cs = append(cs, c.Case)
	}
	sum := result.Summary{Run: opt.RunID, Environment: env, Results: stats.Aggregate(cs, all)}
	return sum, result.WriteSummary(opt.Dir, sum)
}

type run struct {
	opt        Options
	store      *result.Store
	done       map[string]map[int]bool
	prog       *Progress
	dataplanes map[string]any
}

func (r *run) remaining(cs result.CaseSpec) []int {
	if r.done[cs.Case.ID][skippedTrial] {
		return nil
	}
	var out []int
	for t := 1; t <= cs.Repeat; t++ {
		if !r.done[cs.Case.ID][t] {
			out = append(out, t)
		}
	}
	return out
}

// group runs cases that share one cluster.
func (r *run) group(ctx context.Context, cases []result.CaseSpec) error {
	pending := false
	for _, c := range cases {
		pending = pending || len(r.remaining(c)) > 0
	}
	if !pending || ctx.Err() != nil {
		return nil
	}
	k := cluster.KeyOf(cases[0])
	parts := ""
	if k.Proxy != "" || k.Policy != "" {
		parts = fmt.Sprintf(" (proxy %s, policy %s)", k.Proxy, k.Policy)
	}
	r.prog.Log("building %s cluster: dataplane %s%s, %d nodes, MTU %d", k.Backend, k.Dataplane, parts, k.Nodes, k.MTU)
	start := time.Now()
	cl, err := r.opt.NewCluster(ctx, k)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		for _, c := range cases {
			if err := r.record(c, 0, false, time.Now(), scenario.Measurement{}, err); err != nil {
				return err
			}
			r.prog.Skip(c, err)
		}
		return nil
	}
	variant := cases[0].Case.Variant()
	r.dataplanes[variant] = cl.Facts().Record()
	r.prog.Log("cluster ready in %.1f s", time.Since(start).Seconds())
	defer func() {
		// Again at the end: a backend may learn facts while it runs (the kube pod MTU).
		r.dataplanes[variant] = cl.Facts().Record()
		if err := cl.Close(context.Background()); err != nil {
			r.prog.Log("teardown %s: %v", k.Dataplane, err)
		}
	}()
	for _, c := range cases {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.runCase(ctx, cl, c); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) runCase(ctx context.Context, cl cluster.Cluster, cs result.CaseSpec) error {
	todo := r.remaining(cs)
	if len(todo) == 0 {
		return nil
	}
	sc, err := scenario.Get(cs.Case.Scenario)
	if err != nil {
		return err
	}
	r.prog.StartCase(cs)
	fx, err := sc.Setup(ctx, cl, cs.Case, scenario.Options{CPUs: cs.CPUs})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		r.prog.Skip(cs, err)
		return r.record(cs, todo[0], false, time.Now(), scenario.Measurement{}, err)
	}
	defer func() {
		if err := fx.Close(context.Background()); err != nil {
			r.prog.Log("teardown %s: %v", cs.Case.ID, err)
		}
	}()
	if cs.Warmup > 0 {
		start := time.Now()
		m, err := fx.Trial(ctx, cs.Warmup)
		if ctx.Err() != nil {
			return nil
		}
		if err := r.record(cs, 0, true, start, m, err); err != nil {
			return err
		}
	}
	for _, t := range todo {
		r.prog.Trial(cs, t)
		start := time.Now()
		m, terr := fx.Trial(ctx, cs.Duration)
		if ctx.Err() != nil {
			return nil // an interrupted trial is not recorded: resume runs it again
		}
		if err := r.record(cs, t, false, start, m, terr); err != nil {
			return err
		}
		r.prog.TrialDone(cs, t, m.Metrics, terr)
	}
	return nil
}

// record appends one trial (with its raw output under trials/) to results.jsonl.
func (r *run) record(cs result.CaseSpec, n int, warmup bool, start time.Time, m scenario.Measurement, terr error) error {
	t := result.Trial{Run: r.opt.RunID, Case: cs.Case, Trial: n, Warmup: warmup, Start: start.UTC().Format(time.RFC3339),
		DurationS: float64(cs.Duration), Metrics: m.Metrics, Status: "ok",
		Conditions: map[string]any{"client_cpu": cs.CPUs[0], "server_cpu": cs.CPUs[1], "underlay_mtu": cs.MTU, "nodes": cs.Nodes}}
	if warmup {
		t.DurationS = float64(cs.Warmup)
	}
	if terr != nil {
		t.Status, t.Error, t.Metrics = "failed", oneLine(terr.Error()), nil
		if errors.Is(terr, cluster.ErrUnsupported) {
			t.Status = "skipped"
		}
	}
	if t.Metrics == nil {
		t.Metrics = map[string]float64{}
	}
	if len(m.Raw) > 0 {
		name := fmt.Sprintf("%d", n)
		if warmup {
			name = "warmup"
		}
		rel := filepath.Join("trials", cs.Case.Slug(), name+".out")
		p := filepath.Join(r.opt.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, m.Raw, 0o644); err != nil {
			return err
		}
		t.Raw = rel
	}
	return r.store.Append(t)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}
