package report

import (
	"encoding/json"
	"io"

	"github.com/cnibench/cnibench/internal/result"
)

// JSONReport is what `cnibench report --output json` prints: each run's summary and, with
// several runs, the comparison the page shows (rows matched by id without the data plane).
type JSONReport struct {
	Runs       []JSONRun `json:"runs"`
	Columns    []string  `json:"columns,omitempty"`
	Comparison []JSONRow `json:"comparison,omitempty"`
}

// JSONRun is one run of a report.
type JSONRun struct {
	Dir     string         `json:"dir"`
	Summary result.Summary `json:"summary"`
}

// JSONRow is one compared case key: a cell per column (run and data plane).
type JSONRow struct {
	Key   string     `json:"key"`
	Cells []JSONCell `json:"cells"`
}

// JSONCell is one case's headline in a comparison; ChangePct and Disjoint are against the
// first column (Disjoint: the two 95 % intervals do not overlap).
type JSONCell struct {
	Column    string   `json:"column"`
	Case      string   `json:"case,omitempty"`
	Status    string   `json:"status,omitempty"`
	Metric    string   `json:"metric,omitempty"`
	Value     *float64 `json:"value,omitempty"`
	CI95Low   *float64 `json:"ci95_low,omitempty"`
	CI95High  *float64 `json:"ci95_high,omitempty"`
	ChangePct *float64 `json:"change_pct,omitempty"`
	Disjoint  bool     `json:"disjoint,omitempty"`
}

// JSON writes the report for scripts.
func JSON(w io.Writer, runs []Run) error {
	var out JSONReport
	for _, r := range runs {
		out.Runs = append(out.Runs, JSONRun{Dir: r.Dir, Summary: r.Summary})
	}
	if len(runs) > 1 {
		g := buildGrid(runs)
		for _, c := range g.cols {
			out.Columns = append(out.Columns, c.label)
		}
		for _, k := range g.keys {
			row := JSONRow{Key: k}
			ref := g.cells[k][0]
			for j, cr := range g.cells[k] {
				c := JSONCell{Column: g.cols[j].label}
				if cr != nil {
					c.Case, c.Status = cr.Case.ID, cr.Status
				}
				if pm, m, ok := primary(cr); ok {
					c.Metric = pm
					c.Value, c.CI95Low, c.CI95High = &m.TrimmedMean, &m.CI95Low, &m.CI95High
					if ch, disjoint, ok := change(cr, ref); ok && j > 0 {
						c.ChangePct, c.Disjoint = &ch, disjoint
					}
				}
				row.Cells = append(row.Cells, c)
			}
			out.Comparison = append(out.Comparison, row)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// change is the % change of r's headline against ref's and whether their 95 % intervals do
// not overlap; ok is false when either was not measured.
func change(r, ref *result.CaseResult) (pct float64, disjoint, ok bool) {
	_, m, ok := primary(r)
	_, b, bok := primary(ref)
	if !ok || !bok || b.TrimmedMean == 0 {
		return 0, false, false
	}
	disjoint = m.N > 1 && b.N > 1 && (m.CI95Low > b.CI95High || m.CI95High < b.CI95Low)
	return 100 * (m.TrimmedMean/b.TrimmedMean - 1), disjoint, true
}
