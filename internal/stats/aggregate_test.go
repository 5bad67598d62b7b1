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

// Disturbed trials stay out of the statistics; re-runs make them good; a trial number whose
// last record is disturbed is lost; an old failure replaced by a later measurement of the same
// trial leaves no reason behind (a resume that completes every trial ends "ok" without one).
func TestAggregateDisturbedAndResumedFailure(t *testing.T) {
	c := mkCase("d")
	m := func(v float64) map[string]float64 { return map[string]float64{"gbps": v} }
	trials := []result.Trial{
		{Case: c, Trial: 1, Status: "failed", Error: "cluster: no route"}, // a set-up failure of the first run
		{Case: c, Trial: 1, Status: "ok", Metrics: m(10)},                 // resumed
		{Case: c, Trial: 2, Status: "disturbed", Error: "steal 30%", Metrics: m(1)},
		{Case: c, Trial: 2, Status: "ok", Metrics: m(10), Notes: []string{"cpu_server_host_pct = 512 left out"}},
		{Case: c, Trial: 3, Status: "disturbed", Error: "steal 9%", Metrics: m(2)},
		{Case: c, Trial: 4, Status: "ok", Metrics: m(10), Notes: []string{"cpu_server_host_pct = 512 left out"}},
	}
	r := Aggregate([]result.Case{c}, trials)[0]
	if r.Status != "ok" || r.Reason != "" {
		t.Errorf("status %q reason %q, want ok without a reason", r.Status, r.Reason)
	}
	if g := r.Metrics["gbps"]; g.N != 3 || g.Min != 10 {
		t.Errorf("gbps %+v: disturbed values must stay out", g)
	}
	if r.Disturbed != 2 || r.Lost != 1 {
		t.Errorf("disturbed %d lost %d, want 2 and 1", r.Disturbed, r.Lost)
	}
	if len(r.Notes) != 1 {
		t.Errorf("notes %q, want the one distinct note", r.Notes)
	}
	all := Aggregate([]result.Case{c}, []result.Trial{{Case: c, Trial: 1, Status: "disturbed", Metrics: m(1)}})[0]
	if all.Status != "failed" || all.Lost != 1 || all.Metrics != nil {
		t.Errorf("all disturbed: %+v", all)
	}
}
