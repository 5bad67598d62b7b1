package result_test

// Tests of the exports (csv, perfdash, prom) against the formats' real consumers. The fixture
// is a small run directory built here: trials appended through result.Store, summary.json
// aggregated from them by internal/stats as the runner does, plan.json in the runner's shape.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/stats"
)

// requireToolsEnv makes a missing tool a failure instead of a skip (make test sets it).
const requireToolsEnv = "CNIBENCH_REQUIRE_TOOLS"

// requireTool returns the path of a tool the test needs; without it the test is skipped, or
// fails when CNIBENCH_REQUIRE_TOOLS=1.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(requireToolsEnv) == "1" {
			t.Fatalf("%s not found (%v); %s=1 requires it (Debian package prometheus: make test-deps)", name, err, requireToolsEnv)
		}
		t.Skipf("%s not found (%v): install the Debian package prometheus (make test-deps)", name, err)
	}
	return p
}

const fixtureRun = "20261122T071000Z-export"

// fixtureCase builds a case with its id.
func fixtureCase(scenario, dataplane, placement, protocol, tool string, services, replicas int) result.Case {
	c := result.Case{Scenario: scenario, Backend: "lab", Dataplane: dataplane, Placement: placement,
		Protocol: protocol, Tool: tool, Services: services, Replicas: replicas,
		Attach: "bridge", Overlay: "vxlan", Proxy: "iptables", Policy: "iptables"}
	if scenario == "baseline" {
		c.Attach, c.Overlay, c.Proxy, c.Policy = "", "", "", ""
	}
	c.ID = c.MakeID()
	return c
}

// withWorkload gives c streams and a message size (labels in its id).
func withWorkload(c result.Case, streams, msgSize int) result.Case {
	c.Streams, c.MsgSize = streams, msgSize
	c.ID = c.MakeID()
	return c
}

// fixture is a run directory and what it was built from.
type fixture struct {
	dir     string
	cases   []result.Case
	trials  []result.Trial // every record, warm-ups and disturbed ones included
	summary result.Summary
	base    time.Time // start of the first trial
}

// Fixture cases, by index in fixture.cases.
const (
	fxNode2Node = iota // baseline/node2node/inter/tcp, iperf3
	fxRR               // p2p/flannel/intra/rr, netperf with latency percentiles
	fxP2S              // p2s/calico/inter/tcp/svc=100, 4 streams, 1024-byte messages
	fxHTTP             // p2s-replicas/flannel/inter/http/svc=1/rep=3
	fxSkipped          // p2p/calico/inter/udp, skipped
	fxFailed           // p2p/flannel/inter/crr, failed
)

const (
	fixtureTrials   = 3  // measured trials per ok case
	fixtureDuration = 10 // plan.json's duration
	trialDurationS  = 12 // what the trials record (differs so the test sees which is used)
)

