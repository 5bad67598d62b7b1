package plan

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/result"
)

// Expand validates the groups (Validate with each group's own Source; each case passes its
// scenario's Check) and returns their
// cases in order: groups in file order, then dataplane > placement > protocol > services >
// policies > pods > replicas > proxy > policy > copy. Dataplane x placement combinations the
// scenario's Valid rejects are dropped. The underlay MTU and node count are case labels (in
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
		for _, dp := range res.dataplanes {
			for _, pl := range res.placements {
				if info.Valid != nil && !info.Valid(dp, pl) {
					continue
				}
				for _, proto := range res.protocols {
					tool := ""
					if cat.Tools != nil {
						tool = cat.Tools(proto)
					}
					for _, svc := range res.services {
						for _, pol := range res.policies {
							for _, pods := range res.pods {
								for _, rep := range res.replicas {
									for _, proxy := range res.proxies {
										for _, policy := range res.policyNames {
											for cp := 1; cp <= copies; cp++ {
												cs := result.Case{
													Scenario:  g.Scenario,
													Backend:   backend,
													Dataplane: dp,
													Proxy:     proxy,
													Policy:    policy,
													Placement: pl,
													Protocol:  proto,
													Tool:      tool,
													Services:  svc,
													Policies:  pol,
													Pods:      pods,
													Replicas:  rep,
													MTU:       mtu,
													Nodes:     nodes,
												}
												if copies > 1 {
													cs.Copy = cp
												}
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
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return out, nil
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
