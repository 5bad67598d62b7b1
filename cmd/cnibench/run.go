package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/doctor"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/kube"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/plan"
	"github.com/cnibench/cnibench/internal/report"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/runner"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// caseFlags are the run flags that are plan keys (same names as in plan files).
var caseFlags = []struct{ name, help string }{
	{"scenario", "scenario (see cnibench list)"},
	{"dataplane", "dataplane presets, comma-separated (e.g. flannel,calico; baseline: bare,node2node)"},
	{"placement", "placements: intra,inter"},
	{"protocol", "protocols: tcp,udp,rr,crr,udprr"},
	{"services", "Service counts to sweep (scenarios with Services)"},
	{"policies", "NetworkPolicy counts to sweep"},
	{"pods", "silent pod counts to sweep: pods beside the client and server that only load the data plane"},
	{"replicas", "server replica counts to sweep"},
	{"proxy", "Service implementations (override the preset's)"},
	{"policy", "policy engines (override the preset's)"},
	{"repeat", "trials per case (default 12)"},
	{"duration", "seconds per trial (default 10)"},
	{"warmup", "seconds of the warm-up trial the statistics skip; 0 = none (default 2)"},
	{"cpus", "CLIENT,SERVER CPUs the client and server are pinned to (default 0,1)"},
	{"mtu", "underlay MTU, 576..9000 (default 1500; pods get it less the overlay overhead)"},
	{"nodes", "lab: node count (default 2); kube: the nodes to use, A,B (default: two Ready, schedulable nodes)"},
}

// kubeFlags are the kube backend's options.
type kubeFlags struct {
	kubeconfig, image, nodes, kwok string
	tolerate                       bool
	fakeNodes                      int
}

