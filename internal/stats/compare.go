package stats

import (
	"github.com/cnibench/cnibench/internal/result"
)

// Compare makes the paired comparisons inside a run, of each case's primary metric
// (Case.Primary) over the rounds both cases measured (trial k of every case runs in round k;
// see PairedRatio):
//   - "baseline": a pod result against its baseline (Case.BaselineID), when the run has it;
//   - "dataplane", "proxy", "policy", "nf": a case against the first case of the run that measures
//     the same thing (same CompareKey) on another variant, named by the part that differs;
//   - "scale": a case against the least loaded case (Case.Load) of the run that differs from
//     it only in scale (services, policies, pods, replicas, chain length, rules);
//   - "copy": a later copy of a case against its first (an A/A pair: they should not differ).
//
// Only ok trials count (the last record of a trial number wins, as in Aggregate);
// comparisons without a common round are left out. The order is the order of cases.
func Compare(cases []result.Case, trials []result.Trial) []result.Comparison {
	values := map[string]map[int]float64{} // case id -> trial -> primary metric
	primary := map[string]string{}
	for _, c := range cases {
		primary[c.ID] = c.Primary()
	}
	for _, t := range trials {
		pm, ok := primary[t.Case.ID]
		if !ok || t.Warmup {
			continue
		}
		if values[t.Case.ID] == nil {
			values[t.Case.ID] = map[int]float64{}
		}
		v, ok := t.Metrics[pm]
		if t.EffectiveStatus() != "ok" || !ok {
			delete(values[t.Case.ID], t.Trial)
			continue
		}
		values[t.Case.ID][t.Trial] = v
	}
	byID := map[string]result.Case{}
	first := map[string]result.Case{} // CompareKey -> the first case measuring it
	least := map[string]result.Case{} // scale-free key -> the least loaded case
	copy1 := map[result.Case]result.Case{}
	for _, c := range cases {
		byID[c.ID] = c
		if _, ok := first[c.CompareKey()]; !ok {
			first[c.CompareKey()] = c
		}
		if l, ok := least[unscaled(c)]; !ok || c.Load() < l.Load() {
			least[unscaled(c)] = c
		}
		if c.Copy <= 1 {
			copy1[withoutCopy(c)] = c
		}
	}
	var out []result.Comparison
	add := func(c, ref result.Case, kind string) {
		if c.ID == ref.ID || c.Primary() != ref.Primary() {
			return
		}
		if r := PairedRatio(values[c.ID], values[ref.ID]); r.N > 0 {
			out = append(out, result.Comparison{Case: c.ID, Reference: ref.ID, Kind: kind, Metric: c.Primary(), RatioSummary: r})
		}
	}
	for _, c := range cases {
		if b, ok := byID[c.BaselineID()]; ok {
			add(c, b, "baseline")
		}
		if c.Copy > 1 {
			if f, ok := copy1[withoutCopy(c)]; ok {
				add(c, f, "copy")
			}
			continue
		}
		if f := first[c.CompareKey()]; f.ID != c.ID {
			add(c, f, variantKind(c, f))
		}
		if l := least[unscaled(c)]; l.Load() < c.Load() {
			add(c, l, "scale")
		}
	}
	return out
}

// unscaled is a case's identity without its scale: the id of the case with no Services,
// policies, silent pods or replicas, and the variant it ran on.
func unscaled(c result.Case) string {
	u := c
	u.Services, u.Policies, u.Pods, u.Replicas, u.ChainLength, u.Rules = 0, 0, 0, 0, 0, 0
	return u.MakeID() + " " + c.Variant()
}

// withoutCopy is a case's labels but its copy number and id.
func withoutCopy(c result.Case) result.Case {
	c.Copy, c.ID = 0, ""
	return c
}

// variantKind names what differs between two variants of one measurement.
func variantKind(c, ref result.Case) string {
	switch {
	case c.Dataplane != ref.Dataplane:
		return "dataplane"
	case c.Proxy != ref.Proxy:
		return "proxy"
	case c.NF != ref.NF:
		return "nf"
	}
	return "policy"
}
