package runner

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// A trial's estimated length: the tool's run (plus iperf3's omitted second; netserver's CRR
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
		{cs("p2p", "tcp"), 10, 11},
		{cs("p2p", "crr"), 10, 10},
		{cs("p2p", "rr"), 10, 10},
		{cs("vnf", "gtpu"), 3, 70},
		{cs("vnf", "gtpu"), 0, 0},
	} {
		if got := trialSeconds(c.cs, c.d); got != c.want {
			t.Errorf("%s/%s for %d s: %v, want %v", c.cs.Case.Scenario, c.cs.Case.Protocol, c.d, got, c.want)
		}
	}
}

// The log lines of a run without a terminal carry the trial count and an ETA, and the last line
// the measured time and the fixed cost per trial, warm-ups counted.
func TestProgressLogETAAndFixedCost(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, false)
	c := result.CaseSpec{Case: result.Case{ID: "p2p/x/intra/rr", Scenario: "p2p", Protocol: "rr"}, Duration: 1, Warmup: 1, Repeat: 2}
	st := newCaseState(c, nil, nil, Settings{})
	p.Begin([]*caseState{st})
	p.WarmupDone(c, result.Trial{DurationS: 1, Status: "ok"})
	p.TrialDone(c, 1, 2, result.Trial{DurationS: 1, Status: "ok", Metrics: map[string]float64{"transactions_per_s": 10}})
	p.TrialDone(c, 2, 2, result.Trial{DurationS: 1, Status: "ok", Metrics: map[string]float64{"transactions_per_s": 10}})
	p.End()
	out := buf.String()
	for _, re := range []string{
		`trial 1/2: 10 trans/s  \[1/2, ETA \d+s\]`,
		`trial 2/2: 10 trans/s  \[2/2, ETA 0s\]`,
		`done in \d+s \(2 trials and 1 warm-ups\): 3 s measured, -?\d+\.\d\d s of fixed cost per trial`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s in:\n%s", re, out)
		}
	}
}
