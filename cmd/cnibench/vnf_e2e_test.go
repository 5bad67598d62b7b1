package main

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// TestVNFRun runs the vnf scenario on the lab through the CLI: two user-space VNF replicas
// split over both nodes behind a ClusterIP Service or an ingress pod, each limited to 1000m,
// CPUs shared, then exclusive. The shared cases' NDR/PDR searches find rates with their
// precision, latency and the search's cost; the exclusive ones need a CPU of their own per
// replica besides CPU 0: on a 2-CPU host the second replica cannot have one, and the cases are
// skipped saying so.
func TestVNFRun(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "vnf-run")
	r := runCnb(t, runOpts{}, "run", "--scenario", "vnf", "--dataplane", "flannel", "--placement", "split", "--replicas", "2",
		"--cpu-limit", "1000", "--cpu-isolation", "shared,exclusive", "--lb", "service,ingress", "--repeat", "1", "--duration", "1", "--warmup", "0", "--out", out)
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s)", err, r.code, r.stderr)
	}
	if len(s.Results) != 4 {
		t.Fatalf("%d results, want 4 (stderr %s)", len(s.Results), r.stderr)
	}
	for _, cr := range s.Results {
		exclusive := cr.Case.CPUIsolation == "exclusive"
		if exclusive && runtime.NumCPU() < 3 {
			if cr.Status != "skipped" || !strings.Contains(cr.Reason, "exclusive CPUs") {
				t.Errorf("%s: %s (%s), want skipped for want of CPUs", cr.Case.ID, cr.Status, cr.Reason)
			}
			continue
		}
		if cr.Status != "ok" {
			t.Errorf("%s: %s (%s)", cr.Case.ID, cr.Status, cr.Reason)
			continue
		}
		m := func(k string) float64 { return cr.Metrics[k].Mean }
		if m("ndr_pps") <= 1000 || m("pdr_pps") < m("ndr_pps") || m("pdr_pps") > m("search_max_pps") || m("search_max_pps") >= m("generator_max_pps") {
			t.Errorf("%s: NDR %.0f, PDR %.0f, search max %.0f, generator %.0f", cr.Case.ID, m("ndr_pps"), m("pdr_pps"), m("search_max_pps"), m("generator_max_pps"))
		}
		if w := m("ndr_relative_width"); w > 0.005 && m("ndr_pps") < m("search_max_pps") {
			t.Errorf("%s: NDR width %g", cr.Case.ID, w)
		}
		if m("search_trials_count") < 3 || m("latency_p50_us") <= 0 || m("receiver_ring_drops_count") != 0 {
			t.Errorf("%s: %d trials, latency p50 %g us, ring drops %g", cr.Case.ID, int(m("search_trials_count")), m("latency_p50_us"), m("receiver_ring_drops_count"))
		}
		if cr.Case.ID != "vnf/flannel/split/gtpu/vnf=userspace/iso=shared/lb="+cr.Case.LB+"/rep=2/cpu=1000/size=256" || cr.Case.Tool != "cnibench-pkt" {
			t.Errorf("case %+v", cr.Case)
		}
	}
}
