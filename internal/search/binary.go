package search

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Binary is the plain RFC 2544 throughput search, one search per loss target (as NDR and PDR
// are found by two searches), every trial at FinalDuration: a trial at MaxRate, then bisection
// of [MinRate, MaxRate] until (upper-lower)/upper <= RelWidth; MinRate is measured last if no
// trial above it held. It is the baseline MLR is compared with; Phases and InitialDuration
// are not used.
func Binary(ctx context.Context, m Measurer, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, m: m}
	d := cfg.FinalDuration
	goals := make([]Goal, len(cfg.Targets))
	for k, target := range cfg.Targets {
		g, err := r.binary(ctx, target, d)
		if err != nil {
			if !errors.Is(err, errTooMany) {
				return r.result("binary", nil), err
			}
			g.Note = fmt.Sprintf("stopped after %d trials (the most allowed) short of the width goal", len(r.trials))
		}
		goals[k] = g
	}
	return r.result("binary", goals), nil
}

func (r *run) binary(ctx context.Context, target float64, d time.Duration) (Goal, error) {
	cfg := r.cfg
	t, err := r.measure(ctx, cfg.MaxRate, d, 0)
	if err != nil {
		return goal(target, 0, 0), err
	}
	if t.LossRatio() <= target {
		g := goal(target, cfg.MaxRate, 0)
		g.Note = NoteMaxRate
		return g, nil
	}
	lo, hi, held := cfg.MinRate, cfg.MaxRate, false
	for (hi-lo)/hi > cfg.RelWidth {
		mid := (lo + hi) / 2
		t, err := r.measure(ctx, mid, d, 0)
		if err != nil {
			return goal(target, 0, hi), err
		}
		if t.LossRatio() <= target {
			lo, held = mid, true
		} else {
			hi = mid
		}
	}
	if !held {
		t, err := r.measure(ctx, cfg.MinRate, d, 0)
		if err != nil {
			return goal(target, 0, hi), err
		}
		if t.LossRatio() > target {
			g := goal(target, 0, cfg.MinRate)
			g.Note = NoteMinRate
			return g, nil
		}
	}
	return goal(target, lo, hi), nil
}
