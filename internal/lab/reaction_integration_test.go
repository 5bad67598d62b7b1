package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

// TestReactionOnLab runs the reaction scenario in calico labs with kube-proxy's iptables and
// nftables layouts and the eBPF load balancer: one short trial each (three scale ups and downs),
// intra and inter node. Every change is seen by the probe; the control plane's part (the
// client's node programmed) is there; no probe fails while an endpoint goes (the lab takes it
// out of the Service before the pod goes). With CNIBENCH_RECORD_REACTION=DIR it writes each
// trial's raw output and metrics there (internal/scenario/testdata's recordings).
func TestReactionOnLab(t *testing.T) {
	needRoot(t)
	sc, err := scenario.Get("reaction")
	if err != nil {
		t.Fatal(err)
	}
	record := os.Getenv("CNIBENCH_RECORD_REACTION")
	for _, proxy := range []string{"iptables", "nftables", "ebpf"} {
		t.Run(proxy, func(t *testing.T) {
			l := upLab(t, Config{Dataplane: "calico", Proxy: proxy})
			for _, pl := range []string{"intra", "inter"} {
				c := result.Case{Scenario: "reaction", Backend: "lab", Dataplane: "calico", Proxy: proxy, Placement: pl, Protocol: "tcp"}
				c.ID = c.MakeID()
				start := time.Now()
				f, err := sc.Setup(context.Background(), l, c, scenario.Options{CPUs: [2]int{0, 1}})
				if err != nil {
					t.Fatalf("%s: setup: %v", c.ID, err)
				}
				m, err := f.Trial(context.Background(), 0)
				if err != nil {
					t.Errorf("%s: trial: %v\n%s", c.ID, err, m.Raw)
				}
				if err := f.Close(context.Background()); err != nil {
					t.Errorf("%s: close: %v", c.ID, err)
				}
				if err != nil {
					continue
				}
				mm := m.Metrics
				for _, k := range []string{"reaction_up_ms", "reaction_down_ms", "reaction_up_control_ms", "reaction_down_control_ms"} {
					// Down may be 0: no probe reached the removed endpoint after its deletion began.
					if v, ok := mm[k]; !ok || v < 0 || (v == 0 && k != "reaction_down_ms") || v > 5000 {
						t.Errorf("%s: %s = %v (present %v), want a few milliseconds", c.ID, k, v, ok)
					}
				}
				if mm["reaction_changes_count"] < 3 || mm["probe_failed_count"] != 0 || mm["probe_clock_offset_ms"] != 0 || mm["probe_interval_ms"] <= 0 {
					t.Errorf("%s: changes %v, failed probes %v, clock offset %v, interval %v", c.ID, mm["reaction_changes_count"],
						mm["probe_failed_count"], mm["probe_clock_offset_ms"], mm["probe_interval_ms"])
				}
				t.Logf("%s: up %.2f ms (control %.2f + data %.2f, max %.2f), down %.2f ms (control %.2f + data %.2f, max %.2f), pod ready %.1f ms after the call, probe every %.2f ms, clock ±%.2f ms (%.1f s)",
					c.ID, mm["reaction_up_ms"], mm["reaction_up_control_ms"], mm["reaction_up_data_ms"], mm["reaction_up_max_ms"],
					mm["reaction_down_ms"], mm["reaction_down_control_ms"], mm["reaction_down_data_ms"], mm["reaction_down_max_ms"],
					mm["endpoint_ready_ms"], mm["probe_interval_ms"], mm["probe_clock_uncertainty_ms"], time.Since(start).Seconds())
				if record != "" {
					base := filepath.Join(record, "reaction-lab-"+proxy+"-"+pl)
					if err := os.WriteFile(base+".txt", m.Raw, 0o644); err != nil {
						t.Fatal(err)
					}
					writeMetrics(t, base+".metrics", mm)
				}
			}
		})
	}
}

// writeMetrics writes a trial's reaction figures, one "name value" line each, sorted.
func writeMetrics(t *testing.T, path string, m map[string]float64) {
	t.Helper()
	var lines []string
	for k, v := range m {
		if strings.HasPrefix(k, "reaction_") || strings.HasPrefix(k, "probe_") || k == "endpoint_ready_ms" {
			lines = append(lines, fmt.Sprintf("%s %s", k, strconv.FormatFloat(v, 'g', -1, 64)))
		}
	}
	sort.Strings(lines)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
