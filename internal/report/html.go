package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// HTMLOptions say where the page goes and when it was made.
type HTMLOptions struct {
	// Base is the directory the page is written to: links to the raw trial files are made
	// relative to it, so the page and its run directories can be moved together.
	Base      string
	Generated time.Time
	// Version is the cnibench that wrote the page.
	Version string
}

// HTML writes the report of one run, or the comparison of several followed by each run's
// report, as one self-contained page: styles, the small sorting script and the SVG charts are
// inline; it loads nothing, so it renders with no network.
//
// Everything follows the case labels: a section per scenario with one bar chart per metric
// group (the cases' primary metric: every measured case is one bar), a line chart per swept
// dimension (result.Case.Dims), latency percentiles, CPU per Gbit/s, paired ratios to the
// baseline and pivot tables; then seed 001's tables, what went wrong (skipped, failed,
// disturbed, not converged: never hidden), every case in a sortable table with links to its
// raw trial files, the environment and the plan.
func HTML(w io.Writer, runs []Run, opt HTMLOptions) error {
	p := &page{opt: opt, col: &colours{}}
	p.head(runs)
	if len(runs) > 1 {
		p.comparison(runs)
	}
	for i, r := range runs {
		p.run(i, r, len(runs) > 1)
	}
	p.foot()
	_, err := io.WriteString(w, p.sb.String())
	return err
}

type page struct {
	sb  strings.Builder
	opt HTMLOptions
	col *colours
	nav []string
}

func (p *page) f(format string, a ...any) { fmt.Fprintf(&p.sb, format, a...) }
func (p *page) s(s string)                { p.sb.WriteString(s) }

