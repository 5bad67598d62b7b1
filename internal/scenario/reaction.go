package scenario

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/stats"
)

// reaction: how fast the data plane follows a change of a Service's endpoints (seed 003 Fig. 5).
// A ClusterIP Service has one endpoint pod; a client pod probes the Service as fast as it can,
// a new TCP connection each time, and every endpoint answers with its own address, so each
// probe says which endpoint it reached. Then the Service is scaled up (a second endpoint pod is
// created on the server's node, beside the first) and down (that pod is deleted), over and
// over for the trial's duration (at least minReactionPairs times):
//
//   - reaction up: from the new pod being ready (cluster.EndpointPodReady) to the end of the
//     first probe the new endpoint answered;
//   - reaction down: from the pod's deletion beginning (cluster.EndpointPodDeleting) to the
//     last probe that did not reach an endpoint that stays (answered by the removed one, or
//     failed: sent to an endpoint that is gone, a connection lost; probe_failed_count), no
//     later one doing so; 0 when no probe since the deletion reached it. Up is the first
//     probe that shows the new state (the new endpoint cannot answer before the change), so
//     the change happened before that probe ended (not before it began: its stamp is taken
//     before nc is forked, and the connect comes up to a probe's length later, during which
//     the change may happen); down the last probe that shows the old one, so it happened
//     after that probe began: up is an upper bound and down a lower one, each within a few
//     probe intervals (probe_interval_ms) of the truth, the load balancer picking the new or the removed endpoint one time in two. (The
//     probe after the last one that reached the removed endpoint would bound down from above,
//     but a failed probe takes nc's whole 1 s timeout and would put it there);
//   - the control-plane part of each: until the control plane held the new endpoint set
//     (cluster.EndpointsSet: on the lab, its own controller, when the programming of the
//     client's node returned; on a cluster, when the Service's EndpointSlices listed it). The
//     data-plane part is the rest: on a cluster kube-proxy's sync and the kernel; on the lab
//     the kernel only. Where the kernel used the new rules before the programming returned
//     (nf_tables commits in the batch's sendmsg, and nft and iptables-nft return after closing
//     their netlink socket, which waits for an RCU grace period) the phases overlap: the data
//     part is 0 and the overlap (how long before the control part ended the data plane
//     followed) is reported on its own, so no part is ever negative (see phases).
//
// Times: probes are stamped by the client pod's wall clock, events by this host's. The
// scenario estimates the offset between the two before each trial (clockOffset) and applies it
// when it is larger than its uncertainty (on the lab and the project's test cluster the pods
// run on this host's clock: never). A probe is stamped just before its connect, one every
// probe_interval_ms (the resolution); the clock adds probe_clock_uncertainty_ms at most.
type reaction struct{}

func init() { Register(reaction{}) }

func (reaction) Name() string { return "reaction" }

func (reaction) Info() Info {
	return Info{
		Service: always,
		Summary: "time from a Service endpoint added or removed (scale up, down) until traffic reaches it or stops reaching it; control and data plane parts (seed 003 Fig. 5)",
		// How fast the data plane follows a new endpoint; no baseline measures it.
		Primary:           func(result.Case) string { return "reaction_up_ms" },
		NoBaseline:        true,
		DefaultDataplanes: []string{"calico", "cilium"},
		Placements:        []string{"intra", "inter"},
		Protocols:         []string{"tcp"},
		DefaultProtocols:  []string{"tcp"},
		Params:            []string{"proxy"},
		Tool:              "nc",
		// Its changes reprogram every node's Services, and other Services' programming would
		// stand in its measurements.
		Exclusive: func(result.Case) bool { return true },
	}
}

const (
	// answerPort is where the endpoints answer with their address; reactionPort is the
	// Service's port.
	answerPort   = 8080
	reactionPort = 80
	// minReactionPairs is the fewest scale ups and downs of a trial, however short.
	minReactionPairs = 3
	// warmProbes is how many probes the endpoints answer before a change is made; settleProbes
	// how many the remaining endpoints answer in a row, after the removed pod is gone, before
	// a scale down counts as done; keepProbes how many probes the raw output keeps before a
	// change and after its last telling probe.
	warmProbes   = 20
	settleProbes = 50
	keepProbes   = 10
	keepUnshown  = 2000
)

