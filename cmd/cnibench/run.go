package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/plan"
	"github.com/cnibench/cnibench/internal/report"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/runlock"
	"github.com/cnibench/cnibench/internal/runner"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// caseFlags are the run flags that are plan keys (same names as in plan files): the case's
// scenario, dataplane, placement and protocol, the case parameters (internal/param: their
// help is their declaration's, with the values this build has) and the run's settings.
func caseFlags() []struct{ name, help string } {
	cat := catalog()
	flags := []struct{ name, help string }{
		{"scenario", "scenario: " + strings.Join(scenario.Names(), ", ")},
		{"dataplane", "dataplane presets, comma-separated (e.g. flannel,calico; baseline: bare,node2node)"},
		{"placement", "placements: intra,inter"},
		{"protocol", "protocols: tcp,udp,rr,crr,udprr"},
	}
	for _, p := range param.All() {
		help := p.Help
		if vals := p.Allowed(cat.Words[p.Key]); p.Kind == param.Word && len(vals) > 0 {
			help += "; one of " + strings.Join(vals, ", ")
		}
		if p.Kind == param.Int {
			help += fmt.Sprintf(" (%d..%d)", p.Min, p.Max)
		}
		flags = append(flags, struct{ name, help string }{p.Key, help})
	}
	return append(flags, []struct{ name, help string }{
		{"repeat", "trials per case (default 12)"},
		{"duration", "seconds per trial (default 10)"},
		{"warmup", "seconds of the warm-up trial the statistics skip; 0 = none (default 2)"},
		{"cpus", "CLIENT,SERVER CPUs the client and server are pinned to (default 0,1)"},
		{"mtu", "underlay MTU, 576..9000 (default 1500; pods get it less the overlay overhead)"},
		{"nodes", "lab: node count (default 2); kube: the nodes to use, A,B (default: two Ready, schedulable nodes)"},
		{"copies", "identical copies of each case, measured side by side (an A/A test of the noise; default 1)"},
	}...)
}

// settingsFlags are the run's scheduling and stopping settings (not plan keys: plan.json
// records them; a resumed run keeps its order and seed, the others may be changed).
type settingsFlags struct {
	order                string
	seed                 int64
	maxSteal, ciTarget   float64
	maxReruns, maxRepeat int
	timeBudget           time.Duration
	noAccount            bool
	trace                string
}

func (sf *settingsFlags) register(f *pflag.FlagSet) {
	f.StringVar(&sf.order, "order", runner.OrderRounds, "trial order: rounds (trial k of every case before trial k+1 of any, shuffled per round) or sequential (all trials of a case back to back)")
	f.Int64Var(&sf.seed, "seed", 0, "seed of the rounds' shuffle (default: random, recorded in plan.json)")
	f.Float64Var(&sf.maxSteal, "max-steal", runner.DefaultMaxSteal, "a trial whose node lost more than this % of its CPU to the hypervisor (steal) is disturbed: recorded, left out of the statistics and run again; negative: off")
	f.IntVar(&sf.maxReruns, "max-reruns", 0, "re-runs of disturbed trials per case (default: the case's repeat; negative: none)")
	f.Float64Var(&sf.ciTarget, "ci-target", 0, "add rounds until every case's 95% CI half-width is within this % of its value (0: off; --repeat stays the minimum)")
	f.IntVar(&sf.maxRepeat, "max-repeat", 0, "with --ci-target: most trials per case (default 4 x repeat)")
	f.DurationVar(&sf.timeBudget, "time-budget", 0, "with --ci-target: stop adding rounds after this much time (e.g. 45m; default: no bound)")
	f.BoolVar(&sf.noAccount, "no-account", false, "do not account each trial per CPU, role and hop (what limited a case goes unsaid; its cost: cnibench doctor --account-cost)")
	f.StringVar(&sf.trace, "trace", "", "hops: add per-hop latency to each trial's accounting (lab: eBPF stamps a sample of TCP segments at every device hook of the path; its cost: cnibench doctor --trace-cost)")
}

