package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
)

// reactionFake is clustertest's fake cluster with a data plane that follows endpoint changes
// on a schedule: a pod that the tracked Service selects is ready when created; the control
// plane holds the new endpoint set control later (events of the track, per node when perNode,
// else the cluster's); the data plane sends probes by it data after that. The probe's output is
// made up as it would have been, one probe every probeEvery, the endpoints answering in turn;
// the pod's clock is skew ahead of this host's.
type reactionFake struct {
	*clustertest.Fake
	control, data, probeEvery, skew time.Duration
	perNode                         bool
	never                           bool // the data plane never follows

	mu      sync.Mutex
	svc     cluster.Service
	sel     map[string]string
	plane   []planeState // the data plane's endpoint sets over time
	events  []cluster.EndpointEvent
	tracks  int
	stopped int
	probes  int // probe processes started
}

// planeState is the endpoint set the data plane uses from at on.
type planeState struct {
	at  time.Time
	eps []string
}

func newReactionFake(control, data time.Duration) *reactionFake {
	return &reactionFake{Fake: clustertest.New(clustertest.Config{}), control: control, data: data, probeEvery: time.Millisecond}
}

func (r *reactionFake) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	out, err := r.Fake.CreateServices(ctx, specs)
	if err == nil && len(out) == 1 {
		r.mu.Lock()
		r.svc, r.sel = out[0], specs[0].Selector
		r.plane = []planeState{{at: time.Now(), eps: slices.Clone(out[0].Endpoints)}}
		r.mu.Unlock()
	}
	return out, err
}

// endpointsAt is the data plane's endpoint set at t (caller holds mu).
func (r *reactionFake) endpointsAt(t time.Time) []string {
	var eps []string
	for _, s := range r.plane {
		if !s.at.After(t) {
			eps = s.eps
		}
	}
	return eps
}

// change schedules a change of the endpoint set: the control plane's events and the data
// plane's switch (caller holds mu).
func (r *reactionFake) change(ip string, add bool, at time.Time) {
	last := slices.Clone(r.plane[len(r.plane)-1].eps)
	if add {
		last = append(last, ip)
	} else {
		last = slices.DeleteFunc(last, func(s string) bool { return s == ip })
	}
	slices.Sort(last)
	kind := map[bool]string{true: cluster.EndpointPodReady, false: cluster.EndpointPodDeleting}[add]
	r.events = append(r.events, cluster.EndpointEvent{Kind: kind, At: at, IP: ip})
	if r.perNode {
		for i, n := range []string{"node0", "node1"} {
			r.events = append(r.events, cluster.EndpointEvent{Kind: cluster.EndpointsSet, At: at.Add(r.control + time.Duration(i)*time.Millisecond), Endpoints: last, Node: n})
		}
	} else {
		r.events = append(r.events, cluster.EndpointEvent{Kind: cluster.EndpointsSet, At: at.Add(r.control), Endpoints: last})
	}
	if !r.never {
		r.plane = append(r.plane, planeState{at: at.Add(r.control + r.data), eps: last})
	}
}

func (r *reactionFake) CreatePods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	out, err := r.Fake.CreatePods(ctx, specs)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range out {
		if r.sel != nil && cluster.Selects(r.sel, p.Labels) {
			r.change(p.IP, true, time.Now())
		}
	}
	return out, nil
}

func (r *reactionFake) DeletePods(ctx context.Context, names []string) error {
	r.mu.Lock()
	for _, n := range names {
		if p, ok := r.Pod(n); ok && r.sel != nil && cluster.Selects(r.sel, p.Labels) {
			r.change(p.IP, false, time.Now())
		}
	}
	r.mu.Unlock()
	return r.Fake.DeletePods(ctx, names)
}

// Exec answers the pod's clock (skewed) and connections to the Service (by the data plane's
// first endpoint); the rest goes to the fake.
func (r *reactionFake) Exec(ctx context.Context, pod string, argv []string) (cluster.ExecResult, error) {
	if slices.Equal(argv, clockCmd) {
		return cluster.ExecResult{Stdout: []byte(fmtEpoch(time.Now().Add(r.skew)) + "\n")}, nil
	}
	r.mu.Lock()
	svc := r.svc
	eps := r.endpointsAt(time.Now())
	r.mu.Unlock()
	if len(argv) > 1 && argv[1] == "nc" && slices.Contains(argv, svc.ClusterIP) {
		if len(eps) == 0 {
			return cluster.ExecResult{ExitCode: 1}, nil
		}
		return cluster.ExecResult{Stdout: []byte(eps[0] + "\n")}, nil
	}
	return r.Fake.Exec(ctx, pod, argv)
}

