package plan

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/result"
)

// Expand validates the groups (Validate with each group's own Source; each case passes its
// scenario's Check) and returns their
// cases in order: groups in file order, then dataplane > placement > protocol > services >
// policies > pods > replicas > proxy > policy. Dataplane x placement combinations the
// scenario's Valid rejects are dropped. A case whose ID an earlier case already has is
// dropped (the first wins, with its repeat, duration, ...), unless the two cases differ in
// something the ID does not show: that is an error, since their results would be mixed up.
// A group that names proxies or policies gets them in its ids (Case.WithParts).
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

	seen := map[string]int{} // case ID -> index in out
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
			MTU:      intOr(g.MTU, d.MTU),
			Nodes:    intOr(g.Nodes, d.Nodes),
		}
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
											}
											cs.ID = cs.WithParts(g.Proxy != nil, g.Policy != nil)
											if info.Check != nil {
												if err := info.Check(cs); err != nil {
													return nil, c.fail("", -1, "case %s: %v", cs.ID, err)
												}
											}
											if j, dup := seen[cs.ID]; dup {
												if prev := out[j].Case; prev != cs {
													return nil, conflict(c, prev, cs)
												}
												continue
											}
											seen[cs.ID] = len(out)
											s := spec
											s.Case = cs
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
	return out, nil
}

func intOr(p *int, def int) int {
	if p != nil {
		return *p
	}
	return def
}

// conflict is the error for a case that has the ID of an earlier, different case.
func conflict(c checker, prev, cs result.Case) error {
	return c.fail("", -1, "case %s is already planned with different settings", cs.ID)
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