// settings returns the settings the flags give over base; changing order or seed of a
// resumed run is a usage error.
func (sf *settingsFlags) settings(cmd *cobra.Command, base runner.Settings, resume bool) (runner.Settings, error) {
	s := base
	ch := cmd.Flags().Changed
	if resume && (ch("order") || ch("seed")) {
		return s, usagef("--resume keeps the run's --order and --seed (recorded in plan.json): drop them")
	}
	if !resume {
		s.Order, s.Seed = sf.order, sf.seed
		if !ch("seed") {
			s.Seed = time.Now().UnixNano()
		}
	}
	if !resume || ch("max-steal") {
		s.MaxStealPct = sf.maxSteal
	}
	if !resume || ch("max-reruns") {
		s.MaxReruns = sf.maxReruns
	}
	if !resume || ch("ci-target") {
		s.CITargetPct = sf.ciTarget
	}
	if !resume || ch("max-repeat") {
		s.MaxRepeat = sf.maxRepeat
	}
	if !resume || ch("time-budget") {
		s.TimeBudgetS = sf.timeBudget.Seconds()
	}
	if !resume || ch("no-account") {
		s.NoAccount = sf.noAccount
	}
	if !resume || ch("trace") {
		s.Trace = sf.trace
	}
	if (ch("max-repeat") || ch("time-budget")) && s.CITargetPct == 0 {
		return s, usagef("--max-repeat and --time-budget bound the rounds --ci-target adds: give --ci-target too")
	}
	if err := s.Check(); err != nil {
		return s, usageError{err.Error()}
	}
	return s, nil
}

func newRunCmd() *cobra.Command {
	var planFile, backend, out, resume, output string
	var sf settingsFlags
	vals := map[string]*string{}
	bopts := map[string]func() string{} // backend options (not plan keys): flag name -> value
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a plan (or the cases given by flags) and write results",
		Long: `Run benchmark cases and write DIR/results.jsonl (each trial as it ends), DIR/summary.json and
DIR/summary.csv, then print a table with each pod result as a ratio to its baseline.

Trials run in rounds: trial k of every case before trial k+1 of any, in an order shuffled per
round, every case's cluster kept standing, so bursts of hypervisor steal fall on all cases
alike and ratios are paired by round (with a 95 % interval; "no difference" when it holds 1).
A trial disturbed by steal (--max-steal) is kept in results.jsonl, left out of the statistics
and run again. --ci-target adds rounds until the intervals are narrow enough. One run
measures on a host at a time: a second one waits for the first.

Examples:
  cnibench run --plan plans/quick.yaml
  cnibench run --scenario p2p --dataplane flannel,calico --placement inter --protocol tcp,crr
  cnibench run --scenario p2s --dataplane calico --protocol tcp,rr
  cnibench run --scenario n2s --dataplane calico --proxy iptables,nftables --external-traffic-policy local
  cnibench run --backend kube --scenario p2p --nodes worker-1,worker-2 --fake-nodes 10 --pods 1000
  cnibench run --backend kube,lab --kubeconfig KC --plan plans/fidelity.yaml   # the lab against the cluster, paired
  cnibench run --scenario baseline --dataplane bare --protocol tcp --repeat 5 --duration 5
  cnibench run --resume runs/20261122T071000Z-quick`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err := parseBackends(backend)
			if err != nil {
				return usagef("--backend: %v", err)
			}
			if resume != "" && !cmd.Flags().Changed("backend") {
				// a resumed run keeps its backends
				if _, cases, _, err := runner.LoadPlan(resume); err == nil && len(cases) > 0 {
					if bs, err = backendsOf(cases); err != nil {
						return usagef("--resume %s: %v", resume, err)
					}
				}
			}
			set := map[string]string{}
			for name, v := range vals {
				if cmd.Flags().Changed(name) {
					set[name] = *v
				}
			}
			// The backends' own options; one that is also a plan key (kube's --nodes) is the
			// backend's when it declares it.
			given := map[string]map[string]string{}
			for _, b := range bs {
				given[b.Name()] = map[string]string{}
				for _, o := range b.Options() {
					if !cmd.Flags().Changed(o.Name) {
						continue
					}
					if o.CaseKey {
						given[b.Name()][o.Name] = set[o.Name]
					} else {
						given[b.Name()][o.Name] = bopts[o.Name]()
					}
				}
			}
			for _, b := range bs {
				for _, o := range b.Options() {
					if o.CaseKey {
						delete(set, o.Name)
					}
				}
			}
			for _, other := range cluster.Backends() {
				for _, o := range other.Options() {
					if bs.named(other.Name()) == nil && !o.CaseKey && cmd.Flags().Changed(o.Name) {
						return usagef("--%s is a %s backend option: add --backend %s", o.Name, other.Name(), other.Name())
					}
				}
			}
			return runRun(cmd, planFile, set, bs, given, out, resume, output, &sf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&planFile, "plan", "", "plan file (YAML list of case groups); flags given too override its keys")
	for _, cf := range caseFlags() {
		vals[cf.name] = f.String(cf.name, "", cf.help)
	}
	var backendNames []string
	for _, b := range cluster.Backends() {
		backendNames = append(backendNames, b.Name()+" ("+b.Summary()+")")
		for _, o := range b.Options() {
			if o.CaseKey || f.Lookup(o.Name) != nil {
				continue
			}
			help := o.Help
			if o.Bool {
				v := f.Bool(o.Name, o.Default == "true", help)
				bopts[o.Name] = func() string { return strconv.FormatBool(*v) }
				continue
			}
			v := f.String(o.Name, o.Default, help)
			bopts[o.Name] = func() string { return *v }
		}
	}
	f.StringVar(&backend, "backend", "lab", "where pods live: "+strings.Join(backendNames, ", ")+
		"; several, comma-separated (kube,lab), measure every case on each in one run, paired by round against the first's")
	f.StringVar(&out, "out", "", "run directory (default runs/<UTC timestamp>-<plan or scenario>)")
	f.StringVar(&resume, "resume", "", "finish the run in DIR, skipping trials already recorded")
	f.StringVar(&output, "output", "table", "what to print at the end: table or json")
	sf.register(f)
	return cmd
}