func (p *page) head(runs []Run) {
	var names []string
	for _, r := range runs {
		names = append(names, r.Summary.Run)
	}
	title := "cnibench report: " + strings.Join(names, " vs ")
	p.f("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"+
		"<title>%s</title><style>%s</style></head><body>\n", esc(title), css)
	p.f(`<header><h1>%s</h1><p class="sub">`, esc(title))
	if !p.opt.Generated.IsZero() {
		p.f("generated %s", p.opt.Generated.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if p.opt.Version != "" {
		p.f(" by cnibench %s", esc(p.opt.Version))
	}
	p.s(`. Every figure is the trimmed mean of a case's trials (best and worst dropped) with its 95 % confidence interval; ratios are paired by round. Hover a bar or point for its numbers.</p></header>` + "\n")
}

func (p *page) foot() {
	p.f("<script>%s</script></body></html>\n", js)
}

// comparison is the several-runs view: one row per case key (the id without the data plane),
// one column per run and variant, % change to the first column and a mark where the two 95 %
// intervals do not overlap; a bar chart per metric group.
func (p *page) comparison(runs []Run) {
	g := buildGrid(runs)
	p.s(`<section id="comparison"><h2>Runs compared</h2>`)
	p.s(`<p>Cases are matched by id without the data plane (so a lab data plane and a cluster line up). Δ is the change of the trimmed mean against the first column; <b class="differs">≠</b> marks intervals that do not overlap (a difference the noise does not explain); an unmarked change is within the noise.</p>`)
	p.s(`<div class="scroll"><table class="cmp sortable"><thead><tr><th>case</th>`)
	for j, c := range g.cols {
		p.f(`<th>%s</th>`, esc(c.label))
		if j > 0 {
			p.s(`<th>Δ</th>`)
		}
	}
	p.s(`</tr></thead><tbody>`)
	var charts chartSet
	for _, k := range g.keys {
		cells := g.cells[k]
		p.f(`<tr><td>%s</td>`, esc(k))
		ref := cells[0]
		for j, cr := range cells {
			p.f(`<td>%s</td>`, esc(cell(cr)))
			if j > 0 {
				p.s(changeCell(cr, ref))
			}
			pm, m, ok := primary(cr)
			if !ok {
				continue
			}
			u := unitOf(pm)
			charts.add(pm, bar{group: k, series: g.cols[j].label, value: m.TrimmedMean / u.scale,
				lo: m.CI95Low / u.scale, hi: m.CI95High / u.scale, ci: m.N > 1, caseID: cr.Case.ID, run: g.cols[j].run,
				tip: g.cols[j].label + ": " + tip(*cr, pm, m)})
		}
		p.s("</tr>")
	}
	p.s(`</tbody></table></div>`)
	var labels []string
	for _, c := range g.cols {
		labels = append(labels, c.label)
	}
	for _, pm := range charts.order {
		p.f(`<figure class="chart" data-kind="compare" data-group="%s"><figcaption>%s by run</figcaption>%s%s</figure>`,
			esc(pm), esc(pm), legend(labels, p.col), barChart(charts.bars[pm], unitOf(pm), p.col))
	}
	p.s(`<ul class="env">`)
	for _, c := range g.cols {
		p.f(`<li><b>%s</b>: %s</li>`, esc(c.label), esc(c.facts))
	}
	p.s(`</ul></section>` + "\n")
}

// chartSet gathers bars into charts by key, keys and each chart's series in first-seen order.
type chartSet struct {
	order  []string
	bars   map[string][]bar
	series map[string][]string
}

func (c *chartSet) add(key string, b bar) {
	if c.bars == nil {
		c.bars, c.series = map[string][]bar{}, map[string][]string{}
	}
	if _, seen := c.bars[key]; !seen {
		c.order = append(c.order, key)
	}
	c.bars[key] = append(c.bars[key], b)
	if !slices.Contains(c.series[key], b.series) {
		c.series[key] = append(c.series[key], b.series)
	}
}

// changeCell is the % change of r's headline against ref's, marked when the intervals do not
// overlap.
func changeCell(r, ref *result.CaseResult) string {
	ch, disjoint, ok := change(r, ref)
	if !ok {
		return `<td data-v="">-</td>`
	}
	mark, cls := "", ""
	if disjoint {
		mark = ` <b class="differs" title="the 95 % intervals do not overlap">≠</b>`
		if (ch > 0) == HigherIsBetter(r.Case.Primary()) {
			cls = ` class="better"`
		} else {
			cls = ` class="worse"`
		}
	}
	return fmt.Sprintf(`<td data-v="%g"%s>%+.1f%%%s</td>`, ch, cls, ch, mark)
}

// run writes one run's sections. With several runs on the page the ids carry the run's index.
func (p *page) run(i int, r Run, several bool) {
	s := r.Summary
	id := func(name string) string {
		if several {
			return fmt.Sprintf("r%d-%s", i, name)
		}
		return name
	}
	p.f(`<section class="run" id="%s" data-run="%d">`, id("run"), i)
	if several {
		p.f(`<h2 class="runtitle">Run %s <span class="sub">(%s)</span></h2>`, esc(s.Run), esc(r.Dir))
	}
	p.glance(i, r)
	names, by := scenarios(s.Results)
	p.s(`<nav>`)
	for _, n := range names {
		p.f(`<a href="#%s">%s</a> `, id("scn-"+n), esc(n))
	}
	p.f(`<a href="#%s">where the time went</a> <a href="#%s">seed 001 tables</a> <a href="#%s">problems</a> <a href="#%s">all cases</a> <a href="#%s">environment</a></nav>`,
		id("accounting"), id("seed001"), id("problems"), id("cases"), id("environment"))
	for _, n := range names {
		p.scenario(i, id("scn-"+n), n, by[n], s)
	}
	p.accounting(id("accounting"), s)
	p.seedTables(id("seed001"), s.Results, r.Trials)
	p.problems(id("problems"), s)
	p.caseTable(id("cases"), i, r)
	p.environment(id("environment"), r)
	p.s("</section>\n")
}

// glance is the run's verdicts: the paired comparisons between data planes, proxies and policy
// engines, each with its interval and whether the noise explains it; and the counts of what
// did not go as planned.
func (p *page) glance(run int, r Run) {
	s := r.Summary
	var ok, skipped, failed, dist, lost, notConv int
	for _, c := range s.Results {
		switch c.Status {
		case "ok":
			ok++
		case "skipped":
			skipped++
		default:
			failed++
		}
		dist += c.Disturbed
		lost += c.Lost
		if c.Convergence != nil && !c.Convergence.Converged {
			notConv++
		}
	}
	p.s(`<section class="glance"><h2>At a glance</h2><p class="counts">`)
	p.f(`<b>%d</b> cases measured, <b>%d</b> skipped, <b>%d</b> failed; <b>%d</b> trials disturbed by steal (%d not made good); <b>%d</b> cases did not reach the CI target.`,
		ok, skipped, failed, dist, lost, notConv)
	if first, last, okSpan := r.span(); okSpan {
		p.f(` Trials ran from %s to %s (%s).`, first.UTC().Format("2006-01-02 15:04:05"), last.UTC().Format("15:04:05 MST"), last.Sub(first).Round(time.Second))
	}
	p.s(`</p>`)
	p.f(`<p class="host">%s</p>`, esc(hostLine(s.Environment)))
	var rows []result.Comparison
	for _, c := range s.Comparisons {
		if c.OfVariants() && c.N > 0 {
			rows = append(rows, c)
		}
	}
	if len(rows) > 0 {
		p.s(`<p>Backends, data planes, proxies, policy engines and network functions against each other, paired by round (scale sweeps are compared in each scenario's section):</p>`)
		p.comparisonTable(rows)
	}
	p.s(`</section>`)
}

// Verdict says what a paired comparison means for the reader, and its class (better, worse
// or same): better or worse by how much (by the metric's direction), or no difference when
// the interval holds 1.0.
func Verdict(c result.Comparison) (text, class string) {
	if !c.Differs() {
		return "no difference", "same"
	}
	d := 100 * math.Abs(c.Ratio-1)
	if (c.Ratio > 1) == HigherIsBetter(c.Metric) {
		return fmt.Sprintf("better by %.0f %%", d), "better"
	}
	return fmt.Sprintf("worse by %.0f %%", d), "worse"
}

// comparisonTable lists paired comparisons with their intervals and a verdict the reader can
// act on: better or worse by how much, or no difference when the interval holds 1.0.
func (p *page) comparisonTable(rows []result.Comparison) {
	p.s(`<div class="scroll"><table class="verdicts sortable"><thead><tr><th>case</th><th>against</th><th>what differs</th><th>metric</th><th>ratio [95% CI]</th><th>verdict</th></tr></thead><tbody>`)
	for _, c := range rows {
		verdict, cls := Verdict(c)
		p.f(`<tr data-case="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td data-v="%g">%.2fx [%.2f, %.2f]</td><td class="%s">%s</td></tr>`,
			esc(c.Case), esc(c.Case), esc(c.Reference), esc(c.Kind), esc(c.Metric), c.Ratio, c.Ratio, c.CI95Low, c.CI95High, cls, esc(verdict))
	}
	p.s(`</tbody></table></div>`)
}

// scenario writes a scenario's charts and pivot table.
func (p *page) scenario(run int, id, name string, rs []result.CaseResult, s result.Summary) {
	p.f(`<section class="scenario" id="%s" data-scenario="%s"><h2>%s</h2>`, id, esc(name), esc(name))
	// One bar chart per metric group: every measured case is one bar.
	var bars chartSet
	for _, r := range rs {
		pm, m, ok := headline(r)
		if !ok {
			continue
		}
		u := unitOf(pm)
		bars.add(pm, bar{group: groupLabel(r.Case), series: r.Case.Variant(), value: m.TrimmedMean / u.scale,
			lo: m.CI95Low / u.scale, hi: m.CI95High / u.scale, ci: m.N > 1, caseID: r.Case.ID, run: run, tip: tip(r, pm, m)})
	}
	if len(bars.order) == 0 {
		p.s(`<p class="none">No case of this scenario was measured; see the problems below.</p>`)
	}
	for _, pm := range bars.order {
		p.f(`<figure class="chart" data-kind="bars" data-run="%d" data-scenario="%s" data-group="%s"><figcaption>%s: %s (whiskers: 95%% CI)</figcaption>%s%s</figure>`,
			run, esc(name), esc(pm), esc(name), esc(pm), legend(bars.series[pm], p.col), barChart(bars.bars[pm], unitOf(pm), p.col))
	}
	// Sweeps.
	sws := sweeps(rs, run)
	if len(sws) > 0 {
		p.s(`<div class="small-multiples">`)
		for _, sw := range sws {
			pm := sw.metric
			var names []string
			for _, l := range sw.lines {
				names = append(names, l.name)
			}
			p.f(`<figure class="chart" data-kind="sweep" data-run="%d" data-scenario="%s" data-dim="%s" data-metric="%s"><figcaption>%s vs %s, %s</figcaption>%s%s</figure>`,
				run, esc(name), esc(sw.dim), esc(pm), esc(pm), esc(sw.dim), esc(sw.fixed), legend(names, p.col), lineChart(sw.xs, sw.dim, sw.lines, unitOf(pm), p.col))
		}
		p.s(`</div>`)
	}
	// Latency percentiles, per family.
	fams := map[[2]string][]spread{}
	var famOrder [][2]string
	for _, r := range rs {
		if r.Status != "ok" {
			continue
		}
		for _, fam := range percentileFamilies(r) {
			if _, seen := fams[fam]; !seen {
				famOrder = append(famOrder, fam)
			}
			m := func(pc string) float64 { return r.Metrics[fam[0]+"_p"+pc+"_"+fam[1]].TrimmedMean }
			fams[fam] = append(fams[fam], spread{label: groupLabel(r.Case) + " " + r.Case.Variant(), series: r.Case.Variant(),
				p50: m("50"), p90: m("90"), p99: m("99"), caseID: r.Case.ID, run: run,
				tip: fmt.Sprintf("%s\n%s P50 %s, P90 %s, P99 %s %s (trimmed means over trials)", r.Case.ID, fam[0], num(m("50")), num(m("90")), num(m("99")), fam[1])})
		}
	}
	for _, fam := range famOrder {
		p.f(`<figure class="chart" data-kind="percentiles" data-run="%d" data-scenario="%s" data-group="%s"><figcaption>%s: %s percentiles</figcaption>%s</figure>`,
			run, esc(name), esc(fam[0]), esc(name), esc(fam[0]), spreadChart(fams[fam], unitOf("_"+fam[1]), p.col))
	}
	// CPU per Gbit/s, one chart per way the CPU was measured (never two units on one axis).
	var cpu chartSet
	for _, r := range rs {
		if v, what, ok := cpuPerGbit(r); ok {
			cpu.add(what, bar{group: groupLabel(r.Case), series: r.Case.Variant(), value: v, caseID: r.Case.ID, run: run,
				tip: fmt.Sprintf("%s\n%.1f %s", r.Case.ID, v, what)})
		}
	}
	for _, what := range cpu.order {
		p.f(`<figure class="chart" data-kind="cpu" data-run="%d" data-scenario="%s"><figcaption>%s: CPU cost, %s (lower is better)</figcaption>%s%s</figure>`,
			run, esc(name), esc(name), esc(what), legend(cpu.series[what], p.col), barChart(cpu.bars[what], unit{1, "% per Gbit/s"}, p.col))
	}
	// Paired ratios to the baseline.
	byID := map[string]result.CaseResult{}
	for _, r := range rs {
		byID[r.Case.ID] = r
	}
	var fs []forest
	for _, c := range s.Comparisons {
		cr, ok := byID[c.Case]
		if c.Kind != result.KindBaseline || !ok || c.N == 0 {
			continue
		}
		fs = append(fs, forest{label: groupLabel(cr.Case) + " " + cr.Case.Variant(), series: cr.Case.Variant(), ratio: c.Ratio, lo: c.CI95Low, hi: c.CI95High,
			differs: c.Differs(), caseID: c.Case, run: run, tip: fmt.Sprintf("%s / %s (%s)\n%s over %d rounds", c.Case, c.Reference, c.Metric, Ratio(c.RatioSummary), c.N)})
	}
	if len(fs) > 0 {
		p.f(`<figure class="chart" data-kind="ratio" data-run="%d" data-scenario="%s"><figcaption>%s: paired ratio to the baseline (bare veth intra node, node to node inter node)</figcaption>%s</figure>`,
			run, esc(name), esc(name), forestChart(fs, p.col))
	}
	var scale []result.Comparison
	differ := 0
	for _, c := range s.Comparisons {
		if _, ok := byID[c.Case]; ok && c.N > 0 && c.Kind != result.KindBaseline && !c.OfVariants() {
			scale = append(scale, c)
			if c.Differs() {
				differ++
			}
		}
	}
	if len(scale) > 0 {
		p.f(`<details class="scale"><summary>%d other paired comparisons in this scenario (scale points against the smallest, full against partial programming, A/A copies, P99 latency against the baseline); %d differ beyond the noise</summary>`, len(scale), differ)
		p.comparisonTable(scale)
		p.s(`</details>`)
	}
	p.pivotTable(scenarioPivot(name, rs), nil)
	p.s("</section>\n")
}

// pivotTable writes a pivot; commands, when given, add the tool's server and client command
// lines recorded with the trials (seed 001's tables show them).
func (p *page) pivotTable(pv pivot, commands map[string][2]string) {
	if len(pv.rows) == 0 {
		return
	}
	p.f(`<div class="scroll"><table class="pivot"><caption>%s</caption><thead><tr><th>protocol</th><th>placement</th><th>scale</th>`, esc(pv.title))
	if commands != nil {
		p.s(`<th>server command</th><th>client command</th>`)
	}
	for _, v := range pv.variants {
		p.f(`<th>%s</th>`, esc(v))
	}
	p.s(`</tr></thead><tbody>`)
	several := slices.ContainsFunc(pv.rows, func(r pivotRow) bool { return r.scenario != pv.rows[0].scenario })
	for _, r := range pv.rows {
		proto := r.protocol + " (" + r.tool + ")"
		if several {
			proto = r.scenario + " " + proto
		}
		p.f(`<tr><td>%s</td><td>%s</td><td>%s</td>`, esc(proto), esc(r.placement), esc(r.scale))
		if commands != nil {
			cmd := r.command(commands)
			p.f(`<td><code>%s</code></td><td><code>%s</code></td>`, esc(orDefault(cmd[0], "not recorded")), esc(orDefault(cmd[1], "not recorded")))
		}
		for _, v := range pv.variants {
			p.f(`<td>%s</td>`, esc(cell(r.cells[v])))
		}
		p.s(`</tr>`)
	}
	p.s(`</tbody></table></div>`)
}

// problems lists every case that was skipped or failed, lost trials to steal or did not
// converge, with the reasons; and the notes on the tools' figures.
func (p *page) problems(id string, s result.Summary) {
	p.f(`<section id="%s" class="problems"><h2>Problems</h2>`, id)
	n := 0
	item := func(cls, caseID, what string) {
		if n == 0 {
			p.s(`<ul>`)
		}
		n++
		p.f(`<li class="%s" data-case="%s"><b>%s</b> %s: %s</li>`, cls, esc(caseID), esc(cls), esc(caseID), esc(what))
	}
	for _, r := range s.Results {
		switch r.Status {
		case "ok":
		case "skipped":
			item("skipped", r.Case.ID, r.Reason)
		default:
			item(orDefault(r.Status, "failed"), r.Case.ID, r.Reason)
		}
		if r.Disturbed > 0 {
			what := fmt.Sprintf("%d trial(s) disturbed by hypervisor steal, left out and run again", r.Disturbed)
			if r.Lost > 0 {
				what += fmt.Sprintf("; %d not made good (the re-run bound was reached)", r.Lost)
			}
			item("disturbed", r.Case.ID, what)
		}
		if c := r.Convergence; c != nil && !c.Converged {
			item("not-converged", r.Case.ID, fmt.Sprintf("95 %% CI half-width %.1f %% > target %g %% after %d trials: %s", c.HalfWidthPct, c.TargetPct, c.Trials, c.Reason))
		}
		for _, note := range r.Notes {
			item("note", r.Case.ID, note)
		}
	}
	if n == 0 {
		p.s(`<p>None: every case was measured, no trial was disturbed, nothing to note.</p>`)
	} else {
		p.s(`</ul>`)
	}
	p.s(`</section>`)
}

// caseTable is every case with all statistics of its headline metric, its other metrics, its
// convergence and links to its raw trial files; sortable by any column.
func (p *page) caseTable(id string, run int, r Run) {
	s := r.Summary
	raw := map[string][]result.Trial{}
	for _, t := range r.Trials {
		if t.Raw != "" {
			raw[t.Case.ID] = append(raw[t.Case.ID], t)
		}
	}
	base := p.opt.Base
	link := func(rawPath string) string {
		target := filepath.Join(r.Dir, rawPath)
		if base != "" {
			if rel, err := filepath.Rel(absOr(base), absOr(target)); err == nil {
				return filepath.ToSlash(rel)
			}
		}
		return filepath.ToSlash(target)
	}
	vsBase := map[string]result.Comparison{}
	for _, c := range s.Comparisons {
		if c.Kind == result.KindBaseline {
			vsBase[c.Case] = c
		}
	}
	p.f(`<section id="%s"><h2>All cases</h2><p>Click a column to sort. The statistics are those of the case's headline metric; open <i>metrics</i> for the others (trimmed mean ± CI half-width).</p>`, id)
	p.f(`<div class="scroll"><table class="cases sortable" data-run="%d"><thead><tr><th>case</th><th>status</th><th>metric</th><th>n</th><th>trimmed mean</th><th>median</th><th>stdev</th><th>CI95 low</th><th>CI95 high</th><th>CV</th><th>min</th><th>max</th><th>disturbed</th><th>converged</th><th>vs baseline</th><th>trials</th></tr></thead><tbody>`, run)
	for _, cr := range s.Results {
		p.f(`<tr data-case="%s" class="st-%s"><td>%s`, esc(cr.Case.ID), esc(cr.Status), esc(cr.Case.ID))
		if len(cr.Metrics) > 1 {
			p.s(`<details><summary>metrics</summary>`)
			for _, name := range slices.Sorted(maps.Keys(cr.Metrics)) {
				m := cr.Metrics[name]
				p.f(`%s %s±%s<br>`, esc(name), num(m.TrimmedMean), num((m.CI95High-m.CI95Low)/2))
			}
			p.s(`</details>`)
		}
		p.s(`</td>`)
		pm, m, ok := headline(cr)
		if !ok {
			p.f(`<td>%s</td><td colspan="10">%s</td>`, esc(cr.Status), esc(cr.Reason))
		} else {
			p.f(`<td>ok</td><td>%s</td><td data-v="%d">%d</td>`, esc(pm), m.N, m.N)
			for _, v := range []float64{m.TrimmedMean, m.Median, m.Stdev, m.CI95Low, m.CI95High} {
				p.f(`<td data-v="%g">%s</td>`, v, esc(format(pm, v)))
			}
			p.f(`<td data-v="%g">%.1f%%</td>`, m.CV, 100*m.CV)
			for _, v := range []float64{m.Min, m.Max} {
				p.f(`<td data-v="%g">%s</td>`, v, esc(format(pm, v)))
			}
		}
		p.f(`<td data-v="%d">%d`, cr.Disturbed, cr.Disturbed)
		if cr.Lost > 0 {
			p.f(` (%d lost)`, cr.Lost)
		}
		p.s(`</td>`)
		conv := ""
		if c := cr.Convergence; c != nil {
			conv = converged(c)
		}
		p.f(`<td>%s</td>`, esc(conv))
		if c, ok := vsBase[cr.Case.ID]; ok && c.N > 0 {
			p.f(`<td data-v="%g">%s</td>`, c.Ratio, esc(Ratio(c.RatioSummary)))
		} else {
			p.s(`<td data-v="">-</td>`)
		}
		p.s(`<td class="raw">`)
		for _, t := range raw[cr.Case.ID] {
			label := fmt.Sprint(t.Trial)
			if t.Warmup {
				label = "w"
			}
			cls := ""
			if t.Status != "" && t.Status != "ok" {
				cls = ` class="` + esc(t.Status) + `"`
			}
			p.f(`<a href="%s"%s title="trial %s (%s)">%s</a> `, esc(link(t.Raw)), cls, esc(label), esc(orDefault(t.Status, "ok")), esc(label))
		}
		p.s(`</td></tr>`)
	}
	p.s(`</tbody></table></div></section>`)
}

func absOr(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// environment writes the run's environment (host, kernel, CPUs, tool versions, noise floor,
// the data planes' details) and plan (settings, cases, their trial settings), as recorded.
func (p *page) environment(id string, r Run) {
	env := r.Summary.Environment
	p.f(`<section id="%s"><h2>Environment and plan</h2><table class="env"><tbody>`, id)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if m, ok := v.(map[string]any); ok {
			p.f(`<tr><th>%s</th><td>%s</td></tr>`, esc(k), nested(m))
			continue
		}
		p.f(`<tr><th>%s</th><td>%s</td></tr>`, esc(k), esc(fmt.Sprint(v)))
	}
	p.s(`</tbody></table>`)
	if r.Plan != nil {
		p.s(`<h3>Plan</h3><table class="env"><tbody>`)
		for _, k := range slices.Sorted(maps.Keys(r.Settings)) {
			p.f(`<tr><th>%s</th><td>%s</td></tr>`, esc(k), esc(fmt.Sprint(r.Settings[k])))
		}
		shapes := map[string]int{}
		var order []string
		for _, id := range slices.Sorted(maps.Keys(r.Plan)) {
			c := r.Plan[id]
			k := fmt.Sprintf("repeat %d, %d s per trial, %d warm-up, client CPU %d, server CPU %d", c.Repeat, c.Duration, c.Warmup, c.CPUs[0], c.CPUs[1])
			if shapes[k] == 0 {
				order = append(order, k)
			}
			shapes[k]++
		}
		for _, k := range order {
			p.f(`<tr><th>%d cases</th><td>%s</td></tr>`, shapes[k], esc(k))
		}
		p.s(`</tbody></table>`)
	}
	p.s(`</section>`)
}

// nested renders a map of facts (the data planes' details) as a small table.
func nested(m map[string]any) string {
	var sb strings.Builder
	sb.WriteString(`<table class="nested"><tbody>`)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if sub, ok := v.(map[string]any); ok {
			fmt.Fprintf(&sb, `<tr><th>%s</th><td>%s</td></tr>`, esc(k), nested(sub))
			continue
		}
		fmt.Fprintf(&sb, `<tr><th>%s</th><td>%s</td></tr>`, esc(k), esc(fmt.Sprint(v)))
	}
	sb.WriteString(`</tbody></table>`)
	return sb.String()
}

const css = `body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 40px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px}
.sub{color:#555;font-size:13px}nav{margin:8px 0;font-size:13px}nav a{margin-right:10px}
figure.chart{margin:12px 0;overflow-x:auto}figcaption{font-weight:600;margin-bottom:4px}
.small-multiples{display:flex;flex-wrap:wrap;gap:8px}.small-multiples figure{margin:4px 0}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .glabel{font-size:11px}svg .axis{font-size:12px;fill:#555}
svg .grid{stroke:#e6e6e6}svg .one{stroke:#333;stroke-dasharray:3 3}svg .axisline{stroke:#999}
svg .ci{stroke:#222;stroke-width:1.2;fill:none}svg .series{fill:none;stroke-width:2}svg .pt:hover{opacity:.75}
.legend{font-size:12px;margin:2px 0 4px}.legend span{margin-right:12px;white-space:nowrap}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
thead th{background:#f4f4f4;position:sticky;top:0}table.sortable thead th{cursor:pointer}table.sortable thead th:after{content:" ⇅";color:#aaa}
td[data-v]{text-align:right;font-variant-numeric:tabular-nums}caption{text-align:left;font-weight:600;padding:4px 0}
.better{color:#0a6b2d;font-weight:600}.worse{color:#b00020;font-weight:600}.same{color:#555}.differs{color:#b00020}
tr.st-skipped td,tr.st-failed td{background:#fff8e1}.problems li.failed b{color:#b00020}.problems li.skipped b{color:#8a6d00}
.problems li.disturbed b,.problems li.not-converged b{color:#a04000}.raw a{margin-right:2px}.raw a.disturbed{color:#a04000}
details summary{cursor:pointer;color:#555;font-size:11px}code{font-size:11.5px}table.nested th,table.nested td{border:0;padding:1px 6px}
.counts b{font-variant-numeric:tabular-nums}.acct{margin:10px 0 18px}.acct h3{margin:6px 0 2px}.verdict{margin:2px 0}.findings{margin:2px 0;font-size:12.5px}
.cpubar{display:flex;align-items:center;gap:6px;margin:2px 0;font-size:12px}.cpubar .lbl{width:90px}.cpubar .bar{display:flex;width:520px;height:14px;border:1px solid #ccc}.cpubar .seg{height:100%}
tr.drops td{background:#fdecea}.ceiling{color:#8a6d00;font-size:12.5px;margin:2px 0}.kernel,.note{font-size:12px;margin:2px 0}.scroll{overflow-x:auto;max-width:100%}details.scale{margin:8px 0}@media print{nav{display:none}}`

// js sorts a table by the clicked column: numerically by data-v where cells have it, else by
// text; a second click reverses.
const js = `document.querySelectorAll("table.sortable").forEach(function(t){
var hs=t.tHead.rows[0].cells;
Array.prototype.forEach.call(hs,function(th,i){th.addEventListener("click",function(){
var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),asc=th.getAttribute("data-sort")!=="asc";
Array.prototype.forEach.call(hs,function(h){h.removeAttribute("data-sort")});th.setAttribute("data-sort",asc?"asc":"desc");
function key(r){var c=r.cells[i];if(!c)return[1,""];var v=c.getAttribute("data-v");if(v!==null&&v!==""&&!isNaN(+v))return[0,+v];return[1,c.textContent]}
rows.sort(function(x,y){var a=key(x),c=key(y),d;if(a[0]!==c[0])return a[0]-c[0];d=a[0]===0?a[1]-c[1]:a[1].localeCompare(c[1]);return asc?d:-d});
rows.forEach(function(r){b.appendChild(r)})})})});`

// hostLine says where the run was measured and how much noise this host has: host, kernel,
// CPUs and the noise floor of the last A/A test (cnibench doctor --noise), when recorded.
func hostLine(env map[string]any) string {
	var parts []string
	for _, k := range []struct{ key, label string }{{"hostname", "host "}, {"kernel", "kernel "}, {"cpu_count", "CPUs: "}, {"cpu_model", ""}, {"os", ""}} {
		if v, ok := env[k.key]; ok && fmt.Sprint(v) != "" {
			parts = append(parts, k.label+fmt.Sprint(v))
		}
	}
	s := "Measured on: " + orDefault(strings.Join(parts, ", "), "not recorded") + "."
	if nf, ok := result.NoiseFloorOf(env); ok {
		s += fmt.Sprintf(" Noise floor: two cases differ here only when they differ by more than %.1f %% (A/A test of %s, %d rounds, %s).",
			nf.ResolvablePct, nf.Case, nf.Trials, nf.Measured)
	} else {
		s += " No noise floor recorded for this host (run cnibench doctor --noise once: every later report shows it)."
	}
	return s
}
