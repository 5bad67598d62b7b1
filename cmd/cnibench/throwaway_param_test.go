package main

// This file alone adds a case parameter: a throwaway scenario declares an integer parameter of
// its own (scenario.Info.Declares), and the test below finds it in `cnibench run --help`, in
// plan parsing and validation (a bad value is a one-line error), in the case ids and labels,
// in the CSV export and in the report, with no other file touched. It is the proof that a case
// parameter is declared once (internal/param).

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/cnibench/cnibench/internal/stats"
)

type throwawayScenario struct{}

func init() { scenario.Register(throwawayScenario{}) }

func (throwawayScenario) Name() string { return "throwaway" }
func (throwawayScenario) Info() scenario.Info {
	return scenario.Info{
		Summary:           "a scenario that exists only in a test, with a parameter of its own",
		DefaultDataplanes: []string{"flannel"},
		Protocols:         []string{"tcp"},
		Declares: []param.Param{{Key: "throwaway-depth", Label: "throwaway_depth", Help: "throwaway: how deep, to sweep",
			Min: 1, Max: 9, ID: "depth", Sweep: true}},
		DefaultInts: map[string][]int{"throwaway-depth": {2}},
	}
}
func (throwawayScenario) Setup(context.Context, cluster.Cluster, result.Case, scenario.Options) (scenario.Fixture, error) {
	return nil, errors.New("the throwaway scenario measures nothing")
}

func TestThrowawayParamShowsInFlagsPlansIDsExportsAndReport(t *testing.T) {
	// run --help: a flag of its own, with its declared help and range.
	out, err := runInProcess("run", "--help")
	if err != nil || !strings.Contains(out, "--throwaway-depth") || !strings.Contains(out, "throwaway: how deep, to sweep (1..9)") {
		t.Errorf("run --help (err %v) has no --throwaway-depth with its help:\n%s", err, out)
	}

	// plan parsing and expansion: a plan file sweeps it, in the case ids and labels.
	lab, err := cluster.BackendNamed("lab")
	if err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(t.TempDir(), "depth.yaml")
	if err := os.WriteFile(planFile, []byte("- scenario: throwaway\n  placement: intra\n  throwaway-depth: [1, 3]\n  repeat: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases, _, err := expandCases(planFile, nil, runBackends{lab})
	if err != nil {
		t.Fatalf("expanding a plan that sweeps throwaway-depth: %v", err)
	}
	var ids []string
	for _, cs := range cases {
		ids = append(ids, cs.Case.ID)
	}
	if want := "throwaway/flannel/intra/tcp/depth=1 throwaway/flannel/intra/tcp/depth=3"; strings.Join(ids, " ") != want {
		t.Errorf("case ids %v, want %s", ids, want)
	}
	if d := cases[1].Case.Int("throwaway-depth"); d != 3 {
		t.Errorf("label throwaway_depth of %s = %d, want 3", cases[1].Case.ID, d)
	}
	// The scenario's default, when the plan sets none.
	def, _, err := expandCases("", map[string]string{"scenario": "throwaway", "placement": "intra"}, runBackends{lab})
	if err != nil || len(def) != 1 || def[0].Case.ID != "throwaway/flannel/intra/tcp/depth=2" {
		t.Errorf("default depth: %v %+v", err, def)
	}
	// The label survives results.jsonl: written beside the case's other labels, read back.
	b, err := json.Marshal(cases[1].Case)
	if err != nil || !strings.Contains(string(b), `"throwaway_depth":3`) {
		t.Errorf("case JSON %s (%v), want throwaway_depth 3", b, err)
	}
	var back result.Case
	if err := json.Unmarshal(b, &back); err != nil || back != cases[1].Case {
		t.Errorf("case JSON round trip: %v\n got %+v\nwant %+v", err, back, cases[1].Case)
	}

	// validation: a value out of range, from a flag and from a plan file, and the parameter
	// given to a scenario that does not use it, are one-line errors naming the key.
	for _, tc := range []struct {
		plan string
		set  map[string]string
		want string
	}{
		{"", map[string]string{"scenario": "throwaway", "throwaway-depth": "10"}, "--throwaway-depth: 10 out of range (1..9)"},
		{"", map[string]string{"scenario": "throwaway", "throwaway-depth": "x"}, `--throwaway-depth: "x" is not an integer`},
		{"- scenario: throwaway\n  throwaway-depth: [0]\n", nil, ": [0].throwaway-depth[0]: 0 out of range (1..9)"},
		{"", map[string]string{"scenario": "p2p", "throwaway-depth": "3"}, "--throwaway-depth: scenario p2p does not use throwaway-depth"},
	} {
		pf := ""
		if tc.plan != "" {
			pf = filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(pf, []byte(tc.plan), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := expandCases(pf, tc.set, runBackends{lab})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v %q: error %v, want one line with %q", tc.set, tc.plan, err, tc.want)
		}
	}

	// A run of those cases (its trials written as the runner writes them): the CSV export has
	// a throwaway_depth column, the report names the cases by their depth and sweeps over it
	// (its scale column).
	dir := t.TempDir()
	store, err := result.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var trials []result.Trial
	var planned []result.Case
	for _, cs := range cases {
		planned = append(planned, cs.Case)
		for k := 1; k <= 3; k++ {
			tr := result.Trial{Run: "throwaway", Case: cs.Case, Trial: k, Status: "ok", DurationS: 1,
				Metrics: map[string]float64{"throughput_bps": float64(cs.Case.Int("throwaway-depth")) * 1e9}}
			if err := store.Append(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if trials, err = result.LoadTrials(dir); err != nil || len(trials) != 6 || trials[5].Case.Int("throwaway-depth") != 3 {
		t.Fatalf("results.jsonl read back: %v, %d trials", err, len(trials))
	}
	sum := result.Summary{Run: "throwaway", Results: stats.Aggregate(planned, trials), Comparisons: stats.Compare(planned, trials)}
	if err := result.WriteSummary(dir, sum); err != nil {
		t.Fatal(err)
	}
	out, err = runInProcess("export", dir, "--format", "csv")
	if err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 3 {
		t.Fatalf("csv (%v):\n%s", err, out)
	}
	col := -1
	for i, h := range rows[0] {
		if h == "throwaway_depth" {
			col = i
		}
	}
	if col < 0 || rows[1][col] != "1" || rows[2][col] != "3" {
		t.Errorf("csv column throwaway_depth (%d) wants 1 and 3:\n%s", col, out)
	}
	md := filepath.Join(t.TempDir(), "report.md")
	out, err = runInProcess("report", dir, "--markdown", md, "--out", filepath.Join(t.TempDir(), "report.html"))
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	rep, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| throwaway/intra/tcp/depth=3 | 3.00 Gbit/s", "| intra | depth=1 | 1.00 Gbit/s"} {
		if !strings.Contains(string(rep), s) {
			t.Errorf("the report has no %q:\n%s", s, rep)
		}
	}
}