// Waits; variables so tests can shorten them.
var (
	reactionTimeout   = 60 * time.Second      // the most a change may take to show in the probes
	probeStartTimeout = 30 * time.Second      // the most the probe may take to be answered
	reactionPoll      = 50 * time.Millisecond // how often a change's progress is looked at first
	reactionPollMax   = time.Second           // and at most, the probe's output (an exec on a cluster)
	localPoll         = 10 * time.Millisecond // how often when the output is in memory (cluster.LocalOutput)
)

// clockReads is how many times a trial reads the client pod's clock (clockOffset).
const clockReads = 5

// clockCmd prints the pod's wall clock as the probe stamps its probes.
var clockCmd = []string{driver.BusyboxPath, "sh", "-c", `echo "$EPOCHREALTIME"`}

// probeScript connects to $1:$2 again and again, as fast as busybox forks nc, and prints one
// line per connection: "p START END STATUS ANSWER" — the wall-clock times (ash's
// $EPOCHREALTIME, microseconds) before and after it, nc's exit status (0: connected and read to
// the end) and what the endpoint wrote (its address) or nc's error. A constant: the address
// and port arrive as positional parameters.
const probeScript = `while :; do t=$EPOCHREALTIME; r=$(/bin/busybox nc -w 1 "$1" "$2" </dev/null 2>&1); echo "p $t $EPOCHREALTIME $? $r"; done`

// probe is one connection of the probe.
type probe struct {
	Start, End time.Time // on this host's clock
	OK         bool      // connected, and the endpoint's answer read to the end
	Answer     string    // the endpoint's address, or nc's error
}

// parseProbes reads the probe's output (see probeScript), moving its times by -shift onto this
// host's clock. A line that does not start a probe continues the previous one's answer (its
// last line is the answer); an unfinished last line is left for the next reading.
func parseProbes(out []byte, shift time.Duration) []probe {
	var ps []probe
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[:i+1]
	} else {
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r ")
		f := strings.SplitN(line, " ", 5)
		if len(f) >= 4 && f[0] == "p" {
			st, err1 := parseEpoch(f[1])
			en, err2 := parseEpoch(f[2])
			code, err3 := strconv.Atoi(f[3])
			if err1 == nil && err2 == nil && err3 == nil {
				p := probe{Start: st.Add(-shift), End: en.Add(-shift), OK: code == 0}
				if len(f) == 5 {
					p.Answer = strings.TrimSpace(f[4])
				}
				ps = append(ps, p)
				continue
			}
		}
		if len(ps) > 0 && strings.TrimSpace(line) != "" {
			ps[len(ps)-1].Answer = strings.TrimSpace(line)
		}
	}
	return ps
}

// parseEpoch reads "SECONDS.MICROSECONDS" (ash's $EPOCHREALTIME).
func parseEpoch(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var ns int64
	if frac != "" {
		if len(frac) > 9 {
			frac = frac[:9]
		}
		n, err := strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return time.Time{}, err
		}
		ns = n * int64(math.Pow10(9-len(frac)))
	}
	return time.Unix(secs, ns), nil
}

// fmtEpoch writes a time as $EPOCHREALTIME does.
func fmtEpoch(t time.Time) string {
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}

