package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The charts are SVG drawn here, in Go, and put inline into the page: the report needs no
// script to draw them, no charting library and no network, weighs little per point and is
// the same in every browser, in a screenshot and when printed. Every drawn measurement is an
// element of class "pt" carrying data-case (the case id) and data-value (what it stands for),
// and a <title> the browser shows as a tooltip.

// palette colours the series (data plane variants, runs) in order of first appearance; chosen
// to stay distinguishable for the common colour-vision deficiencies (Okabe-Ito, then Tol).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000",
	"#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#882255", "#AA4499", "#F0E442"}

// colours assigns each series name a palette colour, in first-seen order, for the whole page.
type colours struct {
	m     map[string]string
	order []string
}

func (c *colours) of(name string) string {
	if c.m == nil {
		c.m = map[string]string{}
	}
	if col, ok := c.m[name]; ok {
		return col
	}
	col := palette[len(c.m)%len(palette)]
	c.m[name] = col
	c.order = append(c.order, name)
	return col
}

// unit is how a metric's values are shown on an axis: divided by scale, suffixed by name.
type unit struct {
	scale float64
	name  string
}

// unitOf is the display unit of a metric, from the unit its name ends with (docs/design.md: metric
// names carry their unit).
func unitOf(metric string) unit {
	switch {
	case strings.HasSuffix(metric, "_bps"):
		return unit{1e9, "Gbit/s"}
	case strings.HasSuffix(metric, "_pps"):
		return unit{1e6, "Mpps"}
	case strings.HasSuffix(metric, "_per_s"):
		return unit{1, strings.ReplaceAll(strings.TrimSuffix(metric, "_per_s"), "_", " ") + "/s"}
	case strings.HasSuffix(metric, "_us"):
		return unit{1, "µs"}
	case strings.HasSuffix(metric, "_ms"):
		return unit{1, "ms"}
	case strings.HasSuffix(metric, "_pct"):
		return unit{1, "%"}
	}
	return unit{1, ""}
}

// num formats a value for a label with 3 significant digits, without exponent for the
// ranges benchmarks produce.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// niceTicks returns about n round tick values covering [0, hi].
func niceTicks(hi float64, n int) []float64 {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		return []float64{0, 1}
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for v := 0.0; v < hi+step; v += step {
		ticks = append(ticks, v)
		if v >= hi {
			break
		}
	}
	return ticks
}

func esc(s string) string { return html.EscapeString(s) }

// hAxis opens an svg of width x height and draws a horizontal value axis: a grid line and a
// label per tick from top to bottom, and the axis title centred at mid under them.
func hAxis(sb *strings.Builder, width, height int, ticks []float64, x func(float64) float64, top, bottom, mid int, title string) {
	fmt.Fprintf(sb, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, width, height, width, height)
	for _, t := range ticks {
		fmt.Fprintf(sb, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x(t), top, x(t), bottom, x(t), bottom+14, num(t))
	}
	fmt.Fprintf(sb, `<text class="axis" x="%d" y="%d" text-anchor="middle">%s</text>`, mid, bottom+27, esc(title))
}

// bar is one drawn measurement of a horizontal bar chart: its group (a row block), its series
// (a colour), its value and 95 % interval (in display units), the case it stands for and its
// tooltip.
type bar struct {
	group, series string
	value, lo, hi float64
	ci            bool
	caseID        string
	run           int
	tip           string
}

// barChart draws horizontal bars grouped by group, one bar per series in a group, with the
// 95 % CI as a whisker. Groups and series keep the order of items.
func barChart(items []bar, u unit, col *colours) string {
	const (
		labelW, plotW, barH, gap, top, axisH = 250, 560, 13, 9, 8, 30
	)
	var groups []string
	byGroup := map[string][]bar{}
	hi := 0.0
	for _, b := range items {
		if _, ok := byGroup[b.group]; !ok {
			groups = append(groups, b.group)
		}
		byGroup[b.group] = append(byGroup[b.group], b)
		hi = math.Max(hi, math.Max(b.value, b.hi))
	}
	ticks := niceTicks(hi, 5)
	xmax := ticks[len(ticks)-1]
	x := func(v float64) float64 { return labelW + plotW*math.Max(v, 0)/xmax }
	height := top + axisH
	for _, g := range groups {
		height += len(byGroup[g])*barH + gap
	}
	var sb strings.Builder
	plotBottom := height - axisH
	hAxis(&sb, labelW+plotW+20, height, ticks, x, top, plotBottom, labelW+plotW/2, u.name)
	y := top
	for _, g := range groups {
		bs := byGroup[g]
		fmt.Fprintf(&sb, `<text class="glabel" x="%d" y="%.1f" text-anchor="end">%s</text>`, labelW-6, float64(y)+float64(len(bs)*barH)/2+4, esc(g))
		for _, b := range bs {
			c := col.of(b.series)
			fmt.Fprintf(&sb, `<g class="pt" data-case="%s" data-run="%d" data-value="%g"><title>%s</title>`, esc(b.caseID), b.run, b.value*u.scale, esc(b.tip))
			fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelW, y+1, x(b.value)-labelW, barH-2, c)
			if b.ci {
				cy := float64(y) + float64(barH)/2
				fmt.Fprintf(&sb, `<path class="ci" d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f"/>`,
					x(b.lo), cy, x(b.hi), x(b.lo), cy-4, cy+4, x(b.hi), cy-4, cy+4)
			}
			sb.WriteString(`</g>`)
			y += barH
		}
		y += gap
	}
	fmt.Fprintf(&sb, `<line class="axisline" x1="%d" y1="%d" x2="%d" y2="%d"/></svg>`, labelW, top, labelW, plotBottom)
	return sb.String()
}

