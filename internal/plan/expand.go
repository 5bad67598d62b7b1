package plan

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
)

// Expand validates the groups (Validate with each group's own Source; each case passes its
// scenario's Check) and returns their cases in order: groups in file order, then dataplane >
// placement > protocol > the case parameters in their order (internal/param: services >
// policies > pods > replicas > proxy > ... > fragment) > copy. Dataplane x
// placement combinations the scenario's Valid rejects are dropped. The underlay MTU and node count are case labels (in
// the id when not the defaults), so a plan can sweep them; copies (default 1) plans each case
// that many times, the later copies with "/copy=N" in the id. A case whose ID an earlier case
// already has is dropped (planned once), unless the two differ in a label or in a setting
// (repeat, duration, warmup, cpus): that is an error naming both groups, since their results
// would be mixed up. A group that names parts (proxies, policy engines: param.Named) gets
// them in its ids (Case.WithParts).
//
// Keys no group sets come from d. A default CPU this host does not have wraps around
// (CPU 1 on a 1-CPU host is CPU 0), so the built-in defaults work everywhere; CPUs a plan or
// flag names are checked strictly.
func Expand(groups []Group, cat Catalog, backend string, d Defaults) ([]CaseSpec, error) {
	if err := Validate(groups, cat, ""); err != nil {
		return nil, err
	}
	if err := checkDefaults(d); err != nil {
		return nil, err
	}
	if cat.NumCPU > 0 {
		for k := range d.CPUs {
			d.CPUs[k] %= cat.NumCPU
		}
	}

	seen := map[string]int{}  // case ID -> index in out
	group := map[string]int{} // case ID -> the group that planned it
	var out []CaseSpec
	for gi := range groups {
		g := &groups[gi]
		c := checker{i: gi, g: g}
		info := cat.Scenarios[g.Scenario]
		res := resolveGroup(g, info, cat)
		spec := CaseSpec{
			Repeat:   intOr(g.Repeat, d.Repeat),
			Duration: intOr(g.Duration, d.Duration),
			Warmup:   intOr(g.Warmup, d.Warmup),
			CPUs:     d.CPUs,
		}
		mtu, nodes, copies := intOr(g.MTU, d.MTU), intOr(g.Nodes, d.Nodes), intOr(g.Copies, 1)
		if g.CPUs != nil {
			spec.CPUs = *g.CPUs
		}
		for _, cs := range res.cases(g.Scenario, backend, copies) {
			if info.Valid != nil && !info.Valid(cs.Dataplane, cs.Placement) {
				continue
			}
			switch {
			case info.Tool != "":
				cs.Tool = info.Tool
			case cat.Tools != nil:
				cs.Tool = cat.Tools(cs.Protocol)
			}
			cs.MTU, cs.Nodes = mtu, nodes
			cs.ID = cs.WithParts(slices.Collect(maps.Keys(g.Words))...)
			if info.Check != nil {
				if err := info.Check(cs); err != nil {
					return nil, c.fail("", -1, "case %s: %v", cs.ID, err)
				}
			}
			s := spec
			s.Case = cs
			if j, dup := seen[cs.ID]; dup {
				if err := conflict(c, group[cs.ID], out[j], s); err != nil {
					return nil, err
				}
				continue
			}
			seen[cs.ID], group[cs.ID] = len(out), gi
			out = append(out, s)
		}
	}
	return out, nil
}

// cases are the combinations of a group's dimensions in the documented order (the first
// dimension outermost; the case parameters in their order), with the copy number when
// copies > 1. A parameter's neutral value is stored as its default (param.Param.Store).
func (res resolved) cases(scen, backend string, copies int) []result.Case {
	cs := []result.Case{{Scenario: scen, Backend: backend}}
	cs = along(cs, res.dataplanes, func(c *result.Case, v string) { c.Dataplane = v })
	cs = along(cs, res.placements, func(c *result.Case, v string) { c.Placement = v })
	cs = along(cs, res.protocols, func(c *result.Case, v string) { c.Protocol = v })
	for _, p := range param.All() {
		if p.Kind == param.Int {
			cs = along(cs, res.ints[p.Key], func(c *result.Case, v int) { c.SetInt(p.Key, p.Store(v)) })
		} else {
			cs = along(cs, res.words[p.Key], func(c *result.Case, v string) { c.SetWord(p.Key, v) })
		}
	}
	if copies > 1 {
		var nums []int
		for n := 1; n <= copies; n++ {
			nums = append(nums, n)
		}
		cs = along(cs, nums, func(c *result.Case, v int) { c.Copy = v })
	}
	return cs
}

// along crosses cases with one more dimension: every case once per value, in order.
func along[T any](cases []result.Case, vals []T, set func(*result.Case, T)) []result.Case {
	out := make([]result.Case, 0, len(cases)*len(vals))
	for _, c := range cases {
		for _, v := range vals {
			set(&c, v)
			out = append(out, c)
		}
	}
	return out
}

func intOr(p *int, def int) int {
	if p != nil {
		return *p
	}
	return def
}

// conflict is the error for a case planned again (by group c) with the ID of an earlier case
// (planned by group prevGroup) but other labels or settings; nil when the two are the same.
func conflict(c checker, prevGroup int, prev, cs CaseSpec) error {
	what := ""
	switch {
	case prev.Case != cs.Case:
		what = fmt.Sprintf("labels (%+v, here %+v)", prev.Case, cs.Case)
	case prev.Repeat != cs.Repeat:
		what = fmt.Sprintf("repeat %d (here %d)", prev.Repeat, cs.Repeat)
	case prev.Duration != cs.Duration:
		what = fmt.Sprintf("duration %d (here %d)", prev.Duration, cs.Duration)
	case prev.Warmup != cs.Warmup:
		what = fmt.Sprintf("warmup %d (here %d)", prev.Warmup, cs.Warmup)
	case prev.CPUs != cs.CPUs:
		what = fmt.Sprintf("cpus %d,%d (here %d,%d)", prev.CPUs[0], prev.CPUs[1], cs.CPUs[0], cs.CPUs[1])
	default:
		return nil
	}
	return c.fail("", -1, "case %s is already planned by group [%d] with %s: a case has one setting per run (plan the other in a second run, or make it a different case)", cs.Case.ID, prevGroup, what)
}

// checkDefaults checks the caller's defaults with the same ranges as the plan keys.
func checkDefaults(d Defaults) error {
	for _, f := range []struct {
		key string
		v   int
	}{{"repeat", d.Repeat}, {"duration", d.Duration}, {"warmup", d.Warmup}, {"mtu", d.MTU}, {"nodes", d.Nodes}} {
		if r := ranges[f.key]; f.v < r.lo || f.v > r.hi {
			return &Error{Source: "defaults", Path: f.key, Msg: fmt.Sprintf("%d out of range (%d..%d)", f.v, r.lo, r.hi)}
		}
	}
	if msg := checkCPUs(d.CPUs, 0); msg != "" {
		return &Error{Source: "defaults", Path: "cpus", Msg: msg}
	}
	return nil
}