// clockOffset estimates how far the pod's wall clock is ahead of this host's: it reads the
// pod's clock with an exec between two readings of this host's, clockReads times, and keeps the
// reading of the shortest round trip: the offset is the pod's time less the round trip's
// middle, within plus or minus half the round trip (the uncertainty).
func clockOffset(ctx context.Context, cl cluster.Cluster, pod string) (offset, uncertainty time.Duration, err error) {
	uncertainty = -1
	for i := 0; i < clockReads; i++ {
		t1 := time.Now()
		res, err := cl.Exec(ctx, pod, clockCmd)
		t2 := time.Now()
		if err != nil {
			return 0, 0, fmt.Errorf("read the clock of pod %s: %w", pod, err)
		}
		pt, perr := parseEpoch(strings.TrimSpace(string(res.Stdout)))
		if res.ExitCode != 0 || perr != nil {
			return 0, 0, fmt.Errorf("read the clock of pod %s: exit %d, output %q %q", pod, res.ExitCode, res.Stdout, res.Stderr)
		}
		if half := t2.Sub(t1) / 2; uncertainty < 0 || half < uncertainty {
			uncertainty, offset = half, pt.Sub(t1.Add(half))
		}
	}
	return offset, uncertainty, nil
}

// applied is the offset the probes' times are moved by: none when the clocks agree within the
// estimate's uncertainty (the lab's pods run on this host's clock; the middle of a round trip
// is never exact).
func applied(offset, uncertainty time.Duration) time.Duration {
	if offset.Abs() <= uncertainty {
		return 0
	}
	return offset
}

// reactionFixture is a reaction case set up: the client, the endpoint that stays, the Service.
type reactionFixture struct {
	trialFrame
	tracker  cluster.EndpointTracker
	opt      Options
	svc      cluster.Service
	node     string      // the server's node, where the endpoints are
	base     cluster.Pod // the endpoint that stays
	extra    cluster.Pod // the added endpoint while it exists
	seq      int         // endpoints made so far
	pods     []string    // the client and the base endpoint
	probeCmd []string
}

// endpointSpec is the spec of the n-th endpoint pod.
func (f *reactionFixture) endpointSpec(n int) cluster.PodSpec {
	return cluster.PodSpec{Name: objName(f.opt, fmt.Sprintf("ep%d", n)), Node: f.node, Labels: fixtureLabels(f.opt, "endpoint"),
		AnswerPort: answerPort, Ports: []cluster.ContainerPort{{Name: "answer", Port: answerPort, Protocol: "tcp"}}}
}

func (reaction) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (_ Fixture, err error) {
	tr, ok := cl.(cluster.EndpointTracker)
	if !ok {
		return nil, cluster.Unsupported("the %s backend does not tell when a Service's endpoints change", cl.Facts().Backend)
	}
	cn, sn, err := placeNodes(ctx, cl, c.Placement)
	if err != nil {
		return nil, err
	}
	f := &reactionFixture{trialFrame: newFrame(cl, opt, cluster.Pod{}), tracker: tr, opt: opt, node: sn}
	made, err := cl.CreatePods(ctx, []cluster.PodSpec{{Name: objName(opt, "client"), Node: cn, Labels: fixtureLabels(opt, "client")}, f.endpointSpec(0)})
	if err != nil {
		return nil, err
	}
	f.client, f.base = made[0], made[1]
	f.pods = []string{f.client.Name, f.base.Name}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close(context.WithoutCancel(ctx)))
		}
	}()
	start := time.Now()
	f.svc, err = cluster.CreateService(ctx, cl, cluster.ServiceSpec{Name: objName(opt, "reaction"), Selector: fixtureLabels(opt, "endpoint"),
		Ports: []cluster.ServicePort{{Name: "answer", Port: reactionPort, TargetPort: answerPort, Protocol: "tcp"}}})
	if err != nil {
		return nil, err
	}
	svcMS := float64(time.Since(start).Microseconds()) / 1000
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	f.probeCmd = pin(opt.CPUs[0], []string{driver.BusyboxPath, "sh", "-c", probeScript, "probe", f.svc.ClusterIP, strconv.Itoa(reactionPort)})
	f.setup = setupMetrics(ctx, cl, map[string]float64{"service_program_ms": svcMS})
	return f, nil
}

