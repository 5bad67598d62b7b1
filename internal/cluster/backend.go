package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/cnibench/cnibench/internal/result"
)

// ErrBadInput marks a user mistake found by a backend (an unknown dataplane, an option out of
// range, a host that lacks what a case needs): the CLI prints it on one line and exits 2,
// before anything is created.
var ErrBadInput = errors.New("bad input")

// BadInput returns an error wrapping ErrBadInput; its text is the message alone.
func BadInput(format string, args ...any) error {
	return badInput(fmt.Sprintf(format, args...))
}

type badInput string

func (e badInput) Error() string        { return string(e) }
func (e badInput) Is(target error) bool { return target == ErrBadInput }

// Key is what a cluster is built for: consecutive cases with the same key share one cluster.
type Key struct {
	Backend, Dataplane string
	// Proxy and Policy are the case labels: the Service implementation and policy engine a lab
	// is built with (empty on a real cluster, which runs its own).
	Proxy, Policy string
	// Sync is how a lab's proxy programs changes ("partial", "full"; "" = the lab's default).
	Sync       string
	MTU, Nodes int
}

// KeyOf is the key of a case's cluster.
func KeyOf(cs result.CaseSpec) Key {
	return Key{Backend: cs.Case.Backend, Dataplane: cs.Case.Dataplane, Proxy: cs.Case.Proxy, Policy: cs.Case.Policy, Sync: cs.Case.Sync, MTU: cs.Case.MTU, Nodes: cs.Case.Nodes}
}

// Option is one of a backend's own settings, given on the command line as --NAME.
type Option struct {
	Name    string // flag name without dashes
	Help    string
	Default string
	Bool    bool // a switch (--NAME alone means true)
	// CaseKey marks an option that is also a plan key of the same name: the backend takes
	// the value for itself when it is the one chosen (kube's --nodes names nodes; on the lab
	// --nodes is a node count and stays a plan key).
	CaseKey bool
}

// Backend is where pods live. It owns everything the CLI must know about it: its options,
// the dataplanes a plan may name on it, how planned cases map onto it, what the host must
// have before a run starts, and how a cluster is created for a key.
type Backend interface {
	Name() string
	// Summary is one line for help texts.
	Summary() string
	Options() []Option
	// Configure takes the values of the options the user gave (name -> value; a Bool option
	// given alone is "true") and the run's ID. Bad values are ErrBadInput.
	Configure(opts map[string]string, runID string) error
	// Dataplanes are the dataplanes a plan may name (a lab's presets and baselines).
	Dataplanes() []string
	// Resolve turns planned cases into the cases this backend runs: the effective data-plane
	// parts in the labels, cases that become identical planned once. Bad cases are ErrBadInput.
	Resolve(cases []result.CaseSpec) ([]result.CaseSpec, error)
	// Preflight checks, before anything is created, that the cases can run (privileges,
	// tools, kernel features, reachability). Failures are ErrBadInput.
	Preflight(ctx context.Context, cases []result.CaseSpec) error
	// NewCluster creates a cluster for a key. Errors wrapping ErrUnsupported skip the key's
	// cases with the reason.
	NewCluster(ctx context.Context, k Key) (Cluster, error)
	// Standing says how the runner may keep this backend's clusters up together while it
	// interleaves the trials of their cases.
	Standing() Standing
}

// Standing is how a backend's clusters may stand together during a run.
type Standing struct {
	// PerCase: the backend's clusters are isolated from each other (the lab: each in its own
	// namespaces, links and rule sets, cheap to build), so every case gets a cluster of its
	// own and many stand at once. Otherwise they share one data plane (a real cluster): cases
	// with the same Key share a cluster, and only cases that load it with nothing
	// (Case.Load() == 0) stand together; each loaded case has the data plane to itself.
	PerCase bool
	// MaxClusters and MaxLoad bound what stands at once with PerCase: the number of clusters
	// and the sum of their cases' Cost (nil: Case.Load, the Services, policies and pods).
	// Cases beyond run in later blocks; a case whose cost alone exceeds MaxLoad stands alone.
	MaxClusters, MaxLoad int
	Cost                 func(result.Case) int
}

var (
	backendsMu sync.Mutex
	backends   = map[string]Backend{}
)

// RegisterBackend makes a backend known by its name; a backend package calls it from init.
func RegisterBackend(b Backend) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, dup := backends[b.Name()]; dup {
		panic("cluster: backend " + b.Name() + " registered twice")
	}
	backends[b.Name()] = b
}

// Backends returns the registered backends sorted by name.
func Backends() []Backend {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	out := make([]Backend, 0, len(backends))
	for _, b := range backends {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// BackendNamed returns a registered backend; an unknown name is ErrBadInput.
func BackendNamed(name string) (Backend, error) {
	backendsMu.Lock()
	b, ok := backends[name]
	backendsMu.Unlock()
	if !ok {
		var names []string
		for _, b := range Backends() {
			names = append(names, b.Name())
		}
		return nil, BadInput("unknown backend %q (valid: %s)", name, strings.Join(names, ", "))
	}
	return b, nil
}

// ParseList splits a comma-separated flag value: "tcp, udp" -> [tcp udp]; "" -> nil. Items
// are trimmed and empty items dropped; one enclosing pair of brackets ("[tcp,udp]", as YAML
// flow lists and some flag libraries print lists) is removed.
func ParseList(s string) []string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