func runRun(cmd *cobra.Command, planFile string, set map[string]string, bs runBackends, opts map[string]map[string]string, out, resume, output string, sf *settingsFlags) error {
	if output != "table" && output != "json" {
		return usagef("--output: unknown format %q (valid: table, json)", output)
	}
	var (
		cases    []result.CaseSpec
		runID    string
		settings runner.Settings
		err      error
	)
	if resume != "" {
		if planFile != "" || len(set) > 0 || out != "" {
			return usagef("--resume takes no --plan, --out or case flags: the run directory records its cases")
		}
		if runID, cases, settings, err = runner.LoadPlan(resume); err != nil {
			return usageError{err.Error()}
		}
		out = resume
		if on, err := backendsOf(cases); err == nil && on.String() != bs.String() {
			return usagef("--resume %s: the run is on the %s backend, not %s (drop --backend)", resume, on, bs)
		}
	} else if cases, runID, err = expandCases(planFile, set, bs); err != nil {
		return err
	}
	if settings, err = sf.settings(cmd, settings, resume != ""); err != nil {
		return err
	}
	if resume == "" && out != "" {
		runID = filepath.Base(filepath.Clean(out))
		if _, err := os.Stat(filepath.Join(out, result.TrialsFile)); err == nil {
			return usagef("--out %s already holds a run: use --resume %s to finish it, or another --out", out, out)
		}
	}
	if err := bs.configure(cmd.Context(), opts, runID, cases); err != nil {
		return err
	}
	sum, out, err := measure(cmd, bs, cases, runID, out, settings, resume != "")
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if output == "json" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		fmt.Fprintln(w, string(b))
		if err := writeRunReports(cmd.ErrOrStderr(), out); err != nil {
			return err
		}
		return failedCases(sum, out)
	}
	if err := report.Table(w, sum, report.Style{Color: report.IsTerminal(w)}); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nresults: %s (results.jsonl, summary.json, summary.csv)\n", out)
	if err := writeRunReports(w, out); err != nil {
		return err
	}
	return failedCases(sum, out)
}

