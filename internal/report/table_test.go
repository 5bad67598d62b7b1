package report

import (
	"bytes"
	"regexp"
	"slices"
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

// parsedRow is one case read back from a terminal table.
type parsedRow struct {
	cells map[string]string // the row's first line, by column heading
	text  string            // all its lines after the CASE column, blanks squeezed
}

// parseTable reads a terminal table back (the first one in out): the column headings at their
// positions on the header line, the group headings and under each the rows, keyed by the full
// case id (the heading's scenario/dataplane, the row's rest, then the heading's proxy= and
// policy= parts). A row's CASE broken after a '/' continues on the next line; a line with an
// empty CASE column continues the row.
func parseTable(t *testing.T, out string) (heads []string, rows map[string]*parsedRow) {
	t.Helper()
	lines := strings.Split(out, "\n")
	hi := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "CASE ") })
	if hi < 0 {
		t.Fatalf("no header line in\n%s", out)
	}
	head := []rune(lines[hi])
	var starts []int
	for i, r := range head {
		if r != ' ' && (i == 0 || i >= 2 && head[i-1] == ' ' && head[i-2] == ' ') {
			starts = append(starts, i)
		}
	}
	cut := func(rs []rune, j int) string {
		a, b := starts[j], len(rs)
		if j+1 < len(starts) {
			b = min(starts[j+1], len(rs))
		}
		if a >= b {
			return ""
		}
		return strings.TrimSpace(string(rs[a:b]))
	}
	for j := range starts {
		heads = append(heads, cut(head, j))
	}
	rows = map[string]*parsedRow{}
	var group, rest string
	var cur *parsedRow
	done := func() {
		if cur != nil {
			f := strings.Fields(group)
			id := rest
			if len(f) > 0 {
				id = strings.Join(append([]string{f[0], rest}, f[1:]...), "/")
			}
			rows[id] = cur
		}
		cur = nil
	}
	for _, l := range lines[hi+1:] {
		if l == "" {
			break
		}
		rs := []rune(l)
		caseText := strings.TrimSpace(string(rs[:min(starts[1], len(rs))]))
		right := ""
		if len(rs) > starts[1] {
			right = strings.Join(strings.Fields(string(rs[starts[1]:])), " ")
		}
		switch {
		case rs[0] != ' ':
			done()
			group = l
			continue
		case caseText != "" && cur != nil && strings.HasSuffix(rest, "/"):
			rest += caseText
		case caseText != "":
			done()
			rest = caseText
			cur = &parsedRow{cells: map[string]string{}}
			for j := 1; j < len(starts); j++ {
				cur.cells[heads[j]] = cut(rs, j)
			}
		}
		if cur != nil && right != "" {
			cur.text = strings.TrimSpace(cur.text + " " + right)
		}
	}
	done()
	return heads, rows
}

