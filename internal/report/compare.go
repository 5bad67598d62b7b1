package report

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/cnibench/cnibench/internal/result"
)

// Compare writes the runs side by side for the terminal in at most 100 columns: one column
// per (run, data plane), one row per comparison key (result.Case.CompareKey) listed under a
// heading per scenario (per baseline for baselines), each cell the primary metric's trimmed
// mean with the half-width of its 95 % CI, and, with several columns, each column's ratio to
// the first. Columns that do not fit beside each other continue in a block below; a long
// column label wraps over header lines. Under the table, one line per column with the
// environment facts that matter. With a single run it is that run's per-dataplane view.
// Without a style it is plain text; with colour the values are bold, skipped yellow and
// failed red (ratios are not coloured).
func Compare(w io.Writer, runs []Run, style ...Style) error {
	var st Style
	if len(style) > 0 {
		st = style[0]
	}
	g := buildGrid(runs)
	o := &termOut{st: st}
	g.write(o)
	o.blank()
	if len(g.cols) > 1 {
		o.text(fmt.Sprintf("RATIO: the column to its left against %s, same row: %s", g.cols[0].label, ratioLegend), 0, 2)
	}
	for _, c := range g.cols {
		o.text(c.label+": "+c.facts, 0, 2)
	}
	return o.flush(w)
}

// ratioLegend says what a ratio of the comparison is.
const ratioLegend = "the run's paired ratio with its 95 % interval where one run measured and paired both, else the quotient of the two trimmed means (cases of two runs are not paired: no interval)."

// labelWrap is the width a column label wraps at when the column's cells are narrower.
const labelWrap = 30

// write lays the grid out in the terminal width (see Compare).
func (g *grid) write(o *termOut) {
	var groups []string
	keys := map[string][]string{} // group -> its keys
	rest := map[string]string{}
	for _, k := range g.keys {
		gr, r := keyGroup(k, g.cells[k])
		if _, ok := keys[gr]; !ok {
			groups = append(groups, gr)
		}
		keys[gr] = append(keys[gr], k)
		rest[k] = r
	}
	caseW := len("CASE")
	for _, gr := range groups {
		for _, k := range keys[gr] {
			caseW = max(caseW, indentOf(gr)+utf8.RuneCountInString(rest[k]))
		}
	}
	n := len(g.cols)
	colW, ratioW := make([]int, n), make([]int, n)
	labels := make([][]segs, n)
	widest := 0 // the widest column with its ratio
	for j, c := range g.cols {
		cells := 0
		for _, k := range g.keys {
			cells = max(cells, utf8.RuneCountInString(cell(g.cells[k][j])))
			ratioW[j] = max(ratioW[j], len("RATIO"), utf8.RuneCountInString(g.ratio(g.cells[k][j], g.cells[k][0])))
		}
		colW[j] = max(cells, min(utf8.RuneCountInString(c.label), max(cells, labelWrap)))
		labels[j] = wrapLabel(c.label, colW[j])
		widest = max(widest, colW[j]+colRatio(j, ratioW))
	}
	caseW = max(min(caseW, termWidth-2-widest), len("CASE"))
	// Blocks of columns that fit beside the CASE column.
	var blocks [][]int
	used := 0
	for j := range g.cols {
		need := 2 + colW[j] + colRatio(j, ratioW)
		if len(blocks) == 0 || used+need > termWidth {
			blocks = append(blocks, nil)
			used = caseW
		}
		blocks[len(blocks)-1] = append(blocks[len(blocks)-1], j)
		used += need
	}
	for b, block := range blocks {
		if b > 0 {
			o.blank()
		}
		lines := 0
		for _, j := range block {
			lines = max(lines, len(labels[j]))
		}
		for i := range lines {
			caseHead, ratioHead := "", ""
			if i == 0 {
				caseHead, ratioHead = "CASE", "RATIO"
			}
			head := pad(plain(caseHead), caseW+2)
			for _, j := range block {
				var l segs
				if i < len(labels[j]) {
					l = labels[j][i]
				}
				head = append(head, pad(l, colW[j]+2)...)
				if j > 0 {
					head = append(head, pad(plain(ratioHead), ratioW[j]+2)...)
				}
			}
			o.line(head)
		}
		for _, gr := range groups {
			if gr != "" {
				for _, l := range wrap(plain(gr), 0, 2) {
					o.line(l)
				}
			}
			for _, k := range keys[gr] {
				cells := g.cells[k]
				var right segs
				for _, j := range block {
					right = append(right, pad(cellSegs(cells[j]), colW[j]+2)...)
					if j > 0 {
						right = append(right, pad(plain(g.ratio(cells[j], cells[0])), ratioW[j]+2)...)
					}
				}
				o.row(rest[k], indentOf(gr), caseW, []segs{right})
			}
		}
	}
}

