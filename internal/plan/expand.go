package plan

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/result"
)

// Expand validates the groups (Validate with each group's own Source; each case passes its
// scenario's Check) and returns their
// cases in order: groups in file order, then dataplane > placement > protocol > services >
// policies > pods > replicas > proxy > policy > nf > chain-length > rules >
// external-traffic-policy > vnf > cpu-limit > cpu-isolation > frame-size > lb > search > change > sync >
// noisy > noisy-cpu-limit > streams > msg-size > fragment > copy. Dataplane x
// placement combinations the scenario's Valid rejects are dropped. The underlay MTU and node count are case labels (in
// the id when not the defaults), so a plan can sweep them; copies (default 1) plans each case
// that many times, the later copies with "/copy=N" in the id. A case whose ID an earlier case
// already has is dropped (planned once), unless the two differ in a label or in a setting
// (repeat, duration, warmup, cpus): that is an error naming both groups, since their results
// would be mixed up. A group that names proxies or policies gets them in its ids
// (Case.WithParts).
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
			cs.ID = cs.WithParts(g.Proxy != nil, g.Policy != nil)
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
// dimension outermost), with the copy number when copies > 1.
func (res resolved) cases(scen, backend string, copies int) []result.Case {
	cs := []result.Case{{Scenario: scen, Backend: backend}}
	cs = along(cs, res.dataplanes, func(c *result.Case, v string) { c.Dataplane = v })
	cs = along(cs, res.placements, func(c *result.Case, v string) { c.Placement = v })
	cs = along(cs, res.protocols, func(c *result.Case, v string) { c.Protocol = v })
	cs = along(cs, res.services, func(c *result.Case, v int) { c.Services = v })
	cs = along(cs, res.policies, func(c *result.Case, v int) { c.Policies = v })
	cs = along(cs, res.pods, func(c *result.Case, v int) { c.Pods = v })
	cs = along(cs, res.replicas, func(c *result.Case, v int) { c.Replicas = v })
	cs = along(cs, res.proxies, func(c *result.Case, v string) { c.Proxy = v })
	cs = along(cs, res.policyNames, func(c *result.Case, v string) { c.Policy = v })
	cs = along(cs, res.nfs, func(c *result.Case, v string) { c.NF = v })
	cs = along(cs, res.lengths, func(c *result.Case, v int) { c.ChainLength = v })
	cs = along(cs, res.rules, func(c *result.Case, v int) { c.Rules = v })
	cs = along(cs, res.etps, func(c *result.Case, v string) { c.ExternalTrafficPolicy = v })
	cs = along(cs, res.vnfs, func(c *result.Case, v string) { c.VNF = v })
	cs = along(cs, res.cpuLimits, func(c *result.Case, v int) { c.CPULimit = v })
	cs = along(cs, res.isolations, func(c *result.Case, v string) { c.CPUIsolation = v })
	cs = along(cs, res.frameSizes, func(c *result.Case, v int) { c.FrameSize = v })
	cs = along(cs, res.lbs, func(c *result.Case, v string) { c.LB = v })
	cs = along(cs, res.searches, func(c *result.Case, v string) { c.Search = v })
	cs = along(cs, res.changes, func(c *result.Case, v string) { c.Change = v })
	cs = along(cs, res.syncs, func(c *result.Case, v string) { c.Sync = v })
	cs = along(cs, res.noisy, func(c *result.Case, v int) { c.Noisy = v })
	cs = along(cs, res.noisyLimits, func(c *result.Case, v int) { c.NoisyCPULimit = v })
	// One stream is the default: such a case carries 0, as one of a plan that sets none, so
	// both have one id and the same labels.
	cs = along(cs, res.streams, func(c *result.Case, v int) {
		if c.Streams = v; v == 1 {
			c.Streams = 0
		}
	})
	cs = along(cs, res.msgSizes, func(c *result.Case, v int) { c.MsgSize = v })
	cs = along(cs, res.fragments, func(c *result.Case, v string) { c.Fragment = v })
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
