package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// change: how long one change takes to reach the data plane while many objects stand (issue
// 16; kube-proxy's partial syncs, ClusterLoader2's network programming latency). A client pod
// runs cnibench's prober (driver.ProbeCommand), which starts a TCP connection to the changed
// object's address at a fixed interval, whatever became of the ones before (a dropped SYN does
// not hold it up), and stamps each; an endpoint pod answers every connection with its address.
// With the case's Services standing (services: the total, the changed one included), the
// trial makes a change and undoes it, again and again (at least minChanges of each, for the
// trial's duration), each with the probe running from before the call until the probes show
// the new state settled. For each change:
//
//   - the reaction: from the call to the first attempt that obeys the new state (a Service
//     added: answered by its endpoint; removed: not answered), estimated as the middle
//     between that attempt's start and the start of the one before it (or the call, if that
//     started earlier): the change reached the data plane between the two, so the estimate
//     is within half a probe interval of the truth, plus the attempt's own way to the rules
//     (microseconds on one host), plus the clocks' difference (below). Reported per
//     direction as P50, P99 (nearest rank) and maximum; the resolution of each change is
//     recorded (probe_resolution_ms its mean, probe_resolution_max_ms the widest: a machine
//     that stalls the prober for milliseconds widens a change's gap, and the trial says so);
//   - all: the same until every attempt from then on obeys (a data plane that obeys on
//     and off in between, flaps_count, has a later "all"). "From then on" ends with the
//     settleAttempts in a row that settled the change: attempts that disobey after them,
//     until the prober stops, are relapses (relapses_count; a real cluster's kube-proxy
//     resyncing 1,000 Services a second after the change dropped a run of connections);
//   - control: how long the call took. On the lab it returns once every node's data plane
//     holds the change (the lab's control plane is the call), so control is programming; on a
//     cluster it is the API. data is the time from the call's return until the first
//     attempt that obeys (0 when one obeyed before the call returned), overlap how long
//     before the call returned the data plane obeyed already (0 when it obeyed after): the
//     kernel uses a ruleset as soon as its transaction commits, before the tool that sent it
//     exits, so on the lab the two phases overlap. Neither is ever negative (see phases).
//   - program: the backend's own figure for the programming (cl.Programmed's
//     proxy_program_ms, where the backend reports one).
//
// Times: attempts are stamped by the client pod's wall clock, calls by this host's; the
// offset between them is estimated before each trial (clockOffset) and applied when larger
// than its uncertainty (on the lab and the project's test cluster both are this host's).
type change struct{}

func init() { Register(change{}) }

func (change) Name() string { return "change" }

// changeKind is a kind of change the scenario times: something made (do) and taken back
// (undo) again and again, whose effect a connection probe sees.
type changeKind struct {
	name, summary string
	do, undo      string // the directions' names, the metrics' prefixes
	// servedAfterDo: the probe is answered once do took effect (a Service added), not after
	// undo; false the other way round (a policy that denies).
	servedAfterDo bool
	// programMetric is the backend's metric (cl.Programmed) of the programming a change of
	// this kind causes, changedMetric the one of what that programming touched.
	programMetric, changedMetric string
	// cl2 is the ClusterLoader2 measurement that times the same changes (the perfdash
	// export's name for both directions' figures).
	cl2 string
	// setup makes the kind's standing objects (the changed one in its "done" state) once the
	// client and the endpoint exist.
	setup func(ctx context.Context, f *changeFixture) error
	// apply makes the change (do: true) or takes it back; close removes what setup made.
	apply func(ctx context.Context, f *changeFixture, do bool) error
	close func(ctx context.Context, f *changeFixture) error
}

// changeKinds are the kinds by name.
var changeKinds = map[string]changeKind{}

func registerChange(k changeKind) {
	if _, dup := changeKinds[k.name]; dup {
		panic("change kind " + k.name + " registered twice")
	}
	changeKinds[k.name] = k
	if k.cl2 != "" {
		for _, dir := range []string{k.do, k.undo} {
			result.RegisterPerfdashName("change", dir+"_ms", k.cl2)
		}
	}
}

