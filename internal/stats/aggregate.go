package stats

import (
	"fmt"
	"github.com/cnibench/cnibench/internal/account"
	"maps"
	"slices"

	"github.com/cnibench/cnibench/internal/result"
)

// Aggregate returns one CaseResult per case, in the order of cases.
//
// Trials are matched to cases by case id (Case.MakeID() when an id is empty). Warm-up
// trials are ignored. When a case has several trials with the same trial number (a trial
// re-run after a resume, or after it was disturbed) the one appended last wins. A trial's
// status is its Status field; an empty Status means "ok", or "failed" when Error is set; any
// status other than "ok", "skipped" and "disturbed" counts as "failed".
//
// Disturbed trials (the hypervisor took more CPU than the run allowed) never enter the
// statistics: Disturbed counts every disturbed record of the case, Lost the trial numbers
// whose last record is disturbed (not made good by a re-run). Notes are the distinct notes
// of the trials that count.
//
// The case status is:
//   - "ok" when at least one trial is ok; each metric is summarized with Summarize over the
//     ok trials that report it. If some trials were not ok, Reason says how many and gives
//     the first error, e.g. "1 of 12 trials failed: timeout".
//   - "skipped" when no trial is ok and at least one is skipped; Reason is the first
//     skipped trial's Error.
//   - "failed" otherwise; Reason is the first failed trial's Error, or "no trials recorded"
//     when the case has no (non-warm-up) trials.
//
// "First" means lowest trial number.
func Aggregate(cases []result.Case, trials []result.Trial) []result.CaseResult {
	byCase := map[string]map[int]result.Trial{}
	warmups := map[string]bool{}
	disturbed := map[string]int{}
	for _, t := range trials {
		id := t.Case.Key()
		if t.Warmup {
			warmups[id] = true
			continue
		}
		if t.EffectiveStatus() == "disturbed" {
			disturbed[id]++
		}
		if byCase[id] == nil {
			byCase[id] = map[int]result.Trial{}
		}
		byCase[id][t.Trial] = t
	}

	out := make([]result.CaseResult, 0, len(cases))
	for _, c := range cases {
		id := c.Key()
		cr := aggregateCase(c, byCase[id], warmups[id])
		cr.Disturbed = disturbed[id]
		out = append(out, cr)
	}
	return out
}

func aggregateCase(c result.Case, trials map[int]result.Trial, hadWarmups bool) result.CaseResult {
	cr := result.CaseResult{Case: c}
	if len(trials) == 0 {
		cr.Status = "failed"
		cr.Reason = "no trials recorded"
		if hadWarmups {
			cr.Reason = "no trials recorded (only warm-ups)"
		}
		return cr
	}

	var ok, skipped, failed, notOK []result.Trial
	for _, num := range slices.Sorted(maps.Keys(trials)) {
		t := trials[num]
		switch t.EffectiveStatus() {
		case "ok":
			ok = append(ok, t)
			for _, n := range t.Notes {
				if !slices.Contains(cr.Notes, n) {
					cr.Notes = append(cr.Notes, n)
				}
			}
			continue
		case "disturbed":
			cr.Lost++
			continue
		case "skipped":
			skipped = append(skipped, t)
		default:
			failed = append(failed, t)
		}
		notOK = append(notOK, t)
	}

	switch {
	case len(ok) == 0 && len(skipped) > 0:
		cr.Status = "skipped"
		cr.Reason = firstError(skipped, "skipped")
		return cr
	case len(ok) == 0 && len(failed) == 0:
		cr.Status = "failed"
		cr.Reason = fmt.Sprintf("all %d trials disturbed by hypervisor steal (see --max-steal, --max-reruns)", cr.Lost)
		return cr
	case len(ok) == 0:
		cr.Status = "failed"
		cr.Reason = firstError(failed, "failed")
		return cr
	}

	cr.Status = "ok"
	if len(notOK) > 0 {
		cr.Reason = fmt.Sprintf("%d of %d trials failed", len(notOK), len(trials))
		if first := firstError(notOK, ""); first != "" {
			cr.Reason += ": " + first
		}
	}

	values := map[string][]float64{}
	var accts []*account.Trial
	for _, t := range ok {
		for name, v := range t.Metrics {
			values[name] = append(values[name], v)
		}
		accts = append(accts, t.Accounting)
	}
	if cr.Accounting = account.Merge(accts); cr.Accounting != nil {
		if v := account.Judge(cr.Accounting); v.Bottleneck != "" {
			cr.Verdict = &v
		}
	}
	if len(values) > 0 {
		cr.Metrics = make(map[string]result.MetricSummary, len(values))
		for name, vs := range values {
			cr.Metrics[name] = Summarize(vs)
		}
	}
	return cr
}

// firstError returns the Error of the first trial that has one, else def.
func firstError(ts []result.Trial, def string) string {
	for _, t := range ts {
		if t.Error != "" {
			return t.Error
		}
	}
	return def
}
