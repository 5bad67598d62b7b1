package main

import (
	"encoding/json"
	"fmt"
	"io"
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

// noiseFlags are doctor --noise's, --account-cost's and --trace-cost's settings.
type noiseFlags struct {
	on        bool
	cost      bool
	traceCost bool
	caseID    string
	repeat    int
	duration  int
	maxSteal  float64
	amplify   int
}

func (n *noiseFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&n.on, "noise", false, "measure this host's noise floor: one case as two identical copies in rounds (an A/A test); says the smallest difference two cases can show here, and records it for every later run")
	f.BoolVar(&n.cost, "account-cost", false, "measure what the per-CPU, per-role and per-hop accounting of each trial costs: one case as two copies in rounds, the first accounted, the second not; prints their paired ratio (default case p2p/calico/intra/tcp)")
	f.BoolVar(&n.traceCost, "trace-cost", false, "measure what --trace hops costs: one case as two copies in rounds, both accounted, the first traced, the second not; prints their paired ratio (default case p2p/calico/intra/tcp)")
	f.IntVar(&n.amplify, "account-amplify", 1, fmt.Sprintf("with --account-cost: the accounted copy's sampler looks this many times as often (1..%d), its cost grows as much, and the bound found is divided back (a cost below the host's noise made resolvable)", runner.MaxAccountAmplify))
	f.StringVar(&n.caseID, "noise-case", "p2p/flannel/inter/crr", "with --noise, --account-cost or --trace-cost: the case to copy, SCENARIO/DATAPLANE/PLACEMENT/PROTOCOL")
	f.IntVar(&n.repeat, "noise-repeat", 12, "with --noise, --account-cost or --trace-cost: trials per copy (12, the default of a run)")
	f.IntVar(&n.duration, "noise-duration", 5, "with --noise, --account-cost or --trace-cost: seconds per trial")
	f.Float64Var(&n.maxSteal, "max-steal", runner.DefaultMaxSteal, "with --noise, --account-cost or --trace-cost: a trial whose node lost more than this % of its CPU to the hypervisor is disturbed and run again (as run --max-steal; negative: off, for a VM whose steal never drops: the pairs still share their rounds)")
}

// copies runs the case as two copies in rounds with settings set, and returns the paired
// comparison of copy 2 against copy 1, the summary and the run directory.
func (n *noiseFlags) copies(cmd *cobra.Command, name string, set runner.Settings) (*result.Comparison, result.Summary, string, error) {
	b, err := cluster.BackendNamed("lab")
	if err != nil {
		return nil, result.Summary{}, "", err
	}
	if n.repeat < 3 || n.repeat > 1000 || n.duration < 1 || n.duration > 3600 {
		return nil, result.Summary{}, "", usagef("--noise-repeat 3..1000 and --noise-duration 1..3600 (got %d and %d)", n.repeat, n.duration)
	}
	if err := (runner.Settings{MaxStealPct: n.maxSteal}).Check(); err != nil {
		return nil, result.Summary{}, "", usageError{err.Error()}
	}
	cases, err := n.cases(b)
	if err != nil {
		return nil, result.Summary{}, "", err
	}
	if err := b.Configure(nil, name); err != nil {
		return nil, result.Summary{}, "", err
	}
	if err := b.Preflight(cmd.Context(), cases); err != nil {
		return nil, result.Summary{}, "", err
	}
	runID := time.Now().UTC().Format("20060102T150405Z") + "-" + name
	set.Order, set.Seed, set.MaxStealPct = runner.OrderRounds, time.Now().UnixNano(), n.maxSteal
	sum, out, err := measure(cmd, runBackends{b}, cases, runID, "", set, false)
	if err != nil {
		return nil, sum, out, err
	}
	for i, c := range sum.Comparisons {
		if c.Kind == "copy" && c.N >= 2 {
			return &sum.Comparisons[i], sum, out, nil
		}
	}
	return nil, sum, out, fmt.Errorf("the two copies of %s have fewer than 2 rounds in common: see %s/summary.json", n.caseID, out)
}