// ChangeKinds lists the kinds of change the change scenario times, sorted.
func ChangeKinds() []string {
	out := make([]string, 0, len(changeKinds))
	for n := range changeKinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ChangeKindSummary is one line about a kind of change (cnibench list).
func ChangeKindSummary(name string) string { return changeKinds[name].summary }

func (change) Info() Info {
	return Info{
		Summary: "time from one change (a Service added or removed, a policy that denies added or removed) to the data plane obeying it, with many Services and policies standing; P50/P99 over many changes (kube-proxy's partial sync, ClusterLoader2's network programming latency, policy enforcement latency)",
		Primary: func(c result.Case) string {
			if k, ok := changeKinds[c.Change]; ok {
				return k.do + "_p50_ms"
			}
			return "add_p50_ms"
		},
		NoBaseline:        true,
		DefaultDataplanes: []string{"flannel", "cilium"},
		Placements:        []string{"intra", "inter"},
		Protocols:         []string{"tcp"},
		DefaultProtocols:  []string{"tcp"},
		Params:            []string{"services", "policies", "proxy", "policy", "change", "sync"},
		DefaultInts:       map[string][]int{"services": {1}, "policies": {0}},
		DefaultStrs:       map[string][]string{"change": ChangeKinds(), "sync": {"partial"}},
		Tool:              driver.ProbeTool,
		Check: func(c result.Case) error {
			if _, ok := changeKinds[c.Change]; !ok {
				return fmt.Errorf("unknown change %q (valid: %s)", c.Change, strings.Join(ChangeKinds(), ", "))
			}
			if c.Services < 1 {
				return fmt.Errorf("services %d: the change scenario counts the changed Service, give 1 or more", c.Services)
			}
			if c.Policies < 0 {
				return fmt.Errorf("policies %d: give 0 or more standing policies", c.Policies)
			}
			return nil
		},
		Charted: func(c result.Case) []string {
			k := changeKinds[c.Change]
			return []string{k.do + "_p99_ms", k.undo + "_p50_ms"}
		},
		TrialSeconds: func(c result.Case, durationS int) float64 {
			// Each change waits for the probe to settle (about a second), and programming at
			// scale takes its own time: the trial lasts at least minChanges pairs.
			return max(float64(durationS), float64(2*minChanges)*(1.5+float64(c.Services)/5000+float64(c.Policies)/5000))
		},
		// Its changes reprogram every node, and other fixtures' Services would stand in its
		// measurements.
		Exclusive: func(result.Case) bool { return true },
	}
}

const (
	// minChanges is the fewest changes of each direction a trial makes, however short: P99
	// over fewer is only a maximum.
	minChanges = 20
	// changePorts are the changed Service's ports (the endpoint answers on answerPort): the
	// prober tries them in turn, which doubles its connection tuples (connprobe.Options).
	changePort, changePort2 = 80, 81
	// warmAttempts is how many attempts must show the old state before a change is made;
	// settleAttempts how many in a row, started after the call returned, must show the new
	// one before it counts as done; keepAttempts how many the raw record keeps around a
	// change's telling attempts.
	warmAttempts   = 20
	settleAttempts = 100
	keepAttempts   = 5
)

// Probe settings; variables so tests can change them.
var (
	changeInterval = time.Millisecond       // the prober's interval: the resolution is half of it
	changeTimeout  = 250 * time.Millisecond // an attempt not connected by then is not answered
	changeWait     = 60 * time.Second       // the most a change may take to show and settle
)

// changeFixture is a change case set up.
type changeFixture struct {
	trialFrame
	opt      Options
	c        result.Case
	kind     changeKind
	endpoint cluster.Pod
	pods     []string // the client, the endpoint, the extra Services' and the silent pods
	extras   []string // the extra Services
	policies []string // the standing policies and the changed one while it exists
	polSpec  networkingv1.NetworkPolicy
	svc      cluster.Service
	svcSpec  cluster.ServiceSpec
	exists   bool // the changed object (Service, policy) exists
	target   string
	self     string
}

func (change) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (_ Fixture, err error) {
	kind, ok := changeKinds[c.Change]
	if !ok {
		return nil, fmt.Errorf("unknown change %q (valid: %s)", c.Change, strings.Join(ChangeKinds(), ", "))
	}
	self := cl.Facts().Self
	if self == "" {
		return nil, cluster.Unsupported("the %s backend's pods cannot run cnibench's prober", cl.Facts().Backend)
	}
	cn, sn, err := placeNodes(ctx, cl, c.Placement)
	if err != nil {
		return nil, err
	}
	f := &changeFixture{trialFrame: newFrame(cl, opt, cluster.Pod{}), opt: opt, c: c, kind: kind, self: self}
	made, err := cl.CreatePods(ctx, []cluster.PodSpec{
		{Name: objName(opt, "client"), Node: cn, Labels: fixtureLabels(opt, "client")},
		{Name: objName(opt, "endpoint"), Node: sn, Labels: fixtureLabels(opt, "endpoint"), AnswerPort: answerPort,
			Ports: []cluster.ContainerPort{{Name: "answer", Port: answerPort, Protocol: "tcp"}}},
	})
	if err != nil {
		return nil, err
	}
	f.client, f.endpoint = made[0], made[1]
	f.pods = []string{f.client.Name, f.endpoint.Name}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close(context.WithoutCancel(ctx)))
		}
	}()
	// Policies first: a backend that enforces none skips the case before thousands of
	// Services are made for nothing.
	silent, pols, polMS, err := standingPolicies(ctx, cl, c.Policies, objName(opt, "silent"))
	f.pods, f.policies = append(f.pods, silent...), pols
	if err != nil {
		return nil, err
	}
	if err := kind.setup(ctx, f); err != nil {
		return nil, err
	}
	extraPods, extras, extraMS, err := extraServices(ctx, cl, c.Services-1)
	f.pods, f.extras = append(f.pods, extraPods...), extras
	if err != nil {
		return nil, err
	}
	f.setup = setupMetrics(ctx, cl, map[string]float64{"services_program_ms": extraMS, "policies_program_ms": polMS, "policies_total": float64(len(pols))})
	return f, nil
}