// flat is text with its lines joined, so that a phrase wrapped over lines is found: a line
// ending in '/' (a case id broken between its parts) joins the next without a blank.
func flat(s string) string {
	s = regexp.MustCompile(`/\n\s*`).ReplaceAllString(s, "/")
	return strings.Join(strings.Fields(s), " ")
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
	if err := Table(&b, s, Style{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	_, rows := parseTable(t, out)
	row := func(id string) *parsedRow {
		if r := rows[id]; r != nil {
			return r
		}
		t.Fatalf("no row %s in\n%s", id, out)
		return nil
	}
	// Rows are listed under their scenario and data plane, named by the rest of their id.
	for _, l := range []string{"baseline/bare", "p2p/flannel", "  intra/tcp ", "  inter/crr "} {
		if !strings.Contains(out, "\n"+l) {
			t.Errorf("no line starting %q in\n%s", l, out)
		}
	}
	for id, want := range map[string]string{
		"p2p/flannel/intra/tcp": "0.74x [0.70, 0.78]",          // paired
		"p2p/flannel/inter/crr": "0.98x [0.93, 1.04] no diff.", // the interval holds 1
		"p2p/flannel/inter/tcp": "0.50x (unpaired)",            // 8 / 16 without a paired comparison
		"p2p/calico/intra/crr":  "-",                           // no baseline
	} {
		if got := row(id).cells["VS BASELINE (95% CI)"]; got != want {
			t.Errorf("%s: ratio %q, want %q\n%s", id, got, want, out)
		}
	}
	if !strings.Contains(flat(out), `"no diff.": the ratio's 95% CI holds 1.0`) {
		t.Errorf("no legend of \"no diff.\" in\n%s", out)
	}
	if c := row("p2p/flannel/inter/tcp").cells; c["RESULT"] != "8.00 Gbit/s" || c["CI95 ±"] != "2.0%" || c["CV"] != "3.0%" || c["TRIALS"] != "12 (-3 dist., 1 lost)" {
		t.Errorf("value, CI, CV or trials: %q", c)
	}
	if r := row("p2p/flannel/inter/crr"); !strings.Contains(r.text, "36/37 %host") {
		t.Errorf("host CPU: %q", r.text)
	}
	if r := row("p2p/flannel/intra/tcp"); !strings.Contains(r.text, "88/121 %core") {
		t.Errorf("process CPU: %q", r.text)
	}
	for _, want := range []string{
		"dataplane (transactions_per_s): p2p/calico/intra/crr vs p2p/flannel/intra/crr: 1.21x [1.10, 1.33]",
		"disturbed trials: 3 (", "1 could not be made good",
		"p2p/calico/intra/crr: cpu_server_host_pct = 512 left out",
		"CPU: %core = the tool process's CPU time in % of one core",
	} {
		if !strings.Contains(flat(out), want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("steal warning without steal:\n%s", out)
	}
	s.Results[3].Metrics["cpu_node_steal_pct"] = result.MetricSummary{N: 12, Mean: 22}
	b.Reset()
	_ = Table(&b, s, Style{})
	if !strings.Contains(flat(b.String()), "during 1 case(s)") || !strings.Contains(b.String(), "p2p/flannel/intra/tcp 22%") {
		t.Errorf("no steal warning:\n%s", b.String())
	}
	if r := row("p2p/cilium/inter/tcp"); !strings.Contains(r.text, "skipped") || !strings.Contains(r.text, "not built") {
		t.Errorf("skipped row: %q", r.text)
	}
}

// A converged column appears when the run had a CI target; why a case did not converge is a
// footnote.
func TestTableConvergence(t *testing.T) {
	r := res("p2p", "flannel", "inter", "tcp", "throughput_bps", 8e9)
	r.Convergence = &result.Convergence{TargetPct: 5, HalfWidthPct: 7.5, Trials: 12, Reason: "reached --max-repeat 12 trials"}
	ok := res("p2p", "flannel", "intra", "tcp", "throughput_bps", 15e9)
	ok.Convergence = &result.Convergence{TargetPct: 5, HalfWidthPct: 1.25, Trials: 12, Converged: true}
	var b bytes.Buffer
	if err := Table(&b, result.Summary{Results: []result.CaseResult{r, ok}}, Style{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	heads, rows := parseTable(t, out)
	if !slices.Contains(heads, "CONVERGED") {
		t.Errorf("no CONVERGED column: %q\n%s", heads, out)
	}
	if got := rows["p2p/flannel/inter/tcp"].cells["CONVERGED"]; got != "no (7.5% > 5%) [1]" {
		t.Errorf("not converged: %q\n%s", got, out)
	}
	if got := rows["p2p/flannel/intra/tcp"].cells["CONVERGED"]; got != "yes (1.2% <= 5%)" {
		t.Errorf("converged: %q\n%s", got, out)
	}
	if !strings.Contains(flat(out), "[1] p2p/flannel/inter/tcp: no (7.5% > 5% after 12 trials: reached --max-repeat 12 trials)") {
		t.Errorf("no footnote on convergence:\n%s", out)
	}
}

// A run table leaves out the CONVERGED column of a run without a CI target, detail and CPU
// columns that would be empty, and the baseline column of a run without baselines (saying so).
func TestTableLeavesOutEmptyColumns(t *testing.T) {
	var b bytes.Buffer
	if err := Table(&b, result.Summary{Results: []result.CaseResult{res("p2p", "flannel", "inter", "tcp", "throughput_bps", 8e9)}}, Style{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	heads, _ := parseTable(t, out)
	if want := "CASE|RESULT|CI95 ±|CV|TRIALS"; strings.Join(heads, "|") != want {
		t.Errorf("columns %q, want %s", heads, want)
	}
	if strings.Contains(out, "CPU:") || strings.Contains(out, "Ratios are") {
		t.Errorf("CPU or ratio legend without CPU figures or ratios:\n%s", out)
	}
	if !strings.Contains(flat(out), "VS BASELINE left out: no case of this run has its baseline in the run") {
		t.Errorf("no word on the missing baseline column:\n%s", out)
	}
}

// When the table is too wide, details narrow to the room left: the long ones (HTTP) go under
// their row, the short ones (latency percentiles) stay in the column.
func TestTableDetailsOverflowUnderTheirRow(t *testing.T) {
	rr := res("p2p", "calico", "inter", "rr", "transactions_per_s", 12000)
	rr.Metrics["latency_p50_us"] = result.MetricSummary{N: 12, TrimmedMean: 61}
	rr.Metrics["latency_p99_us"] = result.MetricSummary{N: 12, TrimmedMean: 109}
	http := res("p2s-replicas", "calico", "inter", "http", "ttfb_seed_ms", 2.5)
	http.Case.Services, http.Case.Replicas = 100, 10
	http.Case.ID = http.Case.MakeID()
	for k, v := range map[string]float64{"ttfb_p50_ms": 2.25, "ttfb_p99_ms": 3.75, "transfer_bps": 9.41e9, "replicas_served": 100} {
		http.Metrics[k] = result.MetricSummary{N: 12, TrimmedMean: v, Min: v}
	}
	for _, r := range []*result.CaseResult{&rr, &http} {
		r.Metrics["cpu_client_host_pct"] = result.MetricSummary{N: 12, TrimmedMean: 31}
		r.Metrics["cpu_server_host_pct"] = result.MetricSummary{N: 12, TrimmedMean: 30}
	}
	var b bytes.Buffer
	if err := Table(&b, result.Summary{Results: []result.CaseResult{rr, http}}, Style{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	checkWidth(t, "table", out)
	_, rows := parseTable(t, out)
	if r := rows["p2p/calico/inter/rr"]; r == nil || r.cells["DETAIL"] != "p50 61 / p99 109 us" || r.cells["CPU CLI/SRV"] != "31/30 %host" {
		t.Errorf("short detail not in its column:\n%s", out)
	}
	h := rows["p2s-replicas/calico/inter/http/svc=100/rep=10"]
	if h == nil || h.cells["DETAIL"] != "" || h.cells["CPU CLI/SRV"] != "31/30 %host" ||
		!strings.Contains(h.text, "TTFB p50 2.25 / p99 3.75 ms, 9.41 Gbit/s, 100 replicas served") {
		t.Errorf("long detail not under its row:\n%s", out)
	}
}
