package search

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// device is a simulated forwarder with a known loss curve. It forwards at most Capacity
// packets/s plus Buffer packets per trial (a queue that absorbs a short trial's excess: short
// trials look better than long ones), and above Knee it also loses Slope·(rate-Knee)/rate of
// what it is sent (a soft knee: the loss ratio grows with the rate, so NDR and PDR differ).
type device struct {
	Capacity, Buffer float64
	Knee, Slope      float64
	// Warmup packets are lost at the start of every trial (short trials look worse).
	Warmup float64
	// Whole: counts are whole packets. Otherwise they are thousandths of a packet, so the
	// loss ratio is continuous in the rate (to 1e-8) and truth's bisection exact: with whole
	// packets the ratio is a saw-tooth (one packet more lost is a step) and the highest rate
	// within a target is not where a bisection finds it.
	Whole bool
}

func (dv device) lost(rate float64, d time.Duration) (sent, lost uint64) {
	unit := 1000.0
	if dv.Whole {
		unit = 1
	}
	sent = uint64(math.Round(rate * d.Seconds() * unit))
	l := 0.0
	if dv.Slope > 0 && rate > dv.Knee {
		l = float64(sent) * dv.Slope * (rate - dv.Knee) / rate
	}
	if over := float64(sent) - l - (dv.Capacity*d.Seconds()+dv.Buffer)*unit; dv.Capacity > 0 && over > 0 {
		l += over
	}
	l += dv.Warmup * unit
	if l > float64(sent) {
		l = float64(sent)
	}
	return sent, uint64(math.Ceil(l - 1e-9))
}

func (dv device) Measure(_ context.Context, rate float64, d time.Duration) (Trial, error) {
	sent, lost := dv.lost(rate, d)
	return Trial{Sent: sent, Lost: lost}, nil
}