// newFixture writes a run directory whose trials started a few hours ago (so that Prometheus'
// retention and promtool's backfill accept them), in rounds 15 s apart.
func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{dir: t.TempDir(), base: time.Now().Add(-3 * time.Hour).Truncate(time.Second)}
	f.cases = []result.Case{
		fixtureCase("baseline", "node2node", "inter", "tcp", "iperf3", 0, 1),
		fixtureCase("p2p", "flannel", "intra", "rr", "netperf", 0, 1),
		withWorkload(fixtureCase("p2s", "calico", "inter", "tcp", "iperf3", 100, 1), 4, 1024),
		fixtureCase("p2s-replicas", "flannel", "inter", "http", "http", 1, 3),
		fixtureCase("p2p", "calico", "inter", "udp", "iperf3", 0, 1),
		fixtureCase("p2p", "flannel", "inter", "crr", "netperf", 0, 1),
	}
	metrics := func(ci, n int) map[string]float64 {
		k := float64(n)
		switch ci {
		case fxNode2Node:
			return map[string]float64{"throughput_bps": 16e9 + k*1.25e8, "retransmits": k, "cpu_client_pct": 90 + k/4}
		case fxRR:
			return map[string]float64{"transactions_per_s": 21000 + 37*k, "latency_mean_us": 47 + k/8,
				"latency_p50_us": 45 + k, "latency_p90_us": 60 + k, "latency_p99_us": 91 + 3*k, "cpu_client_pct": 55.5,
				result.MsgSizeMetric: 1}
		case fxP2S:
			return map[string]float64{"throughput_bps": 9.4e9 - k*3.3e7, "retransmits": 2 * k, "services_program_ms": 830 + k}
		case fxHTTP:
			return map[string]float64{"requests_per_s": 88.5 + k, "ttfb_seed_ms": 1.75 + k/100,
				"ttfb_p50_ms": 1.5 + k/10, "ttfb_p99_ms": 3.25 + k/4, "transfer_bps": 7.9e9 + k*1e7}
		}
		return nil
	}
	store, err := result.OpenStore(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	at := f.base
	add := func(tr result.Trial) {
		tr.Run = fixtureRun
		tr.Start = at.UTC().Format(time.RFC3339)
		at = at.Add(15 * time.Second)
		if err := store.Append(tr); err != nil {
			t.Fatal(err)
		}
		f.trials = append(f.trials, tr)
	}
	// Warm-ups first, with figures no measured trial has: they must not be exported.
	for ci, c := range f.cases[:fxSkipped] {
		m := metrics(ci, 0)
		for k := range m {
			m[k] = 1e6 * (m[k] + 1)
		}
		add(result.Trial{Case: c, Trial: 0, Warmup: true, DurationS: 2, Metrics: m, Status: "ok"})
	}
	for n := 1; n <= fixtureTrials; n++ {
		for ci, c := range f.cases {
			if ci == fxNode2Node && n == 2 {
				// A disturbed trial, then its re-run: the disturbed one keeps its figures but
				// is left out of the statistics and of the exports.
				m := metrics(ci, n)
				m["throughput_bps"] = 1
				add(result.Trial{Case: c, Trial: n, DurationS: trialDurationS, Metrics: m,
					Status: "disturbed", Error: "the hypervisor took 9% of the CPU"})
			}
			tr := result.Trial{Case: c, Trial: n, DurationS: trialDurationS, Status: "ok",
				Conditions: map[string]any{"client_cpu": 0, "server_cpu": 1}}
			switch ci {
			case fxSkipped:
				tr.Status, tr.Error, tr.Metrics = "skipped", "needs udp on the overlay: not supported here", map[string]float64{}
			case fxFailed:
				tr.Status, tr.Error, tr.Metrics = "failed", "netperf: exit status 1", map[string]float64{}
			default:
				tr.Metrics = metrics(ci, n)
			}
			add(tr)
		}
	}
	f.summary = result.Summary{Run: fixtureRun, Environment: map[string]any{"cnibench_version": "test"},
		Results: stats.Aggregate(f.cases, f.trials)}
	if err := result.WriteSummary(f.dir, f.summary); err != nil {
		t.Fatal(err)
	}
	var specs []result.CaseSpec
	for _, c := range f.cases {
		specs = append(specs, result.CaseSpec{Case: c, Repeat: fixtureTrials, Duration: fixtureDuration, Warmup: 2, CPUs: [2]int{0, 1}})
	}
	b, err := json.Marshal(map[string]any{"run": fixtureRun, "cases": specs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, result.PlanFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// measured are a case's trials that count (ok, not warm-ups), in file order.
func (f fixture) measured(ci int) []result.Trial {
	var out []result.Trial
	for _, tr := range f.trials {
		if tr.Case.ID == f.cases[ci].ID && !tr.Warmup && tr.Status == "ok" {
			out = append(out, tr)
		}
	}
	return out
}

func (f fixture) result(ci int) result.CaseResult {
	for _, r := range f.summary.Results {
		if r.Case.ID == f.cases[ci].ID {
			return r
		}
	}
	panic("no result for " + f.cases[ci].ID)
}

// export runs one export of dir and returns its output.
func export(t *testing.T, dir, format string) []byte {
	t.Helper()
	r, err := result.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := result.Export(&buf, format, r); err != nil {
		t.Fatalf("export %s: %v", format, err)
	}
	return buf.Bytes()
}

func TestExportLoadRunNotARun(t *testing.T) {
	empty := t.TempDir()
	if _, err := result.LoadRun(empty); !errors.Is(err, result.ErrNotRun) {
		t.Errorf("LoadRun(empty dir) = %v, want ErrNotRun", err)
	}
	file := filepath.Join(empty, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := result.LoadRun(file); !errors.Is(err, result.ErrNotRun) {
		t.Errorf("LoadRun(file) = %v, want ErrNotRun", err)
	}
	// Trials without a summary (an interrupted run): prom works, csv and perfdash say what is
	// missing.
	f := newFixture(t)
	os.Remove(filepath.Join(f.dir, result.SummaryJSONFile))
	r, err := result.LoadRun(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{result.FormatCSV, result.FormatPerfdash} {
		if err := result.Export(&bytes.Buffer{}, format, r); !errors.Is(err, result.ErrNotRun) {
			t.Errorf("%s without summary.json: %v, want ErrNotRun", format, err)
		}
	}
	if err := result.Export(&bytes.Buffer{}, result.FormatProm, r); err != nil {
		t.Errorf("prom without summary.json: %v", err)
	}
	if err := result.Export(&bytes.Buffer{}, "xml", r); err == nil {
		t.Error("unknown format accepted")
	}
}
