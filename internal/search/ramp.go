package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// RampConfig is seed 002's search: the rate starts at Start and rises by Step (a fraction)
// every StepDuration until a step loses LossLimit or more, or MaxRate is passed.
type RampConfig struct {
	Start        float64       // first rate, packets/s (required)
	MaxRate      float64       // the ramp stops above it (required)
	Step         float64       // rise per step (default 0.05: 5 %)
	StepDuration time.Duration // default 10 s
	LossLimit    float64       // default 0.01: "maximum feasible throughput" is the highest rate losing less
	Progress     func(Trial)
}

// Ramp runs seed 002's ramp. Its one Goal has Target = LossLimit, Lower = the highest step
// that lost strictly less than LossLimit (seed 002's "maximum feasible throughput"), Upper =
// the step after it (0 when the ramp passed MaxRate without reaching the limit) and Width =
// the step's relative size: the ramp's precision is its step.
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
	switch {
	case !(rc.Start > 0) || !(rc.MaxRate >= rc.Start) || math.IsInf(rc.MaxRate, 0):
		return Result{}, fmt.Errorf("%w: ramp from %v to %v packets/s: give 0 < start <= max rate", ErrBadConfig, rc.Start, rc.MaxRate)
	case !(rc.Step > 0 && rc.Step <= 1):
		return Result{}, fmt.Errorf("%w: ramp step %v: give a rise per step in (0, 1] (0.05 is 5 %%)", ErrBadConfig, rc.Step)
	case !(rc.LossLimit > 0 && rc.LossLimit < 1):
		return Result{}, fmt.Errorf("%w: ramp loss limit %v: give a ratio in (0, 1)", ErrBadConfig, rc.LossLimit)
	case rc.StepDuration < 0:
		return Result{}, fmt.Errorf("%w: ramp step duration %s", ErrBadConfig, rc.StepDuration)
	}
	steps := int(math.Ceil(math.Log(rc.MaxRate/rc.Start)/math.Log1p(rc.Step))) + 1
	r := &run{cfg: Config{MaxTrials: steps + 1, Progress: rc.Progress}, m: m}
	g := Goal{Target: rc.LossLimit}
	for rate := rc.Start; rate <= rc.MaxRate*(1+1e-9); rate *= 1 + rc.Step {
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
	switch {
	case g.Upper == 0:
		g.Note = NoteMaxRate
	case g.Lower == 0:
		g.Note = fmt.Sprintf("%s (the ramp's start)", NoteMinRate)
	default:
		g.Width = (g.Upper - g.Lower) / g.Upper
	}
	return r.result("ramp", []Goal{g}), nil
}
