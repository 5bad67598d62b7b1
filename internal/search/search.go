// Package search finds the rate a device forwards within a loss target by trials: the
// multi-target NDR/PDR search of the VNF scenario, in the manner of FD.io's MLRsearch
// (RFC 9971), the plain RFC 2544 binary search it is compared with, and seed
// 002's ramp (rate up 5 % every 10 s until 1 % is lost). It is pure: a Measurer runs the
// trials (the packet engine in the scenario, a simulated device in the tests).
package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Trial is one measurement: Sent packets offered at Rate (packets/s) for Duration, Lost of them
// not received (duplicates do not make up for losses).
type Trial struct {
	Rate     float64       `json:"rate_pps"`
	Duration time.Duration `json:"duration_ns"`
	Sent     uint64        `json:"sent"`
	Lost     uint64        `json:"lost"`
	Phase    int           `json:"phase"` // the search phase whose trial duration it has (0 = the first)
}

// LossRatio is Lost/Sent (1 when nothing was sent: a trial that sent nothing proves nothing).
func (t Trial) LossRatio() float64 {
	if t.Sent == 0 {
		return 1
	}
	return float64(t.Lost) / float64(t.Sent)
}

// Measurer runs one trial at rate (packets/s) for d.
type Measurer interface {
	Measure(ctx context.Context, rate float64, d time.Duration) (Trial, error)
}

// MeasureFunc is a function as a Measurer.
type MeasureFunc func(ctx context.Context, rate float64, d time.Duration) (Trial, error)

// Measure implements Measurer.
func (f MeasureFunc) Measure(ctx context.Context, rate float64, d time.Duration) (Trial, error) {
	return f(ctx, rate, d)
}

// Goal is what a search found for one loss target.
type Goal struct {
	// Target is the loss ratio allowed (0: NDR; 0.005: the usual PDR).
	Target float64 `json:"loss_target"`
	// Lower is the throughput: the highest rate below Upper that was measured at the final
	// duration and never lost more than Target (0 when even MinRate lost more). For MLR a
	// rate is measured at the final duration when one of its trials lasted that long.
	Lower float64 `json:"lower_pps"`
	// Upper is the lowest rate that lost more than Target (0 when none did: Lower is MaxRate);
	// for MLR in a trial of any duration (RFC 9971 with exceed ratio 0, see MLR).
	Upper float64 `json:"upper_pps"`
	// Width is (Upper-Lower)/Upper, the precision reached (0 when there is no Upper).
	Width float64 `json:"relative_width"`
	// Note says why the search stopped short of the width goal, if it did.
	Note string `json:"note,omitempty"`
}

// Result is a search's outcome: one Goal per loss target (in the order given), every trial
// in the order run, and their total duration (the search's cost).
type Result struct {
	Method    string        `json:"method"`
	Goals     []Goal        `json:"goals"`
	Trials    []Trial       `json:"trials"`
	TrialTime time.Duration `json:"trial_time_ns"`
}

// Notes a Goal can carry.
const (
	NoteMaxRate = "no loss above the target at the highest rate tried (max rate)"
	NoteMinRate = "more loss than the target even at the lowest rate tried (min rate)"
)

// Config is a search's parameters. The zero value of a field takes its default.
type Config struct {
	MinRate float64 // lowest rate tried, packets/s (default 1,000)
	MaxRate float64 // highest rate tried (required)
	// Targets are the loss ratios searched for at once (default 0 and 0.005: NDR and PDR).
	Targets []float64
	// RelWidth is the precision goal: (upper-lower)/upper (default 0.005).
	RelWidth float64
	// InitialDuration is the trial duration of the first phase (default 1 s) and
	// FinalDuration that of the last (default 30 s); the phases between grow geometrically.
	InitialDuration, FinalDuration time.Duration
	// Phases is the number of phases before the final one (default 2). Phase p of n has a
	// width goal of about RelWidth·2^(n-p): each phase halves the logarithmic width, -ln(1-w),
	// of the one before.
	Phases int
	// MaxTrials bounds the trials of one search (default 500): a device whose loss jumps about
	// can keep bounds from meeting; the search then stops with what it has, saying so.
	MaxTrials int
	// Progress, when set, is told of each trial as it ends.
	Progress func(Trial)
}

