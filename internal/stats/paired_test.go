package stats

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

func TestPairedRatioExact(t *testing.T) {
	// Rounds 1..4 in both; round 5 only in a, round 6 only in b; round 7 has a NaN, round 8 a
	// zero: all four left out. Ratios 2, 2, 2, 2: ratio 2 with a collapsed interval.
	a := map[int]float64{1: 20, 2: 40, 3: 10, 4: 8, 5: 1, 7: math.NaN(), 8: 0}
	b := map[int]float64{1: 10, 2: 20, 3: 5, 4: 4, 6: 1, 7: 3, 8: 5}
	r := PairedRatio(a, b)
	if r.N != 4 || math.Abs(r.Ratio-2) > 1e-12 || math.Abs(r.CI95Low-2) > 1e-12 || math.Abs(r.CI95High-2) > 1e-12 {
		t.Errorf("PairedRatio = %+v, want 4 pairs, ratio 2 [2, 2]", r)
	}
	if !r.Differs() {
		t.Error("ratio 2 with no spread must differ from 1")
	}
	// Log ratios ln2, -ln2 (n = 2, nothing trimmed): mean 0, ratio 1; s = ln2*sqrt2,
	// half = t(0.975,1)*ln2*sqrt2/sqrt2 = 12.7062*ln2.
	r = PairedRatio(map[int]float64{1: 2, 2: 1}, map[int]float64{1: 1, 2: 2})
	if r.N != 2 || math.Abs(r.Ratio-1) > 1e-12 || math.Abs(math.Log(r.CI95High)-12.7062047*math.Ln2) > 1e-6 || r.Differs() {
		t.Errorf("symmetric pair: %+v", r)
	}
	if got := PairedRatio(map[int]float64{1: 3}, map[int]float64{2: 3}); got != (result.RatioSummary{}) {
		t.Errorf("no common round: %+v", got)
	}
	if got := PairedRatio(map[int]float64{1: 3}, map[int]float64{1: 2}); got.N != 1 || got.Ratio != 1.5 || got.CI95Low != 1.5 || got.Differs() {
		t.Errorf("one round: %+v (one round never says the cases differ)", got)
	}
}

// abRounds simulates two cases measured in the same rounds on a noisy machine: every round has
// a shared disturbance (steal bursts slow down whatever runs in them) much larger than each
// case's own noise.
func abRounds(rng *rand.Rand, n int, ratio float64) (a, b map[int]float64) {
	a, b = map[int]float64{}, map[int]float64{}
	for k := 1; k <= n; k++ {
		round := 0.15 * rng.NormFloat64() // shared by both cases of the round
		b[k] = 1000 * math.Exp(round+0.02*rng.NormFloat64())
		a[k] = 1000 * ratio * math.Exp(round+0.02*rng.NormFloat64())
	}
	return a, b
}

// An A/A pair's interval holds 1.0 about 95 % of the time; a real 10 % difference is found
// although the rounds' shared disturbance (15 %) is larger than it; and the paired interval is
// far narrower than the two cases' own intervals, which carry that disturbance.
func TestPairedRatioAAandAB(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const runs = 2000
	holds, found := 0, 0
	var pairedHW, unpairedHW float64
	for i := 0; i < runs; i++ {
		a, b := abRounds(rng, 12, 1)
		if r := PairedRatio(a, b); !r.Differs() {
			holds++
		}
		a, b = abRounds(rng, 12, 1.10)
		r := PairedRatio(a, b)
		if r.Differs() && r.CI95Low > 1 {
			found++
		}
		pairedHW += 100 * (r.CI95High - r.CI95Low) / 2 / r.Ratio
		unpairedHW += HalfWidthPct(Summarize(values(a)))
	}
	if f := float64(holds) / runs; f < 0.93 {
		t.Errorf("A/A: the interval held 1.0 in %.3f of runs, want about 0.95", f)
	}
	if f := float64(found) / runs; f < 0.99 {
		t.Errorf("A/B 1.10: found in %.3f of runs, want nearly all", f)
	}
	if pairedHW/runs > 2.5 || unpairedHW/runs < 3*pairedHW/runs {
		t.Errorf("mean half-widths: paired %.2f%%, one case alone %.2f%%: pairing must take the shared disturbance out", pairedHW/runs, unpairedHW/runs)
	}
}

func values(m map[int]float64) []float64 {
	out := make([]float64, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
