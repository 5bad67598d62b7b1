package report

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// Run is one run directory: its summary.json, and (for the HTML report) its trials and plan.
type Run struct {
	Dir     string
	Summary result.Summary
	Trials  []result.Trial // nil when results.jsonl was not read
	// Plan is plan.json's cases by id and Settings the runner's settings (nil when the run has
	// no plan.json or it was not read).
	Plan     map[string]result.CaseSpec
	Settings map[string]any
}

// LoadRun reads a run directory: summary.json (required: a missing one is an error
// satisfying errors.Is(err, fs.ErrNotExist)), results.jsonl and plan.json (when present: the
// report links the trials and shows the plan).
func LoadRun(dir string) (Run, error) {
	rr, err := result.LoadRun(dir)
	if err != nil && !errors.Is(err, result.ErrNotRun) {
		return Run{}, err
	}
	if err != nil || !rr.HasSummary {
		return Run{}, fmt.Errorf("%s has no %s: %w", dir, result.SummaryJSONFile, fs.ErrNotExist)
	}
	return Run{Dir: dir, Summary: rr.Summary, Trials: rr.Trials, Plan: rr.Plan, Settings: rr.Settings}, nil
}

// span is when the run's first trial started and its last ended, from results.jsonl.
func (r Run) span() (time.Time, time.Time, bool) {
	var first, last time.Time
	for _, t := range r.Trials {
		st, err := time.Parse(time.RFC3339Nano, t.Start)
		if err != nil {
			continue
		}
		end := st.Add(time.Duration(t.DurationS * float64(time.Second)))
		if first.IsZero() || st.Before(first) {
			first = st
		}
		if end.After(last) {
			last = end
		}
	}
	return first, last, !first.IsZero()
}

// scenarios lists the scenarios of a run's results in first-seen order, each with its results.
func scenarios(rs []result.CaseResult) ([]string, map[string][]result.CaseResult) {
	var names []string
	by := map[string][]result.CaseResult{}
	for _, r := range rs {
		s := r.Case.Scenario
		if _, ok := by[s]; !ok {
			names = append(names, s)
		}
		by[s] = append(by[s], r)
	}
	return names, by
}

// headline is a result's primary metric when it was measured.
func headline(r result.CaseResult) (string, result.MetricSummary, bool) {
	if r.Status != "ok" {
		return "", result.MetricSummary{}, false
	}
	pm := r.Case.Primary()
	m, ok := r.Metrics[pm]
	return pm, m, ok && m.N > 0
}

// scaleLabel is the case's modes and set scale dimensions ("etp=local", "svc=100 rep=10"), ""
// when it has none.
func scaleLabel(c result.Case, skip string) string {
	parts := c.Modes()
	for _, d := range c.Dims() {
		if d.Set && d.Name != skip {
			parts = append(parts, fmt.Sprintf("%s=%d", d.Key, d.Value))
		}
	}
	return strings.Join(parts, " ")
}

// groupLabel is where a case stands inside its scenario's chart: placement, protocol and
// scale, without its data plane (the series).
func groupLabel(c result.Case) string {
	return strings.TrimSpace(c.Placement + " " + c.Protocol + " " + scaleLabel(c, ""))
}

// sweep is one line chart: a swept dimension of a scenario with everything else fixed.
type sweep struct {
	dim    string   // the dimension's name ("services")
	metric string   // the metric on the y axis (the cases' primary)
	fixed  string   // what is held fixed ("inter crr rep=10")
	xs     []string // the dimension's values, ascending
	lines  []line
}

