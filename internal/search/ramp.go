package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// RampConfig is seed 002's search: the rate starts at Start and rises by Step (a fraction)
// every StepDuration until a step loses LossLimit or more, or MaxRate is passed. Seed 002 does
// not say where its ramp starts; a start the object cannot take (its first step loses the
// limit or more) is halved, down to MinRate, until a step loses less, and the ramp rises from
// there: a start chosen from the generator's rate (a tenth of it) is not always below what a
// loaded forwarder takes.
type RampConfig struct {
	Start        float64       // first rate, packets/s (required)
	MinRate      float64       // the lowest rate a descent from a start too high tries (default Start: none)
	MaxRate      float64       // the ramp stops above it (required)
	Step         float64       // rise per step (default 0.05: 5 %)
	StepDuration time.Duration // default 10 s
	LossLimit    float64       // default 0.01: "maximum feasible throughput" is the highest rate losing less
	Progress     func(Trial)
}

// Ramp runs seed 002's ramp. Its one Goal has Target = LossLimit, Lower = the highest step
// that lost strictly less than LossLimit (seed 002's "maximum feasible throughput"), Upper =
// the step after it (0 when the ramp passed MaxRate without reaching the limit) and Width =
// the step's relative size: the ramp's precision is its step. A start that lost the limit
// (halved until a step did not, see RampConfig) is said in the Goal's Note.
func Ramp(ctx context.Context, m Measurer, rc RampConfig) (Result, error) {
	if rc.Step == 0 {
		rc.Step = 0.05
	}
	if rc.StepDuration == 0 {
		rc.StepDuration = 10 * time.Second
	}
	if rc.LossLimit == 0 {
		rc.LossLimit = 0.01
	}
	if rc.MinRate == 0 {
		rc.MinRate = rc.Start
	}
	switch {
	case !(rc.Start > 0) || !(rc.MaxRate >= rc.Start) || math.IsInf(rc.MaxRate, 0):
		return Result{}, fmt.Errorf("%w: ramp from %v to %v packets/s: give 0 < start <= max rate", ErrBadConfig, rc.Start, rc.MaxRate)
	case !(rc.MinRate > 0 && rc.MinRate <= rc.Start):
		return Result{}, fmt.Errorf("%w: ramp min rate %v: give 0 < min rate <= start (%v)", ErrBadConfig, rc.MinRate, rc.Start)
	case !(rc.Step > 0 && rc.Step <= 1):
		return Result{}, fmt.Errorf("%w: ramp step %v: give a rise per step in (0, 1] (0.05 is 5 %%)", ErrBadConfig, rc.Step)
	case !(rc.LossLimit > 0 && rc.LossLimit < 1):
		return Result{}, fmt.Errorf("%w: ramp loss limit %v: give a ratio in (0, 1)", ErrBadConfig, rc.LossLimit)
	case rc.StepDuration < 0:
		return Result{}, fmt.Errorf("%w: ramp step duration %s", ErrBadConfig, rc.StepDuration)
	}
	steps := int(math.Ceil(math.Log(rc.MaxRate/rc.MinRate)/math.Log1p(rc.Step))) + 1
	halvings := int(math.Ceil(math.Log2(rc.Start/rc.MinRate))) + 1
	r := &run{cfg: Config{MaxTrials: halvings + steps + 1, Progress: rc.Progress}, m: m}
	g := Goal{Target: rc.LossLimit}
	start, err := r.rampStart(ctx, rc)
	if err != nil {
		return r.result("ramp", nil), err
	}
	if start == 0 { // even the lowest rate lost the limit or more
		g.Upper = r.trials[len(r.trials)-1].Rate
		g.Note = fmt.Sprintf("%s (the ramp's start, halved down to it)", NoteMinRate)
		if len(r.trials) == 1 {
			g.Note = fmt.Sprintf("%s (the ramp's start)", NoteMinRate)
		}
		return r.result("ramp", []Goal{g}), nil
	}
	g.Lower = start
	if start < rc.Start {
		g.Note = fmt.Sprintf("the ramp's start, %.0f packets/s, lost %.0f %% or more: it rose from %.0f", rc.Start, 100*rc.LossLimit, start)
	}
	for rate := start * (1 + rc.Step); rate <= rc.MaxRate*(1+1e-9); rate *= 1 + rc.Step {
		t, err := r.measure(ctx, rate, rc.StepDuration, 0)
		if err != nil {
			if errors.Is(err, errTooMany) {
				break
			}
			return r.result("ramp", nil), err
		}
		if t.LossRatio() >= rc.LossLimit {
			g.Upper = rate
			break
		}
		g.Lower = rate
	}
	if g.Upper == 0 {
		g.Note = strings.TrimPrefix(g.Note+"; "+NoteMaxRate, "; ")
	} else {
		g.Width = (g.Upper - g.Lower) / g.Upper
	}
	return r.result("ramp", []Goal{g}), nil
}

// rampStart measures the ramp's start and, while a step loses the limit or more, half its
// rate, down to the min rate: it returns the first rate that lost less (0: none did).
func (r *run) rampStart(ctx context.Context, rc RampConfig) (float64, error) {
	for rate := rc.Start; ; rate /= 2 {
		rate = max(rate, rc.MinRate)
		t, err := r.measure(ctx, rate, rc.StepDuration, 0)
		if err != nil {
			return 0, err
		}
		if t.LossRatio() < rc.LossLimit {
			return rate, nil
		}
		if rate <= rc.MinRate {
			return 0, nil
		}
	}
}
