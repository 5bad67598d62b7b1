package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sort"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/doctor"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
	"github.com/cnibench/cnibench/internal/names"
	"github.com/cnibench/cnibench/internal/result"
)

// Backend is the lab as a cluster.Backend: every case builds its cluster from namespaces on
// this host, with the data-plane parts of its labels.
type Backend struct{}

func init() { cluster.RegisterBackend(Backend{}) }

// Name implements cluster.Backend.
func (Backend) Name() string { return "lab" }

// Summary implements cluster.Backend.
func (Backend) Summary() string { return "network namespaces on this host" }

// Options implements cluster.Backend: the lab has none beyond the plan keys.
func (Backend) Options() []cluster.Option { return nil }

// Configure implements cluster.Backend.
func (Backend) Configure(opts map[string]string, runID string) error {
	for name := range opts {
		return cluster.BadInput("--%s is not a lab option", name)
	}
	return nil
}

// Dataplanes implements cluster.Backend: the presets (scenarios name the baselines).
func (Backend) Dataplanes() []string { return dataplane.PresetNames() }

// Resolve implements cluster.Backend: the labels carry the effective parts (the preset's
// attach and overlay; the proxy and policy engine given, else the preset's own where built).
func (Backend) Resolve(cases []result.CaseSpec) ([]result.CaseSpec, error) {
	out := make([]result.CaseSpec, len(cases))
	for i, cs := range cases {
		c := &cs.Case
		dp, err := dataplane.Resolve(c.Dataplane, c.Proxy, c.Policy)
		if err != nil && !errors.Is(err, cluster.ErrUnsupported) {
			return nil, cluster.BadInput("case %s: %v", c.ID, err)
		}
		if err == nil {
			c.Attach, c.Overlay, c.Proxy, c.Policy = dp.Labels()
		} else { // not built yet: preflight says so
			p, _ := dataplane.Lookup(c.Dataplane)
			c.Attach, c.Overlay = p.Attach, p.Overlay
			proxy, policy := p.Effective()
			if c.Proxy == "" {
				c.Proxy = proxy
			}
			if c.Policy == "" {
				c.Policy = policy
			}
		}
		c.Backend = "lab"
		out[i] = cs
	}
	return out, nil
}

// baseTools are the executables every lab case runs besides the measurement tools (taskset
// pins them, nsenter runs rule tools inside the nodes).
var baseTools = []string{"taskset", "nsenter"}

// Preflight implements cluster.Backend: root, the tools the cases run, each case's
// configuration (dataplane built, MTU budget) and the host capabilities of its parts, tried by
// the doctor. Nothing is created.
func (Backend) Preflight(ctx context.Context, cases []result.CaseSpec) error {
	if os.Geteuid() != 0 {
		return cluster.BadInput("the lab backend needs root (it creates network namespaces): run cnibench as root")
	}
	tools := map[string]bool{}
	for _, t := range baseTools {
		tools[t] = true
	}
	parts := map[string]dataplane.Parts{}
	for _, c := range cases {
		ts, err := driver.CaseTools(c.Case.Tool, c.Case.Protocol)
		if err != nil {
			return cluster.BadInput("case %s: %v", c.Case.ID, err)
		}
		for _, t := range ts {
			tools[t] = true
		}
		cfg := Config{Prefix: "cnbcheck", Dataplane: c.Case.Dataplane, Nodes: c.Case.Nodes, MTU: c.Case.MTU, Proxy: c.Case.Proxy, Policy: c.Case.Policy}
		dp, err := cfg.resolve()
		if err != nil {
			if p, lerr := dataplane.Lookup(cfg.Dataplane); lerr == nil && p.Missing() != "" {
				return cluster.BadInput("dataplane %s is not available: %s (see cnibench list)", p.Name, p.Missing())
			}
			return cluster.BadInput("dataplane %s: %v", cfg.Dataplane, err)
		}
		parts[dp.Preset.Name+": "+dp.String()] = dp
	}
	for _, t := range sortedKeys(tools) {
		if _, err := exec.LookPath(t); err != nil {
			how := "install it with `make deps` (scripts/install-deps.sh)"
			if ht, herr := hosttools.Get(t); herr == nil {
				how = ht.Install()
			}
			return cluster.BadInput("missing tool %s: %s", t, how)
		}
	}
	rep := doctor.Run(ctx)
	for _, k := range sortedKeys(parts) {
		dp := parts[k]
		if who, need, why := dp.Lacks(rep.Has); need != "" {
			return cluster.BadInput("dataplane %s: %s needs %s, which this host lacks: %s (see cnibench doctor)", dp.Preset.Name, who, need, why)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// NewCluster implements cluster.Backend: a lab with a fresh prefix.
func (Backend) NewCluster(ctx context.Context, k cluster.Key) (cluster.Cluster, error) {
	return Up(ctx, Config{Prefix: NewPrefix(), Dataplane: k.Dataplane, Nodes: k.Nodes, MTU: k.MTU, Proxy: k.Proxy, Policy: k.Policy, Sync: k.Sync})
}

// Standing implements cluster.Backend: labs are isolated from each other and cheap (a
// two-node lab with its pods is five namespaces, built in well under a second), so every case
// gets its own and up to 64 stand at once, together loaded with at most 40,000 Services,
// policies and silent pods, a server replica (an nginx and its 10 MB file) counting as 100.
func (Backend) Standing() cluster.Standing {
	return cluster.Standing{PerCase: true, MaxClusters: 64, MaxLoad: 40000, Cost: func(c result.Case) int {
		return c.Services + c.Policies + c.Pods + 100*max(c.Replicas-1, 0)
	}}
}

// NewPrefix returns a fresh object prefix: "cnb" and 5 random lowercase letters or digits.
func NewPrefix() string { return "cnb" + names.Random(names.Lower, 5) }
