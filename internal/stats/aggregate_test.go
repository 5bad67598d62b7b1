package stats

import (
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

func mkCase(id string) result.Case {
	return result.Case{ID: id, Scenario: "pod2pod", Backend: "kind", Dataplane: "bridge",
		Placement: "same-node", Protocol: "tcp", Tool: "iperf3"}
}

func TestAggregate(t *testing.T) {
	okCase, skipCase, failCase, missing, mixed :=
		mkCase("ok"), mkCase("skip"), mkCase("fail"), mkCase("missing"), mkCase("mixed")
	warmOnly := mkCase("warm")

	var trials []result.Trial
	// A huge warm-up value that must not leak into the summary.
	trials = append(trials, result.Trial{Case: okCase, Trial: 0, Warmup: true, Status: "ok",
		Metrics: map[string]float64{"gbps": 1000}})
	for i, v := range []float64{4, 100, 1, 3, 2} {
		trials = append(trials, result.Trial{Case: okCase, Trial: i + 1, Status: "ok",
			Metrics: map[string]float64{"gbps": v, "retrans": 7}})
	}
	trials = append(trials,
		result.Trial{Case: skipCase, Trial: 1, Status: "skipped", Error: "needs 2 nodes"},
		result.Trial{Case: failCase, Trial: 1, Error: "iperf3: connection refused"}, // empty status + error = failed
		result.Trial{Case: failCase, Trial: 2, Status: "failed", Error: "timeout"},
		result.Trial{Case: warmOnly, Trial: 0, Warmup: true, Metrics: map[string]float64{"gbps": 1}},
		result.Trial{Case: mixed, Trial: 2, Status: "failed", Error: "boom"},
		result.Trial{Case: mixed, Trial: 1, Metrics: map[string]float64{"gbps": 5}}, // empty status = ok
		result.Trial{Case: mixed, Trial: 3, Status: "ok", Metrics: map[string]float64{"gbps": 7}},
		// Trial 2 of "mixed" re-run after a resume: the last record wins.
		result.Trial{Case: mixed, Trial: 2, Status: "ok", Metrics: map[string]float64{"gbps": 6}},
		result.Trial{Case: mixed, Trial: 4, Status: "failed", Error: "late failure"},
	)

	cases := []result.Case{missing, okCase, skipCase, failCase, warmOnly, mixed}
	got := Aggregate(cases, trials)
	if len(got) != len(cases) {
		t.Fatalf("got %d results, want %d", len(got), len(cases))
	}
	for i, c := range cases {
		if got[i].Case != c {
			t.Errorf("result %d is case %q, want %q", i, got[i].Case.ID, c.ID)
		}
	}

	want := []struct{ status, reason string }{
		{"failed", "no trials recorded"},
		{"ok", ""},
		{"skipped", "needs 2 nodes"},
		{"failed", "iperf3: connection refused"},
		{"failed", "no trials recorded (only warm-ups)"},
		{"ok", "1 of 4 trials failed: late failure"},
	}
	for i, w := range want {
		if got[i].Status != w.status || got[i].Reason != w.reason {
			t.Errorf("%s: status %q reason %q, want %q %q",
				cases[i].ID, got[i].Status, got[i].Reason, w.status, w.reason)
		}
	}
	for _, i := range []int{0, 2, 3, 4} {
		if got[i].Metrics != nil {
			t.Errorf("%s: metrics %v, want none", cases[i].ID, got[i].Metrics)
		}
	}

	// okCase: warm-up ignored, so gbps is the 5-value example: trimmed mean 3 over {2,3,4}.
	g := got[1].Metrics["gbps"]
	if g.N != 5 || g.Mean != 22 || g.TrimmedMean != 3 || g.Median != 3 || g.Max != 100 {
		t.Errorf("ok gbps = %+v", g)
	}
	if r := got[1].Metrics["retrans"]; r.N != 5 || r.Mean != 7 || r.Stdev != 0 ||
		r.CI95Low != 7 || r.CI95High != 7 {
		t.Errorf("ok retrans = %+v", r)
	}
	// mixed: ok trials 1, 2 (re-run) and 3 -> {5, 6, 7}; trimmed mean 6 over {6}.
	if m := got[5].Metrics["gbps"]; m.N != 3 || m.Mean != 6 || m.TrimmedMean != 6 ||
		m.Min != 5 || m.Max != 7 {
		t.Errorf("mixed gbps = %+v", m)
	}
}

func TestAggregateMatchesByMakeIDWhenIDEmpty(t *testing.T) {
	c := mkCase("")
	trial := result.Trial{Case: c, Trial: 1, Metrics: map[string]float64{"x": 1}}
	trial.Case.ID = c.MakeID()
	got := Aggregate([]result.Case{c}, []result.Trial{trial})
	if got[0].Status != "ok" || got[0].Metrics["x"].N != 1 {
		t.Errorf("got %+v", got[0])
	}
}

func TestTrialStatus(t *testing.T) {
	cases := []struct {
		status, err, want string
	}{
		{"", "", "ok"}, {"", "x", "failed"}, {"ok", "", "ok"}, {"skipped", "why", "skipped"},
		{"failed", "x", "failed"}, {"weird", "", "failed"},
	}
	for _, c := range cases {
		if got := TrialStatus(result.Trial{Status: c.status, Error: c.err}); got != c.want {
			t.Errorf("TrialStatus(%q, %q) = %q, want %q", c.status, c.err, got, c.want)
		}
	}
}