// runAccountCost measures what accounting costs: copy 1 accounted, copy 2 not.
func runAccountCost(cmd *cobra.Command, n *noiseFlags) error {
	if !cmd.Flags().Changed("noise-case") {
		n.caseID = "p2p/calico/intra/tcp"
	}
	if n.amplify < 1 || n.amplify > runner.MaxAccountAmplify {
		return usagef("--account-amplify %d: give 1..%d (how many times as often the sampler looks)", n.amplify, runner.MaxAccountAmplify)
	}
	c, sum, out, err := n.copies(cmd, "account-cost", runner.Settings{UnaccountedCopies: true, AccountAmplify: n.amplify})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	share := 0.0 // the sampler's work in % of one CPU
	for _, r := range sum.Results {
		if a := r.Accounting; r.Case.Copy <= 1 && a != nil && a.WindowS > 0 {
			share = 100 * a.SamplerS / a.WindowS
			cpus := 0
			for _, h := range a.Hosts {
				cpus += len(h.CPUs)
			}
			fmt.Fprintf(w, "the accounting's sampler worked %.1f ms in %d looks per trial window of %.1f s: %.3f %% of one CPU (%.3f %% of the %d CPUs accounted)\n",
				1000*a.SamplerS, a.SamplerLooks, a.WindowS, 100*a.SamplerS/a.WindowS, 100*a.SamplerS/a.WindowS/float64(max(cpus, 1)), cpus)
		}
	}
	n.printCost(w, c, "accounted", "accounting", out)
	if n.amplify > 1 {
		worst := max(0, 100*(1-1/c.CI95High))
		fmt.Fprintf(w, "amplified %dx: at the sampler's own rate (1/%d of these looks; the edges' reads fall outside the tool's run) accounting costs at most %.2f %% of %s\n",
			n.amplify, n.amplify, worst/float64(n.amplify), c.Metric)
		if share > 0 {
			fmt.Fprintf(w, "per 1 %% of one CPU the sampler works: at most %.2f %% of %s (a look at the sampler's own rate may take longer than one of many: multiply by the share that rate takes, printed without --account-amplify)\n",
				worst/share, c.Metric)
		}
	}
	return nil
}

// printCost prints the paired ratio of copy 2 (without the part) against copy 1 (with it): a
// ratio above 1 for a rate is what the part took.
func (n *noiseFlags) printCost(w io.Writer, c *result.Comparison, with, part, out string) {
	fmt.Fprintf(w, "%s, %d rounds of %d s: not %s / %s = %.3f [%.3f, %.3f] (%s)\n", n.caseID, c.N, n.duration, with, with, c.Ratio, c.CI95Low, c.CI95High, c.Metric)
	if c.Differs() {
		fmt.Fprintf(w, "%s cost: %.1f %% of %s (95 %% interval %.1f .. %.1f %%)\n", part, 100*(1-1/c.Ratio), c.Metric, 100*(1-1/c.CI95Low), 100*(1-1/c.CI95High))
	} else {
		fmt.Fprintf(w, "%s cost: no difference this host can tell (the interval holds 1.0); at most %.1f %% of %s\n", part, 100*(1-1/c.CI95High), c.Metric)
	}
	fmt.Fprintf(w, "the run: %s\n", out)
}

// runTraceCost measures what --trace hops costs: copy 1 traced, copy 2 not, both accounted.
func runTraceCost(cmd *cobra.Command, n *noiseFlags) error {
	if !cmd.Flags().Changed("noise-case") {
		n.caseID = "p2p/calico/intra/tcp"
	}
	c, sum, out, err := n.copies(cmd, "trace-cost", runner.Settings{Trace: cluster.TraceHops, UntracedCopies: true})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	for _, r := range sum.Results {
		if a := r.Accounting; r.Case.Copy <= 1 && a != nil {
			fmt.Fprintf(w, "traced: %.0f sampled TCP segments per trial, %d pairs of points\n", a.Traced, len(a.Latency))
			for _, note := range a.Notes {
				fmt.Fprintf(w, "note: %s\n", note)
			}
		}
	}
	n.printCost(w, c, "traced", "tracing", out)
	return nil
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
	aa, sum, out, err := n.copies(cmd, "noise", runner.Settings{})
	if err != nil {
		return err
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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
