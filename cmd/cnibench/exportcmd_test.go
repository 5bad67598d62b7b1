package main

// In-process tests of 'cnibench export' (no root, no binary): the root command is built with
// newRoot, as main does. The exports themselves are tested in internal/result.

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

func runExportCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runInProcess(append([]string{"export"}, args...)...)
}

// exportRun is a run directory with the report fixture's summary and one trial.
func exportRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(reportFixtures[0], result.SummaryJSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, result.SummaryJSONFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := result.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := result.Case{Scenario: "p2p", Backend: "lab", Dataplane: "flannel", Placement: "inter", Protocol: "tcp", Tool: "iperf3", Replicas: 1}
	c.ID = c.MakeID()
	if err := s.Append(result.Trial{Run: "r", Case: c, Trial: 1, Start: time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
		DurationS: 10, Status: "ok", Metrics: map[string]float64{"throughput_bps": 8e9}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestExportFormatsToStdout(t *testing.T) {
	dir := exportRun(t)
	s, err := result.ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}

	out, err := runExportCmd(t, dir, "--format", "csv")
	if err != nil {
		t.Fatalf("csv: %v\n%s", err, out)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("csv on stdout does not parse: %v\n%s", err, out)
	}
	if len(recs) != len(s.Results)+1 || recs[0][0] != "Driver" || recs[0][1] != "Profile" {
		t.Errorf("csv: %d records (want header + %d cases), header %q", len(recs), len(s.Results), recs[0])
	}
	if def, err := runExportCmd(t, dir); err != nil || def != out {
		t.Errorf("without --format: %v; want the csv export", err)
	}

	out, err = runExportCmd(t, dir, "--format", "perfdash")
	if err != nil {
		t.Fatalf("perfdash: %v\n%s", err, out)
	}
	var pd struct {
		Version   string            `json:"version"`
		DataItems []json.RawMessage `json:"dataItems"`
	}
	if err := json.Unmarshal([]byte(out), &pd); err != nil || pd.Version != "v1" || len(pd.DataItems) == 0 {
		t.Errorf("perfdash: %v %+v\n%s", err, pd, out)
	}

	out, err = runExportCmd(t, dir, "--format", "prom")
	if err != nil {
		t.Fatalf("prom: %v\n%s", err, out)
	}
	if !strings.Contains(out, `cnibench_throughput_bytes_per_second{run="r",case="p2p/flannel/inter/tcp"`) || !strings.HasSuffix(out, "# EOF\n") {
		t.Errorf("prom:\n%s", out)
	}
}

func TestExportOutFile(t *testing.T) {
	dir := exportRun(t)
	file := filepath.Join(t.TempDir(), "run.csv")
	out, err := runExportCmd(t, dir, "--format", "csv", "--out", file)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out != "" {
		t.Errorf("--out also printed:\n%s", out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	stdout, _ := runExportCmd(t, dir, "--format", "csv")
	if string(b) != stdout {
		t.Errorf("--out file differs from stdout:\n%s\n---\n%s", b, stdout)
	}
	entries, _ := os.ReadDir(filepath.Dir(file))
	if len(entries) != 1 {
		t.Errorf("temporary files left beside %s: %v", file, entries)
	}
}

func TestExportUsageErrors(t *testing.T) {
	dir := exportRun(t)
	empty := t.TempDir()
	trialsOnly := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(dir, result.TrialsFile))
	os.WriteFile(filepath.Join(trialsOnly, result.TrialsFile), b, 0o644)
	for name, tc := range map[string]struct {
		args []string
		want string // in the message
	}{
		"bad format":              {[]string{dir, "--format", "xml"}, `--format: unknown format "xml" (valid: csv, perfdash, prom)`},
		"not a run":               {[]string{empty, "--format", "csv"}, "is not a cnibench run directory"},
		"no dir":                  {[]string{filepath.Join(empty, "nope"), "--format", "prom"}, "is not a cnibench run directory"},
		"a file":                  {[]string{filepath.Join(dir, result.TrialsFile)}, "is not a cnibench run directory"},
		"no summary for perfdash": {[]string{trialsOnly, "--format", "perfdash"}, "has no summary.json"},
		"no args":                 {nil, "needs one run directory"},
		"two dirs":                {[]string{dir, empty}, "needs one run directory"},
		"bad flag":                {[]string{dir, "--html"}, "unknown flag"},
	} {
		_, err := runExportCmd(t, tc.args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%s: want a usage error (exit 2), got %v", name, err)
			continue
		}
		if strings.Contains(ue.msg, "\n") || !strings.Contains(ue.msg, tc.want) {
			t.Errorf("%s: %q: want one line with %q", name, ue.msg, tc.want)
		}
	}
	for _, args := range [][]string{{"export", dir, "--format", "xml"}, {"export", empty}} {
		if code := execute(args); code != 2 {
			t.Errorf("%v: exit code %d, want 2", args, code)
		}
	}
	// A run with trials but no summary still exports its trials.
	if out, err := runExportCmd(t, trialsOnly, "--format", "prom"); err != nil || !strings.HasSuffix(out, "# EOF\n") {
		t.Errorf("prom of a run without summary: %v\n%s", err, out)
	}
}