// sweeps finds, for every sweep dimension with more than one value among a scenario's
// measured cases, one chart per combination of everything else (placement, protocol, the
// other dimensions), one line per data plane variant. It reads the dimensions from
// result.Case.Dims, so a new dimension gets its charts without report code.
func sweeps(rs []result.CaseResult, run int) []sweep {
	var out []sweep
	idx := map[sweepKey]int{}
	values := map[string]map[int]bool{}
	for _, r := range rs {
		if _, _, ok := headline(r); !ok {
			continue
		}
		for _, d := range r.Case.Dims() {
			if d.Sweep {
				if values[d.Name] == nil {
					values[d.Name] = map[int]bool{}
				}
				values[d.Name][d.Value] = true
			}
		}
	}
	var dims []string
	for _, d := range (result.Case{}).Dims() {
		if len(values[d.Name]) > 1 {
			dims = append(dims, d.Name)
		}
	}
	for _, dim := range dims {
		for _, r := range rs {
			pm0, m0, ok := headline(r)
			if !ok || r.Case.Copy > 1 {
				continue
			}
			// The primary metric's chart, then one per further metric the scenario charts (a
			// VNF's PDR beside its NDR).
			for _, pm := range append([]string{pm0}, r.Case.Charted()...) {
				m, ok := m0, true
				if pm != pm0 {
					m, ok = r.Metrics[pm]
				}
				if !ok || m.N == 0 {
					continue
				}
				out = addSweepPoint(out, idx, sweepKey{dim, sweepFixed(r.Case, dim), pm}, r, m, run)
			}
		}
	}
	// A chart needs at least two x values; sort the x values and each line's points.
	kept := out[:0]
	for _, sw := range out {
		if len(sw.xs) < 2 {
			continue
		}
		slices.SortFunc(sw.xs, func(a, b string) int { return atoi(a) - atoi(b) })
		for i := range sw.lines {
			slices.SortFunc(sw.lines[i].points, func(a, b point) int { return atoi(a.x) - atoi(b.x) })
		}
		kept = append(kept, sw)
	}
	return kept
}

// sweepKey names a chart: its dimension, what it holds fixed and its metric.
type sweepKey struct{ dim, fixed, metric string }

// sweepFixed is what a chart of dimension dim through case c holds fixed.
func sweepFixed(c result.Case, dim string) string {
	return strings.TrimSpace(c.Placement + " " + c.Protocol + " " + scaleLabel(c, dim))
}

// addSweepPoint adds value m of r (metric k.metric) to the chart of key k (a new chart when
// idx has none), on the line of r's variant.
func addSweepPoint(out []sweep, idx map[sweepKey]int, k sweepKey, r result.CaseResult, m result.MetricSummary, run int) []sweep {
	var v int
	for _, d := range r.Case.Dims() {
		if d.Name == k.dim {
			v = d.Value
		}
	}
	i, ok := idx[k]
	if !ok {
		i = len(out)
		idx[k] = i
		out = append(out, sweep{dim: k.dim, metric: k.metric, fixed: k.fixed})
	}
	sw := &out[i]
	xs := strconv.Itoa(v)
	if !slices.Contains(sw.xs, xs) {
		sw.xs = append(sw.xs, xs)
	}
	u := unitOf(k.metric)
	p := point{x: xs, value: m.TrimmedMean / u.scale, lo: m.CI95Low / u.scale, hi: m.CI95High / u.scale, ci: m.N > 1,
		caseID: r.Case.ID, run: run, tip: tip(r, k.metric, m)}
	li := slices.IndexFunc(sw.lines, func(l line) bool { return l.name == r.Case.Variant() })
	if li < 0 {
		sw.lines = append(sw.lines, line{name: r.Case.Variant()})
		li = len(sw.lines) - 1
	}
	sw.lines[li].points = append(sw.lines[li].points, p)
	return out
}

func atoi(s string) int { v, _ := strconv.Atoi(s); return v }

// tip is a measurement's tooltip: case, headline with CI and trials.
func tip(r result.CaseResult, pm string, m result.MetricSummary) string {
	s := fmt.Sprintf("%s\n%s: %s", r.Case.ID, pm, format(pm, m.TrimmedMean))
	if m.N > 1 {
		s += fmt.Sprintf(" (95%% CI %s .. %s)", format(pm, m.CI95Low), format(pm, m.CI95High))
	}
	return s + fmt.Sprintf("\n%d trials, CV %.1f%%", m.N, 100*m.CV)
}

// percentileRe matches a percentile metric: family, percentile, unit (latency_p99_us).
var percentileRe = regexp.MustCompile(`^(.*)_p(50|90|99)_([a-z]+)$`)

