package runner

import (
	"bytes"
	"io"
	"regexp"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// A trial's estimated length: the tool's run (iperf3's omitted slow start lies inside it; netserver's CRR
// pad, which the lab ends, is left for the ETA to learn), or the scenario's own estimate where a trial is more than one run (a vnf trial is a
// whole NDR/PDR search); no warm-up trial takes no time.
func TestTrialSeconds(t *testing.T) {
	cs := func(sc, proto string) result.CaseSpec {
		return result.CaseSpec{Case: result.Case{Scenario: sc, Protocol: proto}}
	}
	for _, c := range []struct {
		cs   result.CaseSpec
		d    int
		want float64
	}{
		{cs("p2p", "tcp"), 10, 10},
		{cs("p2p", "crr"), 10, 10},
		{cs("p2p", "rr"), 10, 10},
		{cs("p2p", "tcp"), 0, 0},
		{cs("vnf", "gtpu"), 3, 70},
		{cs("vnf", "gtpu"), 0, 0},
	} {
		if got := trialSeconds(c.cs, c.d); got != c.want {
			t.Errorf("%s/%s for %d s: %v, want %v", c.cs.Case.Scenario, c.cs.Case.Protocol, c.d, got, c.want)
		}
	}
}

// The log lines of a run without a terminal carry the trial count and an ETA, and the last line
// the measured time and the fixed cost per trial, warm-ups counted: 3 TCP trials of 1 s measure
// 3 x (1 - 0.1) = 2.7 s, the 3 x 0.1 s of omitted slow start ran inside their durations. The
// test's wall time is next to 0: fixed cost (0 - 2.7) / 3 = -0.90 s, besides the omitted
// spans (0 - 2.7 - 0.3) / 3 = -1.00 s.
func TestProgressLogETAAndFixedCost(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, false)
	c := result.CaseSpec{Case: result.Case{ID: "p2p/x/intra/tcp", Scenario: "p2p", Protocol: "tcp"}, Duration: 1, Warmup: 1, Repeat: 2}
	st := newCaseState(c, nil, nil, Settings{})
	p.Begin([]*caseState{st})
	p.SetupDone(c, 0, false, 2)
	p.WarmupDone(c, result.Trial{DurationS: 1, Status: "ok"}, time.Second)
	p.TrialDone(c, 1, 2, result.Trial{DurationS: 1, Status: "ok", Metrics: map[string]float64{"transactions_per_s": 10}}, false)
	p.TrialDone(c, 2, 2, result.Trial{DurationS: 1, Status: "ok", Metrics: map[string]float64{"transactions_per_s": 10}}, false)
	p.End()
	out := buf.String()
	for _, re := range []string{
		`trial 1/2: 10 trans/s  \[1/2, ETA \d+s\]`,
		`trial 2/2: 10 trans/s  \[2/2, ETA 0s\]`,
		`done in \d+s \(2 trials and 1 warm-ups\): 2\.7 s measured, -0\.90 s of fixed cost per trial .*; -1\.00 s besides the 0\.3 s the tools ran inside their durations before they measured`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s in:\n%s", re, out)
		}
	}
}

// The ETA: set-ups left at the mean set-up time so far plus planned trial seconds left at the
// pace measured so far; a case whose set-up failed takes its trials off the plan.
func TestProgressETA(t *testing.T) {
	p := NewProgress(io.Discard, false)
	cs := func(id string) result.CaseSpec {
		return result.CaseSpec{Case: result.Case{ID: id, Scenario: "p2p", Protocol: "rr"}, Duration: 2, Repeat: 3}
	}
	a, b, c := cs("a"), cs("b"), cs("c")
	p.Begin([]*caseState{newCaseState(a, nil, nil, Settings{}), newCaseState(b, nil, nil, Settings{}), newCaseState(c, nil, nil, Settings{})})
	if got := p.eta(); got != "21s" { // 3 set-ups at 1 s + 18 planned seconds at 1 s
		t.Errorf("ETA before anything ran: %s, want 21s", got)
	}
	p.SetupDone(a, 4*time.Second, false, 3)
	p.SetupDone(b, 2*time.Second, true, 3) // b cannot run: its 6 s are off the plan
	p.Trial(a, 1, 3)
	p.trialAt = p.trialAt.Add(-3 * time.Second) // the trial took 3 s for 2 planned: pace 1.5
	p.TrialDone(a, 1, 3, result.Trial{DurationS: 2, Status: "ok"}, false)
	// 1 set-up left at 3 s (mean of 4 and 2) + (12 - 2) planned seconds at 1.5.
	if got := p.eta(); got != "18s" {
		t.Errorf("ETA: %s, want 18s", got)
	}
	// A disturbed trial (2 s of wall) runs again: the work left stays, the pace slows to
	// 5 s of wall for 2 planned seconds.
	p.Trial(a, 2, 3)
	p.trialAt = p.trialAt.Add(-2 * time.Second)
	p.TrialDone(a, 2, 3, result.Trial{DurationS: 2, Status: "disturbed"}, true)
	if got := p.eta(); got != "28s" { // 3 + 10 x 2.5
		t.Errorf("ETA after a disturbed trial: %s, want 28s", got)
	}
}
