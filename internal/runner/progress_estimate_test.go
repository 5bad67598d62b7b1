package runner

import (
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// A trial's estimated length: the tool's run (plus iperf3's omitted second, netserver's CRR
// pad), or the scenario's own estimate where a trial is more than one run (a vnf trial is a
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
		{cs("p2p", "crr"), 10, 14},
		{cs("p2p", "rr"), 10, 10},
		{cs("vnf", "gtpu"), 3, 70},
		{cs("vnf", "gtpu"), 0, 0},
	} {
		if got := trialSeconds(c.cs, c.d); got != c.want {
			t.Errorf("%s/%s for %d s: %v, want %v", c.cs.Case.Scenario, c.cs.Case.Protocol, c.d, got, c.want)
		}
	}
}
