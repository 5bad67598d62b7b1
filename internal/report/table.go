// Package report renders results: the terminal table of a run and the comparison of runs
// side by side (terminal and Markdown; the HTML report comes later).
package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/result"
)

// Table writes a run's results for the terminal in at most 100 columns. The cases are
// listed under a heading per scenario and data plane (with the proxy and policy the ids
// name), each row named by the rest of its id (placement, protocol, scale). A row holds the
// primary metric's trimmed mean with the half-width of its 95 % CI (relative) and CV, the
// trials it rests on (and those disturbed by steal), latency percentiles or UDP loss,
// client/server CPU, the paired ratio to the matching baseline with its interval and, when
// the run had a CI target, whether it converged; a column nothing would be shown in is left
// out. When the table would be too wide, details too long for the room left go on a line
// under their row, then whole columns do (CPU, convergence...), then long ids break between
// their parts. Below the table: what its abbreviations mean, why cases did not converge (the
// CONVERGED cell's footnote), the other paired comparisons of the run, and what the reader
// must know (disturbed trials, steal, notes). Long lines wrap at 100 columns.
func Table(w io.Writer, s result.Summary, st Style) error {
	t := buildRunTable(s)
	o := &termOut{st: st}
	t.write(o)
	o.blank()
	if t.hasCPU {
		o.text(cpuLegend, 0, 2)
	}
	if t.noBaseline {
		o.text("VS BASELINE left out: no case of this run has its baseline in the run (scenario baseline).", 0, 2)
	}
	if slices.Contains(t.cols, colVS) || slices.ContainsFunc(s.Comparisons, func(c result.Comparison) bool { return c.Kind != result.KindBaseline && c.N > 0 }) {
		o.text("Ratios are paired by round (trial k of both cases ran in the same round).", 0, 2)
		if t.noDiff {
			o.text(`"no diff.": the ratio's 95% CI holds 1.0, the two do not differ.`, 0, 2)
		}
		if st.Color {
			o.text("A ratio that differs is green when it is better, red when it is worse.", 0, 2)
		}
	}
	if len(t.unconverged) > 0 {
		o.blank()
		o.text("not converged (the 95% CI half-width stayed above the target):", 0, 2)
		for _, f := range t.unconverged {
			o.text(f, 2, 6)
		}
	}
	comparisons(o, s.Comparisons)
	footnotes(o, s)
	return o.flush(w)
}

// The columns of the run table.
const (
	colCase = iota
	colResult
	colCI
	colCV
	colTrials
	colDetail
	colCPU
	colVS
	colConv
	numCols
)

var tableHeads = [numCols]string{"CASE", "RESULT", "CI95 ±", "CV", "TRIALS", "DETAIL", "CPU CLI/SRV", "VS BASELINE (95% CI)", "CONVERGED"}

// tableLabels name a column's value on the line under a row once the column has left the
// table (the details name themselves).
var tableLabels = [numCols]string{colTrials: "trials ", colCPU: "CPU ", colVS: "vs baseline ", colConv: "converged "}

// tableRow is one case of the run table.
type tableRow struct {
	rest   string        // the case id without its group
	cells  [numCols]segs // a measured case's columns (colCase unused)
	status segs          // a case without a result: its status and why, across the columns
	why    string        // what limited a measured case (its accounting's verdict), "" unknown
	// ceiling says why a case beat its baseline, its own ceiling (beyondCeiling), "" when it
	// did not.
	ceiling string
}

// runTable is a run's results laid out for the terminal.
type runTable struct {
	groups      []string // headings in first-seen order
	rows        map[string][]tableRow
	cols        []int // the columns shown: empty details and CPU are left out
	hasCPU      bool
	noBaseline  bool     // VS BASELINE left out: no case has a baseline in the run
	noDiff      bool     // a ratio reads "no diff."
	unconverged []string // footnotes of the cases that did not converge, "[n] id: why"
}

