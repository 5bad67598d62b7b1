package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/plan"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/runner"
)

// NoiseFile keeps the last noise floor measured on this host; every run records it in its
// environment.
var NoiseFile = "/var/lib/cnibench/noise-floor.json"

// resolvable is the half-width of a ratio's 95 % interval on the log scale, as a percentage:
// a true difference smaller than that leaves 1.0 inside the interval.
func resolvable(r result.RatioSummary) float64 {
	if r.N < 2 || r.CI95Low <= 0 {
		return math.Inf(1)
	}
	return 100 * (math.Exp((math.Log(r.CI95High)-math.Log(r.CI95Low))/2) - 1)
}

// lastNoiseFloor reads the last noise floor (nil when none was measured).
func lastNoiseFloor() map[string]any {
	b, err := os.ReadFile(NoiseFile)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// noiseFlags are doctor --noise's settings.
type noiseFlags struct {
	on       bool
	caseID   string
	repeat   int
	duration int
}

func (n *noiseFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&n.on, "noise", false, "measure this host's noise floor: one case as two identical copies in rounds (an A/A test); says the smallest difference two cases can show here, and records it for every later run")
	f.StringVar(&n.caseID, "noise-case", "p2p/flannel/inter/crr", "with --noise: the case to copy, SCENARIO/DATAPLANE/PLACEMENT/PROTOCOL")
	f.IntVar(&n.repeat, "noise-repeat", 12, "with --noise: trials per copy (12, the default of a run)")
	f.IntVar(&n.duration, "noise-duration", 5, "with --noise: seconds per trial")
}

// cases turns the flags into the two copies of the case.
func (n *noiseFlags) cases(b cluster.Backend) ([]result.CaseSpec, error) {
	parts := strings.Split(n.caseID, "/")
	if len(parts) != 4 {
		return nil, usagef("--noise-case %q: want SCENARIO/DATAPLANE/PLACEMENT/PROTOCOL, e.g. p2p/flannel/inter/crr", n.caseID)
	}
	two, warm := 2, 1
	g := plan.Group{Scenario: parts[0], Dataplane: parts[1:2], Placement: parts[2:3], Protocol: parts[3:4],
		Repeat: &n.repeat, Duration: &n.duration, Warmup: &warm, Copies: &two, Source: "--noise-case"}
	cases, err := plan.Expand([]plan.Group{g}, catalog(), b.Name(), plan.BuiltinDefaults())
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return b.Resolve(cases)
}

// runNoise measures the noise floor and records it.
func runNoise(cmd *cobra.Command, n *noiseFlags) error {
	b, err := cluster.BackendNamed("lab")
	if err != nil {
		return err
	}
	if n.repeat < 3 || n.repeat > 1000 || n.duration < 1 || n.duration > 3600 {
		return usagef("--noise-repeat 3..1000 and --noise-duration 1..3600 (got %d and %d)", n.repeat, n.duration)
	}
	cases, err := n.cases(b)
	if err != nil {
		return err
	}
	if err := b.Configure(nil, "noise"); err != nil {
		return err
	}
	if err := b.Preflight(cmd.Context(), cases); err != nil {
		return err
	}
	runID := time.Now().UTC().Format("20060102T150405Z") + "-noise"
	sum, out, err := measure(cmd, runBackends{b}, cases, runID, "", runner.Settings{Order: runner.OrderRounds, Seed: time.Now().UnixNano()}, false)
	if err != nil {
		return err
	}
	var aa *result.Comparison
	for i, c := range sum.Comparisons {
		if c.Kind == "copy" {
			aa = &sum.Comparisons[i]
		}
	}
	if aa == nil || aa.N < 2 {
		return fmt.Errorf("the two copies of %s have fewer than 2 rounds in common: see %s/summary.json", n.caseID, out)
	}
	nf := result.NoiseFloor{Measured: time.Now().UTC().Format(time.RFC3339), Case: n.caseID, Trials: aa.N, DurationS: n.duration,
		Ratio: aa.Ratio, CI95Low: aa.CI95Low, CI95High: aa.CI95High, ResolvablePct: resolvable(aa.RatioSummary), Run: out}
	for _, r := range sum.Results {
		nf.Disturbed += r.Disturbed
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "A/A: two copies of %s, %d rounds of %d s: ratio %.3f [%.3f, %.3f]\n", n.caseID, aa.N, n.duration, aa.Ratio, aa.CI95Low, aa.CI95High)
	if aa.Differs() {
		fmt.Fprintln(w, "warning: the two copies differ although they are the same: this host's noise is not random (a disturbance that hit one copy); measure again")
	}
	fmt.Fprintf(w, "noise floor: with %d trials a case differs from another here only when they differ by more than %.1f %% (%d trials disturbed by steal and re-run)\n",
		aa.N, nf.ResolvablePct, nf.Disturbed)
	b2, _ := json.MarshalIndent(nf, "", "  ")
	if err := os.MkdirAll(filepath.Dir(NoiseFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(NoiseFile, append(b2, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "recorded in %s (every run's environment carries it as noise_floor); the run: %s\n", NoiseFile, out)
	return nil
}
