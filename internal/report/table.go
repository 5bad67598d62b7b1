// Package report renders results: the terminal table of a run and the comparison of runs
// side by side (terminal and Markdown; the HTML report comes later).
package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cnibench/cnibench/internal/result"
)

// Table writes one row per case: the primary metric's trimmed mean with the half-width of its
// 95 % CI (relative) and CV, the trials it rests on (and those disturbed by steal), latency
// percentiles or UDP loss, client/server CPU, and the paired ratio to the matching baseline
// with its interval. Below it: the other paired comparisons of the run, and what the reader
// must know (disturbed trials, convergence, notes).
func Table(w io.Writer, s result.Summary) error {
	byID := map[string]result.CaseResult{}
	for _, r := range s.Results {
		byID[r.Case.ID] = r
	}
	baseline := map[string]result.Comparison{}
	for _, c := range s.Comparisons {
		if c.Kind == "baseline" {
			baseline[c.Case] = c
		}
	}
	conv := false
	for _, r := range s.Results {
		conv = conv || r.Convergence != nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "CASE\tRESULT\tCI95 ±\tCV\tTRIALS\tDETAIL\tCPU CLI/SRV\tVS BASELINE (95% CI)"
	if conv {
		head += "\tCONVERGED"
	}
	fmt.Fprintln(tw, head)
	for _, r := range s.Results {
		if r.Status != "ok" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t%s\t\t\n", r.Case.ID, r.Status, clip(r.Reason, 70))
			continue
		}
		pm := r.Case.Primary()
		m, ok := r.Metrics[pm]
		if !ok {
			fmt.Fprintf(tw, "%s\tno %s\t\t\t\t\t\t\n", r.Case.ID, pm)
			continue
		}
		val, ci := format(pm, m.TrimmedMean), ciHalfWidth(m)
		detail := ""
		if l, ok := r.Metrics["loss_pct"]; ok {
			detail = fmt.Sprintf("loss %.2f%%", l.TrimmedMean)
		}
		if p50, ok := r.Metrics["latency_p50_us"]; ok {
			detail = fmt.Sprintf("p50 %.0f / p99 %.0f us", p50.TrimmedMean, r.Metrics["latency_p99_us"].TrimmedMean)
		}
		if p50, ok := r.Metrics["ttfb_p50_ms"]; ok {
			detail = fmt.Sprintf("TTFB p50 %.2f / p99 %.2f ms, %.2f Gbit/s, %.0f replicas served", p50.TrimmedMean,
				r.Metrics["ttfb_p99_ms"].TrimmedMean, r.Metrics["transfer_bps"].TrimmedMean/1e9, r.Metrics["replicas_served"].Min)
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t%s", r.Case.ID, val, ci, 100*m.CV, trials(m, r), detail, cpu(r), vsBaseline(r, pm, m, byID, baseline))
		if conv {
			row += "\t" + converged(r.Convergence)
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	io.WriteString(w, cpuLegend)
	fmt.Fprintln(w, "Ratios are paired by round (trial k of both cases ran in the same round); \"no difference\" when the 95% CI holds 1.0.")
	comparisons(w, s.Comparisons)
	footnotes(w, s)
	return nil
}

// cpuLegend says what the CPU column's units are.
const cpuLegend = "\nCPU: %core = the tool process's CPU time in % of one core (iperf3); %host = the whole host's CPU as netperf measures it.\n"

// trials is how many trials the primary metric rests on, with the disturbed ones left out.
func trials(m result.MetricSummary, r result.CaseResult) string {
	s := fmt.Sprint(m.N)
	if r.Disturbed > 0 {
		s += fmt.Sprintf(" (-%d dist.", r.Disturbed)
		if r.Lost > 0 {
			s += fmt.Sprintf(", %d lost", r.Lost)
		}
		s += ")"
	}
	return s
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

// vsBaseline is the paired ratio to the case's baseline with its interval; without a paired
// comparison (a summary written before them) the ratio of the two trimmed means, said to be
// unpaired.
func vsBaseline(r result.CaseResult, pm string, m result.MetricSummary, byID map[string]result.CaseResult, paired map[string]result.Comparison) string {
	if c, ok := paired[r.Case.ID]; ok && c.N > 0 {
		return Ratio(c.RatioSummary)
	}
	if b, ok := byID[r.Case.BaselineID()]; ok && b.Status == "ok" {
		if bm, ok := b.Metrics[pm]; ok && bm.TrimmedMean > 0 {
			return fmt.Sprintf("%.2fx (unpaired)", m.TrimmedMean/bm.TrimmedMean)
		}
	}
	return "-"
}

// Ratio renders a paired ratio: "0.72x [0.68, 0.77]", and "no difference" when the interval
// holds 1.0.
func Ratio(r result.RatioSummary) string {
	if r.N < 2 {
		return fmt.Sprintf("%.2fx (1 round)", r.Ratio)
	}
	s := fmt.Sprintf("%.2fx [%.2f, %.2f]", r.Ratio, r.CI95Low, r.CI95High)
	if !r.Differs() {
		s += " no difference"
	}
	return s
}

func converged(c *result.Convergence) string {
	switch {
	case c == nil:
		return ""
	case c.Converged:
		return fmt.Sprintf("yes (%.1f%% <= %g%%, %d trials)", c.HalfWidthPct, c.TargetPct, c.Trials)
	}
	return fmt.Sprintf("no (%.1f%% > %g%% after %d trials: %s)", c.HalfWidthPct, c.TargetPct, c.Trials, c.Reason)
}

// comparisons lists the run's paired comparisons other than to baselines.
func comparisons(w io.Writer, cs []result.Comparison) {
	var lines []string
	for _, c := range cs {
		if c.Kind == "baseline" || c.N == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s vs %s (%s, %s): %s", c.Case, c.Reference, c.Kind, c.Metric, Ratio(c.RatioSummary)))
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\npaired comparisons inside this run (ratio over the rounds both cases ran, 95%% CI):\n%s\n", strings.Join(lines, "\n"))
	}
}

// footnotes say what the reader must know: trials disturbed by steal, high mean steal among
// the trials kept (a run with --max-steal off), notes on the tools' figures.
func footnotes(w io.Writer, s result.Summary) {
	var dist, lost int
	var stolen, notes []string
	for _, r := range s.Results {
		dist += r.Disturbed
		lost += r.Lost
		if st, ok := r.Metrics["cpu_node_steal_pct"]; ok && st.Mean > StealWarnPct {
			stolen = append(stolen, fmt.Sprintf("%s %.0f%%", r.Case.ID, st.Mean))
		}
		for _, n := range r.Notes {
			notes = append(notes, r.Case.ID+": "+n)
		}
	}
	fmt.Fprintf(w, "\ndisturbed trials: %d (the hypervisor took more CPU than --max-steal allows: kept in results.jsonl, left out of the statistics", dist)
	switch {
	case lost > 0:
		fmt.Fprintf(w, "; %d could not be made good by a re-run, see --max-reruns).\n", lost)
	case dist > 0:
		fmt.Fprint(w, ", and run again).\n")
	default:
		fmt.Fprint(w, ").\n")
	}
	if len(stolen) > 0 {
		fmt.Fprintf(w, "\nwarning: the hypervisor took more than %.0f%% of the CPU (steal) during %d case(s); their figures are noisy:\n  %s\n",
			StealWarnPct, len(stolen), strings.Join(stolen, ", "))
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n  %s\n", strings.Join(notes, "\n  "))
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

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}