func buildRunTable(s result.Summary) runTable {
	byID := map[string]result.CaseResult{}
	for _, r := range s.Results {
		byID[r.Case.ID] = r
	}
	paired := map[string]result.Comparison{}
	for _, c := range s.Comparisons {
		if c.Kind == result.KindBaseline {
			paired[c.Case] = c
		}
	}
	t := runTable{rows: map[string][]tableRow{}}
	conv := false
	for _, r := range s.Results {
		conv = conv || r.Convergence != nil
		g, rest := idGroup(r.Case.ID)
		if _, ok := t.rows[g]; !ok {
			t.groups = append(t.groups, g)
		}
		row := tableRow{rest: rest}
		pm := r.Case.Primary()
		m, ok := r.Metrics[pm]
		switch {
		case r.Status != "ok":
			row.status = styled(statusSGR(r.Status), r.Status)
			if r.Reason != "" {
				row.status = append(row.status, plain(": "+r.Reason)...)
			}
		case !ok:
			row.status = plain("no " + pm)
		default:
			row.cells[colResult] = styled(sgrBold, format(pm, m.TrimmedMean))
			row.cells[colCI] = plain(ciHalfWidth(m))
			row.cells[colCV] = plain(fmt.Sprintf("%.1f%%", 100*m.CV))
			row.cells[colTrials] = trials(m, r)
			row.cells[colDetail] = plain(detail(r))
			row.cells[colCPU] = plain(cpu(r))
			row.cells[colVS] = vsBaseline(r, pm, m, byID, paired)
			if r.Verdict != nil {
				row.why = r.Verdict.Bottleneck
			}
			row.ceiling = beyondCeiling(r, s)
			if c := r.Convergence; c != nil {
				row.cells[colConv] = t.convergedCell(r.Case.ID, c, m.N)
			}
		}
		t.rows[g] = append(t.rows[g], row)
	}
	t.cols = []int{colCase, colResult, colCI, colCV, colTrials}
	for _, c := range []int{colDetail, colCPU} {
		for _, rs := range t.rows {
			if slices.ContainsFunc(rs, func(r tableRow) bool { return r.cells[c].width() > 0 }) {
				t.cols = append(t.cols, c)
				t.hasCPU = t.hasCPU || c == colCPU
				break
			}
		}
	}
	// A run without baselines has nothing to show in VS BASELINE: the column gives its room
	// to the others and a line under the table says why it is missing.
	for _, rs := range t.rows {
		if slices.ContainsFunc(rs, func(r tableRow) bool { return r.status == nil && r.cells[colVS].String() != "-" }) {
			t.cols = append(t.cols, colVS)
			break
		}
	}
	t.noBaseline = !slices.Contains(t.cols, colVS) && slices.ContainsFunc(s.Results, func(r result.CaseResult) bool { return r.Case.BaselineID() != "" })
	if conv {
		t.cols = append(t.cols, colConv)
	}
	for _, rs := range t.rows {
		t.noDiff = t.noDiff || slices.ContainsFunc(rs, func(r tableRow) bool { return strings.HasSuffix(r.cells[colVS].String(), "no diff.") })
	}
	return t
}