// point is one measurement on a line chart at category x.
type point struct {
	x             string
	value, lo, hi float64
	ci            bool
	caseID        string
	run           int
	tip           string
}

// line is one series of a line chart.
type line struct {
	name   string
	points []point
}

// lineChart draws one line per series over categorical x values (in the order given: sweeps
// are 1, 10, 100, ... so equal spacing reads as a log axis), with CI whiskers.
func lineChart(xs []string, xName string, series []line, u unit, col *colours) string {
	const (
		left, plotW, top, plotH, bottom = 56, 300, 10, 170, 40
	)
	hi := 0.0
	for _, s := range series {
		for _, p := range s.points {
			hi = math.Max(hi, math.Max(p.value, p.hi))
		}
	}
	ticks := niceTicks(hi, 4)
	ymax := ticks[len(ticks)-1]
	y := func(v float64) float64 { return top + plotH - plotH*math.Max(v, 0)/ymax }
	xi := map[string]int{}
	for i, v := range xs {
		xi[v] = i
	}
	x := func(v string) float64 {
		if len(xs) == 1 {
			return left + plotW/2
		}
		return left + 10 + float64(plotW-20)*float64(xi[v])/float64(len(xs)-1)
	}
	w, h := left+plotW+10, top+plotH+bottom
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, w, h, w, h)
	for _, t := range ticks {
		fmt.Fprintf(&sb, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/><text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			left, y(t), left+plotW, y(t), left-4, y(t)+4, num(t))
	}
	for _, v := range xs {
		fmt.Fprintf(&sb, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(v), top+plotH+14, esc(v))
	}
	fmt.Fprintf(&sb, `<text class="axis" x="%d" y="%d" text-anchor="middle">%s</text>`, left+plotW/2, top+plotH+30, esc(xName))
	fmt.Fprintf(&sb, `<text class="axis" x="12" y="%d" text-anchor="middle" transform="rotate(-90 12 %d)">%s</text>`, top+plotH/2, top+plotH/2, esc(u.name))
	for _, s := range series {
		c := col.of(s.name)
		var d strings.Builder
		for i, p := range s.points {
			if i == 0 {
				fmt.Fprintf(&d, "M%.1f %.1f", x(p.x), y(p.value))
			} else {
				fmt.Fprintf(&d, "L%.1f %.1f", x(p.x), y(p.value))
			}
		}
		fmt.Fprintf(&sb, `<path class="series" d="%s" stroke="%s"/>`, d.String(), c)
		for _, p := range s.points {
			fmt.Fprintf(&sb, `<g class="pt" data-case="%s" data-run="%d" data-value="%g"><title>%s</title>`, esc(p.caseID), p.run, p.value*u.scale, esc(p.tip))
			if p.ci {
				fmt.Fprintf(&sb, `<path class="ci" d="M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f" stroke="%s"/>`,
					x(p.x), y(p.lo), y(p.hi), x(p.x)-3, y(p.lo), x(p.x)+3, x(p.x)-3, y(p.hi), x(p.x)+3, c)
			}
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/></g>`, x(p.x), y(p.value), c)
		}
	}
	fmt.Fprintf(&sb, `<line class="axisline" x1="%d" y1="%d" x2="%d" y2="%d"/></svg>`, left, top+plotH, left+plotW, top+plotH)
	return sb.String()
}

// spread is one case's percentiles on a percentile chart.
type spread struct {
	label, series string
	p50, p90, p99 float64
	caseID        string
	run           int
	tip           string
}

// spreadChart draws per case a line from P50 to P99 with marks at P50 (dot), P90 (bar) and
// P99 (diamond).
func spreadChart(items []spread, u unit, col *colours) string {
	const (
		labelW, plotW, rowH, top, axisH = 250, 560, 15, 8, 30
	)
	hi := 0.0
	for _, s := range items {
		hi = math.Max(hi, s.p99)
	}
	ticks := niceTicks(hi, 5)
	xmax := ticks[len(ticks)-1]
	x := func(v float64) float64 { return labelW + plotW*math.Max(v, 0)/xmax }
	height := top + len(items)*rowH + axisH
	var sb strings.Builder
	bottom := height - axisH
	hAxis(&sb, labelW+plotW+20, height, ticks, x, top, bottom, labelW+plotW/2, u.name+" (dot P50, bar P90, diamond P99)")
	for i, s := range items {
		c := col.of(s.series)
		cy := float64(top + i*rowH + rowH/2)
		fmt.Fprintf(&sb, `<text class="glabel" x="%d" y="%.1f" text-anchor="end">%s</text>`, labelW-6, cy+4, esc(s.label))
		fmt.Fprintf(&sb, `<g class="pt" data-case="%s" data-run="%d" data-value="%g"><title>%s</title>`, esc(s.caseID), s.run, s.p50*u.scale, esc(s.tip))
		fmt.Fprintf(&sb, `<path d="M%.1f %.1fH%.1f" stroke="%s" stroke-width="2"/>`, x(s.p50), cy, x(s.p99), c)
		fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`, x(s.p50), cy, c)
		fmt.Fprintf(&sb, `<path d="M%.1f %.1fV%.1f" stroke="%s" stroke-width="3"/>`, x(s.p90), cy-5, cy+5, c)
		fmt.Fprintf(&sb, `<path d="M%.1f %.1fl4 4l-4 4l-4 -4z" fill="%s"/></g>`, x(s.p99), cy-4, c)
	}
	fmt.Fprintf(&sb, `<line class="axisline" x1="%d" y1="%d" x2="%d" y2="%d"/></svg>`, labelW, top, labelW, bottom)
	return sb.String()
}