// wrapLabel breaks a column label into lines of at most width, keeping a parenthesis
// ("(cni calico)") on one line when it can and breaking a long run directory's name after a
// '-'.
func wrapLabel(label string, width int) []segs {
	depth := 0
	keep := []rune(label)
	for i, r := range keep {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth = max(depth-1, 0)
		case r == ' ' && depth > 0:
			keep[i] = '\u00a0'
		}
	}
	var out []segs
	for _, r := range breakLinesAfter(string(keep), width, "/-") {
		out = append(out, plain(strings.ReplaceAll(string(keep[r[0]:r[1]]), "\u00a0", " ")))
	}
	return out
}

// colRatio is the room column j's RATIO takes beside it (the first column has none).
func colRatio(j int, ratioW []int) int {
	if j == 0 {
		return 0
	}
	return 2 + ratioW[j]
}

// keyGroup splits a comparison key into the heading it is listed under, its scenario (a
// baseline's with its kind: "baseline/bare"), and the rest ("inter/tcp").
func keyGroup(key string, cells []*result.CaseResult) (group, rest string) {
	lead := 1
	for _, c := range cells {
		if c != nil && c.Case.IsBaseline() {
			lead = 2
		}
	}
	parts := strings.Split(key, "/")
	if len(parts) <= lead {
		return "", key
	}
	return strings.Join(parts[:lead], "/"), strings.Join(parts[lead:], "/")
}

// cellSegs is cell with its colour: a value bold, a status yellow (skipped) or red.
func cellSegs(r *result.CaseResult) segs {
	s := cell(r)
	if _, _, ok := primary(r); ok {
		return styled(sgrBold, s)
	}
	if r != nil && r.Status != "ok" && r.Status != "" {
		return styled(statusSGR(r.Status), s)
	}
	return plain(s)
}

// CompareMarkdown writes what Compare writes as a Markdown document (a pipe table and a list
// of the columns' environments).
func CompareMarkdown(w io.Writer, runs []Run) error {
	g := buildGrid(runs)
	var ids []string
	for _, r := range runs {
		ids = append(ids, fmt.Sprintf("`%s` (%s)", r.Summary.Run, r.Dir))
	}
	fmt.Fprintf(w, "# cnibench report\n\nRuns: %s\n\n", strings.Join(ids, ", "))
	for i, row := range g.rows("case", "ratio") {
		for j := range row {
			row[j] = strings.ReplaceAll(row[j], "|", "/")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		if i == 0 {
			fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(row)))
		}
	}
	fmt.Fprintln(w)
	if len(g.cols) > 1 {
		fmt.Fprintf(w, "Each *ratio* is the column to its left against **%s**, same row: %s\n\n", g.cols[0].label, ratioLegend)
	}
	fmt.Fprintln(w, "Environment:")
	fmt.Fprintln(w)
	for _, c := range g.cols {
		fmt.Fprintf(w, "- **%s**: %s\n", c.label, c.facts)
	}
	return nil
}

// column is one (run, data plane) of the comparison.
type column struct {
	run       int
	dataplane string // the cases' Variant; "" for a run that holds baselines only
	backend   string
	label     string
	facts     string
}

