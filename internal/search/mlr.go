package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// MLR finds the throughput for every loss target of cfg at once, in the manner of FD.io's
// MLRsearch (RFC 9971).
//
// Bounds. Per target, a rate is classified as RFC 9971 does with goal exceed ratio 0 and goal
// duration sum equal to FinalDuration: it is an upper bound as soon as one trial at it, of any
// duration, lost more than the target (at exceed ratio 0 a bad short trial counts in full); it
// is a lower bound when no trial at it lost more and one of them lasted FinalDuration or longer
// (one full-length good trial is the whole duration sum); else it is undecided. The relevant
// upper bound is the lowest upper bound, the relevant lower bound the highest lower bound below
// it; the result is these two at the end. So a short trial that lost too much stays an upper
// bound, a rate that held in short trials is a lower bound only once it held for
// FinalDuration, and on a device that loses more in short trials than in long ones the result
// lies below its full-duration throughput.
//
// Phases. Phase p of 0..n (n = cfg.Phases) classifies alike with its own trial duration
// (InitialDuration to FinalDuration, geometrically) in place of FinalDuration, and has a width
// goal whose logarithmic width halves from phase to phase down to RelWidth. A target moves on
// when its bounds meet its phase's goal, straight to the final phase when they already meet
// RelWidth (there is nothing left for the phases between to narrow). A phase starts from the
// bounds the previous one ended with: the middle of an interval at most two goals wide is tried
// first, then the old lower bound again at the new duration (the old upper bound still is one).
//
// Trials. The first is at MaxRate, for the first phase's duration. Without a lower bound a target steps
// down from its upper bound, without an upper bound up from its lower bound, by a logarithmic
// width that starts at twice the phase's goal and doubles after each step that did not find the
// missing bound. A step down goes further when the upper bound's trial tells where the loss
// starts: at the rate the device forwarded there (corrected for the target, all the load above
// it taken as lost: the forwarding-rate start of MLRsearch after its trial at MaxRate), or where
// the line through the loss rates of the two nearest bad trials reaches the target. Such an
// estimate is measured half a final width goal below, at the duration of the trial it comes
// from if that is longer; when it holds, the rate one final width goal above is tried next at
// that duration: on a device whose loss grows linearly the bounds are then as narrow as the
// final phase asks, and the final phase only measures the lower bound again. With both bounds
// the interval is split at such an estimate when it lies inside, else unevenly so that the
// upper part is the goal times a power of two. After maxJumps estimates missed in a phase, only
// the forwarded rate of a step down is used there. Of the rates the targets want measured, the
// lowest is measured first (the longer duration first at equal rates).
func MLR(ctx context.Context, m Measurer, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	s := newMLRSearch(cfg, m)
	stopped := false
	if err := s.loop(ctx); err != nil {
		if !errors.Is(err, errTooMany) {
			return s.result("mlr", nil), err
		}
		stopped = true
	}
	goals := make([]Goal, len(cfg.Targets))
	for k, t := range cfg.Targets {
		lo, up := s.bounds(t, cfg.FinalDuration)
		g := goal(t, lo, up)
		switch {
		case lo >= cfg.MaxRate:
			g.Upper, g.Width, g.Note = 0, 0, NoteMaxRate
		case lo == 0 && up > 0 && up <= cfg.MinRate:
			g.Note = NoteMinRate
		case stopped || lo == 0 || g.Width > cfg.RelWidth:
			g.Note = fmt.Sprintf("stopped after %d trials (the most allowed) short of the width goal", len(s.trials))
		}
		goals[k] = g
	}
	return s.result("mlr", goals), nil
}

// localSecant is how far apart (natural logarithm of their ratio) two bad trials may be for
// the line through their losses to estimate where the loss starts: farther apart they often
// lie on different parts of the loss curve (a soft knee and the capacity limit).
const localSecant = 0.1

