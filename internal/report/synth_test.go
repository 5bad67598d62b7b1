package report

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// synthRun builds a run of n cases with trials trials each, the shape a big plan has: p2s
// swept over services on several data planes, placements and protocols (the first cases are
// baselines), every case with paired ratios to its baseline and raw trial files named in
// results.jsonl; a few skipped, failed, disturbed and not converged. Figures are random
// around plausible values (seeded: the same every time).
func synthRun(dir string, n, trials int) Run {
	rng := rand.New(rand.NewPCG(1, 2))
	dps := []string{"flannel", "calico", "calico-vxlan", "flannel-hostgw", "kube-router"}
	protos := []struct{ p, tool, metric string }{{"tcp", "iperf3", "throughput_bps"}, {"udp", "iperf3", "throughput_bps"}, {"rr", "netperf", "transactions_per_s"}, {"crr", "netperf", "transactions_per_s"}}
	base := map[string]float64{"throughput_bps": 15e9, "transactions_per_s": 14000}
	s := result.Summary{Run: filepath.Base(dir), Environment: map[string]any{"kernel": "6.18.44", "cpu_count": 2, "cpu_model": "synthetic",
		"tools": map[string]any{"iperf3": "3.12", "netperf": "2.7.0"}}}
	var ts []result.Trial
	start := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	add := func(c result.Case, metric string) {
		c.ID = c.MakeID()
		v := base[metric] * (0.5 + rng.Float64())
		m := result.MetricSummary{N: trials, Mean: v, TrimmedMean: v, Median: v, Stdev: v * 0.03, CI95Low: v * 0.98, CI95High: v * 1.02, CV: 0.03, Min: v * 0.95, Max: v * 1.05}
		cr := result.CaseResult{Case: c, Status: "ok", Metrics: map[string]result.MetricSummary{metric: m}}
		if metric == "throughput_bps" {
			cr.Metrics["cpu_client_proc_pct"] = result.MetricSummary{N: trials, TrimmedMean: 90}
			cr.Metrics["cpu_server_proc_pct"] = result.MetricSummary{N: trials, TrimmedMean: 40}
		} else {
			for i, p := range []string{"50", "90", "99"} {
				cr.Metrics["latency_p"+p+"_us"] = result.MetricSummary{N: trials, TrimmedMean: 60 * float64(i+1)}
			}
		}
		switch len(s.Results) % 97 {
		case 13:
			cr = result.CaseResult{Case: c, Status: "skipped", Reason: "proxy ipvs needs the ip_vs kernel module (not on this kernel)"}
		case 29:
			cr = result.CaseResult{Case: c, Status: "failed", Reason: "netperf exited 1: <establish control: are you sure there is a netserver listening>"}
		case 41:
			cr.Disturbed, cr.Lost = 2, 1
		case 53:
			cr.Convergence = &result.Convergence{TargetPct: 5, HalfWidthPct: 7.5, Trials: trials, Reason: "--time-budget 1h spent"}
		}
		s.Results = append(s.Results, cr)
		if c.Scenario != "baseline" && cr.Status == "ok" {
			r := 0.7 + 0.6*rng.Float64()
			s.Comparisons = append(s.Comparisons, result.Comparison{Case: c.ID, Reference: c.BaselineID(), Kind: "baseline", Metric: metric,
				RatioSummary: result.RatioSummary{N: trials, Ratio: r, CI95Low: r * 0.95, CI95High: r * 1.05}})
		}
		for k := 1; k <= trials; k++ {
			st := start.Add(time.Duration(len(ts)) * 11 * time.Second)
			ts = append(ts, result.Trial{Run: s.Run, Case: c, Trial: k, Start: st.Format(time.RFC3339), DurationS: 10, Status: "ok",
				Metrics: map[string]float64{metric: v}, Raw: fmt.Sprintf("trials/%s/%d.out", c.Slug(), k),
				Conditions: map[string]any{result.ServerCommandKey: "taskset -c 1 iperf3 -s -p 5201", result.ClientCommandKey: "taskset -c 0 iperf3 -c 10.244.1.2 -J"}})
		}
	}
	for _, pr := range protos {
		add(result.Case{Scenario: "baseline", Dataplane: "bare", Placement: "intra", Protocol: pr.p, Tool: pr.tool}, pr.metric)
		add(result.Case{Scenario: "baseline", Dataplane: "node2node", Placement: "inter", Protocol: pr.p, Tool: pr.tool}, pr.metric)
	}
	for svc := 1; len(s.Results) < n; svc *= 2 {
		for _, dp := range dps {
			for _, pl := range []string{"intra", "inter"} {
				for _, pr := range protos {
					if len(s.Results) < n {
						add(result.Case{Scenario: "p2s", Dataplane: dp, Placement: pl, Protocol: pr.p, Tool: pr.tool, Services: svc, Proxy: "iptables"}, pr.metric)
					}
				}
			}
		}
	}
	return Run{Dir: dir, Summary: s, Trials: ts, Settings: map[string]any{"order": "rounds", "seed": 7}}
}
