package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// The Markdown report lists the paired comparisons of variants with their intervals and a
// verdict (a lab case against the real cluster's in a run on both backends), and leaves out
// the others (baselines, scale points: they have their own places).
func TestMarkdownPairedComparisons(t *testing.T) {
	c := func(scen, dp, backend, proto string) result.Case {
		k := result.Case{Scenario: scen, Backend: backend, Dataplane: dp, Placement: "inter", Protocol: proto}
		k.ID = k.MakeID()
		return k
	}
	cases := []result.Case{c("p2p", "cluster", "kube", "tcp"), c("p2p", "flannel", "lab", "tcp"), c("p2p", "cluster", "kube", "rr"), c("p2p", "flannel", "lab", "rr")}
	var rs []result.CaseResult
	for _, k := range cases {
		rs = append(rs, result.CaseResult{Case: k, Status: "ok", Metrics: map[string]result.MetricSummary{k.Primary(): {N: 5, Mean: 1, TrimmedMean: 1}}})
	}
	s := result.Summary{Run: "mixed", Results: rs, Comparisons: []result.Comparison{
		{Case: cases[1].ID, Reference: cases[0].ID, Kind: "backend", Metric: "throughput_bps", RatioSummary: result.RatioSummary{N: 5, Ratio: 0.9, CI95Low: 0.85, CI95High: 0.95}},
		{Case: cases[3].ID, Reference: cases[2].ID, Kind: "backend", Metric: "transactions_per_s", RatioSummary: result.RatioSummary{N: 5, Ratio: 1.02, CI95Low: 0.97, CI95High: 1.08}},
		{Case: cases[3].ID, Reference: "baseline/node2node/inter/rr", Kind: "baseline", Metric: "transactions_per_s", RatioSummary: result.RatioSummary{N: 5, Ratio: 0.5, CI95Low: 0.4, CI95High: 0.6}},
	}}
	var md bytes.Buffer
	if err := Markdown(&md, []Run{{Dir: "/out/mixed", Summary: s}}); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"### Paired comparisons",
		"| p2p/flannel/inter/tcp | p2p/cluster/inter/tcp | backend | throughput_bps | 5 | 0.900 [0.850, 0.950] | worse by 10 % |",
		"| p2p/flannel/inter/rr | p2p/cluster/inter/rr | backend | transactions_per_s | 5 | 1.020 [0.970, 1.080] | no difference |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "baseline/node2node/inter/rr |") {
		t.Errorf("markdown lists a baseline comparison among the variants:\n%s", out)
	}
}