// write lays the table out in the terminal width: columns that do not fit leave for a line
// under each row (the details first, then CPU and convergence); a CASE column still too wide
// breaks its ids between their parts; trials and the baseline ratio leave last.
func (t runTable) write(o *termOut) {
	var width [numCols]int
	for _, c := range t.cols {
		width[c] = plain(tableHeads[c]).width()
	}
	for _, g := range t.groups {
		for _, r := range t.rows[g] {
			width[colCase] = max(width[colCase], indentOf(g)+len([]rune(r.rest)))
			if r.status != nil {
				continue
			}
			for _, c := range t.cols[1:] {
				width[c] = max(width[c], r.cells[c].width())
			}
		}
	}
	inline := slices.Clone(t.cols)
	var moved []int
	total := func() int {
		n := -2
		for _, c := range inline {
			n += width[c] + 2
		}
		return n
	}
	move := func(c int) func() {
		return func() {
			if i := slices.Index(inline, c); i >= 0 {
				inline = slices.Delete(inline, i, i+1)
				moved = append(moved, c)
			}
		}
	}
	capCase := func(least int) func() {
		return func() {
			if avail := termWidth - (total() - width[colCase]); avail >= least {
				width[colCase] = min(width[colCase], avail)
			}
		}
	}
	// The details first narrow to the room left: those that do not fit go under their row
	// (an HTTP case's), the others (loss, latency percentiles) stay. Without room for one
	// the column leaves the table whole.
	if i := slices.Index(inline, colDetail); i >= 0 && total() > termWidth {
		room := termWidth - (total() - width[colDetail])
		w := 0
		for _, g := range t.groups {
			for _, r := range t.rows[g] {
				if d := r.cells[colDetail].width(); d <= room {
					w = max(w, d)
				}
			}
		}
		if w > 0 && room >= len(tableHeads[colDetail]) {
			width[colDetail] = max(w, len(tableHeads[colDetail]))
		} else {
			move(colDetail)()
		}
	}
	for _, step := range []func(){move(colCPU), move(colConv), capCase(24), move(colTrials), capCase(24), move(colVS), capCase(len("CASE"))} {
		if total() <= termWidth {
			break
		}
		step()
	}
	// under reports whether column c of row r goes on the lines under the row.
	under := func(r tableRow, c int) bool {
		return r.cells[c].width() > 0 && (slices.Contains(moved, c) || slices.Contains(inline, c) && r.cells[c].width() > width[c])
	}

	var head segs
	for _, c := range inline {
		head = append(head, pad(plain(tableHeads[c]), width[c]+2)...)
	}
	o.line(head)
	valueAt := width[colCase] + 2 // where the RESULT column starts
	for _, g := range t.groups {
		if g != "" {
			for _, l := range wrap(plain(g), 0, 2) {
				o.line(l)
			}
		}
		for _, r := range t.rows[g] {
			// the values, then what left the table; or the status and why
			var right []segs
			if r.status != nil {
				right = wrapTo(r.status, termWidth-valueAt)
			} else {
				var first segs
				for _, c := range inline[1:] {
					if under(r, c) {
						first = append(first, pad(nil, width[c]+2)...)
					} else {
						first = append(first, pad(r.cells[c], width[c]+2)...)
					}
				}
				right = []segs{first}
				var more []segs
				for _, c := range t.cols {
					if under(r, c) {
						more = append(more, append(plain(tableLabels[c]), r.cells[c]...))
					}
				}
				right = append(right, wrapItems(more, "; ", termWidth-valueAt)...)
				if r.why != "" {
					right = append(right, wrapTo(plain("why: "+r.why), termWidth-valueAt)...)
				}
				if r.ceiling != "" {
					right = append(right, wrapTo(styled(sgrYellow, "note: "+r.ceiling), termWidth-valueAt)...)
				}
			}
			o.row(r.rest, indentOf(g), width[colCase], right)
		}
	}
}

// indentOf is how far the rows under a group heading are indented.
func indentOf(group string) int {
	if group == "" {
		return 0
	}
	return 2
}

// cpuLegend says what the CPU column's units are.
const cpuLegend = "CPU: %core = the tool process's CPU time in % of one core (iperf3); %host = the whole host's CPU as netperf measures it."

// trials is how many trials the primary metric rests on, with the disturbed ones left out
// (yellow; red when some could not be made good by a re-run).
func trials(m result.MetricSummary, r result.CaseResult) segs {
	t := plain(fmt.Sprint(m.N))
	if r.Disturbed > 0 {
		d := fmt.Sprintf("(-%d dist.", r.Disturbed)
		sgr := sgrYellow
		if r.Lost > 0 {
			d += fmt.Sprintf(", %d lost", r.Lost)
			sgr = sgrRed
		}
		t = append(t, plain(" ")...)
		t = append(t, styled(sgr, d+")")...)
	}
	return t
}

// detail is a case's secondary figures: UDP loss, latency percentiles, HTTP time to first byte.
func detail(r result.CaseResult) string {
	d := ""
	if l, ok := r.Metrics["loss_pct"]; ok {
		d = fmt.Sprintf("loss %.2f%%", l.TrimmedMean)
	}
	if p50, ok := r.Metrics["latency_p50_us"]; ok {
		d = fmt.Sprintf("p50 %.0f / p99 %.0f us", p50.TrimmedMean, r.Metrics["latency_p99_us"].TrimmedMean)
	}
	if lo, ok := r.Metrics["latency_p99_low_us"]; ok {
		// Concurrent netperf instances: their percentiles' range, not one percentile.
		d = fmt.Sprintf("mean %.0f us, p99 in %.0f..%.0f us", r.Metrics["latency_mean_us"].TrimmedMean, lo.TrimmedMean, r.Metrics["latency_p99_high_us"].TrimmedMean)
	}
	if _, ok := r.Metrics["reaction_up_control_ms"]; ok {
		part := func(dir string) string {
			s := fmt.Sprintf("control %.2f + data %.2f ms", r.Metrics["reaction_"+dir+"_control_ms"].TrimmedMean, r.Metrics["reaction_"+dir+"_data_ms"].TrimmedMean)
			if o := r.Metrics["reaction_"+dir+"_overlap_ms"].TrimmedMean; o > 0 {
				s += fmt.Sprintf(" (overlapping by %.2f ms)", o)
			}
			return s
		}
		d = fmt.Sprintf("up: %s; down %.2f ms: %s; probe every %.2f ms", part("up"), r.Metrics["reaction_down_ms"].TrimmedMean, part("down"), r.Metrics["probe_interval_ms"].TrimmedMean)
	}
	if p50, ok := r.Metrics["ttfb_p50_ms"]; ok {
		d = fmt.Sprintf("TTFB p50 %.2f / p99 %.2f ms, %.2f Gbit/s, %.0f replicas served", p50.TrimmedMean,
			r.Metrics["ttfb_p99_ms"].TrimmedMean, r.Metrics["transfer_bps"].TrimmedMean/1e9, r.Metrics["replicas_served"].Min)
	}
	return d
}

