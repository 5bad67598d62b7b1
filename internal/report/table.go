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

// BaselineFor names the baseline case a pod result is compared with: the bare veth pair for
// intra-node cases, node to node over the underlay for inter-node cases. "" for baselines.
func BaselineFor(c result.Case) string {
	if c.Scenario == "baseline" {
		return ""
	}
	b := result.Case{Scenario: "baseline", Dataplane: "bare", Placement: "intra", Protocol: c.Protocol}
	if c.Placement == "inter" {
		b.Dataplane, b.Placement = "node2node", "inter"
	}
	return b.MakeID()
}

// Primary is the metric a case is judged by: received throughput for streams, the
// transaction rate for request/response and connect/request/response, and for HTTP the
// seed's time to first byte (mean of the central 4 of 6 fetches; lower is better).
func Primary(c result.Case) string {
	switch c.Protocol {
	case "tcp", "udp":
		return "throughput_bps"
	case "http":
		return "ttfb_seed_ms"
	}
	return "transactions_per_s"
}

// Table writes one row per case: the primary metric's trimmed mean with the half-width of its
// 95 % CI (relative) and CV,
// latency percentiles or UDP loss, client/server CPU, and the ratio to the matching baseline.
func Table(w io.Writer, s result.Summary) error {
	byID := map[string]result.CaseResult{}
	for _, r := range s.Results {
		byID[r.Case.ID] = r
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tCI95 ±\tCV\tDETAIL\tCPU CLI/SRV %\tVS BASELINE")
	for _, r := range s.Results {
		if r.Status != "ok" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t%s\t\t\n", r.Case.ID, r.Status, clip(r.Reason, 70))
			continue
		}
		pm := Primary(r.Case)
		m, ok := r.Metrics[pm]
		if !ok {
			fmt.Fprintf(tw, "%s\tno %s\t\t\t\t\t\n", r.Case.ID, pm)
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
		cpu := ""
		if c, ok := r.Metrics["cpu_client_pct"]; ok {
			cpu = fmt.Sprintf("%.0f/%.0f", c.TrimmedMean, r.Metrics["cpu_server_pct"].TrimmedMean)
		}
		ratio := "-"
		if b, ok := byID[BaselineFor(r.Case)]; ok && b.Status == "ok" {
			if bm, ok := b.Metrics[pm]; ok && bm.TrimmedMean > 0 {
				ratio = fmt.Sprintf("%.2fx", m.TrimmedMean/bm.TrimmedMean)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s\n", r.Case.ID, val, ci, 100*m.CV, detail, cpu, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var stolen []string
	for _, r := range s.Results {
		if st, ok := r.Metrics["cpu_node_steal_pct"]; ok && st.Mean > StealWarnPct {
			stolen = append(stolen, fmt.Sprintf("%s %.0f%%", r.Case.ID, st.Mean))
		}
	}
	if len(stolen) > 0 {
		fmt.Fprintf(w, "\nwarning: the hypervisor took more than %.0f%% of the CPU (steal) during %d case(s); their figures are noisy:\n  %s\n",
			StealWarnPct, len(stolen), strings.Join(stolen, ", "))
	}
	return nil
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