// measure runs checked cases into out ("" = a fresh runs/<runID>): it locks the run
// directory, records the plan (unless resuming), waits for the host's measuring lock, runs
// the rounds and tears down on SIGINT, SIGTERM or SIGHUP (exit 130, with how to resume).
func measure(cmd *cobra.Command, bs runBackends, cases []result.CaseSpec, runID, out string, settings runner.Settings, resume bool) (result.Summary, string, error) {
	var err error
	if !resume && out == "" {
		// A directory of its own, even for two runs started in the same second.
		if out, err = runlock.NewDir(filepath.Join("runs", runID)); err != nil {
			return result.Summary{}, out, err
		}
		runID = filepath.Base(out)
	}
	dirLock, err := runlock.Dir(out, "cnibench run "+runID)
	if err != nil {
		if errors.Is(err, runlock.ErrBusy) {
			return result.Summary{}, out, usageError{err.Error() + ": wait for it to end, or use another --out"}
		}
		return result.Summary{}, out, err
	}
	defer dirLock.Release()
	if !resume {
		if err := runner.SavePlan(out, runID, cases, settings); err != nil {
			return result.Summary{}, out, err
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	stderr := cmd.ErrOrStderr()
	tty := false
	if f, ok := stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	hostLock, err := runlock.Host(ctx, "cnibench run "+out, func(holder string) {
		fmt.Fprintf(stderr, "waiting: another run is measuring on this host: %s (one run measures at a time)\n", holder)
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "interrupted before measuring; start it later with: cnibench run --resume %s\n", out)
			return result.Summary{}, out, exitError{130}
		}
		return result.Summary{}, out, err
	}
	defer hostLock.Release()
	opt := runner.Options{
		Dir: out, RunID: runID, Environment: environment(os.Args[1:]), Progress: runner.NewProgress(stderr, tty),
		NewCluster: bs.newCluster, Standing: bs[0].Standing(), Standings: bs.standings(), Settings: settings,
	}
	fmt.Fprintf(stderr, "run %s -> %s (pid %d; order %s, seed %d)\n", runID, out, os.Getpid(), settings.Order, settings.Seed)
	sum, err := runner.Run(ctx, cases, opt)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "interrupted: clusters torn down, trials so far kept in %s; finish with: cnibench run --resume %s\n", out, out)
		return result.Summary{}, out, exitError{130}
	}
	return sum, out, err
}

// failedCases makes a run whose cases failed (not skipped) exit 1, naming them.
func failedCases(sum result.Summary, out string) error {
	var failed []string
	for _, r := range sum.Results {
		if r.Status == "failed" {
			failed = append(failed, r.Case.ID)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d case(s) failed (%s): see the reasons in %s/summary.json; rerun them with --resume %s", len(failed), strings.Join(failed, ", "), out, out)
	}
	return nil
}

// expandCases turns --plan and the case flags into the cases the backends run; errors are
// usage errors.
func expandCases(planFile string, set map[string]string, bs runBackends) ([]result.CaseSpec, string, error) {
	over, err := plan.FromFlags(set)
	if err != nil {
		return nil, "", usageError{err.Error()}
	}
	var groups []plan.Group
	name := ""
	if planFile != "" {
		if groups, err = plan.Load(planFile); err != nil {
			return nil, "", usageError{err.Error()}
		}
		name = plan.Name(planFile)
	} else if set["scenario"] == "" {
		return nil, "", usagef("nothing to run: give --plan FILE or --scenario S (try: cnibench run --plan plans/quick.yaml)")
	} else {
		name = set["scenario"]
	}
	groups = plan.Merge(groups, over)
	cases, err := bs.resolve(func(backend string) ([]result.CaseSpec, error) {
		cases, err := plan.Expand(groups, catalog(), backend, plan.BuiltinDefaults())
		if err != nil {
			return nil, usageError{err.Error()}
		}
		if len(cases) == 0 {
			return nil, usagef("the plan expands to no cases")
		}
		return cases, nil
	})
	if err != nil {
		return nil, "", err
	}
	return cases, time.Now().UTC().Format("20060102T150405Z") + "-" + name, nil
}
