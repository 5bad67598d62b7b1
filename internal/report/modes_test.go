package report

import (
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// Cases that differ in a mode (n2s's externalTrafficPolicy) are different measurements: their
// own bar group, pivot row and sweep, never two cells of one row.
func TestModesKeepCasesApart(t *testing.T) {
	var rs []result.CaseResult
	for _, etp := range []string{"cluster", "local"} {
		c := result.Case{Scenario: "n2s", Dataplane: "calico", Placement: "intra", Protocol: "tcp", ExternalTrafficPolicy: etp}
		c.ID = c.MakeID()
		rs = append(rs, result.CaseResult{Case: c, Status: "ok", Metrics: map[string]result.MetricSummary{"throughput_bps": {N: 1, TrimmedMean: 1e9}}})
	}
	if a, b := groupLabel(rs[0].Case), groupLabel(rs[1].Case); a != "intra tcp etp=cluster" || b != "intra tcp etp=local" {
		t.Errorf("bar groups %q and %q", a, b)
	}
	p := buildPivot("n2s", rs, func(result.Case) bool { return true })
	if len(p.rows) != 2 || len(p.variants) != 1 || p.rows[1].scale != "etp=local" {
		t.Errorf("pivot rows %+v, variants %v: want a row per policy, one data plane", p.rows, p.variants)
	}
}