// served says whether an attempt was answered by the fixture's endpoint.
func (f *changeFixture) served(a driver.ProbeAttempt) bool {
	return a.Result == driver.ProbeOK && a.Answer == f.endpoint.IP
}

// changeStep is one change and the attempts around it.
type changeStep struct {
	Do        bool
	Call, Ret time.Time // this host's clock before the call and after it returned
	ProgramMS float64   // the backend's programming time of the change (-1: none reported)
	Changed   float64   // what the backend's programming of the change touched (-1: none reported)
	Attempts  []driver.ProbeAttempt
	End       driver.ProbeEnd // the prober's end line: attempts started, slots missed, late starts
	// Settled is the sequence number of the last attempt of the settleAttempts in a row that
	// settled the change (-1: it never did); the attempts after it, until the prober stopped,
	// are past the change's window: those that disobey are relapses.
	Settled int64
}

// Trial makes and takes back the change for durationS seconds, at least minChanges times
// each, and measures every one.
func (f *changeFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	offset, unc, err := clockOffset(ctx, f.cl, f.client.Name)
	if err != nil {
		return Measurement{}, err
	}
	shift := applied(offset, unc)
	probeCmd := pin(f.opt.CPUs[0], driver.ProbeCommand(f.self, driver.ProbeSpec{Target: f.target, Interval: changeInterval, Timeout: changeTimeout}))
	win := f.open(ctx)
	defer win.abandon(context.WithoutCancel(ctx))
	begin := time.Now()
	var steps []changeStep
	var raw bytes.Buffer
	fmt.Fprintf(&raw, "# change %s target %s shift_us %d uncertainty_us %d\n", f.kind.name, f.target, shift.Microseconds(), unc.Microseconds())
	fail := func(err error) (Measurement, error) {
		return Measurement{Raw: raw.Bytes(), Client: probeCmd}, err
	}
	for n := 0; n < minChanges || time.Since(begin) < time.Duration(durationS)*time.Second; n++ {
		// Undo first when the trial finds the change made, so every trial ends as it began.
		order := []bool{true, false}
		if f.done() {
			order = []bool{false, true}
		}
		for _, do := range order {
			st, err := f.step(ctx, probeCmd, shift, do)
			f.recordStep(&raw, st)
			if err != nil {
				return fail(err)
			}
			steps = append(steps, st)
		}
	}
	cpu := map[string]float64{}
	acct := win.close(ctx, cpu)
	m, err := changeMetrics(f.kind, steps, f.obeys)
	if err != nil {
		return fail(err)
	}
	addProbeConditions(m, shift, unc, cpu, f.setup)
	return Measurement{Metrics: m, Raw: raw.Bytes(), Client: probeCmd, Accounting: acct}, nil
}

