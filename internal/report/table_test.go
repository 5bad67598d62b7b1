package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

func res(sc, dp, pl, proto string, metric string, v float64) result.CaseResult {
	c := result.Case{Scenario: sc, Dataplane: dp, Placement: pl, Protocol: proto}
	c.ID = c.MakeID()
	return result.CaseResult{Case: c, Status: "ok", Metrics: map[string]result.MetricSummary{
		metric: {N: 12, TrimmedMean: v, CI95Low: v * 0.98, CI95High: v * 1.02, CV: 0.03}}}
}

func TestTableRatiosToMatchingBaseline(t *testing.T) {
	s := result.Summary{Results: []result.CaseResult{
		res("baseline", "bare", "intra", "tcp", "throughput_bps", 20e9),
		res("baseline", "node2node", "inter", "tcp", "throughput_bps", 16e9),
		res("baseline", "node2node", "inter", "crr", "transactions_per_s", 4000),
		res("p2p", "flannel", "intra", "tcp", "throughput_bps", 15e9),
		res("p2p", "flannel", "inter", "tcp", "throughput_bps", 8e9),
		res("p2p", "flannel", "inter", "crr", "transactions_per_s", 3000),
		res("p2p", "calico", "intra", "crr", "transactions_per_s", 3000), // no bare crr baseline
		{Case: result.Case{ID: "p2p/cilium/inter/tcp"}, Status: "skipped", Reason: "dataplane cilium: not built"},
	}, Comparisons: []result.Comparison{
		{Case: "p2p/flannel/intra/tcp", Reference: "baseline/bare/intra/tcp", Kind: "baseline", Metric: "throughput_bps",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 0.74, CI95Low: 0.70, CI95High: 0.78}},
		{Case: "p2p/flannel/inter/crr", Reference: "baseline/node2node/inter/crr", Kind: "baseline", Metric: "transactions_per_s",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 0.98, CI95Low: 0.93, CI95High: 1.04}},
		{Case: "p2p/calico/intra/crr", Reference: "p2p/flannel/intra/crr", Kind: "dataplane", Metric: "transactions_per_s",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 1.21, CI95Low: 1.10, CI95High: 1.33}},
	}}
	s.Results[4].Disturbed, s.Results[4].Lost = 3, 1
	s.Results[5].Metrics["cpu_client_host_pct"] = result.MetricSummary{N: 12, TrimmedMean: 36}
	s.Results[5].Metrics["cpu_server_host_pct"] = result.MetricSummary{N: 12, TrimmedMean: 37}
	s.Results[3].Metrics["cpu_client_proc_pct"] = result.MetricSummary{N: 12, TrimmedMean: 88}
	s.Results[3].Metrics["cpu_server_proc_pct"] = result.MetricSummary{N: 12, TrimmedMean: 121}
	s.Results[6].Notes = []string{"cpu_server_host_pct = 512 left out"}
	var b bytes.Buffer
	if err := Table(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	row := func(id string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, id+" ") {
				return l
			}
		}
		t.Fatalf("no row %s in\n%s", id, out)
		return ""
	}
	for id, want := range map[string]string{
		"p2p/flannel/intra/tcp": "0.74x [0.70, 0.78]",               // paired
		"p2p/flannel/inter/crr": "0.98x [0.93, 1.04] no difference", // the interval holds 1
		"p2p/flannel/inter/tcp": "0.50x (unpaired)",                 // 8 / 16 without a paired comparison
	} {
		if r := row(id); !strings.HasSuffix(strings.TrimSpace(r), want) {
			t.Errorf("%s: want ratio %s: %q", id, want, r)
		}
	}
	if r := row("p2p/calico/intra/crr"); !strings.HasSuffix(strings.TrimSpace(r), "-") {
		t.Errorf("ratio without a baseline: %q", r)
	}
	if r := row("p2p/flannel/inter/tcp"); !strings.Contains(r, "8.00 Gbit/s") || !strings.Contains(r, "2.0%") || !strings.Contains(r, "12 (-3 dist., 1 lost)") {
		t.Errorf("value, CI or trials: %q", r)
	}
	if r := row("p2p/flannel/inter/crr"); !strings.Contains(r, "36/37 %host") {
		t.Errorf("host CPU: %q", r)
	}
	if r := row("p2p/flannel/intra/tcp"); !strings.Contains(r, "88/121 %core") {
		t.Errorf("process CPU: %q", r)
	}
	for _, want := range []string{
		"p2p/calico/intra/crr vs p2p/flannel/intra/crr (dataplane, transactions_per_s): 1.21x [1.10, 1.33]",
		"disturbed trials: 3 (", "1 could not be made good",
		"p2p/calico/intra/crr: cpu_server_host_pct = 512 left out",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("steal warning without steal:\n%s", out)
	}
	s.Results[3].Metrics["cpu_node_steal_pct"] = result.MetricSummary{N: 12, Mean: 22}
	b.Reset()
	_ = Table(&b, s)
	if !strings.Contains(b.String(), "during 1 case(s)") || !strings.Contains(b.String(), "p2p/flannel/intra/tcp 22%") {
		t.Errorf("no steal warning:\n%s", b.String())
	}
	if r := row("p2p/cilium/inter/tcp"); !strings.Contains(r, "skipped") || !strings.Contains(r, "not built") {
		t.Errorf("skipped row: %q", r)
	}
}

// A converged column appears when the run had a CI target.
func TestTableConvergence(t *testing.T) {
	r := res("p2p", "flannel", "inter", "tcp", "throughput_bps", 8e9)
	r.Convergence = &result.Convergence{TargetPct: 5, HalfWidthPct: 7.5, Trials: 48, Reason: "reached --max-repeat 48 trials"}
	var b bytes.Buffer
	if err := Table(&b, result.Summary{Results: []result.CaseResult{r}}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "CONVERGED") || !strings.Contains(out, "no (7.5% > 5% after 48 trials: reached --max-repeat 48 trials)") {
		t.Errorf("convergence:\n%s", out)
	}
}