// check makes one connection through the Service before the trials: the endpoint must answer
// it with its address.
func (f *reactionFixture) check(ctx context.Context) error {
	var last string
	for i := 0; i < probeTries; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(probeWait):
			}
		}
		res, err := f.cl.Exec(ctx, f.client.Name, []string{driver.BusyboxPath, "nc", "-w", strconv.Itoa(probeTimeoutS), f.svc.ClusterIP, strconv.Itoa(reactionPort)})
		if err != nil {
			return err
		}
		last = strings.TrimSpace(string(res.Stdout) + " " + string(res.Stderr))
		if res.ExitCode == 0 && lastLine(res.Stdout) == f.base.IP {
			return nil
		}
	}
	return fmt.Errorf("service %s (%s:%d) not answered by its endpoint %s from pod %s after %d tries (last: %q)",
		f.svc.Name, f.svc.ClusterIP, reactionPort, f.base.IP, f.client.Name, probeTries, last)
}

// lastLine is the last non-empty line of b, trimmed.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// reactionStep is one change and what the probe saw around it.
type reactionStep struct {
	Up        bool
	Pod, IP   string    // the endpoint added or removed
	Call, Ret time.Time // this host's clock before the create or delete call and after it returned
	Remaining []string  // the endpoints that stay
	Probes    []probe
}

// Trial scales the Service up and down for durationS seconds (at least minReactionPairs times
// each) and measures each change.
func (f *reactionFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	if f.extra.Name != "" { // left by a trial that failed
		if err := f.cl.DeletePods(ctx, []string{f.extra.Name}); err != nil {
			return Measurement{}, fmt.Errorf("delete the endpoint left by the last trial: %w", err)
		}
		f.extra = cluster.Pod{}
	}
	track, err := f.tracker.TrackEndpoints(ctx, f.svc.Name)
	if err != nil {
		return Measurement{}, err
	}
	defer track.Stop()
	offset, unc, err := clockOffset(ctx, f.cl, f.client.Name)
	if err != nil {
		return Measurement{}, err
	}
	shift := applied(offset, unc)
	cnt0 := readCounters(f.cl)
	win := f.open(ctx)
	defer win.abandon(context.WithoutCancel(ctx))
	begin := time.Now()
	var steps []reactionStep
	fail := func(err error) (Measurement, error) {
		return Measurement{Raw: reactionRecord(steps, track.Events(), f.client.Node, shift, unc), Client: f.probeCmd}, err
	}
	for i := 0; i < minReactionPairs || time.Since(begin) < time.Duration(durationS)*time.Second; i++ {
		for _, up := range []bool{true, false} {
			st, err := f.step(ctx, track, shift, up)
			steps = append(steps, st)
			if err != nil {
				return fail(err)
			}
		}
	}
	cpu := map[string]float64{}
	acct := win.close(ctx, cpu)
	cnt1 := readCounters(f.cl)
	evs := track.Events()
	m, err := reactionMetrics(steps, evs, f.client.Node)
	if err != nil {
		return fail(err)
	}
	addProbeConditions(m, shift, unc, cpu, f.setup)
	for k, v := range counted(cnt0, cnt1) {
		m[k] = v
	}
	return Measurement{Metrics: m, Raw: reactionRecord(steps, evs, f.client.Node, shift, unc), Client: f.probeCmd, Accounting: acct}, nil
}