func newRunCmd() *cobra.Command {
	var planFile, backend, out, resume, output string
	var kf kubeFlags
	vals := map[string]*string{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a plan (or the cases given by flags) and write results",
		Long: `Run benchmark cases and write DIR/results.jsonl (each trial as it ends), DIR/summary.json and
DIR/summary.csv, then print a table with each pod result as a ratio to its baseline.

Examples:
  cnibench run --plan plans/quick.yaml
  cnibench run --scenario p2p --dataplane flannel,calico --placement inter --protocol tcp,crr
  cnibench run --scenario p2s --dataplane calico --protocol tcp,rr
  cnibench run --backend kube --scenario p2p --nodes worker-1,worker-2 --fake-nodes 10 --pods 1000
  cnibench run --scenario baseline --dataplane bare --protocol tcp --repeat 5 --duration 5
  cnibench run --resume runs/20261122T071000Z-quick`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			set := map[string]string{}
			for name, v := range vals {
				if cmd.Flags().Changed(name) {
					set[name] = *v
				}
			}
			// On kube, --nodes names the nodes; on the lab it is a node count (a plan key).
			if nodes, ok := set["nodes"]; ok && backend == "kube" {
				if _, err := strconv.Atoi(strings.Split(nodes, ",")[0]); err == nil {
					return usagef("--nodes %s: on the kube backend --nodes names the nodes to use (A,B); the node count is a lab setting", nodes)
				}
				kf.nodes = nodes
				delete(set, "nodes")
			}
			if backend != "kube" && (kf.fakeNodes != 0 || kf.kwok != "") {
				return usagef("--fake-nodes and --kwok are kube backend options: add --backend kube")
			}
			if kf.fakeNodes < 0 || kf.fakeNodes > 1000 {
				return usagef("--fake-nodes %d: give 0..1000 fake nodes", kf.fakeNodes)
			}
			if kf.fakeNodes > 0 {
				if _, err := kube.KwokBinary(kf.kwok); err != nil {
					return usageError{err.Error()}
				}
			}
			return runRun(cmd, planFile, set, backend, out, resume, output, kf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&planFile, "plan", "", "plan file (YAML list of case groups); flags given too override its keys")
	for _, cf := range caseFlags {
		if cf.name == "scenario" {
			cf.help = "scenario: " + strings.Join(scenario.Names(), ", ")
		}
		vals[cf.name] = f.String(cf.name, "", cf.help)
	}
	f.StringVar(&backend, "backend", "lab", "where pods live: lab (network namespaces on this host) or kube")
	f.StringVar(&out, "out", "", "run directory (default runs/<UTC timestamp>-<plan or scenario>)")
	f.StringVar(&resume, "resume", "", "finish the run in DIR, skipping trials already recorded")
	f.StringVar(&output, "output", "table", "what to print at the end: table or json")
	f.StringVar(&kf.kubeconfig, "kubeconfig", "", "kube backend: kubeconfig (default $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&kf.image, "image", kube.DefaultImage, "kube backend: tools image (build it with 'cnibench image build')")
	f.IntVar(&kf.fakeNodes, "fake-nodes", 0, "kube backend: put silent pods on N kwok fake nodes, run for the run's lifetime and removed after")
	f.StringVar(&kf.kwok, "kwok", "", "kube backend: the kwok binary for --fake-nodes (default: kwok on PATH)")
	f.BoolVar(&kf.tolerate, "tolerate-taints", false, "kube backend: also use tainted nodes, tolerating their taints")
	return cmd
}

func runRun(cmd *cobra.Command, planFile string, set map[string]string, backend, out, resume, output string, kf kubeFlags) error {
	if output != "table" && output != "json" {
		return usagef("--output: unknown format %q (valid: table, json)", output)
	}
	if backend != "lab" && backend != "kube" {
		return usagef("--backend: unknown backend %q (valid: lab, kube)", backend)
	}
	var (
		cases []result.CaseSpec
		runID string
		err   error
	)
	if resume != "" {
		if planFile != "" || len(set) > 0 || out != "" {
			return usagef("--resume takes no --plan, --out or case flags: the run directory records its cases")
		}
		if runID, cases, err = runner.LoadPlan(resume); err != nil {
			return usageError{err.Error()}
		}
		out = resume
	} else {
		if cases, runID, err = expandCases(planFile, set, backend); err != nil {
			return err
		}
		if out == "" {
			out = filepath.Join("runs", runID)
		} else {
			runID = filepath.Base(filepath.Clean(out))
		}
		if _, err := os.Stat(filepath.Join(out, result.TrialsFile)); err == nil {
			return usagef("--out %s already holds a run: use --resume %s to finish it, or another --out", out, out)
		}
	}
	if len(cases) > 0 && cases[0].Case.Backend == "kube" {
		backend = "kube" // a resumed run keeps its backend
	}
	if backend == "kube" {
		if _, err := kube.LoadConfig(kf.kubeconfig); err != nil {
			return usagef("--backend kube: %v (give --kubeconfig FILE)", err)
		}
	} else if err := preflight(cases); err != nil {
		return err
	}
	if resume == "" {
		if err := runner.SavePlan(out, runID, cases); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stderr := cmd.ErrOrStderr()
	tty := false
	if f, ok := stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	opt := runner.Options{
		Dir: out, RunID: runID, Environment: environment(os.Args[1:]), Progress: runner.NewProgress(stderr, tty),
		NewCluster: func(ctx context.Context, k runner.ClusterKey) (cluster.Cluster, error) {
			if k.Backend == "kube" {
				return kube.New(ctx, kube.Config{Kubeconfig: kf.kubeconfig, RunID: runID, Image: kf.image,
					Nodes: plan.ParseList(kf.nodes), TolerateTaints: kf.tolerate, FakeNodes: kf.fakeNodes, Kwok: kf.kwok})
			}
			return lab.Up(ctx, lab.Config{Prefix: newPrefix(), Dataplane: k.Dataplane, Nodes: k.Nodes, MTU: k.MTU, Proxy: k.Proxy, Policy: k.Policy})
		},
	}
	fmt.Fprintf(stderr, "run %s -> %s\n", runID, out)
	sum, err := runner.Run(ctx, cases, opt)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "interrupted: lab torn down, trials so far kept in %s; finish with: cnibench run --resume %s\n", out, out)
		return exitError{130}
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if output == "json" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		fmt.Fprintln(w, string(b))
		return failedCases(sum, out)
	}
	if err := report.Table(w, sum); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nresults: %s (results.jsonl, summary.json, summary.csv)\n", out)
	return failedCases(sum, out)
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

// expandCases turns --plan and the case flags into cases; errors are usage errors.
func expandCases(planFile string, set map[string]string, backend string) ([]result.CaseSpec, string, error) {
	cat := catalog()
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
	cases, err := plan.Expand(groups, cat, backend, plan.BuiltinDefaults())
	if err != nil {
		return nil, "", usageError{err.Error()}
	}
	if len(cases) == 0 {
		return nil, "", usagef("the plan expands to no cases")
	}
	if backend == "kube" {
		for _, cs := range cases {
			if v := cs.Case.Variant(); v != cs.Case.Dataplane {
				return nil, "", usagef("case %s: proxy and policy choose lab implementations; a cluster runs its own (remove proxy/policy for --backend kube)", cs.Case.ID)
			}
		}
		return kubeCases(cases), time.Now().UTC().Format("20060102T150405Z") + "-" + name, nil
	}
	// The case labels carry the effective data-plane parts.
	for i := range cases {
		c := &cases[i].Case
		p, err := lab.Lookup(c.Dataplane)
		if err != nil {
			return nil, "", usageError{err.Error()}
		}
		c.Attach, c.Overlay = p.Attach, p.Overlay
		proxy, policy := p.Effective()
		if c.Proxy == "" {
			c.Proxy = proxy
		}
		if c.Policy == "" {
			c.Policy = policy
		}
	}
	return cases, time.Now().UTC().Format("20060102T150405Z") + "-" + name, nil
}

// kubeCases maps lab cases onto a real cluster: pod cases run on the cluster's own data plane
// (dataplane "cluster"), baselines keep their names (bare is skipped there: no bare veth pair
// on a cluster). Cases that become identical are planned once.
func kubeCases(cases []result.CaseSpec) []result.CaseSpec {
	var out []result.CaseSpec
	seen := map[string]bool{}
	for _, cs := range cases {
		c := &cs.Case
		if c.Scenario != "baseline" {
			c.Dataplane, c.Attach, c.Overlay, c.Proxy, c.Policy = "cluster", "", "", "", ""
		}
		c.ID = c.MakeID()
		if !seen[c.ID] {
			seen[c.ID] = true
			out = append(out, cs)
		}
	}
	return out
}

// preflight checks, before anything is created, that this host can run the cases: root, the
// tools they use, and the kernel features of their dataplanes. Failures are usage errors.
func preflight(cases []result.CaseSpec) error {
	if os.Geteuid() != 0 {
		return usagef("the lab backend needs root (it creates network namespaces): run cnibench as root")
	}
	tools := map[string]bool{"taskset": true}
	dps := map[string]bool{}
	for _, c := range cases {
		d, err := driver.For(c.Case.Protocol)
		if err != nil {
			return usageError{err.Error()}
		}
		tools[d.Name()] = true
		if d.Name() == "netperf" {
			tools["netserver"] = true
		}
		if d.Name() == "curl" {
			tools["nginx"], tools["/bin/busybox"] = true, true
		}
		if sc, err := scenario.Get(c.Case.Scenario); err == nil && sc.Info().Check != nil {
			if err := sc.Info().Check(c.Case); err != nil {
				return usagef("case %s: %v", c.Case.ID, err)
			}
		}
		// The lab configuration each case needs (dataplane known and built, MTU budget).
		cfg := lab.Config{Prefix: "cnbcheck", Dataplane: c.Case.Dataplane, Nodes: c.Nodes, MTU: c.MTU, Proxy: c.Case.Proxy, Policy: c.Case.Policy}
		if err := cfg.Validate(); err != nil {
			if p, lerr := lab.Lookup(cfg.Dataplane); lerr == nil && p.Missing != "" {
				return usagef("dataplane %s is not available: %s (see cnibench list)", p.Name, p.Missing)
			}
			return usagef("dataplane %s: %v", cfg.Dataplane, err)
		}
		dps[c.Case.Dataplane] = true
	}
	for t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return usagef("missing tool %s: install it with `make deps` (scripts/install-deps.sh)", t)
		}
	}
	rep := doctor.Run(context.Background())
	for dp := range dps {
		p, _ := lab.Lookup(dp) // validated above
		if need, why := lacks(p, rep); need != "" {
			return usagef("dataplane %s needs %s, which this host lacks: %s (see cnibench doctor)", dp, need, why)
		}
	}
	return nil
}

// newPrefix returns a fresh object prefix: "cnb" and 5 random lowercase letters or digits.
func newPrefix() string {
	const a = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = a[int(b[i])%len(a)]
	}
	return "cnb" + string(b)
}
