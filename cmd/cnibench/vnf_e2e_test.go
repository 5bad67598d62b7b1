package main

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/lab"
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
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	r := runCnb(t, runOpts{}, "run", "--scenario", "vnf", "--dataplane", "flannel", "--placement", "split", "--replicas", "2",
		"--cpu-limit", "1000", "--cpu-isolation", "shared,exclusive", "--lb", "service,ingress", "--repeat", "1", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s)", err, r.code, r.stderr)
	}
	if len(s.Results) != 4 {
		t.Fatalf("%d results, want 4 (stderr %s)", len(s.Results), r.stderr)
	}
	for _, cr := range s.Results {
		exclusive := cr.Case.Word("cpu-isolation") == "exclusive"
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
		if cr.Case.ID != "vnf/flannel/split/gtpu/vnf=userspace/iso=shared/lb="+cr.Case.Word("lb")+"/rep=2/cpu=1000/size=256" || cr.Case.Tool != "cnibench-pkt" {
			t.Errorf("case %+v", cr.Case)
		}
	}
}

// TestVNFNoisyRamp runs seed 002's own search (the ramp) with two noisy neighbours of 250m
// beside one replica and the ingress on the other node. The neighbours' loops really run, in
// CFS quotas of 250m (watched from the host while the run measures), and only while the case
// measures; the ramp finds a maximum feasible throughput; nothing of them is left.
func TestVNFNoisyRamp(t *testing.T) {
	needRoot(t)
	cpuRoot, _ := lab.CPURoots()
	if cpuRoot == "" {
		t.Skip("no cgroup v1 cpu hierarchy: pods get no CPU limits here")
	}
	out := filepath.Join(t.TempDir(), "vnf-noisy")
	seen := map[string]string{} // noisy loop's cgroup -> its quota
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for cg, quota := range noisyLoops(filepath.Dir(cpuRoot)) {
				seen[cg] = quota
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	r := runCnb(t, runOpts{}, "run", "--scenario", "vnf", "--dataplane", "flannel", "--placement", "intra", "--replicas", "1",
		"--lb", "ingress-remote", "--search", "ramp", "--noisy", "2", "--noisy-cpu-limit", "250", "--repeat", "1", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	close(stop)
	<-done
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s)", err, r.code, r.stderr)
	}
	if len(s.Results) != 1 || s.Results[0].Status != "ok" {
		t.Fatalf("results %+v (stderr %s)", s.Results, r.stderr)
	}
	cr := s.Results[0]
	m := func(k string) float64 { return cr.Metrics[k].Mean }
	if m("max_feasible_pps") <= 1000 || m("max_feasible_pps") > m("search_max_pps") || m("search_trials_count") < 2 || m("max_feasible_relative_width") > 0.05 {
		t.Errorf("max feasible %.0f pps (width %g) of %.0f searched, %v trials", m("max_feasible_pps"), m("max_feasible_relative_width"), m("search_max_pps"), m("search_trials_count"))
	}
	if _, ok := cr.Metrics["ndr_pps"]; ok || cr.Case.ID != "vnf/flannel/intra/gtpu/vnf=userspace/iso=shared/lb=ingress-remote/search=ramp/size=256/noisy=2/ncpu=250" {
		t.Errorf("case %s, metrics %v", cr.Case.ID, cr.Metrics)
	}
	if len(seen) != 2 {
		t.Errorf("noisy loops seen in cgroups %v, want 2", seen)
	}
	for cg, quota := range seen {
		if !strings.HasSuffix(cg, "-noisy0") && !strings.HasSuffix(cg, "-noisy1") || quota != "25000" {
			t.Errorf("noisy loop in cgroup %s with quota %q, want a noisy pod's of 25000 us (250m of 100 ms)", cg, quota)
		}
	}
	if left := noisyLoops(filepath.Dir(cpuRoot)); len(left) > 0 {
		t.Errorf("noisy loops left after the run: %v", left)
	}
}

// noisyLoops finds the noisy neighbours' shell loops running on the host: each one's v1 cpu
// cgroup (under cpuMount) and that cgroup's CFS quota.
func noisyLoops(cpuMount string) map[string]string {
	out := map[string]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "while :; do :; done") {
			continue
		}
		// A pod process with a cgroup to join starts as the lab's gate shell, which holds the
		// loop's command line as its arguments until it is in its cgroups and execs it: that is
		// not the loop running yet (it was seen in the root cgroup, and the test failed).
		if strings.Contains(string(b), "read -r _ <&3") {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(cg), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "cpu") {
				q, _ := os.ReadFile(filepath.Join(cpuMount, f[2], "cpu.cfs_quota_us"))
				out[f[2]] = strings.TrimSpace(string(q))
			}
		}
	}
	return out
}