// ErrBadConfig wraps every configuration error.
var ErrBadConfig = errors.New("bad search configuration")

func (c Config) withDefaults() (Config, error) {
	if c.MinRate == 0 {
		c.MinRate = 1000
	}
	if c.Targets == nil {
		c.Targets = []float64{0, 0.005}
	}
	if c.RelWidth == 0 {
		c.RelWidth = 0.005
	}
	if c.InitialDuration == 0 {
		c.InitialDuration = time.Second
	}
	if c.FinalDuration == 0 {
		c.FinalDuration = 30 * time.Second
	}
	if c.Phases == 0 {
		c.Phases = 2
	}
	if c.MaxTrials == 0 {
		c.MaxTrials = 500
	}
	switch {
	case !(c.MaxRate > 0) || math.IsInf(c.MaxRate, 0):
		return c, fmt.Errorf("%w: max rate %v: give the highest rate to try, > 0 packets/s", ErrBadConfig, c.MaxRate)
	case !(c.MinRate > 0) || c.MinRate >= c.MaxRate:
		return c, fmt.Errorf("%w: min rate %v: give 0 < min rate < max rate (%v)", ErrBadConfig, c.MinRate, c.MaxRate)
	case !(c.RelWidth > 0 && c.RelWidth < 1):
		return c, fmt.Errorf("%w: relative width %v: give a precision between 0 and 1 (e.g. 0.005)", ErrBadConfig, c.RelWidth)
	case len(c.Targets) == 0:
		return c, fmt.Errorf("%w: no loss targets", ErrBadConfig)
	case c.InitialDuration < 0 || c.FinalDuration < c.InitialDuration:
		return c, fmt.Errorf("%w: durations %s..%s: give 0 < initial <= final", ErrBadConfig, c.InitialDuration, c.FinalDuration)
	case c.Phases < 0:
		return c, fmt.Errorf("%w: %d phases: give 0 or more", ErrBadConfig, c.Phases)
	}
	for _, t := range c.Targets {
		if !(t >= 0 && t < 1) {
			return c, fmt.Errorf("%w: loss target %v: give a ratio 0 <= target < 1 (0.005 is 0.5 %%)", ErrBadConfig, t)
		}
	}
	return c, nil
}

// run keeps the trials of one search.
type run struct {
	cfg    Config
	m      Measurer
	trials []Trial
}

func (r *run) measure(ctx context.Context, rate float64, d time.Duration, phase int) (Trial, error) {
	if len(r.trials) >= r.cfg.MaxTrials {
		return Trial{}, errTooMany
	}
	if err := ctx.Err(); err != nil {
		return Trial{}, err
	}
	t, err := r.m.Measure(ctx, rate, d)
	if err != nil {
		return Trial{}, fmt.Errorf("trial at %.0f pps for %s: %w", rate, d, err)
	}
	t.Rate, t.Duration, t.Phase = rate, d, phase
	r.trials = append(r.trials, t)
	if r.cfg.Progress != nil {
		r.cfg.Progress(t)
	}
	return t, nil
}

var errTooMany = errors.New("too many trials")

func (r *run) result(method string, goals []Goal) Result {
	res := Result{Method: method, Goals: goals, Trials: r.trials}
	for _, t := range r.trials {
		res.TrialTime += t.Duration
	}
	return res
}

// goal makes a Goal from bounds (lower 0: none, upper 0: none).
func goal(target, lower, upper float64) Goal {
	g := Goal{Target: target, Lower: lower, Upper: upper}
	if upper > 0 {
		g.Width = (upper - lower) / upper
	}
	return g
}

// sortedTargets returns the targets ascending (the search's order) without duplicates.
func sortedTargets(ts []float64) []float64 {
	s := slices.Clone(ts)
	slices.Sort(s)
	return slices.Compact(s)
}
