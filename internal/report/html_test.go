package report

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
)

func renderHTML(t testing.TB, runs ...Run) string {
	t.Helper()
	var b bytes.Buffer
	if err := HTML(&b, runs, HTMLOptions{Base: "/out", Generated: time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC), Version: "test"}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// figures returns each chart figure of the page with its attributes and body.
var figureRe = regexp.MustCompile(`(?s)<figure class="chart" ([^>]*)>(.*?)</figure>`)
var attrRe = regexp.MustCompile(`data-([a-z]+)="([^"]*)"`)
var ptRe = regexp.MustCompile(`<g class="pt" data-case="([^"]*)"`)

type fig struct {
	attrs map[string]string
	cases []string
}

func figures(page string) []fig {
	var out []fig
	for _, m := range figureRe.FindAllStringSubmatch(page, -1) {
		f := fig{attrs: map[string]string{}}
		for _, a := range attrRe.FindAllStringSubmatch(m[1], -1) {
			f.attrs[a[1]] = a[2]
		}
		for _, p := range ptRe.FindAllStringSubmatch(m[2], -1) {
			f.cases = append(f.cases, p[1])
		}
		out = append(out, f)
	}
	return out
}

// TestHTMLOneBarPerMeasuredCase: one bar chart per scenario and metric group, every measured
// case exactly one bar in its scenario's chart of its primary metric; skipped and failed cases
// are in no chart but in the problems list and the case table with their reasons.
func TestHTMLOneBarPerMeasuredCase(t *testing.T) {
	run := synthRun("/runs/synth", 120, 3)
	page := renderHTML(t, run)
	type key struct{ scenario, group string }
	want := map[key]map[string]bool{}
	for _, r := range run.Summary.Results {
		pm, _, ok := headline(r)
		if !ok {
			continue
		}
		k := key{r.Case.Scenario, pm}
		if want[k] == nil {
			want[k] = map[string]bool{}
		}
		want[k][r.Case.ID] = true
	}
	got := map[key][]string{}
	for _, f := range figures(page) {
		if f.attrs["kind"] != "bars" {
			continue
		}
		k := key{f.attrs["scenario"], f.attrs["group"]}
		if _, dup := got[k]; dup {
			t.Errorf("two bar charts for %v", k)
		}
		got[k] = f.cases
	}
	if len(got) != len(want) {
		t.Errorf("%d bar charts, want %d (one per scenario and metric group): %v", len(got), len(want), got)
	}
	for k, ids := range want {
		seen := map[string]int{}
		for _, id := range got[k] {
			seen[id]++
		}
		for id := range ids {
			if seen[id] != 1 {
				t.Errorf("%v: case %s drawn %d times, want once", k, id, seen[id])
			}
		}
		if len(got[k]) != len(ids) {
			t.Errorf("%v: %d bars, want %d", k, len(got[k]), len(ids))
		}
	}
	for _, r := range run.Summary.Results {
		if r.Status == "ok" {
			continue
		}
		if !strings.Contains(page, `<li class="`+r.Status+`" data-case="`+r.Case.ID+`">`) {
			t.Errorf("%s case %s not in the problems list", r.Status, r.Case.ID)
		}
		if !strings.Contains(page, esc(r.Reason)) {
			t.Errorf("reason of %s not on the page: %s", r.Case.ID, r.Reason)
		}
	}
	for _, s := range []string{`<li class="disturbed"`, `<li class="not-converged"`, "--time-budget 1h spent"} {
		if !strings.Contains(page, s) {
			t.Errorf("no %q on the page", s)
		}
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<establish control") {
		t.Error("a reason was not escaped")
	}
}

// TestHTMLSelfContained: the page names no URL it could fetch (no src=, no http(s) URL, no
// @import or url()), and every link is to a raw trial file, relative to where the page is.
func TestHTMLSelfContained(t *testing.T) {
	run := synthRun("/out/runs/synth", 60, 3)
	page := renderHTML(t, run)
	for _, bad := range []string{"http://", "https://", " src=", "@import", "url(", "<link"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q: it must load nothing", bad)
		}
	}
	hrefs := regexp.MustCompile(`href="([^"#][^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(hrefs) != 60*3 {
		t.Errorf("%d links to files, want one per trial (180)", len(hrefs))
	}
	for _, h := range hrefs {
		if !strings.HasPrefix(h[1], "runs/synth/trials/") {
			t.Fatalf("link %q is not relative to the page's directory /out", h[1])
		}
	}
}

// TestHTMLSweepFollowsDims: a swept dimension gets one line chart per fixed rest, one line per
// variant, points sorted by value; a dimension the report has no code for (the lab's MTU) is
// plotted the same way.
func TestHTMLSweepFollowsDims(t *testing.T) {
	var rs []result.CaseResult
	for _, dp := range []string{"flannel", "calico"} {
		for _, mtu := range []int{9000, 1500, 4000} {
			r := res("p2p", dp, "inter", "tcp", "throughput_bps", float64(mtu)*1e6)
			r.Case.MTU = mtu
			r.Case.ID = r.Case.MakeID()
			rs = append(rs, r)
		}
	}
	page := renderHTML(t, Run{Dir: "/out/r", Summary: result.Summary{Run: "r", Results: rs}})
	var sw []fig
	for _, f := range figures(page) {
		if f.attrs["kind"] == "sweep" {
			sw = append(sw, f)
		}
	}
	if len(sw) != 1 || sw[0].attrs["dim"] != "mtu" {
		t.Fatalf("sweep charts %+v, want one over mtu", sw)
	}
	want := []string{"p2p/flannel/inter/tcp", "p2p/flannel/inter/tcp/mtu=4000", "p2p/flannel/inter/tcp/mtu=9000",
		"p2p/calico/inter/tcp", "p2p/calico/inter/tcp/mtu=4000", "p2p/calico/inter/tcp/mtu=9000"}
	if strings.Join(sw[0].cases, " ") != strings.Join(want, " ") {
		t.Errorf("points %v, want %v (one line per data plane, sorted by mtu)", sw[0].cases, want)
	}
}

// TestHTMLSweepChartsMore: a scenario that charts a metric besides its primary one (a VNF's PDR
// beside its NDR, over frame sizes) gets a sweep chart of each, one line per variant.
func TestHTMLSweepChartsMore(t *testing.T) {
	result.RegisterScenario("sweeptest", result.Judge{Primary: func(result.Case) string { return "ndr_pps" },
		Charted: func(result.Case) []string { return []string{"pdr_pps"} }})
	param.Register(param.Param{Key: "test-frame-size", Label: "test_frame_size", Min: 64, Max: 1518, ID: "tsize", Sweep: true})
	var rs []result.CaseResult
	for _, dp := range []string{"flannel", "calico"} {
		for _, size := range []int{64, 1518, 256} {
			r := res("sweeptest", dp, "intra", "udp", "ndr_pps", 1e6/float64(size))
			r.Metrics["pdr_pps"] = result.MetricSummary{N: 2, TrimmedMean: 2e6 / float64(size)}
			r.Case.SetInt("test-frame-size", size)
			r.Case.ID = r.Case.MakeID()
			rs = append(rs, r)
		}
	}
	page := renderHTML(t, Run{Dir: "/out/r", Summary: result.Summary{Run: "r", Results: rs}})
	got := map[string][]string{}
	for _, f := range figures(page) {
		if f.attrs["kind"] == "sweep" && f.attrs["dim"] == "test_frame_size" {
			got[f.attrs["metric"]] = f.cases
		}
	}
	want := []string{"sweeptest/flannel/intra/udp/tsize=64", "sweeptest/flannel/intra/udp/tsize=256", "sweeptest/flannel/intra/udp/tsize=1518",
		"sweeptest/calico/intra/udp/tsize=64", "sweeptest/calico/intra/udp/tsize=256", "sweeptest/calico/intra/udp/tsize=1518"}
	if len(got) != 2 || strings.Join(got["ndr_pps"], " ") != strings.Join(want, " ") || strings.Join(got["pdr_pps"], " ") != strings.Join(want, " ") {
		t.Errorf("frame-size charts %v, want ndr_pps and pdr_pps over %v", got, want)
	}
}

// TestHTMLComparison: several runs are matched by id without the data plane; the change is
// marked only where the 95 % intervals do not overlap.
func TestHTMLComparison(t *testing.T) {
	a := res("p2p", "flannel", "inter", "tcp", "throughput_bps", 10e9) // CI 9.8 .. 10.2
	b := res("p2p", "cluster", "inter", "tcp", "throughput_bps", 12e9) // CI 11.76 .. 12.24: disjoint
	c := res("p2p", "flannel", "inter", "crr", "transactions_per_s", 1000)
	d := res("p2p", "cluster", "inter", "crr", "transactions_per_s", 1010) // overlapping
	b.Case.Backend, d.Case.Backend = "kube", "kube"
	page := renderHTML(t, Run{Dir: "lab", Summary: result.Summary{Run: "lab", Results: []result.CaseResult{a, c}}},
		Run{Dir: "kube", Summary: result.Summary{Run: "kube", Results: []result.CaseResult{b, d}}})
	row := func(key string) string {
		i := strings.Index(page, "<tr><td>"+key+"</td>")
		if i < 0 {
			t.Fatalf("no comparison row %s", key)
		}
		return page[i : i+strings.Index(page[i:], "</tr>")]
	}
	if r := row("p2p/inter/tcp"); !strings.Contains(r, "+20.0%") || !strings.Contains(r, "≠") || !strings.Contains(r, `class="better"`) {
		t.Errorf("tcp row: %s", r)
	}
	if r := row("p2p/inter/crr"); !strings.Contains(r, "+1.0%") || strings.Contains(r, "≠") {
		t.Errorf("crr row (overlapping intervals: no mark): %s", r)
	}
	n := 0
	for _, f := range figures(page) {
		if f.attrs["kind"] == "compare" {
			n++
			if len(f.cases) != 2 {
				t.Errorf("compare chart %s: %d points, want 2", f.attrs["group"], len(f.cases))
			}
		}
	}
	if n != 2 {
		t.Errorf("%d comparison charts, want one per metric (2)", n)
	}
}

// TestSeedTables: a run of seed 001's scenarios gets Tables 5.1-5.6 with the commands its trials
// recorded and a column per data plane.
func TestSeedTables(t *testing.T) {
	var rs []result.CaseResult
	var ts []result.Trial
	add := func(sc, proto, tool, metric string, svc, pods, rep int) {
		for _, dp := range []string{"flannel", "calico"} {
			r := res(sc, dp, "inter", proto, metric, 1)
			r.Case.Tool, r.Case.Services, r.Case.Pods, r.Case.Replicas = tool, svc, pods, rep
			r.Case.ID = r.Case.MakeID()
			rs = append(rs, r)
			ts = append(ts, result.Trial{Case: r.Case, Trial: 1, Conditions: map[string]any{
				result.ServerCommandKey: tool + " server", result.ClientCommandKey: tool + " client " + proto}})
		}
	}
	add("p2p", "tcp", "iperf3", "throughput_bps", 0, 0, 0)
	add("p2p-policies", "udp", "iperf3", "throughput_bps", 0, 1000, 0)
	add("p2p", "crr", "netperf", "transactions_per_s", 0, 0, 0)
	add("p2s", "tcp", "iperf3", "throughput_bps", 100, 0, 0)
	add("p2s", "udp", "iperf3", "throughput_bps", 100, 0, 0)
	add("p2s", "rr", "netperf", "transactions_per_s", 1, 0, 0)
	add("p2s-replicas", "http", "curl", "ttfb_seed_ms", 1, 0, 10)
	run := Run{Dir: "/out/r", Summary: result.Summary{Run: "r", Results: rs}, Trials: ts}
	page := renderHTML(t, run)
	for i := 1; i <= 6; i++ {
		if !strings.Contains(page, "<caption>Table 5."+string(rune('0'+i))+":") {
			t.Errorf("no Table 5.%d", i)
		}
	}
	if !strings.Contains(page, "<code>curl client http</code>") || !strings.Contains(page, "<td>p2p-policies udp (iperf3)</td><td>inter</td><td>pods=1000</td>") {
		t.Errorf("seed tables lack the recorded commands or the sweep rows")
	}
	var md bytes.Buffer
	if err := Markdown(&md, []Run{run}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "### Table 5.6: HTTP") || !strings.Contains(md.String(), "| p2s-replicas http (curl) | inter | svc=1 rep=10 | `curl server` | `curl client http` |") {
		t.Errorf("markdown seed tables:\n%s", md.String())
	}
}

// BenchmarkHTML1000Cases: the target is a report of 1,000 cases x 12 trials rendered
// in under 2 s and weighing under 5 MB; the size is reported as a metric.
func BenchmarkHTML1000Cases(b *testing.B) {
	run := synthRun("/out/runs/big", 1000, 12)
	var size int
	for b.Loop() {
		var buf bytes.Buffer
		if err := HTML(&buf, []Run{run}, HTMLOptions{Base: "/out"}); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size)/1e6, "MB")
}

// TestHTMLNoiseFloor: the noise floor a run's environment carries (as summary.json decodes it)
// is stated at the top of the page; without one the page says how to measure it.
func TestHTMLNoiseFloor(t *testing.T) {
	nf := result.NoiseFloor{Measured: "2026-11-25T05:00:00Z", Case: "p2p/flannel/inter/crr", Trials: 12, ResolvablePct: 3.04}
	b, err := json.Marshal(map[string]any{result.NoiseFloorKey: nf, "kernel": "6.18"})
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	page := renderHTML(t, Run{Dir: "/out/r", Summary: result.Summary{Run: "r", Environment: env}})
	if !strings.Contains(page, "differ by more than 3.0 % (A/A test of p2p/flannel/inter/crr, 12 rounds, 2026-11-25T05:00:00Z)") {
		t.Errorf("noise floor not stated")
	}
	if page := renderHTML(t, Run{Dir: "/out/r", Summary: result.Summary{Run: "r"}}); !strings.Contains(page, "run cnibench doctor --noise once") {
		t.Errorf("no hint to measure the noise floor")
	}
}