// done says whether the change is made now (the state after do: every kind's do makes the
// changed object).
func (f *changeFixture) done() bool { return f.exists }

// obeys says whether an attempt shows the state after a step's change.
func (f *changeFixture) obeys(do bool, a driver.ProbeAttempt) bool {
	return f.served(a) == (do == f.kind.servedAfterDo)
}

// step makes one change with the probe running: it starts the prober, waits until
// warmAttempts attempts show the old state, makes the change, and waits until
// settleAttempts attempts in a row, started after the call returned, show the new one.
func (f *changeFixture) step(ctx context.Context, probeCmd []string, shift time.Duration, do bool) (st changeStep, err error) {
	st = changeStep{Do: do, ProgramMS: -1, Changed: -1, Settled: -1}
	p, err := f.cl.Start(ctx, f.client.Name, probeCmd, cluster.Ready{})
	if err != nil {
		return st, fmt.Errorf("start the prober: %w", err)
	}
	defer func() {
		if serr := p.Stop(); serr != nil && err == nil {
			err = fmt.Errorf("stop the prober: %w", serr)
		}
		if run, perr := driver.ParseProbe(p.Output()); perr == nil {
			st.Attempts, st.End = shifted(run.Attempts, shift), run.End
		} else if err == nil {
			err = perr
		}
	}()
	old := func(a driver.ProbeAttempt) bool { return f.obeys(!do, a) }
	if err := waitAttempts(ctx, p, shift, probeStartTimeout, func(as []driver.ProbeAttempt) bool {
		n := 0
		for _, a := range as {
			if old(a) {
				n++
			}
		}
		return n >= warmAttempts
	}); err != nil {
		return st, fmt.Errorf("probe of %s from pod %s before the change: %w", f.target, f.client.Name, err)
	}
	st.Call = time.Now()
	err = f.kind.apply(ctx, f, do)
	st.Ret = time.Now()
	if err != nil {
		return st, fmt.Errorf("%s: %w", f.direction(do), err)
	}
	prog := f.cl.Programmed(ctx)
	if pm, ok := prog[f.kind.programMetric]; ok {
		st.ProgramMS = pm
	}
	if n, ok := prog[f.kind.changedMetric]; ok {
		st.Changed = n
	}
	err = waitAttempts(ctx, p, shift, changeWait, func(as []driver.ProbeAttempt) bool {
		if settled(as, st.Ret, func(a driver.ProbeAttempt) bool { return f.obeys(do, a) }) {
			st.Settled = as[len(as)-1].Seq
			return true
		}
		return false
	})
	if err != nil {
		return st, fmt.Errorf("%s: the probe of %s never settled on the new state: %w", f.direction(do), f.target, err)
	}
	return st, nil
}

func (f *changeFixture) direction(do bool) string {
	if do {
		return f.kind.do
	}
	return f.kind.undo
}

// shifted moves attempts' stamps by -shift onto this host's clock.
func shifted(as []driver.ProbeAttempt, shift time.Duration) []driver.ProbeAttempt {
	if shift == 0 {
		return as
	}
	out := slices.Clone(as)
	for i := range out {
		out[i].Start, out[i].End = out[i].Start.Add(-shift), out[i].End.Add(-shift)
	}
	return out
}

