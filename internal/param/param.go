// Package param is the table of case parameters: each knob a plan sweeps beyond the case's
// scenario, dataplane, placement and protocol is declared once here (table.go) or by the
// scenario that owns it (scenario.Info.Declares), and everything else follows the declaration:
// the plan key and its checks, the run command's flag and help, the expansion order, the
// case label (result.Case, its JSON key), the case id, the CSV column, the baseline a case is
// held against and the comparisons it takes part in.
package param

import (
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Kind is what a parameter's values are.
type Kind uint8

const (
	Int  Kind = iota // integers in Min..Max
	Word             // words from Words (or Values, or the catalog)
)

// Place is where a word parameter's value stands in a case id.
type Place uint8

const (
	// Mode: after the variant parts, as "ID=value" ("etp=local"); in the comparison key, so
	// cases of different modes are never compared as variants of one measurement.
	Mode Place = iota
	// Variant: right after the protocol, as "ID=value" ("nf=xdp"); what the case runs on,
	// so it is left out of the comparison key and reports give each value a column.
	Variant
	// Named: appended at the end of the id ("/proxy=nftables") only when the case's group
	// names the parameter (a lab part chosen in place of the preset's); a variant too.
	Named
)

// Compare is the comparison a parameter takes part in inside a run (stats.Compare).
type Compare uint8

const (
	// NoCompare: none of its own.
	NoCompare Compare = iota
	// Scale: the parameter loads the data plane; a case is compared against the least loaded
	// case of the run that differs from it only in scale parameters ("scale").
	Scale
	// Against: a case is compared against the first case of the run that differs from it
	// only in this parameter, under the parameter's key (partial against full sync: "sync").
	Against
)

// Param declares one case parameter.
type Param struct {
	Key   string // plan key and run flag ("frame-size")
	Label string // result.Case label: its JSON key and CSV column ("frame_size")
	Kind  Kind
	Help  string // the run flag's help
	// Order places the parameter in expansion order and in case ids (lower first); 0 puts a
	// parameter after every ordered one, in the order parameters were registered.
	Order int

	// Min and Max bound an Int parameter.
	Min, Max int
	// Default is an Int parameter's value in a case whose group and scenario set none (a
	// Word's is "").
	Default int
	// Neutral is an Int value that means the same as Default (one stream is the tool's
	// default): stored as Default, so both have one id and one set of labels. 0: none.
	Neutral int

	// Words are a Word parameter's allowed values; Values gives them when they are only known
	// at run time (the kinds a scenario knows). Neither: the plan catalog's, or any word.
	Words  []string
	Values func() []string

	// ID is the parameter's key in case ids ("size": "/size=256"); "" keeps it out. An Int
	// is in the id when it is neither 0 nor Neutral, after the words, in Order; a Word where
	// Place says.
	ID    string
	Place Place
	// Sweep: reports plot results against the parameter (an Int with an ID).
	Sweep bool

	// Load: the parameter counts in the case's load (result.Case.Load) by as much as its
	// value exceeds LoadBase (replicas past the first).
	Load     bool
	LoadBase int
	// Workload: the parameter shapes the traffic itself (streams, message size), so the
	// baseline a case is held against is measured with the same value.
	Workload bool
	Compare  Compare
}

// Known are the parameters declared so far, in id order; Lookup finds one by key.
var (
	mu    sync.RWMutex
	known []Param
	seq   = map[string]int{} // key -> registration number
)

// Register declares p. Registering the same key again with the same declaration is a no-op
// (scenarios that share a parameter may each contribute it); a different declaration of a
// known key, or one without a key, label or kind's bounds, is a programming error.
func Register(p Param) {
	mu.Lock()
	defer mu.Unlock()
	if err := p.check(); err != nil {
		panic("param: " + err.Error())
	}
	for _, q := range known {
		if q.Key == p.Key || q.Label == p.Label || (p.ID != "" && q.ID == p.ID) {
			if same(p, q) {
				return
			}
			panic(fmt.Sprintf("param: %q declared twice, differently (or its label or id key is taken by %q)", p.Key, q.Key))
		}
	}
	seq[p.Key] = len(seq)
	known = append(known, p)
	sort.SliceStable(known, func(i, j int) bool { return less(known[i], known[j]) })
}

func less(a, b Param) bool {
	oa, ob := a.Order, b.Order
	switch {
	case oa == 0 && ob == 0:
		return seq[a.Key] < seq[b.Key]
	case oa == 0:
		return false
	case ob == 0:
		return true
	}
	return oa < ob
}

func same(a, b Param) bool {
	return a.Key == b.Key && a.Label == b.Label && a.Kind == b.Kind && a.Help == b.Help && a.Order == b.Order &&
		a.Min == b.Min && a.Max == b.Max && a.Default == b.Default && a.Neutral == b.Neutral &&
		slices.Equal(a.Words, b.Words) && (a.Values == nil) == (b.Values == nil) && a.ID == b.ID && a.Place == b.Place &&
		a.Sweep == b.Sweep && a.Load == b.Load && a.LoadBase == b.LoadBase && a.Workload == b.Workload && a.Compare == b.Compare
}

func (p Param) check() error {
	switch {
	case p.Key == "" || p.Label == "":
		return fmt.Errorf("%+v: a parameter needs a key and a label", p)
	case p.Kind == Int && p.Min > p.Max:
		return fmt.Errorf("%s: Min %d > Max %d", p.Key, p.Min, p.Max)
	case p.Kind == Int && (p.Default < p.Min && p.Default != 0 || p.Default > p.Max):
		return fmt.Errorf("%s: Default %d out of %d..%d", p.Key, p.Default, p.Min, p.Max)
	case p.Kind == Word && (p.Load || p.Default != 0 || p.Neutral != 0):
		return fmt.Errorf("%s: a word has no load, default or neutral value", p.Key)
	}
	return nil
}

// All returns the declared parameters in order (expansion and id order).
func All() []Param {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(known)
}

// Lookup returns the parameter of key.
func Lookup(key string) (Param, bool) { return find(func(p Param) bool { return p.Key == key }) }

// ByLabel returns the parameter of label.
func ByLabel(label string) (Param, bool) { return find(func(p Param) bool { return p.Label == label }) }

func find(match func(Param) bool) (Param, bool) {
	mu.RLock()
	defer mu.RUnlock()
	for _, p := range known {
		if match(p) {
			return p, true
		}
	}
	return Param{}, false
}

// Keys returns the keys of the declared parameters, in order.
func Keys() []string {
	var out []string
	for _, p := range All() {
		out = append(out, p.Key)
	}
	return out
}

// Allowed are the values a Word parameter takes: its Words, else its Values(), else
// catalog (the plan's catalog of what this build has; nil: any word).
func (p Param) Allowed(catalog []string) []string {
	switch {
	case p.Words != nil:
		return p.Words
	case p.Values != nil:
		return p.Values()
	}
	return catalog
}

// Store is the value a case stores for v: Neutral is stored as Default.
func (p Param) Store(v int) int {
	if p.Neutral != 0 && v == p.Neutral {
		return p.Default
	}
	return v
}

// InID tells whether an Int value is in the case id (neither 0 nor Neutral).
func (p Param) InID(v int) bool {
	return p.ID != "" && v != 0 && v != p.Neutral
}

// Shown is the value an Int shows in reports: Neutral for 0 when it has one (a case of one
// stream stores 0).
func (p Param) Shown(v int) int {
	if v == 0 && p.Neutral != 0 {
		return p.Neutral
	}
	return v
}

// LoadOf is what an Int value adds to the case's load.
func (p Param) LoadOf(v int) int {
	if !p.Load {
		return 0
	}
	return max(v-p.LoadBase, 0)
}
