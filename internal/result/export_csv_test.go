package result_test

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
	_ "github.com/cnibench/cnibench/internal/scenario" // the scenarios' own case parameters, as cnibench links them
)

// netperfHeader is k8s-netperf's result CSV header as its WriteCSVResult writes it
// (github.com/cloud-bulldozer/k8s-netperf pkg/archive/archive.go, commit fb9a2ec1091d:
// commonCsvHeaderFields + "Avg Throughput", "Throughput Metric", "99%tile Observed Latency",
// "Latency Metric"), written out here rather than taken from the package under test.
var netperfHeader = []string{
	"Driver", "Profile", "Same node", "Host Network", "VM mode", "Service", "External Server",
	"UDN Info", "Bridge Info", "SR-IOV Info", "Macvlan Info", "Localnet Info", "Duration",
	"Parallelism", "# of Samples", "Message Size", "Burst", "Confidence metric - low",
	"Confidence metric - high", "Avg Throughput", "Throughput Metric",
	"99%tile Observed Latency", "Latency Metric",
}

var ownHeader = []string{
	"case", "scenario", "backend", "dataplane", "attach", "overlay", "proxy", "policy",
	"placement", "protocol", "services", "policies", "pods", "replicas", "status", "reason",
	"metric", "external_traffic_policy",
	// the case parameters' labels, in parameter order (internal/param)
	"nf", "chain_length", "rules", "vnf", "cpu_limit", "cpu_isolation", "frame_size", "lb", "search",
	"change", "sync", "noisy", "noisy_cpu_limit", "streams", "msg_size", "fragment",
}

// readCSV parses an export and returns its rows as maps by column name, checking the header.
func readCSV(t *testing.T, b []byte) []map[string]string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("csv does not parse: %v\n%s", err, b)
	}
	want := append(slices.Clone(netperfHeader), ownHeader...)
	if len(recs) == 0 || !slices.Equal(recs[0], want) {
		t.Fatalf("header\n got %q\nwant %q", recs[0], want)
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, v := range rec {
			row[want[i]] = v
		}
		rows = append(rows, row)
	}
	return rows
}

func num(t *testing.T, row map[string]string, col string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(row[col], 64)
	if err != nil {
		t.Fatalf("%s: column %q = %q: %v", row["case"], col, row[col], err)
	}
	return v
}