// settled says whether the attempts, in order, end with settleAttempts that started at or
// after t and all obey, with none missing (the prober prints attempts as they finish: a
// slow one may still be out).
func settled(as []driver.ProbeAttempt, t time.Time, obeys func(driver.ProbeAttempt) bool) bool {
	n := len(as)
	if n < settleAttempts {
		return false
	}
	tail := as[n-settleAttempts:]
	for i, a := range tail {
		if a.Start.Before(t) || !obeys(a) || (i > 0 && a.Seq != tail[i-1].Seq+1) {
			return false
		}
	}
	return true
}

// waitAttempts polls the prober's output until done says the attempts (in sequence order,
// moved onto this host's clock) show what it waits for, for at most d, as often as pollEvery says.
func waitAttempts(ctx context.Context, p cluster.Process, shift, d time.Duration, done func([]driver.ProbeAttempt) bool) error {
	deadline := time.Now().Add(d)
	wait, most := pollEvery(p)
	var last string
	for {
		out := p.Output()
		run, err := driver.ParseProbe(out)
		if err != nil {
			return err
		}
		as := shifted(run.Attempts, shift)
		if done(as) {
			return nil
		}
		switch {
		case len(as) > 0:
			a := as[len(as)-1]
			last = fmt.Sprintf("%d attempts, the last %s %s", len(as), a.Result, a.Answer)
		case run.Ended:
			return fmt.Errorf("the prober ended: %s", excerptLines(strings.TrimSpace(string(out)), 3))
		default:
			last = "no attempt: " + excerptLines(strings.TrimSpace(string(out)), 3)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", d, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*3/2, most)
	}
}

// changeTimes are one step's figures in milliseconds.
type changeTimes struct {
	first, all, control, data, overlap, program float64
	changed                                     float64 // what the programming touched (-1: not reported)
	resolution                                  float64 // half the gap the first figure falls in
	flaps                                       int     // attempts that disobeyed between first and all
	relapses                                    int     // attempts that disobeyed after the change settled
}

// firstObeying returns the index of the first attempt started at or after the call (from)
// and of the first of those that obeys the change (-1: none), among the attempts of the
// change's window.
func (st changeStep) firstObeying(obeys func(bool, driver.ProbeAttempt) bool) (from, first int) {
	as, _ := st.window()
	from = sort.Search(len(as), func(i int) bool { return !as[i].Start.Before(st.Call) })
	for i := from; i < len(as); i++ {
		if obeys(st.Do, as[i]) {
			return from, i
		}
	}
	return from, -1
}

// times computes a step's figures (see change).
func (st changeStep) times(obeys func(bool, driver.ProbeAttempt) bool) (changeTimes, error) {
	as, after := st.window()
	ok := func(i int) bool { return obeys(st.Do, as[i]) }
	from, first := st.firstObeying(obeys)
	if first < 0 {
		return changeTimes{}, errors.New("no attempt obeyed the change")
	}
	all := len(as)
	for all > from && ok(all-1) {
		all--
	}
	if all == len(as) {
		return changeTimes{}, errors.New("the last attempt did not obey the change")
	}
	// mid is the estimate for "between attempt i-1 and i": the middle of their starts, the
	// earlier bounded by the call.
	mid := func(i int) (at, half time.Duration) {
		lo := st.Call
		if i > 0 && as[i-1].Start.After(lo) {
			lo = as[i-1].Start
		}
		half = as[i].Start.Sub(lo) / 2
		return lo.Add(half).Sub(st.Call), half
	}
	t := changeTimes{control: ms(st.Ret.Sub(st.Call)), program: st.ProgramMS, changed: st.Changed}
	f, half := mid(first)
	t.first, t.resolution = ms(f), ms(half)
	a, _ := mid(all)
	t.all = ms(a)
	t.data, t.overlap = phases(t.first, t.control)
	for i := first; i < all; i++ {
		if !ok(i) {
			t.flaps++
		}
	}
	for _, a := range after {
		if !obeys(st.Do, a) {
			t.relapses++
		}
	}
	return t, nil
}

// window splits a step's attempts into those up to the one that settled the change (all of
// them when none did) and those after it.
func (st changeStep) window() (in, after []driver.ProbeAttempt) {
	if st.Settled < 0 {
		return st.Attempts, nil
	}
	n := sort.Search(len(st.Attempts), func(i int) bool { return st.Attempts[i].Seq > st.Settled })
	return st.Attempts[:n], st.Attempts[n:]
}

// changeMetrics are a trial's figures per direction (see change): P50, P99 (nearest rank),
// maximum and mean of the reaction; P50 and P99 of all; P50 of control, data and program;
// flaps; the changes made, the probe's median interval, and the mean and widest resolution
// (half the gap between the attempts a change's figure falls between: half the interval when
// the prober keeps its schedule, more when the machine held it up; probe_late_pct says how
// often it did: the share of attempts started more than an interval after their slot).
func changeMetrics(k changeKind, steps []changeStep, obeys func(bool, driver.ProbeAttempt) bool) (map[string]float64, error) {
	by := map[bool][]changeTimes{}
	var gaps, res []float64
	var started, late int
	for i, st := range steps {
		t, err := st.times(obeys)
		if err != nil {
			return nil, fmt.Errorf("change %d (%s): %w", i+1, map[bool]string{true: k.do, false: k.undo}[st.Do], err)
		}
		by[st.Do] = append(by[st.Do], t)
		res = append(res, t.resolution)
		started, late = started+st.End.Attempts, late+st.End.Late
		for j := 1; j < len(st.Attempts); j++ {
			gaps = append(gaps, ms(st.Attempts[j].Start.Sub(st.Attempts[j-1].Start)))
		}
	}
	if len(by[true]) == 0 || len(by[false]) == 0 {
		return nil, errors.New("no change measured")
	}
	m := map[string]float64{"changes_count": float64(len(by[true]))}
	for _, do := range []bool{true, false} {
		dir := k.undo
		if do {
			dir = k.do
		}
		var first, all, control, data, overlap, program, changed []float64
		flaps, relapses := 0, 0
		for _, t := range by[do] {
			first, all, control, data = append(first, t.first), append(all, t.all), append(control, t.control), append(data, t.data)
			overlap = append(overlap, t.overlap)
			if t.program >= 0 {
				program = append(program, t.program)
			}
			if t.changed >= 0 {
				changed = append(changed, t.changed)
			}
			flaps += t.flaps
			relapses += t.relapses
		}
		m[dir+"_p50_ms"] = nearestRank(first, 50)
		m[dir+"_p99_ms"] = nearestRank(first, 99)
		m[dir+"_max_ms"] = slices.Max(first)
		m[dir+"_mean_ms"] = mean(first)
		m[dir+"_all_p50_ms"] = nearestRank(all, 50)
		m[dir+"_all_p99_ms"] = nearestRank(all, 99)
		m[dir+"_control_p50_ms"] = nearestRank(control, 50)
		m[dir+"_data_p50_ms"] = nearestRank(data, 50)
		m[dir+"_overlap_p50_ms"] = nearestRank(overlap, 50)
		if len(program) > 0 {
			m[dir+"_program_p50_ms"] = nearestRank(program, 50)
		}
		if len(changed) > 0 {
			m[dir+"_changed_p50_count"] = nearestRank(changed, 50)
		}
		m[dir+"_flaps_count"] = float64(flaps)
		m[dir+"_relapses_count"] = float64(relapses)
	}
	if len(gaps) > 0 {
		m["probe_interval_ms"] = nearestRank(gaps, 50)
	}
	m["probe_resolution_ms"] = mean(res)
	m["probe_resolution_max_ms"] = slices.Max(res)
	if started > 0 {
		// the machine held the prober up: these attempts started more than an interval
		// after their slot, and the resolution around them is coarser than half the interval
		m["probe_late_pct"] = 100 * float64(late) / float64(started)
	}
	return m, nil
}

// recordStep writes a step to the trial's raw record: a header, and the attempts that tell its
// story (keepAttempts around the call, the first obeying one and the one from which all do;
// every disobeying one between), as the prober printed them (its clock).
func (f *changeFixture) recordStep(b *bytes.Buffer, st changeStep) {
	fmt.Fprintf(b, "# step %s call %s ret %s program_ms %.3f attempts %d\n", f.direction(st.Do), fmtEpoch(st.Call), fmtEpoch(st.Ret), st.ProgramMS, len(st.Attempts))
	as := st.Attempts
	keep := make([]bool, len(as))
	mark := func(i int) {
		for j := max(i-keepAttempts, 0); j < min(i+keepAttempts+1, len(as)); j++ {
			keep[j] = true
		}
	}
	from, first := st.firstObeying(f.obeys)
	mark(from)
	for i := first; first >= 0 && i < len(as); i++ {
		if i == first || !f.obeys(st.Do, as[i]) { // the first obeying one and the flaps after it
			mark(i)
		}
	}
	for i, a := range as {
		if keep[i] {
			fmt.Fprintf(b, "c %d %d %d %s %s\n", a.Seq, a.Start.UnixNano(), a.End.UnixNano(), a.Result, orDash(a.Answer))
		}
	}
}

// Close removes what the kind made, the extra Services and the pods.
func (f *changeFixture) Close(ctx context.Context) error {
	var errs []error
	if f.kind.close != nil {
		errs = append(errs, f.kind.close(ctx, f))
	}
	if len(f.policies) > 0 {
		errs = append(errs, f.cl.DeleteNetworkPolicies(ctx, f.policies))
	}
	if len(f.extras) > 0 {
		errs = append(errs, f.cl.DeleteServices(ctx, f.extras))
	}
	if len(f.pods) > 0 {
		errs = append(errs, f.cl.DeletePods(ctx, f.pods))
	}
	return errors.Join(errs...)
}

// The kind "service": a ClusterIP Service over the endpoint is removed and added again with
// the same ClusterIP (cluster.ServiceSpec.ClusterIP), so the prober aims at its address
// throughout.
func init() {
	registerChange(changeKind{
		name:    "service",
		summary: "a ClusterIP Service is added (and removed again): until its address answers (and stops answering)",
		do:      "add", undo: "remove", servedAfterDo: true, programMetric: "proxy_program_ms", changedMetric: "proxy_changed_count",
		cl2: "NetworkProgrammingLatency", // kube-proxy's programming of a Service change
		setup: func(ctx context.Context, f *changeFixture) error {
			f.svcSpec = cluster.ServiceSpec{Name: objName(f.opt, "changed"), Selector: fixtureLabels(f.opt, "endpoint"),
				Ports: []cluster.ServicePort{{Name: "answer", Port: changePort, TargetPort: answerPort, Protocol: "tcp"},
					{Name: "answer2", Port: changePort2, TargetPort: answerPort, Protocol: "tcp"}}}
			svc, err := cluster.CreateService(ctx, f.cl, f.svcSpec)
			if err != nil {
				return err
			}
			f.svc, f.exists = svc, true
			f.svcSpec.ClusterIP = svc.ClusterIP
			f.target = svc.ClusterIP + ":" + strconv.Itoa(changePort) + "," + svc.ClusterIP + ":" + strconv.Itoa(changePort2)
			return nil
		},
		apply: func(ctx context.Context, f *changeFixture, do bool) error {
			if do {
				spec := f.svcSpec
				spec.NoWait = true // the probe times it (on a cluster the call returns when the API accepted)
				if _, err := cluster.CreateService(ctx, f.cl, spec); err != nil {
					return err
				}
				f.exists = true
				return nil
			}
			if err := cluster.DeleteService(ctx, f.cl, f.svcSpec.Name); err != nil {
				return err
			}
			f.exists = false
			return nil
		},
		close: func(ctx context.Context, f *changeFixture) error {
			if !f.exists {
				return nil
			}
			f.exists = false
			return cluster.DeleteService(ctx, f.cl, f.svcSpec.Name)
		},
	})
}

// The kind "policy": a NetworkPolicy that selects the endpoint and admits no ingress (the
// usual "deny all" policy) is added (deny: until the endpoint stops answering the client) and
// removed (allow: until it answers again). The standing policies (policies, over silent pods)
// do not select the endpoint, so the changed one alone decides; every engine drops what it
// denies, so a denied attempt times out (changeTimeout). The probe aims at the endpoint pod
// itself; every attempt is a new connection whose first packet the engines judge afresh.
func init() {
	registerChange(changeKind{
		name:    "policy",
		summary: "a NetworkPolicy denying all ingress to the endpoint is added (and removed again): until the endpoint stops answering (and answers again)",
		do:      "deny", undo: "allow", servedAfterDo: false, programMetric: "policy_program_ms", changedMetric: "policy_changed_count",
		cl2: "NetworkPolicyEnforcementLatency",
		setup: func(ctx context.Context, f *changeFixture) error {
			f.polSpec = networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: objName(f.opt, "changed-deny")},
				Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: fixtureLabels(f.opt, "endpoint")},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
			f.target = f.endpoint.IP + ":" + strconv.Itoa(answerPort)
			return f.kind.apply(ctx, f, true)
		},
		apply: func(ctx context.Context, f *changeFixture, do bool) error {
			name := f.polSpec.Name
			if do {
				if err := f.cl.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{*f.polSpec.DeepCopy()}); err != nil {
					return err
				}
				f.exists, f.policies = true, append(f.policies, name)
				return nil
			}
			if err := f.cl.DeleteNetworkPolicies(ctx, []string{name}); err != nil {
				return err
			}
			f.exists, f.policies = false, slices.DeleteFunc(f.policies, func(n string) bool { return n == name })
			return nil
		},
	})
}

