package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/cnibench/cnibench/internal/result"
)

// Markdown writes the report as Markdown: the runs side by side (CompareMarkdown), then for
// each run seed 001's tables, a pivot table per scenario (a sweep down, data planes across),
// the paired comparisons of variants (backends, data planes, proxies, policy engines, network
// functions) with their intervals, and what went wrong. The charts are in the HTML report only.
func Markdown(w io.Writer, runs []Run) error {
	if err := CompareMarkdown(w, runs); err != nil {
		return err
	}
	for _, r := range runs {
		if len(runs) > 1 {
			fmt.Fprintf(w, "\n## Run `%s`\n", r.Summary.Run)
		}
		cmds := commands(r.Trials)
		for _, pv := range seedPivots(r.Summary.Results) {
			mdPivot(w, pv, cmds)
		}
		names, by := scenarios(r.Summary.Results)
		for _, n := range names {
			mdPivot(w, scenarioPivot(n, by[n]), nil)
		}
		mdVariants(w, r.Summary)
		mdVerdicts(w, r.Summary)
		mdProblems(w, r.Summary)
	}
	return nil
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", "/") }

func mdPivot(w io.Writer, pv pivot, cmds map[string][2]string) {
	if len(pv.rows) == 0 {
		return
	}
	head := []string{"protocol", "placement", "scale"}
	if cmds != nil {
		head = append(head, "server command", "client command")
	}
	head = append(head, pv.variants...)
	fmt.Fprintf(w, "\n### %s\n\n| %s |\n|%s\n", pv.title, strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, r := range pv.rows {
		row := []string{r.scenario + " " + r.protocol + " (" + r.tool + ")", r.placement, r.scale}
		if cmds != nil {
			cmd := r.command(cmds)
			row = append(row, "`"+orDefault(cmd[0], "not recorded")+"`", "`"+orDefault(cmd[1], "not recorded")+"`")
		}
		for _, v := range pv.variants {
			row = append(row, cell(r.cells[v]))
		}
		for i := range row {
			row[i] = mdCell(row[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// mdVariants lists the run's paired comparisons of variants: each case against the first
// case of the run measuring the same thing on another variant, the ratio over the rounds
// both ran with its 95 % interval, and the verdict.
func mdVariants(w io.Writer, s result.Summary) {
	var rows []result.Comparison
	for _, c := range s.Comparisons {
		if c.OfVariants() && c.N > 0 {
			rows = append(rows, c)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprint(w, "\n### Paired comparisons\n\nEach case against the run's first case measuring the same thing on another variant, over the rounds both ran (ratio case/reference, 95 % interval).\n\n")
	fmt.Fprint(w, "| case | against | what differs | metric | rounds | ratio [95% CI] | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, c := range rows {
		v, _ := Verdict(c)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %.3f [%.3f, %.3f] | %s |\n", mdCell(c.Case), mdCell(c.Reference), c.Kind, c.Metric, c.N, c.Ratio, c.CI95Low, c.CI95High, v)
	}
}

// mdVerdicts says for every accounted case what limited it, and what else its accounting
// found (drops, steal, retransmits, work outside the run); the per-CPU bars and the hop
// tables are in the HTML report.
func mdVerdicts(w io.Writer, s result.Summary) {
	var lines []string
	for _, r := range s.Results {
		if v := r.Verdict; v != nil {
			lines = append(lines, fmt.Sprintf("- **%s**: %s", r.Case.ID, v.Bottleneck))
			for _, f := range v.Findings {
				lines = append(lines, "  - "+f)
			}
		}
		if c := beyondCeiling(r, s); c != "" {
			if r.Verdict == nil {
				lines = append(lines, fmt.Sprintf("- **%s**:", r.Case.ID))
			}
			lines = append(lines, fmt.Sprintf("  - **note**: %s", c))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(w, "\n### What limited each case\n\nFrom each case's accounting (the mean over its trials of every CPU's shares, the run's processes, the devices of the path and the kernel's counters; the HTML report shows them):\n\n")
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

func mdProblems(w io.Writer, s result.Summary) {
	var lines []string
	for _, r := range s.Results {
		if r.Status != "ok" {
			lines = append(lines, fmt.Sprintf("- **%s** %s: %s", orDefault(r.Status, "failed"), r.Case.ID, r.Reason))
		}
		if r.Disturbed > 0 {
			lines = append(lines, fmt.Sprintf("- **disturbed** %s: %d trial(s) disturbed by steal, %d not made good", r.Case.ID, r.Disturbed, r.Lost))
		}
		if c := r.Convergence; c != nil && !c.Converged {
			lines = append(lines, fmt.Sprintf("- **not converged** %s: CI half-width %.1f %% > %g %% after %d trials: %s", r.Case.ID, c.HalfWidthPct, c.TargetPct, c.Trials, c.Reason))
		}
		for _, n := range r.Notes {
			lines = append(lines, fmt.Sprintf("- **note** %s: %s", r.Case.ID, n))
		}
	}
	fmt.Fprint(w, "\n### Problems\n\n")
	if len(lines) == 0 {
		fmt.Fprintln(w, "None: every case was measured, no trial was disturbed, nothing to note.")
		return
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}