// forest is one paired ratio with its interval on a forest plot.
type forest struct {
	label, series   string
	ratio, lo, hi   float64
	differs, better bool
	caseID          string
	run             int
	tip             string
}

// forestChart draws paired ratios on a log axis with their 95 % intervals and a line at 1.0;
// a ratio whose interval holds 1.0 is drawn hollow (no difference).
func forestChart(items []forest, col *colours) string {
	const (
		labelW, plotW, rowH, top, axisH = 250, 560, 15, 8, 30
	)
	lo, hi := 1.0, 1.0
	for _, f := range items {
		if f.lo > 0 {
			lo = math.Min(lo, f.lo)
		}
		lo = math.Min(lo, f.ratio)
		hi = math.Max(hi, math.Max(f.hi, f.ratio))
	}
	lo, hi = math.Log(lo)-0.05, math.Log(hi)+0.05
	x := func(v float64) float64 {
		if v <= 0 {
			return labelW
		}
		return labelW + plotW*(math.Log(v)-lo)/(hi-lo)
	}
	height := top + len(items)*rowH + axisH
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, labelW+plotW+20, height, labelW+plotW+20, height)
	bottom := height - axisH
	for _, t := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100} {
		if math.Log(t) < lo || math.Log(t) > hi {
			continue
		}
		cls := "grid"
		if t == 1 {
			cls = "one"
		}
		fmt.Fprintf(&sb, `<line class="%s" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text class="tick" x="%.1f" y="%d" text-anchor="middle">%g</text>`,
			cls, x(t), top, x(t), bottom, x(t), bottom+14, t)
	}
	fmt.Fprintf(&sb, `<text class="axis" x="%d" y="%d" text-anchor="middle">ratio (log scale), 95%% CI; hollow: no difference</text>`, labelW+plotW/2, bottom+27)
	for i, f := range items {
		c := col.of(f.series)
		cy := float64(top + i*rowH + rowH/2)
		fmt.Fprintf(&sb, `<text class="glabel" x="%d" y="%.1f" text-anchor="end">%s</text>`, labelW-6, cy+4, esc(f.label))
		fmt.Fprintf(&sb, `<g class="pt" data-case="%s" data-run="%d" data-value="%g"><title>%s</title>`, esc(f.caseID), f.run, f.ratio, esc(f.tip))
		if f.lo > 0 && f.hi > 0 {
			fmt.Fprintf(&sb, `<path d="M%.1f %.1fH%.1f" stroke="%s" stroke-width="2"/>`, x(f.lo), cy, x(f.hi), c)
		}
		fill := c
		if !f.differs {
			fill = "#fff"
		}
		fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" stroke-width="1.5"/></g>`, x(f.ratio), cy, fill, c)
	}
	fmt.Fprintf(&sb, `</svg>`)
	return sb.String()
}

// legend lists series names with their colours.
func legend(names []string, col *colours) string {
	var sb strings.Builder
	sb.WriteString(`<div class="legend">`)
	for _, n := range names {
		fmt.Fprintf(&sb, `<span><i style="background:%s"></i>%s</span>`, col.of(n), esc(n))
	}
	sb.WriteString(`</div>`)
	return sb.String()
}