// cpu renders the client and server CPU figures with their unit.
func cpu(r result.CaseResult) string {
	for _, k := range []struct{ prefix, unit string }{{"cpu_%s_proc_pct", "%core"}, {"cpu_%s_host_pct", "%host"}} {
		c, okc := r.Metrics[fmt.Sprintf(k.prefix, "client")]
		sv, oks := r.Metrics[fmt.Sprintf(k.prefix, "server")]
		if !okc && !oks {
			continue
		}
		num := func(m result.MetricSummary, ok bool) string {
			if !ok || m.N == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", m.TrimmedMean)
		}
		return num(c, okc) + "/" + num(sv, oks) + " " + k.unit
	}
	return ""
}

// vsBaseline is the paired ratio to the case's baseline with its interval, coloured when it
// differs; without a paired comparison (a summary written before them) the ratio of the two
// trimmed means, said to be unpaired.
func vsBaseline(r result.CaseResult, pm string, m result.MetricSummary, byID map[string]result.CaseResult, paired map[string]result.Comparison) segs {
	if c, ok := paired[r.Case.ID]; ok && c.N > 0 {
		return styled(ratioSGR(c.RatioSummary, orDefault(c.Metric, pm)), ratioText(c.RatioSummary, "no diff."))
	}
	if b, ok := byID[r.Case.BaselineID()]; ok && b.Status == "ok" {
		if bm, ok := b.Metrics[pm]; ok && bm.TrimmedMean > 0 {
			return plain(fmt.Sprintf("%.2fx (unpaired)", m.TrimmedMean/bm.TrimmedMean))
		}
	}
	return plain("-")
}

// Ratio renders a paired ratio: "0.72x [0.68, 0.77]", and "no difference" when the interval
// holds 1.0.
func Ratio(r result.RatioSummary) string { return ratioText(r, "no difference") }

// ratioText is Ratio with same said when the interval holds 1.0.
func ratioText(r result.RatioSummary, same string) string {
	if r.N < 2 {
		return fmt.Sprintf("%.2fx (1 round)", r.Ratio)
	}
	s := fmt.Sprintf("%.2fx [%.2f, %.2f]", r.Ratio, r.CI95Low, r.CI95High)
	if !r.Differs() {
		s += " " + same
	}
	return s
}

// convergedCell is the CONVERGED cell of a case whose primary metric rests on n trials:
// "yes" with the half-width reached, or "no" (yellow) with a footnote that says why.
func (t *runTable) convergedCell(id string, c *result.Convergence, n int) segs {
	if c.Converged {
		s := fmt.Sprintf("yes (%.1f%% <= %g%%", c.HalfWidthPct, c.TargetPct)
		if c.Trials != n {
			s += fmt.Sprintf(", %d trials", c.Trials)
		}
		return plain(s + ")")
	}
	t.unconverged = append(t.unconverged, fmt.Sprintf("[%d] %s: %s", len(t.unconverged)+1, id, converged(c)))
	return append(styled(sgrYellow, fmt.Sprintf("no (%.1f%% > %g%%)", c.HalfWidthPct, c.TargetPct)),
		plain(fmt.Sprintf(" [%d]", len(t.unconverged)))...)
}

