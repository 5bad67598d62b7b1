package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// MLR finds the throughput for every loss target of cfg at once, in the manner of MLRsearch:
//
//   - Phases 0..n (n = cfg.Phases) run trials of growing duration, InitialDuration to
//     FinalDuration geometrically, with width goals RelWidth·2^(n-p): early phases are short
//     and coarse, only the last one runs trials at full duration.
//   - Every trial serves every target: a trial at rate r that lost ratio l is a lower bound for
//     the targets >= l and an upper bound for the others.
//   - In a phase, a target's bounds must come from trials at least as long as the phase's (a
//     rate that held for 1 s need not hold for 30 s, and one that lost in 1 s may not lose in
//     30 s: a few packets lost to rounding or a warm-up are a larger share of a short trial).
//     The bounds an earlier, shorter phase ended with are measured again first, the lower one
//     first: on most devices they still bracket the answer and the phase costs two trials.
//   - Without a lower bound the search goes down from the upper bound, first straight to the
//     rate the device forwarded there (upper·(1-loss): one trial at the highest rate finds the
//     neighbourhood), then in steps that double; without an upper bound it goes up likewise;
//     with both it bisects until the interval is as narrow as the phase asks.
//
// The first trial is at MaxRate. The result states per target the bounds found at the final
// duration and the relative width reached.
func MLR(ctx context.Context, m Measurer, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, m: m}
	targets := sortedTargets(cfg.Targets)
	n := cfg.Phases
	final := n
	for p := 0; p <= n; p++ {
		d := phaseDuration(cfg, p)
		width := cfg.RelWidth * math.Pow(2, float64(n-p))
		ext := make([]float64, len(targets)) // per target: the external search's step
		for i := range ext {
			ext[i] = width
		}
		for {
			rate, i := 0.0, -1
			for k, t := range targets {
				if next, ok := r.next(t, d, width, &ext[k]); ok {
					rate, i = next, k
					break
				}
			}
			if i < 0 {
				break
			}
			if _, err := r.measure(ctx, rate, d, p); err != nil {
				if errors.Is(err, errTooMany) {
					final = p
					break
				}
				return r.result("mlr", nil), err
			}
		}
		if final < n {
			break
		}
	}
	goals := make([]Goal, len(cfg.Targets))
	for k, t := range cfg.Targets {
		lo, up := r.bounds(t, cfg.FinalDuration)
		g := goal(t, lo.Rate, up.Rate)
		switch {
		case lo.Rate >= cfg.MaxRate:
			g.Upper, g.Width, g.Note = 0, 0, NoteMaxRate
		case lo.Rate == 0 && up.Rate > 0 && up.Rate <= cfg.MinRate:
			g.Note = NoteMinRate
		case final < n || lo.Rate == 0 || g.Width > cfg.RelWidth:
			g.Note = fmt.Sprintf("stopped after %d trials (the most allowed) short of the width goal", len(r.trials))
		}
		goals[k] = g
	}
	return r.result("mlr", goals), nil
}

// phaseDuration is phase p's trial duration: InitialDuration·(Final/Initial)^(p/n), to the ms.
func phaseDuration(cfg Config, p int) time.Duration {
	if cfg.Phases == 0 || p >= cfg.Phases {
		return cfg.FinalDuration
	}
	ratio := float64(cfg.FinalDuration) / float64(cfg.InitialDuration)
	d := float64(cfg.InitialDuration) * math.Pow(ratio, float64(p)/float64(cfg.Phases))
	return time.Duration(d).Round(time.Millisecond)
}

// bounds returns target's bounds among trials of duration d or longer: the upper one is the
// lowest rate that lost more than target, the lower one the highest rate below it that lost
// at most target; a zero Trial is none.
func (r *run) bounds(target float64, d time.Duration) (lower, upper Trial) {
	for _, t := range r.trials {
		if t.Duration >= d && t.LossRatio() > target && (upper.Rate == 0 || t.Rate < upper.Rate) {
			upper = t
		}
	}
	for _, t := range r.trials {
		if t.Duration >= d && t.LossRatio() <= target && (upper.Rate == 0 || t.Rate < upper.Rate) && t.Rate > lower.Rate {
			lower = t
		}
	}
	return lower, upper
}

// hint is a bound target had in shorter trials than d, between the bounds of trials of d
// (lowerRate, upperRate; 0: none) and not yet measured at d, or 0: the highest rate that held
// (lost at most target) if any, else the lowest that lost more above it.
func (r *run) hint(target float64, d time.Duration, lowerRate, upperRate float64) float64 {
	inside := func(t Trial) bool {
		return t.Duration < d && t.Rate > lowerRate && (upperRate == 0 || t.Rate < upperRate) && !r.measuredAt(t.Rate, d)
	}
	held, lost := 0.0, 0.0
	for _, t := range r.trials {
		if inside(t) && t.LossRatio() <= target && t.Rate > held {
			held = t.Rate
		}
	}
	if held > 0 {
		return held
	}
	for _, t := range r.trials {
		if inside(t) && t.LossRatio() > target && (lost == 0 || t.Rate < lost) {
			lost = t.Rate
		}
	}
	return lost
}

// next is the rate target's search wants measured next in a phase of trials of duration d and
// width goal width (ext: its external search's step, doubled as it is used), or false when
// the target is done for the phase.
func (r *run) next(target float64, d time.Duration, width float64, ext *float64) (float64, bool) {
	cfg := r.cfg
	lo, up := r.bounds(target, d)
	switch {
	case lo.Rate >= cfg.MaxRate:
		return 0, false // nothing above the max rate to find
	case up.Rate > 0 && up.Rate <= cfg.MinRate && lo.Rate == 0:
		return 0, false // nothing below the min rate to find
	case up.Rate > 0 && lo.Rate > 0 && (up.Rate-lo.Rate)/up.Rate <= width:
		return 0, false
	}
	if h := r.hint(target, d, lo.Rate, up.Rate); h > 0 {
		return h, true // an earlier phase's bound, measured again at this duration
	}
	switch {
	case lo.Rate > 0 && up.Rate > 0:
		return (lo.Rate + up.Rate) / 2, true
	case lo.Rate > 0:
		next := math.Min(cfg.MaxRate, lo.Rate/(1-math.Min(*ext, 0.5)))
		*ext *= 2
		return next, true
	case up.Rate > 0:
		next := up.Rate * (1 - math.Min(*ext, 0.5))
		// Straight to the rate the device forwarded at the upper bound when that is lower:
		// far fewer steps after a trial at a rate well above its capacity.
		if fwd := up.Rate * (1 - up.LossRatio()); fwd < next && !r.measuredAt(fwd, d) {
			next = fwd
		} else {
			*ext *= 2
		}
		return math.Max(cfg.MinRate, next), true
	}
	return cfg.MaxRate, true
}

func (r *run) measuredAt(rate float64, d time.Duration) bool {
	for _, t := range r.trials {
		if t.Rate == rate && t.Duration >= d {
			return true
		}
	}
	return false
}
