// Package plan turns a YAML plan file and/or command-line flags into a validated, expanded
// list of benchmark cases.
//
// A plan file is a YAML list of case groups. Each group names a scenario and the dimensions
// to sweep; its keys are the same as the command-line flags:
//
//   - scenario: baseline
//     dataplane: [bare, node2node]
//     protocol: [tcp, udp, rr, crr]
//     repeat: 3
//     duration: 2
//   - scenario: p2p
//     dataplane: [flannel, calico]
//     placement: [intra, inter]
//
// List keys may also be written as a single scalar ("protocol: tcp") or a comma-separated
// scalar ("protocol: tcp, udp"), as on the command line. Load parses a file into Groups,
// FromFlags builds a Group from flag values, Merge lays flags over a plan, Validate checks
// groups against a Catalog and Expand turns them into the ordered list of CaseSpecs.
//
// Every error is one line naming the source, the field path and the fix, e.g.
//
//	plans/x.yaml: [1].protocol[2]: unknown protocol "tcpp" for scenario p2p (valid: tcp, udp, rr, crr, udprr)
//	--repeat: 0 out of range (1..1000)
package plan

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"

	"gopkg.in/yaml.v3"
)

// Keys are the keys of a case group, in the order they are documented and checked: the case's
// scenario, dataplane, placement and protocol, the case parameters (internal/param, in their
// order) and the run's settings. They are also the names of the command-line flags (without
// "--").
func Keys() []string {
	keys := []string{"scenario", "dataplane", "placement", "protocol"}
	keys = append(keys, param.Keys()...)
	return append(keys, settingKeys...)
}

// settingKeys are the keys that set how a group's cases run, not what they are (mtu and nodes
// are labels of the lab's shape, one value per group).
var settingKeys = []string{"repeat", "duration", "warmup", "cpus", "mtu", "nodes", "copies"}

// Placements are the placements a scenario allows when its scenario.Info.Placements is nil.
var Placements = []string{"intra", "inter"}

// Catalog describes what this build and host can run.
type Catalog struct {
	Scenarios  map[string]scenario.Info     // the plan reads Dataplanes, Placements, Protocols, their defaults, Params, Valid and Check
	Dataplanes []string                     // lab presets
	Tools      func(protocol string) string // protocol -> tool name for Case.Tool; nil = ""
	NumCPU     int                          // CPUs of this host; 0 = unknown (only >= 0 is checked)
	// Words are the values this build has for Word parameters that declare none of their own
	// (param.Param.Allowed), by key: the lab's proxies and policy engines, the chains'
	// network-function kinds (nil or missing = any value is accepted).
	Words map[string][]string
}

// Group is one case group of a plan (or the flags). A nil slice or pointer means the key is
// unset: the scenario's default or Defaults applies, and Merge leaves the base value alone.
// An empty Scenario is unset too.
type Group struct {
	Scenario  string
	Dataplane []string
	Placement []string
	Protocol  []string
	// Ints and Words sweep the case parameters (internal/param) by key: a key is set when it
	// is in the map ("services": [1, 10]).
	Ints  map[string][]int
	Words map[string][]string

	Repeat   *int    // trials per case
	Duration *int    // seconds per trial
	Warmup   *int    // seconds of the warm-up trial; 0 = none
	CPUs     *[2]int // the client's and server's CPUs
	MTU      *int    // underlay MTU
	Nodes    *int
	Copies   *int // identical copies of each case (an A/A test); default 1

	// Source is where the group came from (the plan file path, or "flags"); Validate and
	// Expand name it in errors. Load and FromFlags set it.
	Source string

	// flagKeys are the keys Merge took from the flags; errors about them name the flag.
	flagKeys map[string]bool
}

// Defaults are the values used for keys no group sets.
type Defaults struct {
	Repeat, Duration, Warmup int
	CPUs                     [2]int
	MTU, Nodes               int
}

// BuiltinDefaults returns the built-in defaults: 12 trials of 10 s after a 2 s warm-up trial,
// client on CPU 0 and server on CPU 1, underlay MTU 1500, 2 nodes (result.DefaultMTU and
// result.DefaultNodes: a case id names its MTU and node count only when they differ).
func BuiltinDefaults() Defaults {
	return Defaults{Repeat: 12, Duration: 10, Warmup: 2, CPUs: [2]int{0, 1}, MTU: result.DefaultMTU, Nodes: result.DefaultNodes}
}

// CaseSpec is one expanded case with its run parameters (defined in result, where runs
// record it).
type CaseSpec = result.CaseSpec

// Error is a plan error: Source (a file path; empty for flags), Path (e.g. "[1].protocol[2]"
// or "--protocol") and Msg. Error() joins the non-empty parts with ": ".
type Error struct {
	Source, Path, Msg string
}