// percentileFamilies lists the metric families a result has P50, P90 and P99 of
// ("latency" for latency_p50_us...; "ttfb" for ttfb_p50_ms...), with their unit suffix.
func percentileFamilies(r result.CaseResult) [][2]string {
	var out [][2]string
	for name := range r.Metrics {
		m := percentileRe.FindStringSubmatch(name)
		if m == nil || m[2] != "50" {
			continue
		}
		fam := [2]string{m[1], m[3]}
		_, ok90 := r.Metrics[fam[0]+"_p90_"+fam[1]]
		_, ok99 := r.Metrics[fam[0]+"_p99_"+fam[1]]
		if ok90 && ok99 {
			out = append(out, fam)
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// cpuPerGbit is the CPU a stream case spent per Gbit/s: client and server CPU (iperf3's
// per-process figures, % of one core) summed and divided by the received Gbit/s; else the
// client node's busy CPU (% of the node) per Gbit/s. ok is false when the case has neither.
func cpuPerGbit(r result.CaseResult) (v float64, what string, ok bool) {
	tp, okT := r.Metrics["throughput_bps"]
	if r.Status != "ok" || !okT || tp.TrimmedMean <= 0 {
		return 0, "", false
	}
	g := tp.TrimmedMean / 1e9
	c, okc := r.Metrics["cpu_client_proc_pct"]
	s, oks := r.Metrics["cpu_server_proc_pct"]
	if okc && oks {
		return (c.TrimmedMean + s.TrimmedMean) / g, "% of a core (client + server process) per Gbit/s", true
	}
	if b, ok := r.Metrics["cpu_node_busy_pct"]; ok {
		return b.TrimmedMean / g, "% of the client node busy per Gbit/s", true
	}
	return 0, "", false
}

// pivot is a seed-style table: rows are a sweep (placement, protocol, scale), columns the
// data plane variants, cells the headline with the half-width of its CI.
type pivot struct {
	title    string
	variants []string
	rows     []pivotRow
}

type pivotRow struct {
	scenario, protocol, placement, scale string
	tool                                 string
	first                                result.Case // the row's first case: its scale values order the rows
	cells                                map[string]*result.CaseResult
}

// buildPivot lays out the results that keep(): one row per (scenario, protocol, placement,
// scale), rows sorted by protocol order of appearance, placement, then scale values.
func buildPivot(title string, rs []result.CaseResult, keep func(result.Case) bool) pivot {
	p := pivot{title: title}
	idx := map[string]int{}
	for i := range rs {
		r := &rs[i]
		c := r.Case
		if !keep(c) || c.Copy > 1 {
			continue
		}
		if !slices.Contains(p.variants, c.Variant()) {
			p.variants = append(p.variants, c.Variant())
		}
		k := c.Scenario + "|" + c.Protocol + "|" + c.Placement + "|" + scaleLabel(c, "")
		j, ok := idx[k]
		if !ok {
			j = len(p.rows)
			idx[k] = j
			p.rows = append(p.rows, pivotRow{scenario: c.Scenario, protocol: c.Protocol, placement: c.Placement,
				scale: scaleLabel(c, ""), tool: c.Tool, first: c, cells: map[string]*result.CaseResult{}})
		}
		p.rows[j].cells[c.Variant()] = r
	}
	order := map[string]int{}
	for _, r := range p.rows {
		if _, ok := order[r.scenario+"|"+r.protocol]; !ok {
			order[r.scenario+"|"+r.protocol] = len(order)
		}
	}
	slices.SortStableFunc(p.rows, func(a, b pivotRow) int {
		if d := order[a.scenario+"|"+a.protocol] - order[b.scenario+"|"+b.protocol]; d != 0 {
			return d
		}
		if a.placement != b.placement {
			return strings.Compare(a.placement, b.placement)
		}
		return compareScale(a.first, b.first)
	})
	return p
}

// compareScale orders two cases by their dimension values.
func compareScale(a, b result.Case) int {
	da, db := a.Dims(), b.Dims()
	for i := range da {
		if d := da[i].Value - db[i].Value; d != 0 {
			return d
		}
	}
	return 0
}

// scenarioPivot is a scenario's pivot: all its cases, a sweep down, data planes across.
func scenarioPivot(name string, rs []result.CaseResult) pivot {
	return buildPivot(name+": a sweep down, data planes across", rs, func(result.Case) bool { return true })
}

// command is the server and client command lines recorded for one of the row's cases (the
// data planes of a row run the same tools).
func (r pivotRow) command(cmds map[string][2]string) [2]string {
	for _, v := range slices.Sorted(maps.Keys(r.cells)) {
		if x, ok := cmds[r.cells[v].Case.ID]; ok {
			return x
		}
	}
	return [2]string{}
}