// truth is the highest rate the device forwards within target over trials of duration d, by
// a bisection of the model itself to 1e-7 (the loss grows with the rate by construction).
func (dv device) truth(target float64, d time.Duration, lo, hi float64) float64 {
	ok := func(r float64) bool {
		s, l := dv.lost(r, d)
		return s > 0 && float64(l) <= target*float64(s)
	}
	if ok(hi) {
		return hi
	}
	for (hi-lo)/hi > 1e-7 {
		mid := (lo + hi) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// checkGoals asserts each goal brackets the device's truth at the final duration, within the
// width goal, with its lower bound measured at the final duration.
func checkGoals(t *testing.T, name string, dv device, cfg Config, res Result) {
	t.Helper()
	cfg, _ = cfg.withDefaults()
	for _, g := range res.Goals {
		if s, l := dv.lost(cfg.MinRate, cfg.FinalDuration); float64(l) > g.Target*float64(s) {
			if g.Note != NoteMinRate || g.Lower != 0 || g.Upper != cfg.MinRate {
				t.Errorf("%s target %g: %+v, want the min rate noted (it loses %d of %d)", name, g.Target, g, l, s)
			}
			continue
		}
		truth := dv.truth(g.Target, cfg.FinalDuration, cfg.MinRate, cfg.MaxRate)
		switch {
		case g.Note != "":
			t.Errorf("%s target %g: note %q (truth %.1f)", name, g.Target, g.Note, truth)
		case !(g.Lower <= truth*(1+1e-6) && truth <= g.Upper*(1+1e-6)): // the truth is known to 1e-7
			t.Errorf("%s target %g: [%.1f, %.1f] does not hold the truth %.1f", name, g.Target, g.Lower, g.Upper, truth)
		case g.Width > cfg.RelWidth || g.Width != (g.Upper-g.Lower)/g.Upper:
			t.Errorf("%s target %g: width %g, goal %g", name, g.Target, g.Width, cfg.RelWidth)
		}
		held := false
		for _, tr := range res.Trials {
			if tr.Rate == g.Lower && tr.Duration == cfg.FinalDuration && tr.LossRatio() <= g.Target {
				held = true
			}
		}
		if !held {
			t.Errorf("%s target %g: lower bound %.1f not measured at the final duration %s", name, g.Target, g.Lower, cfg.FinalDuration)
		}
	}
}

var devices = map[string]device{
	"threshold":           {Capacity: 140_000},
	"soft knee":           {Capacity: 300_000, Knee: 120_000, Slope: 0.05},
	"buffer":              {Capacity: 140_000, Buffer: 200_000},
	"knee and buffer":     {Capacity: 270_000, Knee: 200_000, Slope: 0.02, Buffer: 50_000},
	"near max rate":       {Capacity: 990_000},
	"at max rate":         {Capacity: 2_000_000},
	"a few pps":           {Capacity: 1_500},
	"knee below capacity": {Capacity: 500_000, Knee: 10_000, Slope: 0.001},
}

func TestMLRFindsNDRAndPDR(t *testing.T) {
	cfg := Config{MaxRate: 1e6}
	for name, dv := range devices {
		res, err := MLR(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if name == "at max rate" {
			for _, g := range res.Goals {
				if g.Lower != 1e6 || g.Upper != 0 || g.Note != NoteMaxRate {
					t.Errorf("%s: %+v, want the max rate noted", name, g)
				}
			}
			continue
		}
		checkGoals(t, "mlr "+name, dv, cfg, res)
		if res.Goals[0].Target != 0 || res.Goals[1].Target != 0.005 || res.Method != "mlr" {
			t.Errorf("%s: goals %+v", name, res.Goals)
		}
	}
}

// Random devices and configurations: the goals always hold the truth within the width.
func TestMLRRandomDevices(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 300; i++ {
		dv := device{Capacity: 2000 + rng.Float64()*800_000}
		if rng.Intn(2) == 0 {
			dv.Knee, dv.Slope = dv.Capacity*rng.Float64(), rng.Float64()*0.1
		}
		if rng.Intn(2) == 0 {
			dv.Buffer = rng.Float64() * dv.Capacity
		}
		cfg := Config{MaxRate: 1e6, RelWidth: []float64{0.001, 0.005, 0.02}[rng.Intn(3)], Phases: rng.Intn(4),
			Targets:       [][]float64{{0}, {0, 0.005}, {0.001, 0.01, 0.05}}[rng.Intn(3)],
			FinalDuration: time.Duration(1+rng.Intn(60)) * time.Second}
		res, err := MLR(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkGoals(t, "random", dv, cfg, res)
		checkRFCBounds(t, "random", cfg, res)
		if t.Failed() {
			t.Fatalf("device %+v config %+v", dv, cfg)
		}
	}
}

// checkRFCBounds asserts what MLR's bounds are by its trials (RFC 9971 at exceed ratio 0,
// duration sum = final duration), unless the min rate is noted: the lower bound (the max rate
// when noted) held in a trial of the final duration and
// lost more than the target in none; the upper bound lost more in some trial, of any duration;
// nothing between them lost more; the width goal is met.
func checkRFCBounds(t *testing.T, name string, cfg Config, res Result) {
	t.Helper()
	cfg, _ = cfg.withDefaults()
	for _, g := range res.Goals {
		if g.Note == NoteMinRate && g.Lower == 0 && g.Upper == cfg.MinRate {
			continue // checkGoals asserts it
		}
		if g.Note == NoteMaxRate && g.Lower == cfg.MaxRate && g.Upper == 0 {
			g.Upper = math.Inf(1) // no upper bound: the loop below finds none bad
		} else if g.Note != "" || g.Width > cfg.RelWidth || !(g.Lower > 0 && g.Upper > g.Lower) {
			t.Errorf("%s target %g: %+v", name, g.Target, g)
			continue
		}
		heldLong, upperBad := false, false
		for _, tr := range res.Trials {
			bad := tr.LossRatio() > g.Target
			switch {
			case tr.Rate == g.Lower && bad:
				t.Errorf("%s target %g: lower bound %.1f lost %d of %d in %s", name, g.Target, g.Lower, tr.Lost, tr.Sent, tr.Duration)
			case tr.Rate == g.Lower && tr.Duration >= cfg.FinalDuration:
				heldLong = true
			case tr.Rate == g.Upper && bad:
				upperBad = true
			case tr.Rate > g.Lower && tr.Rate < g.Upper && bad:
				t.Errorf("%s target %g: %.1f, between the bounds, lost %d of %d in %s", name, g.Target, tr.Rate, tr.Lost, tr.Sent, tr.Duration)
			}
		}
		if !heldLong || (!upperBad && g.Note != NoteMaxRate) {
			t.Errorf("%s target %g: lower bound %.1f held for %s: %v; upper bound %.1f lost more: %v", name, g.Target, g.Lower, cfg.FinalDuration, heldLong, g.Upper, upperBad)
		}
	}
}

// With whole packets the loss ratio is a saw-tooth near the target, and a short trial loses
// relatively more (a packet lost is a larger share of it): the bounds are those of
// checkRFCBounds, the lower one within the target at the final duration; the upper one lost
// more than the target in a trial no longer than the final one, not necessarily at it.
func TestMLRWholePackets(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for i := 0; i < 200; i++ {
		dv := device{Capacity: 2000 + rng.Float64()*800_000, Whole: true}
		dv.Knee, dv.Slope = dv.Capacity*rng.Float64(), rng.Float64()*0.01
		cfg := Config{MaxRate: 1e6, Targets: []float64{0, 0.001, 0.005}, FinalDuration: 10 * time.Second}
		res, err := MLR(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var goals []Goal
		for _, g := range res.Goals {
			if g.Note == NoteMinRate {
				if s, l := dv.lost(1000, 10*time.Second); float64(l) <= g.Target*float64(s) {
					t.Fatalf("device %+v target %g: min rate noted, but it loses %d of %d there", dv, g.Target, l, s)
				}
				continue
			}
			if sl, ll := dv.lost(g.Lower, 10*time.Second); float64(ll) > g.Target*float64(sl) {
				t.Fatalf("device %+v target %g: %+v (lower loses %d of %d)", dv, g.Target, g, ll, sl)
			}
			goals = append(goals, g)
		}
		res.Goals = goals
		checkRFCBounds(t, "whole packets", cfg, res)
		if t.Failed() {
			t.Fatalf("device %+v", dv)
		}
	}
}

func TestBinaryFindsNDRAndPDR(t *testing.T) {
	cfg := Config{MaxRate: 1e6}
	for name, dv := range devices {
		if name == "at max rate" {
			continue
		}
		res, err := Binary(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkGoals(t, "binary "+name, dv, cfg, res)
		for _, tr := range res.Trials {
			if tr.Duration != 30*time.Second {
				t.Fatalf("binary ran a %s trial", tr.Duration)
			}
		}
	}
}

// The point of MLR: the same precision for less trial time. Over many devices its total trial
// time is at most half the binary search's (the target), and on each no worse.
func TestMLRHalvesBinaryTrialTime(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var mlrSum, binSum time.Duration
	cfg := Config{MaxRate: 1e6}
	for i := 0; i < 100; i++ {
		dv := device{Capacity: 5000 + rng.Float64()*900_000, Knee: 0, Slope: 0}
		if i%2 == 1 {
			dv.Knee, dv.Slope = dv.Capacity*0.8, 0.05
		}
		m, err := MLR(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Binary(context.Background(), dv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkGoals(t, "mlr", dv, cfg, m)
		checkGoals(t, "binary", dv, cfg, b)
		if m.TrialTime > b.TrialTime {
			t.Errorf("device %+v: mlr %s > binary %s", dv, m.TrialTime, b.TrialTime)
		}
		mlrSum += m.TrialTime
		binSum += b.TrialTime
		if i < 4 {
			t.Logf("capacity %.0f pps knee %.0f: mlr %d trials %s, binary %d trials %s (ratio %.2f)",
				dv.Capacity, dv.Knee, len(m.Trials), m.TrialTime, len(b.Trials), b.TrialTime, m.TrialTime.Seconds()/b.TrialTime.Seconds())
		}
	}
	ratio := mlrSum.Seconds() / binSum.Seconds()
	t.Logf("100 devices, NDR+PDR at width 0.005, 1 s..30 s: mlr %s, binary %s of trials: ratio %.3f", mlrSum, binSum, ratio)
	if ratio > 0.5 {
		t.Errorf("mlr/binary trial time %.3f, want <= 0.5", ratio)
	}
}

// A device that loses more in short trials (a warm-up loss): a short trial that lost more than
// the target makes an upper bound (RFC 9971 at exceed ratio 0), so the result lies between the
// throughput of the shortest trials and that of the final ones: its upper bound is not below
// the former, its lower bound not above the latter.
func TestMLRShortTrialsLoseMore(t *testing.T) {
	dv := device{Capacity: 200_000, Warmup: 600}
	cfg := Config{MinRate: 150_000, MaxRate: 1e6, Targets: []float64{0.005}} // below 120,000 pps the warm-up alone is 0.5 %
	res, err := MLR(context.Background(), dv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkRFCBounds(t, "warm-up", cfg, res)
	g := res.Goals[0]
	short, final := dv.truth(0.005, time.Second, 150_000, 1e6), dv.truth(0.005, 30*time.Second, 150_000, 1e6)
	if g.Upper < short || g.Lower > final {
		t.Errorf("warm-up: [%.1f, %.1f], want upper >= %.1f (1 s throughput), lower <= %.1f (30 s)", g.Lower, g.Upper, short, final)
	}
}

func TestMinRateAndMaxTrials(t *testing.T) {
	dead := device{Capacity: 10}
	for _, f := range []func(context.Context, Measurer, Config) (Result, error){MLR, Binary} {
		res, err := f(context.Background(), dead, Config{MaxRate: 1e5})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range res.Goals {
			if g.Lower != 0 || g.Upper != 1000 || g.Note != NoteMinRate {
				t.Errorf("%s dead device: %+v", res.Method, g)
			}
		}
	}
	res, err := MLR(context.Background(), device{Capacity: 123_456}, Config{MaxRate: 1e6, MaxTrials: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Trials) != 5 || !strings.Contains(res.Goals[0].Note, "stopped after 5 trials") {
		t.Errorf("max trials: %d trials, %+v", len(res.Trials), res.Goals)
	}
}

func TestMeasurerErrorAndCancel(t *testing.T) {
	boom := errors.New("generator died")
	n := 0
	m := MeasureFunc(func(ctx context.Context, rate float64, d time.Duration) (Trial, error) {
		if n++; n == 3 {
			return Trial{}, boom
		}
		return device{Capacity: 5e4}.Measure(ctx, rate, d)
	})
	res, err := MLR(context.Background(), m, Config{MaxRate: 1e6})
	if !errors.Is(err, boom) || len(res.Trials) != 2 {
		t.Errorf("err %v after %d trials", err, len(res.Trials))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Binary(ctx, device{Capacity: 5e4}, Config{MaxRate: 1e6}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "max rate 0"},
		{Config{MaxRate: 100, MinRate: 200}, "min rate 200"},
		{Config{MaxRate: 1e6, RelWidth: 2}, "relative width 2"},
		{Config{MaxRate: 1e6, Targets: []float64{1.5}}, "loss target 1.5"},
		{Config{MaxRate: 1e6, Targets: []float64{}}, "no loss targets"},
		{Config{MaxRate: 1e6, InitialDuration: 10 * time.Second, FinalDuration: time.Second}, "durations"},
		{Config{MaxRate: 1e6, Phases: -1}, "-1 phases"},
	} {
		_, err := MLR(context.Background(), device{}, c.cfg)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := Ramp(context.Background(), device{}, RampConfig{Start: 0, MaxRate: 1}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("ramp from 0: %v", err)
	}
}

// Seed 002's ramp: +5 % every 10 s; the answer is the last step losing under 1 %.
func TestRamp(t *testing.T) {
	dv := device{Capacity: 140_000}
	var seen []float64
	res, err := Ramp(context.Background(), dv, RampConfig{Start: 50_000, MaxRate: 1e6, Progress: func(tr Trial) { seen = append(seen, tr.Rate) }})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Goals[0]
	// Steps 50k·1.05^k; 1 % loss at 140,000/0.99 = 141,414: the last step below is k=21
	// (139,298), the next (146,263) loses 4.3 %.
	want := 50_000 * math.Pow(1.05, 21)
	if math.Abs(g.Lower-want) > 1e-6 || math.Abs(g.Upper-want*1.05) > 1e-6 || len(res.Trials) != 23 || len(seen) != 23 {
		t.Errorf("ramp %+v after %d trials, want lower %.1f", g, len(res.Trials), want)
	}
	if res.TrialTime != 230*time.Second || math.Abs(g.Width-0.05/1.05) > 1e-12 {
		t.Errorf("trial time %s width %g", res.TrialTime, g.Width)
	}
	// A start the device cannot take is halved until a step loses less, and the ramp rises
	// from there: 400k and 200k lose, 100k does not, then 100k·1.05^k: k=7 (140,710) is the
	// last below 141,414.
	seen = nil
	res, err = Ramp(context.Background(), dv, RampConfig{Start: 400_000, MinRate: 1000, MaxRate: 1e6, Progress: func(tr Trial) { seen = append(seen, tr.Rate) }})
	if err != nil {
		t.Fatal(err)
	}
	g = res.Goals[0]
	if !slices.Equal(seen[:3], []float64{400_000, 200_000, 100_000}) || math.Abs(g.Lower-100_000*math.Pow(1.05, 7)) > 1e-6 || len(res.Trials) != 3+8 ||
		!strings.Contains(g.Note, "start, 400000 packets/s, lost 1 % or more: it rose from 100000") {
		t.Errorf("ramp from too high a start: %+v after rates %v", g, seen)
	}
	// Even the min rate loses: no maximum, the last halving is the upper bound.
	res, _ = Ramp(context.Background(), device{Capacity: 500}, RampConfig{Start: 8000, MinRate: 1000, MaxRate: 1e5, StepDuration: time.Second})
	if g := res.Goals[0]; g.Lower != 0 || g.Upper != 1000 || len(res.Trials) != 4 || !strings.Contains(g.Note, "halved down to it") {
		t.Errorf("ramp with nothing feasible: %+v after %d trials", g, len(res.Trials))
	}
	if _, err := Ramp(context.Background(), dv, RampConfig{Start: 1000, MinRate: 2000, MaxRate: 1e5}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("min rate above the start: %v", err)
	}
	// Never reaching the limit: the max rate is noted.
	res, _ = Ramp(context.Background(), device{Capacity: 1e7}, RampConfig{Start: 1e5, MaxRate: 2e5, StepDuration: time.Second})
	if g := res.Goals[0]; g.Note != NoteMaxRate || g.Upper != 0 || g.Lower > 2e5 || g.Lower < 2e5/1.05 {
		t.Errorf("ramp past max: %+v", g)
	}
}