// maxJumps is how many estimates may miss in a phase (one that lost more than the target, or
// one whose neighbour did not) before a target's search only splits and steps (down from an
// upper bound it still goes to the forwarded rate when that is further than the step).
const maxJumps = 3

type mlrSearch struct {
	*run
	n     int             // the final phase
	durs  []time.Duration // per phase: its trial duration
	width []float64       // per phase: its relative width goal
	logw  []float64       // per phase: the same as a logarithmic width
	sels  []*selector
}

// selector is one target's search state.
type selector struct {
	target   float64
	phase    int
	lo0, hi0 float64       // the bounds the previous phase ended with (0: none)
	ext      float64       // logarithmic width of the next external step
	landed   float64       // an estimate that held, whose neighbour one final width above is to try
	landedD  time.Duration // the duration it held for
	jumps    int           // estimates that missed in this phase
}

// step kinds: what a nominated rate is for (how its outcome changes the selector).
const (
	stepFirst = iota
	stepHalve
	stepRefine
	stepDown
	stepUp
	stepEstimate
	stepNeighbour
	stepBisect
)

type nomination struct {
	rate  float64
	d     time.Duration
	phase int
	kind  int
	ext   float64 // stepBisect: the smaller part's logarithmic width
}

func newMLRSearch(cfg Config, m Measurer) *mlrSearch {
	s := &mlrSearch{run: &run{cfg: cfg, m: m}, n: cfg.Phases}
	final := -math.Log1p(-cfg.RelWidth)
	for p := 0; p <= s.n; p++ {
		s.durs = append(s.durs, phaseDuration(cfg, p))
		lw := final * math.Pow(2, float64(s.n-p))
		w := -math.Expm1(-lw)
		if p == s.n {
			w = cfg.RelWidth
		} else {
			// A hair narrower, so that the halves of an earlier phase's interval are within
			// the next phase's goal despite rounding.
			w *= 1 - 1e-9
		}
		s.width = append(s.width, w)
		s.logw = append(s.logw, -math.Log1p(-w))
	}
	for _, t := range sortedTargets(cfg.Targets) {
		s.sels = append(s.sels, &selector{target: t, ext: 2 * s.logw[0]})
	}
	return s
}

func (s *mlrSearch) loop(ctx context.Context) error {
	for {
		var best nomination
		var bestSel *selector
		for _, sel := range s.sels {
			nm, ok := s.nominate(sel)
			if !ok {
				continue
			}
			if bestSel == nil || nm.rate < best.rate || (nm.rate == best.rate && nm.d > best.d) {
				best, bestSel = nm, sel
			}
		}
		if bestSel == nil {
			return nil
		}
		t, err := s.measure(ctx, best.rate, best.d, s.phaseOf(best.d))
		if err != nil {
			return err
		}
		s.won(bestSel, best, t)
	}
}

// phaseOf is the last phase whose trials are no longer than d.
func (s *mlrSearch) phaseOf(d time.Duration) int {
	p := 0
	for q, pd := range s.durs {
		if pd <= d {
			p = q
		}
	}
	return p
}

// bounds returns target's relevant bounds among the trials as classified for trials of
// duration d (see MLR); 0 is none.
func (s *mlrSearch) bounds(target float64, d time.Duration) (lo, hi float64) {
	for _, t := range s.trials {
		if t.LossRatio() > target && (hi == 0 || t.Rate < hi) {
			hi = t.Rate
		}
	}
	for _, t := range s.trials {
		if t.Duration >= d && t.LossRatio() <= target && (hi == 0 || t.Rate < hi) && t.Rate > lo && !s.bad(t.Rate, target) {
			lo = t.Rate
		}
	}
	return lo, hi
}

// bad says whether a trial at rate lost more than target.
func (s *mlrSearch) bad(rate, target float64) bool {
	for _, t := range s.trials {
		if t.Rate == rate && t.LossRatio() > target {
			return true
		}
	}
	return false
}

// narrow says whether [lo, hi] meets phase p's width goal.
func (s *mlrSearch) narrow(p int, lo, hi float64) bool {
	return lo > 0 && hi > 0 && (hi-lo)/hi <= s.width[p]
}