// step makes one change with the probe running: it starts the probe, waits until the
// endpoints answer it, adds an endpoint (up) or removes the added one, and waits until the
// probe shows the change: a probe answered by the new endpoint, or, once the removed pod is
// gone, settleProbes probes in a row answered by the endpoints that stay; and until the track
// has seen the control plane's new endpoint set.
func (f *reactionFixture) step(ctx context.Context, track cluster.EndpointTrack, shift time.Duration, up bool) (st reactionStep, err error) {
	st = reactionStep{Up: up, Remaining: []string{f.base.IP}}
	p, err := f.cl.Start(ctx, f.client.Name, f.probeCmd, cluster.Ready{})
	if err != nil {
		return st, fmt.Errorf("start the probe: %w", err)
	}
	defer func() {
		_ = p.Stop()
		st.Probes = parseProbes(p.Output(), shift)
	}()
	now := slices.Clone(st.Remaining)
	if !up {
		now = append(now, f.extra.IP)
	}
	if err := waitProbes(ctx, p, shift, probeStartTimeout, nil, func(ps []probe) bool {
		return countAnswered(ps, now) >= warmProbes
	}); err != nil {
		return st, fmt.Errorf("probe of %s:%d from pod %s: %w", f.svc.ClusterIP, reactionPort, f.client.Name, err)
	}
	st.Call = time.Now()
	if up {
		f.seq++
		var made []cluster.Pod
		made, err = f.cl.CreatePods(ctx, []cluster.PodSpec{f.endpointSpec(f.seq)})
		st.Ret = time.Now()
		if err != nil {
			return st, fmt.Errorf("scale up: %w", err)
		}
		f.extra = made[0]
		st.Pod, st.IP = f.extra.Name, f.extra.IP
	} else {
		st.Pod, st.IP = f.extra.Name, f.extra.IP
		err = f.cl.DeletePods(ctx, []string{st.Pod})
		st.Ret = time.Now()
		if err != nil {
			return st, fmt.Errorf("scale down: %w", err)
		}
		f.extra = cluster.Pod{}
	}
	err = waitProbes(ctx, p, shift, reactionTimeout, func() bool { return controlEvent(track.Events(), st, f.client.Node) != nil },
		func(ps []probe) bool {
			st.Probes = ps
			return reacted(st)
		})
	if err != nil {
		what := map[bool]string{true: "reached the new endpoint " + st.IP, false: "stopped reaching the removed endpoint " + st.IP}[up]
		cp := "seen"
		if controlEvent(track.Events(), st, f.client.Node) == nil {
			cp = "not seen"
		}
		return st, fmt.Errorf("%s: the probe never %s (the control plane's new endpoint set %s)", err, what, cp)
	}
	return st, nil
}

// pollEvery returns how often a waiter looks at p's output first and at most: every localPoll
// when it is in this program's memory (cluster.LocalOutput: the lab's), from reactionPoll
// growing to reactionPollMax when reading it is an exec away (a cluster's). When a probe's
// output is read changes no figure (the probe stamps its probes), only how long a trial lasts
// past what it waits for.
func pollEvery(p cluster.Process) (first, most time.Duration) {
	if _, ok := p.(cluster.LocalOutput); ok {
		return localPoll, localPoll
	}
	return reactionPoll, reactionPollMax
}