// Start starts the made-up probe.
func (r *reactionFake) Start(ctx context.Context, pod string, argv []string, ready cluster.Ready) (cluster.Process, error) {
	if !slices.Contains(argv, probeScript) {
		return r.Fake.Start(ctx, pod, argv, ready)
	}
	r.mu.Lock()
	r.probes++
	r.mu.Unlock()
	return &fakeProbe{r: r, clockedProcess: clockedProcess{start: time.Now()}}, nil
}

// clockedProcess is a made-up process that runs from start until Stop; its output is made up
// from the time it ran.
type clockedProcess struct {
	start time.Time
	mu    sync.Mutex
	end   time.Time
}

func (p *clockedProcess) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end.IsZero() {
		p.end = time.Now()
	}
	return nil
}

// until is when the process stopped (stopped true), or now while it runs.
func (p *clockedProcess) until() (end time.Time, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end.IsZero() {
		return time.Now(), false
	}
	return p.end, true
}

// fakeProbe is a probe process whose output is made up from the data plane's schedule.
type fakeProbe struct {
	r *reactionFake
	clockedProcess
}

func (p *fakeProbe) Output() []byte {
	end, _ := p.until()
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	var b strings.Builder
	for i, t := 0, p.start; t.Before(end); i, t = i+1, t.Add(p.r.probeEvery) {
		eps := p.r.endpointsAt(t)
		if len(eps) == 0 {
			fmt.Fprintf(&b, "p %s %s 1 nc: can't connect to remote host (%s): Connection refused\n", fmtEpoch(t.Add(p.r.skew)), fmtEpoch(t.Add(p.r.skew+200*time.Microsecond)), p.r.svc.ClusterIP)
			continue
		}
		fmt.Fprintf(&b, "p %s %s 0 %s\n", fmtEpoch(t.Add(p.r.skew)), fmtEpoch(t.Add(p.r.skew+200*time.Microsecond)), eps[i%len(eps)])
	}
	return []byte(b.String())
}

func (r *reactionFake) TrackEndpoints(ctx context.Context, service string) (cluster.EndpointTrack, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if service != r.svc.Name {
		return nil, fmt.Errorf("no service %s", service)
	}
	r.tracks++
	return &fakeTrack{r: r, from: time.Now()}, nil
}

type fakeTrack struct {
	r    *reactionFake
	from time.Time
}

// Events are the events from the track's start that have happened by now.
func (t *fakeTrack) Events() []cluster.EndpointEvent {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	now := time.Now()
	var out []cluster.EndpointEvent
	for _, e := range t.r.events {
		if !e.At.Before(t.from) && !e.At.After(now) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b cluster.EndpointEvent) int { return a.At.Compare(b.At) })
	return out
}

func (t *fakeTrack) Stop() {
	t.r.mu.Lock()
	t.r.stopped++
	t.r.mu.Unlock()
}

// shortWaits makes the scenario's waits fit a unit test.
func shortWaits(t *testing.T) {
	t.Helper()
	old := []time.Duration{reactionTimeout, probeStartTimeout, reactionPoll, reactionPollMax}
	reactionTimeout, probeStartTimeout, reactionPoll, reactionPollMax = 2*time.Second, 2*time.Second, 5*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() {
		reactionTimeout, probeStartTimeout, reactionPoll, reactionPollMax = old[0], old[1], old[2], old[3]
	})
}

func reactionCase(pl string) result.Case {
	c := result.Case{Scenario: "reaction", Backend: "fake", Dataplane: "fake", Placement: pl, Protocol: "tcp"}
	c.ID = c.MakeID()
	return c
}