// below is the lowest rate m with (hi-m)/hi <= w; above the highest h with (h-lo)/h <= w.
func below(hi, w float64) float64 {
	m := hi * (1 - w)
	for (hi-m)/hi > w {
		m = math.Nextafter(m, hi)
	}
	return m
}

func above(lo, w float64) float64 {
	h := lo / (1 - w)
	for (h-lo)/h > w {
		h = math.Nextafter(h, lo)
	}
	return h
}

// nominate is the rate sel wants measured next and why, or false when its target is done.
func (s *mlrSearch) nominate(sel *selector) (nomination, bool) {
	cfg := s.cfg
	for {
		p, t := sel.phase, sel.target
		d, w, lw := s.durs[p], s.width[p], s.logw[p]
		lo, hi := s.bounds(t, d)
		nm := nomination{d: d, phase: p}
		inside := func(r float64) bool {
			return r > lo && (hi == 0 || r < hi) && r >= cfg.MinRate && r <= cfg.MaxRate
		}
		if lo == 0 && hi == 0 && sel.lo0 == 0 {
			nm.rate, nm.kind = cfg.MaxRate, stepFirst
			return nm, true
		}
		// An estimate held: one final width goal above it, at the estimate's duration.
		if sel.landed != 0 && sel.landed == lo {
			if r := math.Min(above(lo, cfg.RelWidth), cfg.MaxRate); inside(r) {
				nm.rate, nm.kind, nm.d = r, stepNeighbour, max(d, sel.landedD)
				return nm, true
			}
		}
		sel.landed = 0
		if lo >= cfg.MaxRate || (lo == 0 && hi > 0 && hi <= cfg.MinRate) || s.narrow(p, lo, hi) {
			if p == s.n {
				return nm, false
			}
			// Bounds as narrow as the final goal leave nothing for the phases between to
			// narrow: the final phase measures the lower bound again.
			next := p + 1
			if s.narrow(s.n, lo, hi) || lo >= cfg.MaxRate {
				next = s.n
			}
			sel.phase, sel.lo0, sel.hi0, sel.jumps = next, lo, hi, 0
			sel.ext = 2 * s.logw[next]
			if lo > 0 && hi > 0 {
				sel.ext = 2 * math.Max(s.logw[next], math.Log(hi/lo))
			}
			continue
		}
		// A phase's first steps: the middle of the previous phase's interval when that is at
		// most two goals wide, then its lower bound again (its upper bound still is one).
		if sel.lo0 > 0 && sel.hi0 > 0 {
			if g := math.Log(sel.hi0 / sel.lo0); g > lw && g <= 2*lw*(1+1e-9) {
				if r := below(sel.hi0, w); inside(r) {
					nm.rate, nm.kind = r, stepHalve
					return nm, true
				}
			}
		}
		if inside(sel.lo0) {
			nm.rate, nm.kind = sel.lo0, stepRefine
			return nm, true
		}
		// An estimate is measured at the duration of the trial it comes from when that is
		// longer: it tells how trials that long lose.
		var fwd, sec float64
		estD := d
		if hi > 0 {
			fwd, sec, estD = s.estimates(t, hi)
			estD = max(d, estD)
		}
		if sel.jumps >= maxJumps {
			sec = 0
		}
		aim := func(e float64) float64 { return e * (1 - cfg.RelWidth/2) }
		switch {
		case lo == 0: // down from hi
			r := hi * math.Exp(-sel.ext)
			nm.kind = stepDown
			if a := aim(sec); sec > 0 && a >= r && a < hi {
				r, nm.kind = a, stepEstimate
			}
			if a := aim(fwd); fwd > 0 && a < r {
				r, nm.kind = a, stepEstimate
			}
			if r < cfg.MinRate/(1-w) {
				r = cfg.MinRate
			}
			if nm.kind == stepEstimate {
				nm.d = estD
			}
			nm.rate = r
			return nm, true
		case hi == 0: // up from lo
			r := lo * math.Exp(sel.ext)
			if r > cfg.MaxRate*(1-w) {
				r = cfg.MaxRate
			}
			nm.rate, nm.kind = r, stepUp
			return nm, true
		}
		// Both bounds: split, unevenly so that the upper part is the goal times a power of two.
		g := math.Log(hi / lo)
		r, part := below(hi, w), lw
		if g > 2*lw*(1+1e-9) {
			part = lw
			for 4*part < g {
				part *= 2
			}
			// part or 2·part, whichever splits more evenly.
			if part*(g-part) < 2*part*(g-2*part) {
				part *= 2
			}
			r = hi * math.Exp(-part)
		}
		nm.rate, nm.kind, nm.ext = r, stepBisect, math.Min(part, g-part)
		// Or where the loss is estimated to reach the target, when that is inside: not below
		// one final width goal above lo (a step that could not narrow the final interval).
		e := sec
		if fwd > 0 && (e == 0 || fwd < e) && aim(fwd) < r && sel.jumps < maxJumps {
			e = fwd
		}
		if e > 0 && e > lo*(1-cfg.RelWidth) {
			if a := math.Max(aim(e), above(lo, cfg.RelWidth)); inside(a) {
				nm.rate, nm.kind, nm.d = a, stepEstimate, estD
			}
		}
		return nm, true
	}
}

