package runner

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

// Progress reports a run: on a terminal one live line (trial i of n, case, ETA); otherwise
// plain log lines, one per event.
//
// The ETA adds what is left of two kinds of work, each at the pace measured so far in this run:
// the cases still to set up (their clusters and fixtures) at the mean set-up time, and the
// planned trial seconds left (warm-ups included) at the wall time a planned second has taken.
// Until a set-up or a trial has been measured, a set-up counts 1 s and a planned second 1 s.
type Progress struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	start     time.Time
	total     float64 // planned seconds of measurement
	spent     float64 // planned seconds already behind us
	trials    int     // trials planned
	ran       int     // trials run
	warmups   int     // warm-up trials run
	measured  float64 // seconds the trials run (warm-ups included) measured: their durations less driver.OmitS
	omitted   float64 // seconds they ran inside their durations before they measured (driver.OmitS)
	setupLeft int     // cases with trials to run not yet set up
	setups    int     // set-ups done
	setupWall float64 // their wall time, s
	trialWall float64 // wall time of the trials run (warm-ups included), s
	trialAt   time.Time
	lineOpen  bool
}

// NewProgress writes to w; tty selects the live line.
func NewProgress(w io.Writer, tty bool) *Progress { return &Progress{w: w, tty: tty} }

// trialSeconds is how long one trial of c takes, about: its duration (the slow start a TCP
// trial leaves out, driver.OmitS, lies inside it). (A TCP_CRR trial's server may wait
// driver.PadTime past it where the backend cannot end that wait: the ETA learns it from the
// trials run.)
func trialSeconds(c result.CaseSpec, d int) float64 {
	if d <= 0 {
		return 0 // no (warm-up) trial
	}
	if sc, err := scenario.Get(c.Case.Scenario); err == nil && sc.Info().TrialSeconds != nil {
		return sc.Info().TrialSeconds(c.Case, d)
	}
	return float64(d)
}

// Begin announces the cases and what is left of them.
func (p *Progress) Begin(cases []*caseState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = time.Now()
	for _, c := range cases {
		if n := len(c.pending()); n > 0 {
			p.trials += n
			p.total += float64(n)*trialSeconds(c.cs, c.cs.Duration) + trialSeconds(c.cs, c.cs.Warmup)
			p.setupLeft++
		}
	}
	p.logf("%d cases, %d trials, about %s of measurement", len(cases), p.trials, fmtDur(p.total))
}

// SetupDone reports a case's set-up (its cluster, when the case made it, and its fixture) and
// how long it took; failed, the case's trials (pending of them) are off the plan.
func (p *Progress) SetupDone(c result.CaseSpec, took time.Duration, failed bool, pending int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setups++
	p.setupWall += took.Seconds()
	p.setupLeft = max(p.setupLeft-1, 0)
	if failed && pending > 0 {
		p.trials -= pending
		p.total -= float64(pending)*trialSeconds(c, c.Duration) + trialSeconds(c, c.Warmup)
	}
}

// Skip reports a case that cannot run (skipped) or could not be set up (failed).
func (p *Progress) Skip(c result.CaseSpec, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	verb := "failed"
	if errors.Is(err, cluster.ErrUnsupported) {
		verb = "skipped"
	}
	p.logf("%s %s: %s", verb, c.Case.ID, oneLine(err.Error()))
}

// Trial marks the start of trial t of target.
func (p *Progress) Trial(c result.CaseSpec, t, target int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trialAt = time.Now()
	if p.tty {
		p.live(fmt.Sprintf("[%d/%d] %s trial %d/%d", p.ran+1, max(p.trials, p.ran+1), c.Case.ID, t, target))
	}
}

// WarmupDone reports a finished warm-up trial and how long it took.
func (p *Progress) WarmupDone(c result.CaseSpec, tr result.Trial, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.warmups++
	p.measured += tr.DurationS - driver.OmitS(c.Case.Protocol)
	p.omitted += driver.OmitS(c.Case.Protocol)
	p.spent += trialSeconds(c, c.Warmup)
	p.trialWall += took.Seconds()
}