// converged says in full whether a case converged ("" without a CI target).
func converged(c *result.Convergence) string {
	switch {
	case c == nil:
		return ""
	case c.Converged:
		return fmt.Sprintf("yes (%.1f%% <= %g%%, %d trials)", c.HalfWidthPct, c.TargetPct, c.Trials)
	}
	return fmt.Sprintf("no (%.1f%% > %g%% after %d trials: %s)", c.HalfWidthPct, c.TargetPct, c.Trials, c.Reason)
}

// comparisons lists the run's paired comparisons other than to baselines, under a heading
// per what differs and metric.
func comparisons(o *termOut, cs []result.Comparison) {
	type kindMetric struct{ kind, metric string }
	var order []kindMetric
	by := map[kindMetric][]result.Comparison{}
	for _, c := range cs {
		if c.Kind == result.KindBaseline || c.N == 0 {
			continue
		}
		k := kindMetric{c.Kind, c.Metric}
		if by[k] == nil {
			order = append(order, k)
		}
		by[k] = append(by[k], c)
	}
	if len(order) == 0 {
		return
	}
	o.blank()
	o.text("paired comparisons inside this run (ratio over the rounds both cases ran, 95% CI):", 0, 2)
	for _, k := range order {
		o.text(fmt.Sprintf("%s (%s):", k.kind, k.metric), 2, 4)
		for _, c := range by[k] {
			o.para(append(plain(c.Case+" vs "+c.Reference+": "), styled(ratioSGR(c.RatioSummary, c.Metric), Ratio(c.RatioSummary))...), 4, 6)
		}
	}
}

// footnotes say what the reader must know: trials disturbed by steal, high mean steal among
// the trials kept (a run with --max-steal off), trials that failed, notes on the tools'
// figures.
func footnotes(o *termOut, s result.Summary) {
	var dist, lost int
	var stolen, notes []string
	for _, r := range s.Results {
		dist += r.Disturbed
		lost += r.Lost
		if st, ok := r.Metrics["cpu_node_steal_pct"]; ok && st.Mean > StealWarnPct {
			stolen = append(stolen, fmt.Sprintf("%s %.0f%%", r.Case.ID, st.Mean))
		}
		if r.Status == "ok" && r.Reason != "" {
			notes = append(notes, r.Case.ID+": "+r.Reason)
		}
		for _, n := range r.Notes {
			notes = append(notes, r.Case.ID+": "+n)
		}
	}
	o.blank()
	head := plain(fmt.Sprintf("disturbed trials: %d", dist))
	if dist > 0 {
		head = styled(sgrYellow, head.String())
	}
	tail := ")."
	switch {
	case lost > 0:
		tail = fmt.Sprintf("; %d could not be made good by a re-run, see --max-reruns).", lost)
	case dist > 0:
		tail = ", and run again)."
	}
	o.para(append(head, plain(" (the hypervisor took more CPU than --max-steal allows: kept in results.jsonl, left out of the statistics"+tail)...), 0, 2)
	if len(stolen) > 0 {
		o.blank()
		o.para(append(styled(sgrYellow, "warning:"), plain(fmt.Sprintf(" the hypervisor took more than %.0f%% of the CPU (steal) during %d case(s); their figures are noisy:",
			StealWarnPct, len(stolen)))...), 0, 2)
		o.text(strings.Join(stolen, ", "), 2, 2)
	}
	if len(notes) > 0 {
		o.blank()
		o.text("notes:", 0, 2)
		for _, n := range notes {
			o.text(n, 2, 4)
		}
	}
}

// StealWarnPct is the mean CPU steal above which the table warns that a case's figures are
// disturbed by the hypervisor.
const StealWarnPct = 5.0

// ciHalfWidth is the half-width of m's 95 % CI relative to its trimmed mean ("2.0%"), "-"
// when it is unknown (one trial, or a zero mean).
func ciHalfWidth(m result.MetricSummary) string {
	if m.TrimmedMean == 0 || m.N < 2 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*(m.CI95High-m.CI95Low)/2/m.TrimmedMean)
}

func format(metric string, v float64) string {
	switch {
	case strings.HasSuffix(metric, "_bps"):
		return fmt.Sprintf("%.2f Gbit/s", v/1e9)
	case metric == "transactions_per_s":
		return fmt.Sprintf("%.0f trans/s", v)
	case strings.HasSuffix(metric, "_ms"):
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.3g", v)
}
