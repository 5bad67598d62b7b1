// Package scenario holds one file per scenario. Scenarios are written only against
// cluster.Cluster: they never know which backend they run on.
package scenario

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
)

// Options are the per-case knobs the runner passes.
type Options struct {
	CPUs [2]int // client CPU, server CPU
	// Name tells apart the fixtures that stand in one cluster at once: their pods are named
	// after it ("f3-client"); "" when the fixture has its cluster to itself.
	Name string
	// NoAccount turns the backend's per-CPU, per-role and per-hop accounting of each trial
	// off (cluster.Accounter); the node's busy, softirq and steal shares are kept.
	NoAccount bool
	// Trace asks the accounting for per-hop latency too (cluster.TraceHops; "": none).
	Trace string
	// Amplify > 1 makes the accounting's sampler look that many times as often
	// (cluster.AccountPath.Amplify).
	Amplify int
}

// accountAsk is what a fixture asks of each trial's accounting.
type accountAsk struct {
	on      bool   // account (Options.NoAccount off)
	trace   string // cluster.AccountPath.Trace
	amplify int    // cluster.AccountPath.Amplify
}

func askOf(opt Options) accountAsk {
	return accountAsk{on: !opt.NoAccount, trace: opt.Trace, amplify: opt.Amplify}
}

// Measurement is one trial's outcome.
type Measurement struct {
	Metrics map[string]float64
	Raw     []byte // the tool's output, kept next to results.jsonl
	// Server and Client are the command lines the trial ran (the server's started at set-up),
	// recorded with the trial so a report can show what was measured, as seed 001's tables do.
	Server, Client []string
	// Accounting is where the trial's CPU time and packets went (nil: not accounted).
	Accounting *account.Trial
}

// Fixture is a case set up and ready to run trials.
type Fixture interface {
	Trial(ctx context.Context, durationS int) (Measurement, error)
	Close(ctx context.Context) error
}

// Info describes a scenario for planning and `cnibench list`.
type Info struct {
	Summary           string
	Dataplanes        []string // allowed (nil: any lab preset)
	DefaultDataplanes []string
	Placements        []string
	Protocols         []string
	DefaultProtocols  []string
	// Params are the keys of the case parameters the scenario uses (internal/param: services,
	// policies, pods, ...), besides those it declares.
	Params []string
	// Declares are case parameters of the scenario's own (Register registers them; the
	// scenario uses them): their plan keys, flags, labels, ids and columns follow.
	Declares []param.Param
	// Tool is the measuring tool of every case of the scenario, whatever its protocol (the
	// case label "tool"); "" when the protocol's driver is the tool.
	Tool string
	// DefaultInts and DefaultStrs are the values of Int parameters ("chain-length", "rules")
	// and of Word parameters ("nf", "external-traffic-policy") a group of the scenario that
	// does not set them gets (missing: the parameter's own default).
	DefaultInts map[string][]int
	DefaultStrs map[string][]string
	// Valid says whether a dataplane x placement combination exists.
	Valid func(dataplane, placement string) bool
	// Check rejects a case whose parameters do not fit together (nil: any case is fine); the
	// CLI reports it as bad input before building anything.
	Check func(c result.Case) error
	// Primary is the metric a case is judged by, when not the protocol's (result.Case.Primary).
	Primary func(c result.Case) string
	// NoBaseline: no baseline case measures what the scenario does (result.Case.BaselineID).
	NoBaseline bool
	// Charted are metrics besides the primary one that reports chart in sweeps (nil: none).
	Charted func(c result.Case) []string
	// Service says whether a case's client reaches its server through a Service (nil: only a
	// case that stands Services does; result.Case.ThroughService).
	Service func(c result.Case) bool
	// TrialSeconds estimates how long one trial of case c with trials of durationS seconds
	// takes, for a scenario whose trial is more than one run of its tool (nil: durationS and
	// the tool's own overhead).
	TrialSeconds func(c result.Case, durationS int) float64
	// Exclusive says that a case's fixture cannot share its cluster with other fixtures: it
	// changes the data plane for every pod (NetworkPolicies selecting by role) or takes a
	// node's own ports (host-network servers). nil: fixtures share.
	Exclusive func(c result.Case) bool
}

// Shares tells whether case c's fixture may stand in one cluster beside other fixtures: a case
// that loads the data plane (Services, policies, pods, replicas) or that its scenario calls
// exclusive stands alone, as does a case of an unknown scenario.
func Shares(c result.Case) bool {
	if c.Load() > 0 {
		return false
	}
	sc, err := Get(c.Scenario)
	if err != nil {
		return false
	}
	ex := sc.Info().Exclusive
	return ex == nil || !ex(c)
}

// always is Info.Service of a scenario whose every case goes through a Service.
func always(result.Case) bool { return true }

// Scenario is a topology plus a workload.
type Scenario interface {
	Name() string
	Info() Info
	// Setup creates the case's pods and servers in cl.
	Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error)
}

var registry = map[string]Scenario{}

// Register makes a scenario known by its name: each scenario registers itself from init (a
// test may register one of its own). A second scenario of the same name is a programming
// error.
func Register(s Scenario) {
	if _, dup := registry[s.Name()]; dup {
		panic("scenario: " + s.Name() + " registered twice")
	}
	registry[s.Name()] = s
	info := s.Info()
	for _, p := range info.Declares {
		param.Register(p)
	}
	result.RegisterScenario(s.Name(), result.Judge{Primary: info.Primary, NoBaseline: info.NoBaseline, Charted: info.Charted, Service: info.Service})
}

// Uses are the keys of the case parameters a scenario uses: its Params and those it declares.
func Uses(info Info) []string {
	out := slices.Clone(info.Params)
	for _, p := range info.Declares {
		if !slices.Contains(out, p.Key) {
			out = append(out, p.Key)
		}
	}
	return out
}

// Get returns a scenario by name.
func Get(name string) (Scenario, error) {
	if s, ok := registry[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown scenario %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// Names lists the scenarios, sorted.
func Names() []string {
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