// grid is the comparison: cells[key][column], keys in first-seen order.
type grid struct {
	cols  []column
	keys  []string
	cells map[string][]*result.CaseResult
	// runOf is the run of each cell, paired each run's paired ratios of the primary metric
	// by case and reference id.
	runOf  map[*result.CaseResult]int
	paired []map[[2]string]result.RatioSummary
}

// buildGrid lays the runs out. Pod results go to their run's column of their data plane.
// Baselines have no column of their own: a run's baseline is shown once, in the run's first
// column (its key keeps the baseline's name, so its row compares baselines across runs).
func buildGrid(runs []Run) grid {
	g := grid{cells: map[string][]*result.CaseResult{}, runOf: map[*result.CaseResult]int{}}
	for _, r := range runs {
		pm := map[string]string{}
		for _, cr := range r.Summary.Results {
			pm[cr.Case.ID] = cr.Case.Primary()
		}
		pairs := map[[2]string]result.RatioSummary{}
		for _, c := range r.Summary.Comparisons {
			if c.N > 0 && c.Metric == pm[c.Case] {
				pairs[[2]string{c.Case, c.Reference}] = c.RatioSummary
			}
		}
		g.paired = append(g.paired, pairs)
	}
	first := make([]int, len(runs)) // each run's first column
	for i, r := range runs {
		first[i] = len(g.cols)
		for _, cr := range r.Summary.Results {
			if !cr.Case.IsBaseline() && g.col(i, cr.Case.Variant()) < 0 {
				g.cols = append(g.cols, column{run: i, dataplane: cr.Case.Variant(), backend: cr.Case.Backend})
			}
		}
		if len(g.cols) == first[i] {
			g.cols = append(g.cols, column{run: i, backend: runBackend(r.Summary)})
		}
	}
	for i, r := range runs {
		for _, cr := range r.Summary.Results {
			k := cr.Case.CompareKey()
			if g.cells[k] == nil {
				g.keys = append(g.keys, k)
				g.cells[k] = make([]*result.CaseResult, len(g.cols))
			}
			j := g.col(i, cr.Case.Variant())
			if cr.Case.IsBaseline() {
				j = first[i]
			}
			if g.cells[k][j] == nil {
				g.cells[k][j] = &cr
				g.runOf[&cr] = i
			}
		}
	}
	g.label(runs)
	return g
}

// col is the index of run's column of dataplane, -1 if none.
func (g *grid) col(run int, dataplane string) int {
	return slices.IndexFunc(g.cols, func(c column) bool { return c.run == run && c.dataplane == dataplane })
}

// label names the columns ("lab flannel", "kube cluster (cni calico)", the run directory's
// base name first when several runs share a backend) and gathers their environment facts.
func (g *grid) label(runs []Run) {
	perBackend := map[string]map[int]bool{}
	for _, c := range g.cols {
		if perBackend[c.backend] == nil {
			perBackend[c.backend] = map[int]bool{}
		}
		perBackend[c.backend][c.run] = true
	}
	seen := map[string]int{}
	for j := range g.cols {
		c := &g.cols[j]
		env := runs[c.run].Summary.Environment
		info := dataplaneInfo(env, c.dataplane)
		parts := []string{orDefault(c.backend, "run")}
		if len(perBackend[c.backend]) > 1 {
			parts = append([]string{filepath.Base(filepath.Clean(runs[c.run].Dir))}, parts...)
		}
		if c.dataplane != "" {
			parts = append(parts, c.dataplane)
		}
		if cni, ok := info["cni"].(string); ok && strings.TrimSpace(cni) != "" {
			parts = append(parts, fmt.Sprintf("(cni %s)", strings.Fields(cni)[0]))
		}
		c.label = strings.Join(parts, " ")
		if seen[c.label]++; seen[c.label] > 1 {
			c.label += fmt.Sprintf(" #%d", seen[c.label])
		}
		c.facts = facts(env, info, c.backend)
	}
}

// factKeys are the environment facts shown under a comparison, in this order.
var factKeys = []string{"kubernetes_version", "cni", "flannel_backend", "kube_proxy_mode", "pod_mtu"}