// near says whether got is within tol of want.
func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// A trial scales the Service up and down for its duration, at least three times (a trial of 0 s
// does that many), each change with a probe of its own; the reaction is what the data plane's schedule
// says: control + data up and down, the control part as the track's events say (the client's
// node when the backend programs nodes itself). The pod's clock, 250 ms ahead, is read and
// taken off the probes' times. The Service, the endpoints and the client go on Close.
func TestReactionOnFake(t *testing.T) {
	shortWaits(t)
	for _, perNode := range []bool{false, true} {
		t.Run(fmt.Sprintf("per-node=%v", perNode), func(t *testing.T) {
			r := newReactionFake(30*time.Millisecond, 10*time.Millisecond)
			r.perNode, r.skew = perNode, 250*time.Millisecond
			f, err := reaction{}.Setup(context.Background(), r, reactionCase("inter"), Options{CPUs: [2]int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := f.Trial(context.Background(), 0)
			if err != nil {
				t.Fatalf("trial: %v\n%s", err, m.Raw)
			}
			pods := r.Pods()
			if len(pods) != 2 || pods[0].Node != "node0" || pods[1].Node != "node1" || pods[1].Name != "ep0" {
				t.Errorf("pods after the trial %+v, want the client on node0 and ep0 on node1", pods)
			}
			if r.probes != 2*minReactionPairs || r.tracks != 1 || r.stopped != 1 {
				t.Errorf("%d probes, %d tracks (%d stopped), want %d probes, one track", r.probes, r.tracks, r.stopped, 2*minReactionPairs)
			}
			// The data plane follows 40 ms after the change; a probe every 1 ms, two endpoints
			// answering in turn: the first probe to the new one within 2 ms of it.
			for k, want := range map[string]float64{
				"reaction_up_ms": 40, "reaction_up_p50_ms": 40, "reaction_up_max_ms": 40, "reaction_up_control_ms": 30, "reaction_up_data_ms": 10,
				"reaction_down_ms": 40, "reaction_down_p50_ms": 40, "reaction_down_max_ms": 40, "reaction_down_control_ms": 30, "reaction_down_data_ms": 10,
				"probe_clock_offset_ms": 250, "probe_interval_ms": 1,
			} {
				tol := 2.5
				if perNode && strings.Contains(k, "control") { // node0's programming, not node1's 1 ms later
					tol = 0.5
				}
				if v, ok := m.Metrics[k]; !ok || !near(v, want, tol) {
					t.Errorf("%s = %v (present %v), want %v ± %v", k, v, ok, want, tol)
				}
			}
			if m.Metrics["reaction_changes_count"] != minReactionPairs || m.Metrics["probe_failed_count"] != 0 || m.Metrics["endpoint_ready_ms"] > 1 {
				t.Errorf("changes %v, failed %v, ready %v", m.Metrics["reaction_changes_count"], m.Metrics["probe_failed_count"], m.Metrics["endpoint_ready_ms"])
			}
			if _, ok := m.Metrics["service_program_ms"]; !ok {
				t.Errorf("no setup figures: %v", m.Metrics)
			}
			// The raw output reads back into the same figures.
			steps, evs, node, err := readReactionRecord(m.Raw)
			if err != nil || node != "node0" || len(steps) != 2*minReactionPairs {
				t.Fatalf("record: %d steps, node %q, %v", len(steps), node, err)
			}
			again, err := reactionMetrics(steps, evs, node)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"reaction_up_ms", "reaction_down_max_ms", "reaction_up_control_ms", "reaction_down_data_ms"} {
				if !near(again[k], m.Metrics[k], 0.005) { // the record keeps microseconds
					t.Errorf("%s from the record: %v, from the trial %v", k, again[k], m.Metrics[k])
				}
			}
			if err := f.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			r.AssertEmpty(t)
		})
	}
}

// A data plane that never follows fails the trial, saying which endpoint the probe never
// reached and that the control plane did have it; the endpoint it added goes with the next
// trial or Close.
func TestReactionNeverFollows(t *testing.T) {
	shortWaits(t)
	reactionTimeout = 300 * time.Millisecond
	r := newReactionFake(10*time.Millisecond, 0)
	r.never = true
	f, err := reaction{}.Setup(context.Background(), r, reactionCase("intra"), Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.Trial(context.Background(), 1)
	if err == nil || !strings.Contains(err.Error(), "never reached the new endpoint 10.244.0.4") || !strings.Contains(err.Error(), "set seen") {
		t.Errorf("trial: %v, want: never reached the new endpoint (control plane seen)", err)
	}
	if !strings.Contains(string(m.Raw), "# step up ep1 10.244.0.4") {
		t.Errorf("raw output:\n%s", m.Raw)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.AssertEmpty(t)
}

// A backend that cannot tell when endpoints change skips the case.
func TestReactionNeedsTracker(t *testing.T) {
	_, err := reaction{}.Setup(context.Background(), clustertest.New(clustertest.Config{}), reactionCase("intra"), Options{})
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "does not tell when a Service's endpoints change") {
		t.Errorf("setup on a backend without endpoint tracking: %v", err)
	}
}

// The case: the proxy is its variant, the tool the probe's, and it stands alone in its
// cluster (its changes reprogram every Service).
func TestReactionInfo(t *testing.T) {
	info := reaction{}.Info()
	c := reactionCase("intra")
	if info.Tool != "nc" || !slices.Equal(info.Params, []string{"proxy"}) || info.Exclusive == nil || !info.Exclusive(c) || Shares(c) {
		t.Errorf("info %+v", info)
	}
	if c.Primary() != "reaction_up_ms" || c.BaselineID() != "" {
		t.Errorf("primary %s, baseline %q", c.Primary(), c.BaselineID())
	}
}
