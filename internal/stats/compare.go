package stats

import (
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
)

// Compare makes the paired comparisons inside a run, of each case's primary metric
// (Case.Primary) over the rounds both cases measured (trial k of every case runs in round k;
// see PairedRatio):
//   - "baseline": a pod result against its baseline (Case.BaselineID), when the run has it;
//   - "baseline-p99": the same for the P99 latency (latency_p99_us) of request/response cases,
//     whose primary metric is their rate (the tail is what a chain or a proxy adds);
//   - "backend", "dataplane", "proxy", "policy", "nf", "vnf": a case against the first case of
//     the run that measures the same thing (same CompareKey) on another variant, named by the
//     part that differs ("backend" in a run holding several: a lab case against the real
//     cluster's when the run lists the cluster's cases first);
//   - "scale": a case against the least loaded case (Case.Load) of the run that differs from
//     it only in scale (the parameters of param.Scale: services, policies, pods, replicas,
//     chain length, rules, noisy neighbours);
//   - a parameter of param.Against by its key ("sync"): a case against the first case of the
//     run that differs from it only in that parameter (partial against full programming of
//     the same change);
//   - "copy": a later copy of a case against its first (an A/A pair: they should not differ).
//
// Only ok trials count (the last record of a trial number wins, as in Aggregate);
// comparisons without a common round are left out. The order is the order of cases.
func Compare(cases []result.Case, trials []result.Trial) []result.Comparison {
	values := map[string]map[string]map[int]float64{} // metric -> case id -> trial -> value
	known := map[string]bool{}
	for _, c := range cases {
		known[c.ID] = true
	}
	for _, t := range trials {
		if !known[t.Case.ID] || t.Warmup {
			continue
		}
		for _, m := range []string{t.Case.Primary(), p99} {
			if values[m] == nil {
				values[m] = map[string]map[int]float64{}
			}
			if values[m][t.Case.ID] == nil {
				values[m][t.Case.ID] = map[int]float64{}
			}
			v, ok := t.Metrics[m]
			if t.EffectiveStatus() != "ok" || !ok {
				delete(values[m][t.Case.ID], t.Trial)
				continue
			}
			values[m][t.Case.ID][t.Trial] = v
		}
	}
	byID := map[string]result.Case{}
	first := map[string]result.Case{} // CompareKey -> the first case measuring it
	least := map[string]result.Case{} // scale-free key -> the least loaded case
	copy1 := map[result.Case]result.Case{}
	against := againstParams()
	refs := map[string]result.Case{} // key + the id without that parameter -> the first case with it
	for _, c := range cases {
		byID[c.ID] = c
		for _, p := range against {
			if k, ok := without(c, p); ok {
				if _, seen := refs[k]; !seen {
					refs[k] = c
				}
			}
		}
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
	addMetric := func(c, ref result.Case, kind, metric string) {
		if r := PairedRatio(values[metric][c.ID], values[metric][ref.ID]); r.N > 0 {
			out = append(out, result.Comparison{Case: c.ID, Reference: ref.ID, Kind: kind, Metric: metric, RatioSummary: r})
		}
	}
	add := func(c, ref result.Case, kind string) {
		if c.ID == ref.ID || c.Primary() != ref.Primary() {
			return
		}
		addMetric(c, ref, kind, c.Primary())
	}
	for _, c := range cases {
		if b, ok := byID[c.BaselineID()]; ok {
			add(c, b, result.KindBaseline)
			if c.Primary() == "transactions_per_s" && b.Primary() == c.Primary() {
				addMetric(c, b, "baseline-p99", p99)
			}
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
		for _, p := range against {
			if k, ok := without(c, p); ok && refs[k].ID != c.ID {
				add(c, refs[k], p.Key)
			}
		}
	}
	return out
}

// p99 is the tail latency compared with the baseline besides the primary metric.
const p99 = "latency_p99_us"

// unscaled is a case's identity without its scale: the id of the case with none of the
// scale parameters set (param.Scale: Services, policies, silent pods, replicas, ...), and the
// variant it ran on.
func unscaled(c result.Case) string {
	u := c
	for _, p := range param.All() {
		if p.Compare == param.Scale && p.Kind == param.Int {
			u.SetInt(p.Key, 0)
		}
	}
	return u.MakeID() + " " + c.Variant()
}

// againstParams are the parameters of param.Against.
func againstParams() []param.Param {
	var out []param.Param
	for _, p := range param.All() {
		if p.Compare == param.Against && p.ID != "" {
			out = append(out, p)
		}
	}
	return out
}

// without is the key of a case that sets parameter p: p's key and the case's id without
// the part "ID=value" of p; false when the case does not set p.
func without(c result.Case, p param.Param) (string, bool) {
	v := c.Text(p)
	if v == "" {
		return "", false
	}
	parts := strings.Split(c.Key(), "/")
	return p.Key + " " + strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == p.ID+"="+v }), "/"), true
}

// withoutCopy is a case's labels but its copy number and id.
func withoutCopy(c result.Case) result.Case {
	c.Copy, c.ID = 0, ""
	return c
}

// variantKind names what differs between two variants of one measurement: the backend, the
// dataplane, or the first Word parameter of a variant place (param.Named, param.Variant:
// "proxy", "policy", "nf", "vnf") that differs; "variant" when none does.
func variantKind(c, ref result.Case) string {
	switch {
	case c.Backend != ref.Backend:
		return "backend"
	case c.Dataplane != ref.Dataplane:
		return "dataplane"
	}
	for _, p := range param.All() {
		if p.Kind == param.Word && (p.Place == param.Named || p.Place == param.Variant) && c.Text(p) != ref.Text(p) {
			return p.Key
		}
	}
	return "variant"
}