// The kinds "selector" and "except" edit a standing policy (cluster.UpdateNetworkPolicies)
// instead of adding one: a policy that selects the endpoint and admits ingress from one peer
// stands, admitting the client; the change edits the peer so that it no longer does (deny:
// until the endpoint stops answering the client) and back (allow: until it answers again).
// kube-burner's netpolLatency saw edits of this kind, ipBlock excepts above all, take far
// longer than added policies on some CNIs. As for the policy kind, the standing policies do
// not select the endpoint, so the edited one alone decides.
func init() {
	registerPolicyEdit("selector", "a NetworkPolicy admitting the client to the endpoint has its ingress peer's podSelector changed to labels no pod has (and back): until the endpoint stops answering (and answers again)",
		func(f *changeFixture, admit bool) networkingv1.NetworkPolicyPeer {
			role := "client"
			if !admit {
				role = "nobody"
			}
			return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: fixtureLabels(f.opt, role)}}
		})
	registerPolicyEdit("except", "a NetworkPolicy admitting every address (ipBlock 0.0.0.0/0) to the endpoint gets the client's address as an ipBlock except (and loses it): until the endpoint stops answering (and answers again)",
		func(f *changeFixture, admit bool) networkingv1.NetworkPolicyPeer {
			b := &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}
			if !admit {
				b.Except = []string{f.client.IP + "/32"}
			}
			return networkingv1.NetworkPolicyPeer{IPBlock: b}
		})
}