// facts lists the environment facts that matter for a column: the kernel (the nodes' on a
// cluster, the host's on the lab), then factKeys from the data plane's info when present.
func facts(env, info map[string]any, backend string) string {
	var fs []string
	if k := nodeKernels(info); k != "" {
		fs = append(fs, "kernel "+k)
	} else if k, ok := env["kernel"].(string); ok && backend != "kube" {
		fs = append(fs, "kernel "+k)
	}
	for _, k := range factKeys {
		if v, ok := info[k]; ok {
			fs = append(fs, fmt.Sprintf("%s %v", k, v))
		}
	}
	if len(fs) == 0 {
		return "no environment facts recorded"
	}
	return strings.Join(fs, ", ")
}

// nodeKernels is the distinct kernels of a cluster's nodes ("node_kernel": node -> kernel).
func nodeKernels(info map[string]any) string {
	m, _ := info["node_kernel"].(map[string]any)
	var ks []string
	for _, v := range m {
		if s := fmt.Sprint(v); !slices.Contains(ks, s) {
			ks = append(ks, s)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, " / ")
}

// dataplaneInfo is environment["dataplanes"][dataplane], nil if not recorded.
func dataplaneInfo(env map[string]any, dataplane string) map[string]any {
	dps, _ := env["dataplanes"].(map[string]any)
	info, _ := dps[dataplane].(map[string]any)
	return info
}

// runBackend is the backend of a run's cases ("" when it has none).
func runBackend(s result.Summary) string {
	for _, r := range s.Results {
		if r.Case.Backend != "" {
			return r.Case.Backend
		}
	}
	return ""
}

// rows is the table: a header (the case and ratio columns named caseHead and ratioHead),
// then one row per key; after each column but the first, its ratio to the first.
func (g *grid) rows(caseHead, ratioHead string) [][]string {
	head := []string{caseHead}
	for j, c := range g.cols {
		head = append(head, c.label)
		if j > 0 {
			head = append(head, ratioHead)
		}
	}
	out := [][]string{head}
	for _, k := range g.keys {
		row := []string{k}
		cells := g.cells[k]
		for j, cr := range cells {
			row = append(row, cell(cr))
			if j > 0 {
				row = append(row, g.ratio(cr, cells[0]))
			}
		}
		out = append(out, row)
	}
	return out
}

// primary is a result's primary metric, if it was measured.
func primary(r *result.CaseResult) (string, result.MetricSummary, bool) {
	if r == nil || r.Status != "ok" {
		return "", result.MetricSummary{}, false
	}
	pm := r.Case.Primary()
	m, ok := r.Metrics[pm]
	return pm, m, ok
}

// cell is a result's primary metric with its CI half-width, its status when it was not
// measured, "-" when the column has no such case.
func cell(r *result.CaseResult) string {
	pm, m, ok := primary(r)
	switch {
	case ok && ciHalfWidth(m) != "-":
		return format(pm, m.TrimmedMean) + " ±" + ciHalfWidth(m)
	case ok:
		return format(pm, m.TrimmedMean)
	case r != nil && r.Status != "ok" && r.Status != "":
		return r.Status
	}
	return "-"
}

// ratio is r's primary metric against ref's, "-" when either is missing: the run's paired
// ratio with its 95 % interval ("1.06x [0.98, 1.15]") where one run measured both and paired
// them, else the quotient of their trimmed means ("0.68x": two runs are not paired).
func (g *grid) ratio(r, ref *result.CaseResult) string {
	_, m, ok := primary(r)
	_, b, bok := primary(ref)
	if !ok || !bok || b.TrimmedMean <= 0 {
		return "-"
	}
	if i, j := g.runOf[r], g.runOf[ref]; i == j && i < len(g.paired) {
		if p, ok := g.paired[i][[2]string{r.Case.ID, ref.Case.ID}]; ok {
			return Ratio(p)
		}
	}
	return fmt.Sprintf("%.2fx", m.TrimmedMean/b.TrimmedMean)
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