func (e *Error) Error() string {
	parts := make([]string, 0, 3)
	for _, s := range []string{e.Source, e.Path, e.Msg} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// Name is the plan name of a plan file: plans/quick.yaml -> "quick".
func Name(path string) string {
	if path == "" {
		return ""
	}
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// Merge lays the keys set in over (usually the flags) on every group of base: a set key of
// over replaces the same key in each group (scenario included). Errors about those keys then
// name the flag ("--repeat") instead of the plan file. With no base groups the result is over
// alone. base is not modified.
func Merge(base []Group, over Group) []Group {
	if len(base) == 0 {
		g := over.clone()
		if g.Source == "" {
			g.Source = "flags"
		}
		return []Group{g}
	}
	out := make([]Group, len(base))
	for i, b := range base {
		g := b.clone()
		for _, k := range Keys() {
			if !over.isSet(k) {
				continue
			}
			g.copyKey(k, &over)
			if g.flagKeys == nil {
				g.flagKeys = map[string]bool{}
			}
			g.flagKeys[k] = true
		}
		out[i] = g
	}
	return out
}

// MarshalYAML writes the group as a plan file's case group: its set keys in Keys order.
func (g Group) MarshalYAML() (any, error) {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range Keys() {
		if !g.isSet(k) {
			continue
		}
		var v any
		switch {
		case k == "scenario":
			v = g.Scenario
		case k == "cpus":
			v = *g.CPUs
		case g.strList(k) != nil:
			v = *g.strList(k)
		case g.intPtr(k) != nil:
			v = **g.intPtr(k)
		case g.Ints[k] != nil:
			v = g.Ints[k]
		default:
			v = g.Words[k]
		}
		var kn, vn yaml.Node
		if err := kn.Encode(k); err != nil {
			return nil, err
		}
		if err := vn.Encode(v); err != nil {
			return nil, err
		}
		if vn.Kind == yaml.SequenceNode {
			vn.Style = yaml.FlowStyle
		}
		m.Content = append(m.Content, &kn, &vn)
	}
	return m, nil
}

func ptrClone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func (g Group) clone() Group {
	c := g
	c.Dataplane = slices.Clone(g.Dataplane)
	c.Placement = slices.Clone(g.Placement)
	c.Protocol = slices.Clone(g.Protocol)
	c.Ints, c.Words = nil, nil
	for k, v := range g.Ints {
		c.setInts(k, slices.Clone(v))
	}
	for k, v := range g.Words {
		c.setWords(k, slices.Clone(v))
	}
	c.Repeat = ptrClone(g.Repeat)
	c.Duration = ptrClone(g.Duration)
	c.Warmup = ptrClone(g.Warmup)
	c.CPUs = ptrClone(g.CPUs)
	c.MTU = ptrClone(g.MTU)
	c.Nodes = ptrClone(g.Nodes)
	c.Copies = ptrClone(g.Copies)
	c.flagKeys = maps.Clone(g.flagKeys)
	return c
}

func (g *Group) setInts(k string, v []int) {
	if g.Ints == nil {
		g.Ints = map[string][]int{}
	}
	g.Ints[k] = v
}

func (g *Group) setWords(k string, v []string) {
	if g.Words == nil {
		g.Words = map[string][]string{}
	}
	g.Words[k] = v
}

// strList returns the list field of key k (nil for other keys).
func (g *Group) strList(k string) *[]string {
	switch k {
	case "dataplane":
		return &g.Dataplane
	case "placement":
		return &g.Placement
	case "protocol":
		return &g.Protocol
	}
	return nil
}

func (g *Group) intPtr(k string) **int {
	switch k {
	case "repeat":
		return &g.Repeat
	case "duration":
		return &g.Duration
	case "warmup":
		return &g.Warmup
	case "mtu":
		return &g.MTU
	case "nodes":
		return &g.Nodes
	case "copies":
		return &g.Copies
	}
	return nil
}

func (g *Group) isSet(k string) bool {
	if _, ok := g.Ints[k]; ok {
		return true
	}
	if _, ok := g.Words[k]; ok {
		return true
	}
	switch {
	case k == "scenario":
		return g.Scenario != ""
	case k == "cpus":
		return g.CPUs != nil
	case g.strList(k) != nil:
		return *g.strList(k) != nil
	case g.intPtr(k) != nil:
		return *g.intPtr(k) != nil
	}
	return false
}

func (g *Group) copyKey(k string, from *Group) {
	if v, ok := from.Ints[k]; ok {
		g.setInts(k, slices.Clone(v))
		return
	}
	if v, ok := from.Words[k]; ok {
		g.setWords(k, slices.Clone(v))
		return
	}
	switch {
	case k == "scenario":
		g.Scenario = from.Scenario
	case k == "cpus":
		g.CPUs = ptrClone(from.CPUs)
	case g.strList(k) != nil:
		*g.strList(k) = slices.Clone(*from.strList(k))
	case g.intPtr(k) != nil:
		*g.intPtr(k) = ptrClone(*from.intPtr(k))
	}
}
