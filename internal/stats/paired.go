package stats

import (
	"math"
	"slices"

	"github.com/cnibench/cnibench/internal/result"
)

// PairedRatio compares two cases over the rounds both measured: a and b map a round (trial
// number) to one case's value of one metric. Rounds where either value is missing, not
// finite or not positive are left out. The log ratios d_k = ln(a_k/b_k) are summarized like
// any sample (trimmed mean and its Tukey-McLaughlin interval, see Summarize); Ratio is
// exp(trimmed mean of d) and the interval exp of d's interval. Pairing by round takes out
// what disturbed both cases alike in that round (a burst of steal, a drift), which two
// separate intervals would count twice. N is the number of rounds paired; N == 0 gives the
// zero RatioSummary and N == 1 a ratio whose interval collapses to it.
func PairedRatio(a, b map[int]float64) result.RatioSummary {
	var d []float64
	for k, av := range a {
		bv, ok := b[k]
		if !ok || !(av > 0) || !(bv > 0) || math.IsInf(av, 0) || math.IsInf(bv, 0) {
			continue
		}
		d = append(d, math.Log(av/bv))
	}
	if len(d) == 0 {
		return result.RatioSummary{}
	}
	slices.Sort(d)
	tm, lo, hi := trimmedCI(d)
	return result.RatioSummary{N: len(d), Ratio: math.Exp(tm), CI95Low: math.Exp(lo), CI95High: math.Exp(hi)}
}
