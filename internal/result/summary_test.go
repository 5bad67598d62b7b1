package result

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testSummary() Summary {
	ok := testCase("pod2pod/bridge/cross-node/tcp")
	ok.Services = 100
	skipped := testCase("pod2pod/bridge/same-node/udp")
	skipped.Protocol = "udp"
	return Summary{
		Run:         "r1",
		Environment: map[string]any{"kernel": "6.8.0", "nodes": float64(2)},
		Results: []CaseResult{
			{Case: ok, Status: "ok", Metrics: map[string]MetricSummary{
				"rtt_us": {N: 3, Mean: 50, TrimmedMean: 50, Median: 50, Stdev: 1,
					CI95Low: 47.5, CI95High: 52.5, CV: 0.02, Min: 49, Max: 51},
				"gbps": {N: 12, Mean: 9.25, TrimmedMean: 9.3, Median: 9.3, Stdev: 0.1,
					CI95Low: 9.2, CI95High: 9.4, CV: 0.0108108, Min: 9, Max: 1e21},
			}},
			{Case: skipped, Status: "skipped", Reason: "needs 2 nodes, got 1"},
		},
	}
}

func TestSummaryJSONRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := testSummary()
	if err := WriteSummary(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadSummary = %+v\nwant %+v", got, want)
	}
	if js := readFile(t, filepath.Join(dir, SummaryJSONFile)); !strings.Contains(js, "\n  \"run\": \"r1\"") {
		t.Errorf("summary.json not indented:\n%s", js)
	}
	// Overwriting works and leaves no temporary files behind.
	want.Run = "r2"
	if err := WriteSummary(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadSummary(dir); got.Run != "r2" {
		t.Errorf("after rewrite run = %q", got.Run)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{SummaryCSVFile, SummaryJSONFile}) {
		t.Errorf("dir contains %v", names)
	}
}

func TestReadSummaryErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadSummary(dir); err == nil {
		t.Error("ReadSummary of missing file succeeded")
	}
	os.WriteFile(filepath.Join(dir, SummaryJSONFile), []byte("{"), 0o644)
	if _, err := ReadSummary(dir); err == nil {
		t.Error("ReadSummary of bad JSON succeeded")
	}
}

func TestSummaryCSV(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSummary(dir, testSummary()); err != nil {
		t.Fatal(err)
	}
	raw := readFile(t, filepath.Join(dir, SummaryCSVFile))
	wantHeader := "run,case,scenario,backend,dataplane,attach,overlay,proxy,policy,placement," +
		"protocol,tool,services,policies,pods,replicas,status,reason,metric,n,mean," +
		"trimmed_mean,median,stdev,ci95_low,ci95_high,cv,min,max"
	if first, _, _ := strings.Cut(raw, "\n"); first != wantHeader {
		t.Errorf("header = %q\nwant     %q", first, wantHeader)
	}

	rows, err := csv.NewReader(strings.NewReader(raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"r1", "pod2pod/bridge/cross-node/tcp", "pod2pod", "kind", "bridge", "", "", "", "",
			"cross-node", "tcp", "iperf3", "100", "0", "0", "0", "ok", "",
			"gbps", "12", "9.25", "9.3", "9.3", "0.1", "9.2", "9.4", "0.0108108", "9", "1e+21"},
		{"r1", "pod2pod/bridge/cross-node/tcp", "pod2pod", "kind", "bridge", "", "", "", "",
			"cross-node", "tcp", "iperf3", "100", "0", "0", "0", "ok", "",
			"rtt_us", "3", "50", "50", "50", "1", "47.5", "52.5", "0.02", "49", "51"},
		{"r1", "pod2pod/bridge/same-node/udp", "pod2pod", "kind", "bridge", "", "", "", "",
			"cross-node", "udp", "iperf3", "0", "0", "0", "0", "skipped", "needs 2 nodes, got 1",
			"", "", "", "", "", "", "", "", "", "", ""},
	}
	if len(rows) != len(want)+1 {
		t.Fatalf("got %d rows, want %d:\n%s", len(rows), len(want)+1, raw)
	}
	for i, w := range want {
		if !reflect.DeepEqual(rows[i+1], w) {
			t.Errorf("row %d = %q\nwant   %q", i+1, rows[i+1], w)
		}
	}
	if strings.Count(raw, `"needs 2 nodes, got 1"`) != 1 {
		t.Errorf("reason with a comma not quoted:\n%s", raw)
	}
}

func TestWriteSummaryCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "run")
	if err := WriteSummary(dir, Summary{Run: "empty"}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, SummaryCSVFile)); strings.Count(got, "\n") != 1 {
		t.Errorf("empty summary csv = %q, want header only", got)
	}
}

func TestTrialEffectiveStatus(t *testing.T) {
	cases := []struct {
		status, err, want string
	}{
		{"", "", "ok"}, {"", "x", "failed"}, {"ok", "", "ok"}, {"skipped", "why", "skipped"},
		{"failed", "x", "failed"}, {"weird", "", "failed"}, {"disturbed", "steal", "disturbed"},
	}
	for _, c := range cases {
		if got := (Trial{Status: c.status, Error: c.err}).EffectiveStatus(); got != c.want {
			t.Errorf("EffectiveStatus(%q, %q) = %q, want %q", c.status, c.err, got, c.want)
		}
	}
	if (Trial{Status: "ok", Warmup: true}).Measured() || !(Trial{}).Measured() || (Trial{Status: "disturbed"}).Measured() {
		t.Error("Measured: a warm-up or a disturbed trial counted, or an ok one did not")
	}
}