// registerPolicyEdit registers a kind that edits the peer of a standing policy: peer(f, true)
// admits the client, peer(f, false) does not.
func registerPolicyEdit(name, summary string, peer func(f *changeFixture, admit bool) networkingv1.NetworkPolicyPeer) {
	edited := func(f *changeFixture, admit bool) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: objName(f.opt, "changed-"+name)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: fixtureLabels(f.opt, "endpoint")},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer(f, admit)}}}}}
	}
	registerChange(changeKind{
		name: name, summary: summary,
		do: "deny", undo: "allow", servedAfterDo: false, programMetric: "policy_program_ms", changedMetric: "policy_changed_count",
		cl2: "NetworkPolicyEnforcementLatency",
		setup: func(ctx context.Context, f *changeFixture) error {
			f.polSpec = edited(f, true)
			if err := f.cl.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{*f.polSpec.DeepCopy()}); err != nil {
				return err
			}
			f.policies = append(f.policies, f.polSpec.Name)
			f.target = f.endpoint.IP + ":" + strconv.Itoa(answerPort)
			return nil
		},
		apply: func(ctx context.Context, f *changeFixture, do bool) error {
			if err := f.cl.UpdateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{edited(f, !do)}); err != nil {
				return err
			}
			f.exists = do // the edit that denies is in place
			return nil
		},
	})
}