// waitProbes polls the probe's output until done says it shows what it waits for, for at most
// d; an error says what the probe showed last. With gate, the output is read only once gate
// is true (the track's events are in memory, the output may be an exec away), as often as
// pollEvery says.
func waitProbes(ctx context.Context, p cluster.Process, shift, d time.Duration, gate func() bool, done func([]probe) bool) error {
	deadline := time.Now().Add(d)
	wait, most := pollEvery(p)
	var out []byte
	var ps []probe
	for {
		open := gate == nil || gate()
		if open {
			out = p.Output()
			ps = parseProbes(out, shift)
			if done(ps) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			last := "no probe"
			if len(ps) > 0 {
				l := ps[len(ps)-1]
				last = fmt.Sprintf("%d probes, the last %s (ok %v)", len(ps), l.Answer, l.OK)
			} else if t := strings.TrimSpace(string(out)); t != "" {
				last = "output " + excerptLines(t, 3)
			}
			return fmt.Errorf("after %s: %s", d, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if open {
			wait = min(wait*3/2, most)
		}
	}
}

// countAnswered counts the probes answered by one of eps.
func countAnswered(ps []probe, eps []string) int {
	n := 0
	for _, p := range ps {
		if p.OK && slices.Contains(eps, p.Answer) {
			n++
		}
	}
	return n
}

// reacted says whether the probes show the step's change: up, one answered by the new
// endpoint; down, the last settleProbes all after the removed pod was gone and answered by
// the endpoints that stay.
func reacted(st reactionStep) bool {
	if st.Up {
		return firstReaching(st) >= 0
	}
	n := len(st.Probes)
	if n < settleProbes {
		return false
	}
	for _, p := range st.Probes[n-settleProbes:] {
		if p.Start.Before(st.Ret) || !p.OK || !slices.Contains(st.Remaining, p.Answer) {
			return false
		}
	}
	return true
}

// firstReaching is the index of the first probe after the call answered by the new endpoint
// (-1: none yet).
func firstReaching(st reactionStep) int {
	for i, p := range st.Probes {
		if !p.Start.Before(st.Call) && p.OK && p.Answer == st.IP {
			return i
		}
	}
	return -1
}

// lastReaching is the index of the last probe since t that did not reach an endpoint that
// stays (answered by the removed endpoint, or failed: sent to an endpoint that is gone); -1
// when there is none. failed counts the probes since t that failed.
func lastReaching(st reactionStep, t time.Time) (last, failed int) {
	last = -1
	for i, p := range st.Probes {
		if p.Start.Before(t) {
			continue
		}
		if !p.OK {
			failed++
		}
		if !p.OK || !slices.Contains(st.Remaining, p.Answer) {
			last = i
		}
	}
	return last, failed
}

// podEvent is the first event of kind about the step's endpoint since its call (nil: none).
func podEvent(evs []cluster.EndpointEvent, st reactionStep, kind string) *cluster.EndpointEvent {
	for i, e := range evs {
		if e.Kind == kind && e.IP == st.IP && !e.At.Before(st.Call) {
			return &evs[i]
		}
	}
	return nil
}

// controlEvent is the first endpoint set since the step's call that holds the new endpoint
// (up) or no longer holds the removed one (down): the one programmed in node if the backend
// programs nodes itself, else the cluster's (nil: none yet).
func controlEvent(evs []cluster.EndpointEvent, st reactionStep, node string) *cluster.EndpointEvent {
	perNode := slices.ContainsFunc(evs, func(e cluster.EndpointEvent) bool { return e.Kind == cluster.EndpointsSet && e.Node != "" })
	for i, e := range evs {
		if e.Kind != cluster.EndpointsSet || e.At.Before(st.Call) || (perNode && e.Node != node) || (!perNode && e.Node != "") {
			continue
		}
		if slices.Contains(e.Endpoints, st.IP) == st.Up {
			return &evs[i]
		}
	}
	return nil
}

// stepTimes are one change's figures in milliseconds.
type stepTimes struct {
	total, control, data, overlap float64
	ready                         float64 // scale up: from the create call to the pod being ready
	failed                        int     // scale down: probes that failed
}

// times computes a step's figures from its probes and the track's events (see reaction).
func (st reactionStep) times(evs []cluster.EndpointEvent, node string) (stepTimes, error) {
	kind := map[bool]string{true: cluster.EndpointPodReady, false: cluster.EndpointPodDeleting}[st.Up]
	from := podEvent(evs, st, kind)
	if from == nil {
		return stepTimes{}, fmt.Errorf("endpoint %s (%s): no %s event", st.Pod, st.IP, kind)
	}
	ctl := controlEvent(evs, st, node)
	if ctl == nil {
		return stepTimes{}, fmt.Errorf("endpoint %s (%s): the control plane's new endpoint set was not seen", st.Pod, st.IP)
	}
	var t stepTimes
	if st.Up {
		i := firstReaching(st)
		if i < 0 {
			return stepTimes{}, fmt.Errorf("endpoint %s (%s): no probe reached it", st.Pod, st.IP)
		}
		t.total = ms(st.Probes[i].End.Sub(from.At))
		t.ready = ms(from.At.Sub(st.Call))
	} else {
		i, failed := lastReaching(st, from.At)
		if i >= 0 { // else no probe since the deletion reached it: faster than the probe
			t.total = ms(st.Probes[i].Start.Sub(from.At))
		}
		t.failed = failed
	}
	t.control = ms(ctl.At.Sub(from.At))
	t.data, t.overlap = phases(t.total, t.control)
	return t, nil
}

// addProbeConditions adds a probing trial's conditions to its figures: the offset applied to
// the pod's clock and its uncertainty, the client node's CPU over the trial (when both
// samples were read: cpuErr nil) and the case's set-up figures.
func addProbeConditions(m map[string]float64, shift, unc time.Duration, cpu, setup map[string]float64) {
	m["probe_clock_offset_ms"] = ms(shift)
	m["probe_clock_uncertainty_ms"] = ms(unc)
	for _, add := range []map[string]float64{cpu, setup} {
		for k, v := range add {
			m[k] = v
		}
	}
}

// reactionMetrics are a trial's figures: per direction the mean, P50 (nearest rank) and
// maximum reaction, the mean control and data parts; the mean time from a create call to its
// pod being ready, the probes that failed while endpoints were removed, the changes made and
// the probe's median interval (its resolution).
func reactionMetrics(steps []reactionStep, evs []cluster.EndpointEvent, node string) (map[string]float64, error) {
	var up, down []stepTimes
	var gaps []float64
	for _, st := range steps {
		t, err := st.times(evs, node)
		if err != nil {
			return nil, err
		}
		if st.Up {
			up = append(up, t)
		} else {
			down = append(down, t)
		}
		for i := 1; i < len(st.Probes); i++ {
			gaps = append(gaps, ms(st.Probes[i].Start.Sub(st.Probes[i-1].Start)))
		}
	}
	if len(up) == 0 || len(down) == 0 {
		return nil, errors.New("no change measured")
	}
	m := map[string]float64{"reaction_changes_count": float64(len(up))}
	for _, d := range []struct {
		name string
		ts   []stepTimes
	}{{"up", up}, {"down", down}} {
		var total, control, data, overlap []float64
		for _, t := range d.ts {
			total, control, data = append(total, t.total), append(control, t.control), append(data, t.data)
			overlap = append(overlap, t.overlap)
		}
		m["reaction_"+d.name+"_ms"] = mean(total)
		m["reaction_"+d.name+"_p50_ms"] = nearestRank(total, 50)
		m["reaction_"+d.name+"_max_ms"] = slices.Max(total)
		m["reaction_"+d.name+"_control_ms"] = mean(control)
		m["reaction_"+d.name+"_data_ms"] = mean(data)
		m["reaction_"+d.name+"_overlap_ms"] = mean(overlap)
	}
	var ready []float64
	failed := 0
	for _, t := range up {
		ready = append(ready, t.ready)
	}
	for _, t := range down {
		failed += t.failed
	}
	m["endpoint_ready_ms"] = mean(ready)
	m["probe_failed_count"] = float64(failed)
	if len(gaps) > 0 {
		m["probe_interval_ms"] = nearestRank(gaps, 50)
	}
	return m, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// nearestRank is the nearest-rank p-th percentile of xs (non-empty).
func nearestRank(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return stats.NearestRank(s, p)
}

// keepAround keeps the probes that tell a step's story: keepProbes on each side of its call
// and of the probe that dates the change (up: the first answered by the new endpoint; down:
// the last that reached the removed one), and, down, every probe since the call that reached
// something else than the endpoints that stay (failed, or answered by the removed endpoint)
// with the one after it. The figures read back from them are the step's. A step whose change
// never showed keeps keepUnshown probes from its call.
func keepAround(st reactionStep, ps []probe) []probe {
	first := sort.Search(len(ps), func(i int) bool { return !ps[i].Start.Before(st.Call) })
	s := st
	s.Probes = ps
	shows := firstReaching(s)
	if !st.Up {
		if shows, _ = lastReaching(s, st.Call); shows < 0 {
			shows = first // the change showed before the first probe after the call
		}
	}
	keep := make([]bool, len(ps))
	mark := func(from, to int) {
		for i := max(from, 0); i < min(to, len(ps)); i++ {
			keep[i] = true
		}
	}
	mark(first-keepProbes, first+keepProbes)
	if shows < 0 {
		mark(first, first+keepUnshown)
	} else {
		mark(shows-keepProbes, shows+keepProbes+1)
	}
	for i := first; !st.Up && i < len(ps); i++ {
		if p := ps[i]; !p.OK || !slices.Contains(st.Remaining, p.Answer) {
			mark(i, i+2)
		}
	}
	var out []probe
	for i, k := range keep {
		if k {
			out = append(out, ps[i])
		}
	}
	return out
}

// reactionRecord is a trial's raw output: per step a header and the probe lines that tell its
// story (keepAround; the times as the pod's clock gave them), then the track's events. It
// reads back with readReactionRecord.
func reactionRecord(steps []reactionStep, evs []cluster.EndpointEvent, node string, shift, unc time.Duration) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# reaction node %s shift_us %d uncertainty_us %d\n", node, shift.Microseconds(), unc.Microseconds())
	for _, st := range steps {
		dir := map[bool]string{true: "up", false: "down"}[st.Up]
		fmt.Fprintf(&b, "# step %s %s %s call %s ret %s remaining %s\n", dir, orDash(st.Pod), orDash(st.IP), fmtEpoch(st.Call), fmtEpoch(st.Ret), orDash(strings.Join(st.Remaining, ",")))
		for _, p := range keepAround(st, st.Probes) {
			code := 0
			if !p.OK {
				code = 1
			}
			fmt.Fprintf(&b, "p %s %s %d %s\n", fmtEpoch(p.Start.Add(shift)), fmtEpoch(p.End.Add(shift)), code, p.Answer)
		}
	}
	for _, e := range evs {
		fmt.Fprintf(&b, "# event %s %s ip %s node %s endpoints %s\n", e.Kind, fmtEpoch(e.At), orDash(e.IP), orDash(e.Node), orDash(strings.Join(e.Endpoints, ",")))
	}
	return b.Bytes()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func unDash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// readReactionRecord reads a trial's raw output back (reactionRecord): its steps, the track's
// events and the client's node.
func readReactionRecord(raw []byte) (steps []reactionStep, evs []cluster.EndpointEvent, node string, err error) {
	var shift time.Duration
	var probes bytes.Buffer
	flush := func() { // the probe lines read since the last step's header are its
		if len(steps) > 0 && probes.Len() > 0 {
			steps[len(steps)-1].Probes = parseProbes(probes.Bytes(), shift)
		}
		probes.Reset()
	}
	for n, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		bad := func() error { return fmt.Errorf("line %d: %q", n+1, line) }
		switch {
		case len(f) == 0:
		case f[0] != "#":
			probes.WriteString(line + "\n")
		case len(f) == 8 && f[1] == "reaction":
			node = f[3]
			us, err := strconv.ParseInt(f[5], 10, 64)
			if err != nil {
				return nil, nil, "", bad()
			}
			shift = time.Duration(us) * time.Microsecond
		case len(f) == 11 && f[1] == "step":
			flush()
			call, err1 := parseEpoch(f[6])
			ret, err2 := parseEpoch(f[8])
			if err1 != nil || err2 != nil {
				return nil, nil, "", bad()
			}
			st := reactionStep{Up: f[2] == "up", Pod: unDash(f[3]), IP: unDash(f[4]), Call: call, Ret: ret}
			if r := unDash(f[10]); r != "" {
				st.Remaining = strings.Split(r, ",")
			}
			steps = append(steps, st)
		case len(f) == 10 && f[1] == "event":
			at, err := parseEpoch(f[3])
			if err != nil {
				return nil, nil, "", bad()
			}
			e := cluster.EndpointEvent{Kind: f[2], At: at, IP: unDash(f[5]), Node: unDash(f[7])}
			if eps := unDash(f[9]); eps != "" {
				e.Endpoints = strings.Split(eps, ",")
			}
			evs = append(evs, e)
		default:
			return nil, nil, "", bad()
		}
	}
	flush()
	return steps, evs, node, nil
}

// Close deletes the Service and the pods.
func (f *reactionFixture) Close(ctx context.Context) error {
	var errs []error
	if f.svc.Name != "" {
		errs = append(errs, f.cl.DeleteServices(ctx, []string{f.svc.Name}))
	}
	pods := slices.Clone(f.pods)
	if f.extra.Name != "" {
		pods = append(pods, f.extra.Name)
	}
	if len(pods) > 0 {
		errs = append(errs, f.cl.DeletePods(ctx, pods))
	}
	return errors.Join(errs...)
}