func TestExportCSV(t *testing.T) {
	f := newFixture(t)
	rows := readCSV(t, export(t, f.dir, result.FormatCSV))
	if len(rows) != len(f.cases) {
		t.Fatalf("%d rows, want one per case (%d)", len(rows), len(f.cases))
	}
	byCase := map[string]map[string]string{}
	for i, row := range rows {
		if row["case"] != f.summary.Results[i].Case.ID {
			t.Errorf("row %d is %s, want the summary's order (%s)", i, row["case"], f.summary.Results[i].Case.ID)
		}
		byCase[row["case"]] = row
	}

	// What every case's row says, k8s-netperf's way.
	type want struct {
		driver, profile, sameNode, hostNet, service string
		parallelism, msgSize                        string
		metric, unit                                string
		scale                                       float64
		latency                                     string // cnibench metric behind the p99 column
		latScale                                    float64
		status                                      string
	}
	wants := map[int]want{
		fxNode2Node: {"iperf3", "TCP_STREAM", "false", "true", "false", "1", "0", "throughput_bps", "Mb/s", 1e6, "", 0, "ok"},
		fxRR:        {"netperf", "TCP_RR", "true", "false", "false", "1", "1", "transactions_per_s", "OP/s", 1, "latency_p99_us", 1, "ok"},
		fxP2S:       {"iperf3", "TCP_STREAM", "false", "false", "true", "4", "1024", "throughput_bps", "Mb/s", 1e6, "", 0, "ok"},
		fxHTTP:      {"http", "HTTP", "false", "false", "true", "1", "0", "requests_per_s", "OP/s", 1, "ttfb_p99_ms", 1e-3, "ok"},
		fxSkipped:   {"iperf3", "UDP_STREAM", "false", "false", "false", "1", "0", "throughput_bps", "Mb/s", 1e6, "", 0, "skipped"},
		fxFailed:    {"netperf", "TCP_CRR", "false", "false", "false", "1", "0", "transactions_per_s", "OP/s", 1, "", 0, "failed"},
	}
	for ci, w := range wants {
		c := f.cases[ci]
		row := byCase[c.ID]
		if row == nil {
			t.Errorf("no row for %s", c.ID)
			continue
		}
		res := f.result(ci)
		for col, v := range map[string]string{
			"Driver": w.driver, "Profile": w.profile, "Same node": w.sameNode, "Host Network": w.hostNet,
			"VM mode": "false", "Service": w.service, "External Server": "false", "UDN Info": "",
			"Duration": strconv.Itoa(fixtureDuration), "Parallelism": w.parallelism,
			"Message Size": w.msgSize, "Burst": "0", "Throughput Metric": w.unit,
			"scenario": c.Scenario, "backend": "lab", "dataplane": c.Dataplane, "attach": c.Attach,
			"overlay": c.Overlay, "proxy": c.Proxy, "policy": c.Policy, "placement": c.Placement,
			"protocol": c.Protocol, "services": strconv.Itoa(c.Services), "policies": "0", "pods": "0",
			"replicas": strconv.Itoa(c.Replicas), "status": w.status, "reason": res.Reason, "metric": w.metric,
			"external_traffic_policy": c.ExternalTrafficPolicy,
		} {
			if row[col] != v {
				t.Errorf("%s: %q = %q, want %q", c.ID, col, row[col], v)
			}
		}
		if w.status != "ok" {
			if res.Reason == "" {
				t.Errorf("%s: the fixture's %s case has no reason", c.ID, w.status)
			}
			for _, col := range []string{"# of Samples", "Confidence metric - low", "Confidence metric - high", "Avg Throughput", "99%tile Observed Latency", "Latency Metric"} {
				if row[col] != "" {
					t.Errorf("%s (%s): %q = %q, want empty", c.ID, w.status, col, row[col])
				}
			}
			continue
		}
		m := res.Metrics[w.metric]
		if m.N != fixtureTrials {
			t.Fatalf("%s: fixture has n=%d of %s", c.ID, m.N, w.metric)
		}
		if got := num(t, row, "# of Samples"); got != float64(m.N) {
			t.Errorf("%s: samples %v, want %d", c.ID, got, m.N)
		}
		for col, v := range map[string]float64{
			"Avg Throughput":           m.TrimmedMean / w.scale,
			"Confidence metric - low":  m.CI95Low / w.scale,
			"Confidence metric - high": m.CI95High / w.scale,
		} {
			if got := num(t, row, col); got != v {
				t.Errorf("%s: %q = %v, want %v (summary's %s in %s)", c.ID, col, got, v, w.metric, w.unit)
			}
		}
		if lo, avg, hi := num(t, row, "Confidence metric - low"), num(t, row, "Avg Throughput"), num(t, row, "Confidence metric - high"); !(lo < avg && avg < hi) {
			t.Errorf("%s: CI %v..%v does not hold %v", c.ID, lo, hi, avg)
		}
		if w.latency == "" {
			if row["99%tile Observed Latency"] != "" || row["Latency Metric"] != "" {
				t.Errorf("%s: latency %q %q, want none", c.ID, row["99%tile Observed Latency"], row["Latency Metric"])
			}
			continue
		}
		if got, v := num(t, row, "99%tile Observed Latency"), res.Metrics[w.latency].TrimmedMean/w.latScale; got != v || row["Latency Metric"] != "usec" {
			t.Errorf("%s: p99 latency %v %s, want %v usec", c.ID, got, row["Latency Metric"], v)
		}
	}

	// Without plan.json the duration is the trials' own.
	os.Remove(filepath.Join(f.dir, result.PlanFile))
	for _, row := range readCSV(t, export(t, f.dir, result.FormatCSV)) {
		if want := strconv.Itoa(trialDurationS); row["Duration"] != want {
			t.Errorf("%s without plan.json: Duration %q, want the trials' %s", row["case"], row["Duration"], want)
		}
	}
}

// The report package's lab run: a realistic summary.json without trials or plan.
func TestExportCSVLabRun(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../report/testdata/lab-run/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, result.SummaryJSONFile), b, 0o644)
	s, err := result.ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := readCSV(t, export(t, dir, result.FormatCSV))
	if len(rows) != len(s.Results) {
		t.Fatalf("%d rows for %d cases", len(rows), len(s.Results))
	}
	for i, res := range s.Results {
		row := rows[i]
		if row["case"] != res.Case.ID {
			t.Fatalf("row %d: %s, want %s", i, row["case"], res.Case.ID)
		}
		metric, scale := "throughput_bps", 1e6
		if res.Case.Protocol == "crr" {
			metric, scale = "transactions_per_s", 1
		}
		if row["metric"] != metric {
			t.Errorf("%s: metric %q, want %q", res.Case.ID, row["metric"], metric)
		}
		if got, want := num(t, row, "Avg Throughput"), res.Metrics[metric].TrimmedMean/scale; got != want {
			t.Errorf("%s: Avg Throughput %v, want %v", res.Case.ID, got, want)
		}
		if row["Duration"] != "" {
			t.Errorf("%s: Duration %q without plan or trials, want empty", res.Case.ID, row["Duration"])
		}
		if row["Host Network"] != strconv.FormatBool(res.Case.Dataplane == "node2node") {
			t.Errorf("%s: Host Network %q", res.Case.ID, row["Host Network"])
		}
	}
}
