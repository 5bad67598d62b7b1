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
//   - ci95_low, ci95_high: trimmed_mean ± t(0.975, m-1) · s_m / √m, where m and s_m are the
//     count and the sample standard deviation of the trimmed set (the whole sample when
//     n < MinTrim) and t is the Student t quantile. When m < 2 the interval collapses to
//     trimmed_mean.
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

	trimmed := xs
	if n >= MinTrim {
		trimmed = xs[1 : n-1]
	}
	tm, ts := meanStdev(trimmed)
	s.TrimmedMean = tm
	s.CI95Low, s.CI95High = tm, tm
	if m := len(trimmed); m >= 2 {
		half := TQuantile(0.975, float64(m-1)) * ts / math.Sqrt(float64(m))
		s.CI95Low, s.CI95High = tm-half, tm+half
	}
	return s
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