// TrialDone reports a finished trial; again says that it runs again (disturbed).
func (p *Progress) TrialDone(c result.CaseSpec, t, target int, tr result.Trial, again bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ran++
	p.measured += tr.DurationS - driver.OmitS(c.Case.Protocol)
	p.omitted += driver.OmitS(c.Case.Protocol)
	if !again {
		// A trial that runs again leaves the work as it was: its wall time slows the pace.
		p.spent += trialSeconds(c, c.Duration)
	}
	if !p.trialAt.IsZero() {
		p.trialWall += time.Since(p.trialAt).Seconds()
		p.trialAt = time.Time{}
	}
	msg := headline(tr.Metrics)
	switch tr.Status {
	case "failed":
		msg = "failed: " + tr.Error
	case "disturbed":
		msg += " - disturbed: " + tr.Error
	}
	if !p.tty || tr.Status != "ok" {
		p.logf("  %s trial %d/%d: %s  [%d/%d, ETA %s]", c.Case.ID, t, target, msg, p.ran, max(p.trials, p.ran), p.eta())
	}
}

// Log prints a message line.
func (p *Progress) Log(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.logf(format, args...)
}

// End closes the live line.
func (p *Progress) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLine()
	wall := time.Since(p.start).Seconds()
	line := fmt.Sprintf("done in %s (%d trials", fmtDur(wall), p.ran)
	if p.warmups > 0 {
		line += fmt.Sprintf(" and %d warm-ups", p.warmups)
	}
	line += ")"
	if n := p.ran + p.warmups; n > 0 && p.measured > 0 {
		line += fmt.Sprintf(": %.1f s measured, %.2f s of fixed cost per trial (wall time less measured time, per trial", p.measured, (wall-p.measured)/float64(n))
		if p.omitted > 0 {
			// The omitted spans ran inside the trials' durations: wall time, not measured.
			line += fmt.Sprintf("; %.2f s besides the %.1f s the tools ran inside their durations before they measured (iperf3's omitted slow start)", (wall-p.measured-p.omitted)/float64(n), p.omitted)
		}
		line += ")"
	}
	p.logf("%s", line)
}

func (p *Progress) logf(format string, args ...any) {
	p.clearLine()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *Progress) clearLine() {
	if p.lineOpen {
		fmt.Fprint(p.w, "\r\033[K")
		p.lineOpen = false
	}
}

func (p *Progress) live(s string) {
	fmt.Fprintf(p.w, "\r\033[K%s  ETA %s", s, p.eta())
	p.lineOpen = true
}

// eta is the time left (see Progress).
func (p *Progress) eta() string {
	setup, pace := 1.0, 1.0
	if p.setups > 0 {
		setup = p.setupWall / float64(p.setups)
	}
	if p.spent > 0 && p.trialWall > 0 {
		pace = p.trialWall / p.spent
	}
	return fmtDur(float64(p.setupLeft)*setup + max(p.total-p.spent, 0)*pace)
}

func fmtDur(s float64) string {
	d := time.Duration(s) * time.Second
	if d >= time.Minute {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// headline is a short rendering of a trial's main figure.
func headline(m map[string]float64) string {
	var parts []string
	if v, ok := m["throughput_bps"]; ok {
		parts = append(parts, fmt.Sprintf("%.2f Gbit/s", v/1e9))
	}
	if v, ok := m["loss_pct"]; ok {
		parts = append(parts, fmt.Sprintf("loss %.2f%%", v))
	}
	if v, ok := m["transactions_per_s"]; ok {
		parts = append(parts, fmt.Sprintf("%.0f trans/s", v))
	}
	if v, ok := m["latency_p99_us"]; ok {
		parts = append(parts, fmt.Sprintf("p99 %.0f us", v))
	}
	if v, ok := m["reaction_up_ms"]; ok {
		parts = append(parts, fmt.Sprintf("up %.1f ms (control %.1f), down %.1f ms (control %.1f), %.0f changes", v, m["reaction_up_control_ms"],
			m["reaction_down_ms"], m["reaction_down_control_ms"], m["reaction_changes_count"]))
	}
	if v, ok := m["ttfb_seed_ms"]; ok {
		parts = append(parts, fmt.Sprintf("TTFB %.2f ms (p99 %.2f), %.2f Gbit/s", v, m["ttfb_p99_ms"], m["transfer_bps"]/1e9))
	}
	if v, ok := m["cpu_node_steal_pct"]; ok && v >= 1 {
		parts = append(parts, fmt.Sprintf("steal %.0f%%", v))
	}
	return strings.Join(parts, ", ")
}
