package scenario

import (
	"context"
	"sort"
	"time"

	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/search"
)

// vnfSearch is a way a vnf trial finds its rates (case label search): it runs the search up to
// maxRate with final trials of final, names the metrics of each goal of its result and
// estimates how long it takes.
type vnfSearch struct {
	name, summary string
	run           func(ctx context.Context, m search.Measurer, maxRate float64, final time.Duration) (search.Result, error)
	// metric is the metric prefix of a goal of loss target t ("ndr": ndr_pps, ndr_bps, ...).
	metric func(t float64) string
	// seconds estimates one search with final trials of d seconds on this kind of host.
	seconds func(d int) float64
}

// vnfSearches are the searches by name; "" is the default, MLR.
var vnfSearches = map[string]vnfSearch{}

func registerSearch(s vnfSearch) {
	if _, dup := vnfSearches[s.name]; dup {
		panic("scenario: search " + s.name + " registered twice")
	}
	vnfSearches[s.name] = s
}

// vnfDefaultSearch is the search of a case that names none.
const vnfDefaultSearch = "mlr"

// vnfSearchOf is the search of case c.
func vnfSearchOf(c result.Case) vnfSearch {
	if s, ok := vnfSearches[c.Word(pSearch)]; ok {
		return s
	}
	return vnfSearches[vnfDefaultSearch]
}

// VNFSearches lists the searches of the vnf scenario, sorted.
func VNFSearches() []string {
	var out []string
	for n := range vnfSearches {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// VNFSearchSummary says what a search is ("" for an unknown one).
func VNFSearchSummary(name string) string { return vnfSearches[name].summary }

// ndrPDR names the goals of the searches for the no-drop rate (loss target 0) and the
// partial-drop rate.
func ndrPDR(t float64) string {
	if t == 0 {
		return "ndr"
	}
	return "pdr"
}

// Ramp parameters: it starts at a tenth of the highest rate (seed 002 went from 10 to 400
// kpps, a fortieth) so that a search stays under ~50 steps, and rises 5 % a step, each step
// lasting the case's duration (seed 002: 10 s).
const (
	rampStartFraction = 0.1
	rampStep          = 0.05
)

// engineRunSeconds is what one run of the packet engine costs besides its duration (starting
// the receiver and waiting for it, the generator's start, the receiver's drain and both
// results), measured here.
const engineRunSeconds = 0.7

func init() {
	mlrConfig := func(maxRate float64, final time.Duration) search.Config {
		return search.Config{MinRate: vnfMinRate, MaxRate: maxRate, InitialDuration: min(time.Second, final), FinalDuration: final}
	}
	registerSearch(vnfSearch{name: "mlr",
		summary: "NDR (no loss) and PDR (0.5 % loss) at relative width 0.005 in one multi-target search in the manner of MLRsearch: short trials first, final ones at the case's duration",
		run: func(ctx context.Context, m search.Measurer, maxRate float64, final time.Duration) (search.Result, error) {
			return search.MLR(ctx, m, mlrConfig(maxRate, final))
		},
		metric: ndrPDR,
		// About 30 runs of the packet engine, a third of them at the full duration (searches
		// with 3 s final trials took 47-84 s, 33 runs on average).
		seconds: func(d int) float64 { return 20*float64(d) + 10 },
	})
	registerSearch(vnfSearch{name: "binary",
		summary: "NDR and PDR by RFC 2544 binary searches, one per loss target, every trial at the case's duration",
		run: func(ctx context.Context, m search.Measurer, maxRate float64, final time.Duration) (search.Result, error) {
			return search.Binary(ctx, m, mlrConfig(maxRate, final))
		},
		metric: ndrPDR,
		// Two searches of ~15 halvings each down to width 0.005.
		seconds: func(d int) float64 { return 30 * (float64(d) + engineRunSeconds) },
	})
	registerSearch(vnfSearch{name: "ramp",
		summary: "seed 002's maximum feasible throughput: the rate rises 5 % a step (each step lasting the case's duration) from a tenth of the highest rate (halved until a step loses less than 1 %, when that start is too high) until a step loses 1 % or more",
		run: func(ctx context.Context, m search.Measurer, maxRate float64, final time.Duration) (search.Result, error) {
			return search.Ramp(ctx, m, search.RampConfig{Start: max(vnfMinRate, rampStartFraction*maxRate), MinRate: vnfMinRate, MaxRate: maxRate, Step: rampStep, StepDuration: final})
		},
		metric: func(float64) string { return "max_feasible" },
		// At most 49 steps from a tenth of the highest rate (and a few halvings of a start too
		// high); a ramp usually stops after ~2/3.
		seconds: func(d int) float64 { return 33 * (float64(d) + engineRunSeconds) },
	})
}
