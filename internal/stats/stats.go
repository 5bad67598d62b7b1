// Package stats turns trial measurements into the aggregates of the result schema.
//
// Summarize computes a result.MetricSummary over a sample of values. Non-finite values
// (NaN, ±Inf) are ignored; the remaining n values define:
//
//   - n: the number of finite values.
//   - mean: the arithmetic mean.
//   - stdev: the sample standard deviation (divisor n-1); 0 when n < 2.
//   - median: the middle value of the sorted sample, or the mean of the two middle values
//     when n is even.
//   - min, max: the smallest and largest value.
//   - trimmed_mean: the mean after dropping the single lowest and the single highest value
//     when n >= MinTrim (with the default 12 trials the best and the worst trial are
//     dropped, seed 001's rule); the plain mean when n < MinTrim, so that a short run's
//     interval still rests on at least three values rather than collapsing onto the median.
//   - ci95_low, ci95_high: the Tukey-McLaughlin interval of the trimmed mean, trimmed_mean ±
//     t(0.975, n-2g-1) · s_w / ((1-2g/n)·√n), where g is the number of values trimmed from
//     each end (1 when n >= MinTrim, else 0) and s_w the standard deviation (divisor n-1) of
//     the winsorized sample (the g lowest values replaced by the next lowest, the g highest
//     by the next highest). With g = 0 it is the Student t interval of the mean. (The SD of
//     the trimmed sample alone, with df = m-1, covers the true value only ~89 % of the time.)
//     When n-2g-1 < 1 the interval collapses to trimmed_mean.
//   - cv: the coefficient of variation stdev/mean, 0 when mean is 0.
//
// An empty (or all non-finite) input gives the zero MetricSummary, whose N is 0.
//
// Aggregate groups the trials of a run by case and summarizes each metric of each case.
package stats

import (
	"math"
	"slices"

	"github.com/cnibench/cnibench/internal/result"
)

// MinTrim is the smallest sample whose best and worst values are dropped for trimmed_mean.
const MinTrim = 5

// Summarize returns the summary of values as defined in the package documentation.
func Summarize(values []float64) result.MetricSummary {
	xs := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			xs = append(xs, v)
		}
	}
	n := len(xs)
	if n == 0 {
		return result.MetricSummary{}
	}
	slices.Sort(xs)

	mean, stdev := meanStdev(xs)
	s := result.MetricSummary{
		N:      n,
		Mean:   mean,
		Stdev:  stdev,
		Median: median(xs),
		Min:    xs[0],
		Max:    xs[n-1],
	}
	if mean != 0 {
		s.CV = stdev / mean
	}

	s.TrimmedMean, s.CI95Low, s.CI95High = trimmedCI(xs)
	return s
}

// trimmedCI returns the trimmed mean of a sorted, non-empty sample and its Tukey-McLaughlin
// 95 % interval (see the package documentation).
func trimmedCI(xs []float64) (tm, lo, hi float64) {
	n := len(xs)
	g := 0
	if n >= MinTrim {
		g = 1
	}
	tm, _ = meanStdev(xs[g : n-g])
	df := n - 2*g - 1
	if df < 1 {
		return tm, tm, tm
	}
	w := make([]float64, n)
	for i, x := range xs {
		w[i] = min(max(x, xs[g]), xs[n-1-g])
	}
	_, sw := meanStdev(w)
	half := TQuantile(0.975, float64(df)) * sw / ((1 - 2*float64(g)/float64(n)) * math.Sqrt(float64(n)))
	return tm, tm - half, tm + half
}

// HalfWidthPct is the 95 % CI half-width of m relative to its trimmed mean, in percent: +Inf
// when it is unknown (fewer than 2 values, a zero mean), which never meets a target.
func HalfWidthPct(m result.MetricSummary) float64 {
	if m.N < 2 || m.TrimmedMean == 0 {
		return math.Inf(1)
	}
	return 100 * (m.CI95High - m.CI95Low) / 2 / math.Abs(m.TrimmedMean)
}

// meanStdev returns the mean and the sample standard deviation (0 when len(xs) < 2).
func meanStdev(xs []float64) (mean, stdev float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean = sum / float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		d := x - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// median of a sorted, non-empty slice.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// NearestRank is the nearest-rank p-th percentile of sorted (ascending, non-empty): the
// smallest value with at least p % of the samples at or below it.
func NearestRank(sorted []float64, p float64) float64 {
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}
