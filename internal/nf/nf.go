// Package nf holds the network functions of service-function chains (seed 000 ch. 5): the
// kinds (each one file or package that registers itself), the one rule set every kind enforces
// (allow the measured flow, drop the rest), and the chain topology the lab builds from them:
// client -> NF 1 -> ... -> NF N -> server, each NF its own network namespace with two
// interfaces, "in" facing the client and "out" facing the server.
package nf

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Layer is how a kind sits in the chain.
type Layer int

const (
	// Routed kinds (layer 3) route between two subnets: the chain gives every hop a subnet,
	// the NF an address on each side and forwarding in its namespace; the client and server
	// route to each other through the first and last NF.
	Routed Layer = 3
	// Transparent kinds (layer 2) join their two interfaces without addresses: client and
	// server share one subnet and see each other as neighbours.
	Transparent Layer = 2
)

func (l Layer) String() string {
	if l == Routed {
		return "routed (layer 3)"
	}
	return "transparent (layer 2)"
}

// Env is where one NF of a chain runs.
type Env struct {
	// NS is the NF's network namespace (internal/netns names); In and Out are its interfaces
	// towards the client and towards the server, up, with their MTU set (addressed when the
	// kind is Routed).
	NS      string
	In, Out string
	// InPeer and OutPeer are the other ends of In and Out (the previous and next hop: the
	// client's or server's eth0, or a neighbouring NF's out0/in0). A kind may prepare them for
	// what it needs (a veth peer that receives XDP redirects needs GRO or an XDP program), and
	// must undo that on Close.
	InPeer, OutPeer Endpoint
	// Name is unique among the objects of the run and starts with the run's prefix: kinds name
	// what they create outside the namespace after it (pinned BPF objects, OVS databases).
	Name string
	// Dir is a scratch directory of this NF (removed with the chain; `lab clean` removes
	// leftovers): sockets, databases, rule files.
	Dir string
	// BPFDir is a directory on a bpf file system under the run's prefix where the kind pins
	// its programs and maps ("" when the chain has none: the kind then pins nothing).
	BPFDir string
	// CPU is the CPU a kind that runs a polling process or thread pins it to (-1: any).
	CPU int
}

// Endpoint is an interface in a namespace.
type Endpoint struct {
	NS, Dev string
}

// Instance is a running NF.
type Instance interface {
	// Close stops the NF and removes what it created (processes, pins, files). Idempotent.
	Close() error
}

// Kind is a network-function implementation.
type Kind interface {
	Name() string
	Summary() string
	Layer() Layer
	// Usable is nil when this host can run the kind, else an error saying why not (the runner
	// reports the cases as skipped with it).
	Usable() error
	// Start makes the NF in env enforce rules between env.In and env.Out, and forward what
	// they allow. On an error nothing it started is left.
	Start(ctx context.Context, env Env, rules RuleSet) (Instance, error)
}

// Pauser is an Instance that keeps a CPU busy for as long as it runs, traffic or not (a
// poll-mode driver). Pause stops it using any CPU (it forwards nothing meanwhile) and Resume
// lets it go on; a backend keeps such NFs paused except during the trials of their own chain,
// so they never take CPU from the trials of other cases.
type Pauser interface {
	Pause() error
	Resume() error
}

// Cleaner is a kind that leaves something outside its NF's namespace and scratch directory
// when its process is killed (a runtime directory of its own tool): `lab clean` asks every kind
// that is one what a prefix left and removes it.
type Cleaner interface {
	// Leftovers names what the NFs of a run prefix left on this host ("" = any run).
	Leftovers(prefix string) []string
	// Clean removes it. Idempotent.
	Clean(prefix string) error
}

// Cleaners are the registered kinds that are Cleaners.
func Cleaners() []Cleaner { return kindsAs[Cleaner]() }

// kindsAs are the registered kinds that implement T, sorted by name.
func kindsAs[T any]() []T {
	var out []T
	for _, n := range Names() {
		if c, ok := kinds[n].(T); ok {
			out = append(out, c)
		}
	}
	return out
}

var kinds = map[string]Kind{}

// Register makes a kind known by its name (from init). A second kind of the same name is a
// programming error.
func Register(k Kind) {
	if _, dup := kinds[k.Name()]; dup {
		panic("nf: kind " + k.Name() + " registered twice")
	}
	kinds[k.Name()] = k
}

// Get returns a kind by name, or an error listing the kinds.
func Get(name string) (Kind, error) {
	if k, ok := kinds[name]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown network-function kind %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// Names lists the registered kinds, sorted.
func Names() []string {
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