// estimates returns where the loss of target's upper bound hi suggests the loss starts
// reaching target (0: no estimate), and the duration of the trials it comes from. fwd assumes
// all the load above what the device forwarded at hi is lost (its longest trial there); sec
// extends the line through the loss rates of that trial and of the nearest bad trial of the
// same duration above it, when close enough.
func (s *mlrSearch) estimates(target, hi float64) (fwd, sec float64, d time.Duration) {
	var th Trial
	for _, t := range s.trials {
		if t.Rate == hi && t.LossRatio() > target && t.Duration > th.Duration {
			th = t
		}
	}
	if th.Duration == 0 {
		return 0, 0, 0
	}
	l1 := th.LossRatio()
	fwd = hi * (1 - l1) / (1 - target)
	var t2 Trial
	for _, t := range s.trials {
		if t.Duration == th.Duration && t.Rate > hi && math.Log(t.Rate/hi) <= localSecant && t.LossRatio() > target && (t2.Rate == 0 || t.Rate < t2.Rate) {
			t2 = t
		}
	}
	if t2.Rate == 0 {
		return fwd, 0, th.Duration
	}
	// Loss rates L = rate·ratio on the line L(r) = L1 + k·(r - hi); it reaches target·r at
	// (k·hi - L1)/(k - target).
	L1, L2 := hi*l1, t2.Rate*t2.LossRatio()
	k := (L2 - L1) / (t2.Rate - hi)
	if k > target {
		if sec = (k*hi - L1) / (k - target); sec <= 0 || sec >= hi {
			sec = 0
		}
	}
	return fwd, sec, th.Duration
}

// won updates sel after its nomination nm was measured as t.
func (s *mlrSearch) won(sel *selector, nm nomination, t Trial) {
	bad := t.LossRatio() > sel.target
	switch nm.kind {
	case stepHalve, stepRefine:
		sel.ext = 2 * s.logw[nm.phase]
	case stepDown:
		if bad {
			sel.ext *= 2
		}
	case stepUp:
		if !bad {
			sel.ext *= 2
		}
	case stepBisect:
		sel.ext = 2 * math.Max(s.logw[nm.phase], nm.ext)
	case stepEstimate:
		if bad {
			sel.jumps++
			if lo, _ := s.bounds(sel.target, s.durs[nm.phase]); lo == 0 {
				sel.ext *= 2
			}
		} else {
			sel.landed, sel.landedD = nm.rate, nm.d
		}
	case stepNeighbour:
		if !bad {
			sel.jumps++ // the estimate was low
		}
	}
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
