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
	}}
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
		"p2p/flannel/intra/tcp": "0.75x", // 15 / 20 (bare)
		"p2p/flannel/inter/tcp": "0.50x", // 8 / 16 (node2node inter)
		"p2p/flannel/inter/crr": "0.75x",
	} {
		if r := row(id); !strings.HasSuffix(strings.TrimSpace(r), want) {
			t.Errorf("%s: want ratio %s: %q", id, want, r)
		}
	}
	if r := row("p2p/calico/intra/crr"); !strings.HasSuffix(strings.TrimSpace(r), "-") {
		t.Errorf("ratio without a baseline: %q", r)
	}
	if r := row("p2p/flannel/inter/tcp"); !strings.Contains(r, "8.00 Gbit/s") || !strings.Contains(r, "2.0%") {
		t.Errorf("value or CI: %q", r)
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
