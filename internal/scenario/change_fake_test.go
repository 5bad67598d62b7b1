package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/connprobe"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// changeFake is clustertest's fake cluster whose data plane follows the changed Service on a
// schedule: it serves the Service's address from delay after the create call began, and stops
// serving it delay after the delete call began; the calls themselves take call. The prober's
// output is made up as cnibench's prober would have printed it, an attempt every interval,
// each answered by the endpoint while the address is served and refused otherwise; with flap,
// the first attempt after each switch still sees the old state for one more attempt after a
// first one saw the new (a data plane that obeys on and off). The pod's clock is skew ahead.
type changeFake struct {
	*clustertest.Fake
	delay, call, interval, skew time.Duration
	flap, never                 bool

	mu        sync.Mutex
	changed   string      // the changed Service's name
	plane     []planeFlip // when the address is served, over time
	probes    int
	probeArgv []string // the last prober's command
}

// planeFlip: from at on, the address is served or not; entered is when the call that made
// the flip entered the fake (the schedule counts from there).
type planeFlip struct {
	at, entered time.Time
	served      bool
}

func newChangeFake(delay time.Duration) *changeFake {
	return &changeFake{Fake: clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: "/fake/cnibench"}}), delay: delay, interval: time.Millisecond}
}

func (r *changeFake) flip(served bool, call time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.never {
		r.plane = append(r.plane, planeFlip{at: call.Add(r.delay), entered: call, served: served})
	}
}

func (r *changeFake) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	t0 := time.Now()
	out, err := r.Fake.CreateServices(ctx, specs)
	if err == nil && len(specs) == 1 && strings.HasSuffix(specs[0].Name, "changed") {
		r.mu.Lock()
		first := r.changed == ""
		r.changed = specs[0].Name
		r.mu.Unlock()
		if first { // set-up: served from now on
			r.mu.Lock()
			r.plane = []planeFlip{{at: t0, served: true}}
			r.mu.Unlock()
		} else {
			r.flip(true, t0)
		}
		time.Sleep(r.call)
	}
	return out, err
}

// CreateNetworkPolicies, UpdateNetworkPolicies and DeleteNetworkPolicies follow the changed
// policy of the policy kinds as CreateServices and DeleteServices follow the changed Service:
// the endpoint is served while no changed policy exists or while it admits the client.
func (r *changeFake) CreateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	t0 := time.Now()
	err := r.Fake.CreateNetworkPolicies(ctx, pols)
	if err == nil && len(pols) == 1 && strings.Contains(pols[0].Name, "changed-") {
		served := r.admitsClient(pols[0])
		r.mu.Lock()
		first := r.changed == ""
		r.changed = pols[0].Name
		if first {
			r.plane = []planeFlip{{at: t0, served: served}}
		}
		r.mu.Unlock()
		if !first {
			r.flip(served, t0)
		}
		time.Sleep(r.call)
	}
	return err
}

func (r *changeFake) UpdateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	t0 := time.Now()
	err := r.Fake.UpdateNetworkPolicies(ctx, pols)
	r.mu.Lock()
	ours := len(pols) == 1 && pols[0].Name == r.changed
	r.mu.Unlock()
	if err == nil && ours {
		r.flip(r.admitsClient(pols[0]), t0)
		time.Sleep(r.call)
	}
	return err
}

// admitsClient says whether p lets the client in: an ingress peer whose podSelector picks the
// client's labels, or whose ipBlock holds the client's address outside its excepts.
func (r *changeFake) admitsClient(p networkingv1.NetworkPolicy) bool {
	var client cluster.Pod
	for _, q := range r.Pods() {
		if strings.HasSuffix(q.Name, "client") {
			client = q
		}
	}
	ip := net.ParseIP(client.IP)
	holds := func(cidr string) bool {
		_, n, err := net.ParseCIDR(cidr)
		return err == nil && n.Contains(ip)
	}
	for _, in := range p.Spec.Ingress {
		for _, peer := range in.From {
			switch {
			case peer.PodSelector != nil && cluster.Selects(peer.PodSelector.MatchLabels, client.Labels):
				return true
			case peer.IPBlock != nil && holds(peer.IPBlock.CIDR) && !slices.ContainsFunc(peer.IPBlock.Except, holds):
				return true
			}
		}
	}
	return false
}

func (r *changeFake) DeleteNetworkPolicies(ctx context.Context, names []string) error {
	t0 := time.Now()
	r.mu.Lock()
	ours := slices.Contains(names, r.changed)
	r.mu.Unlock()
	if ours {
		r.flip(true, t0)
		time.Sleep(r.call)
	}
	return r.Fake.DeleteNetworkPolicies(ctx, names)
}

func (r *changeFake) DeleteServices(ctx context.Context, names []string) error {
	t0 := time.Now()
	r.mu.Lock()
	ours := slices.Contains(names, r.changed)
	r.mu.Unlock()
	if ours {
		r.flip(false, t0)
		time.Sleep(r.call)
	}
	return r.Fake.DeleteServices(ctx, names)
}

// callLagMS is the longest time, in ms, between the scenario's stamp of a change call (the
// raw record's "# step DIR call T") and that call entering the fake, where the data plane's
// schedule starts (the test logs it: 0.006-0.23 ms here, with and without four busy loops
// beside the test); a loaded machine runs a call late, and every figure measured from the
// stamp exceeds the schedule by as much as the lag of its change, never more: the tests' upper
// bounds take it as measured instead of a guess.
func (r *changeFake) callLagMS(t *testing.T, raw []byte) float64 {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	lag, steps := 0.0, 0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "#" || f[1] != "step" || f[3] != "call" {
			continue
		}
		var sec, usec int64
		if _, err := fmt.Sscanf(f[4], "%d.%d", &sec, &usec); err != nil {
			t.Fatalf("raw record: step call %q: %v", f[4], err)
		}
		call := time.Unix(sec, usec*1000)
		steps++
		for _, fl := range r.plane {
			if !fl.entered.IsZero() && !fl.entered.Before(call) {
				lag = max(lag, float64(fl.entered.Sub(call))/1e6)
				break
			}
		}
	}
	if steps == 0 {
		t.Fatalf("raw record has no step calls:\n%.600s", raw)
	}
	t.Logf("%d change calls, entering the fake up to %.3f ms after their stamps", steps, lag)
	return lag
}

// shiftErrMS is how far, in ms, the trial's estimate of the pod's clock offset (the raw
// record's "shift_us") is from the fake's true skew: the figures read that much low.
func (r *changeFake) shiftErrMS(t *testing.T, raw []byte) float64 {
	t.Helper()
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 7 && f[1] == "change" && f[5] == "shift_us" {
			var us int64
			if _, err := fmt.Sscanf(f[6], "%d", &us); err != nil {
				t.Fatalf("raw record: shift %q: %v", f[6], err)
			}
			return float64(us)/1e3 - float64(r.skew)/1e6
		}
	}
	t.Fatalf("raw record has no shift:\n%.600s", raw)
	return 0
}

// within tells whether got is want within tol, or above it by at most lag more (callLagMS).
func within(got, want, tol, lag float64) bool { return got >= want-tol && got <= want+lag+tol }

// servedAt says whether the address is served at t, and the index of the flip that says so
// (caller holds mu).
func (r *changeFake) servedAt(t time.Time) (bool, int) {
	served, idx := false, -1
	for i, s := range r.plane {
		if !s.at.After(t) {
			served, idx = s.served, i
		}
	}
	return served, idx
}

func (r *changeFake) Exec(ctx context.Context, pod string, argv []string) (cluster.ExecResult, error) {
	if slices.Equal(argv, clockCmd) {
		return cluster.ExecResult{Stdout: []byte(fmtEpoch(time.Now().Add(r.skew)) + "\n")}, nil
	}
	return r.Fake.Exec(ctx, pod, argv)
}

func (r *changeFake) Start(ctx context.Context, pod string, argv []string, ready cluster.Ready) (cluster.Process, error) {
	if !slices.Contains(argv, "probe") {
		return r.Fake.Start(ctx, pod, argv, ready)
	}
	r.mu.Lock()
	r.probes++
	r.probeArgv = argv
	r.mu.Unlock()
	return &madeUpProber{r: r, clockedProcess: clockedProcess{start: time.Now()}}, nil
}

// endpointIP is the answer of the fake's endpoint pod.
func (r *changeFake) endpointIP() string {
	for _, p := range r.Pods() {
		if strings.HasSuffix(p.Name, "endpoint") {
			return p.IP
		}
	}
	return ""
}

// madeUpProber is a prober whose output is made up from the data plane's schedule.
type madeUpProber struct {
	r *changeFake
	clockedProcess
}

func (p *madeUpProber) Output() []byte {
	end, stopped := p.until()
	ip := p.r.endpointIP()
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# probe target 10.96.0.1:80 interval_ns %d timeout_ns %d t0_ns %d\n", p.r.interval, 250*time.Millisecond, p.start.Add(p.r.skew).UnixNano())
	flapped := map[int]bool{}
	seenNew := map[int]int{}
	n := 0
	for i, t := 0, p.start; t.Before(end); i, t = i+1, t.Add(p.r.interval) {
		n++
		served, idx := p.r.servedAt(t)
		if p.r.flap && idx > 0 && !flapped[idx] {
			if seenNew[idx]++; seenNew[idx] == 2 { // the second attempt after the switch sees the old state
				flapped[idx] = true
				served = !served
			}
		}
		s, e := t.Add(p.r.skew).UnixNano(), t.Add(p.r.skew+150*time.Microsecond).UnixNano()
		if served {
			fmt.Fprintf(&b, "c %d %d %d ok %s\n", i, s, e, ip)
		} else {
			fmt.Fprintf(&b, "c %d %d %d refused -\n", i, s, e)
		}
	}
	if stopped {
		// one attempt in ten started late, as a prober the machine held up now and then says
		fmt.Fprintf(&b, "# end attempts %d missed 0 late %d\n", n, n/10)
	}
	return []byte(b.String())
}

func changeCase(kind string, services int) result.Case {
	c := result.Case{Scenario: "change", Backend: "fake", Dataplane: "fake", Placement: "inter", Protocol: "tcp", Services: services, Change: kind}
	c.ID = c.MakeID()
	return c
}

// shortChangeWaits makes the scenario's waits fit a unit test.
func shortChangeWaits(t *testing.T) {
	t.Helper()
	shortWaits(t)
	old := changeWait
	changeWait = 2 * time.Second
	t.Cleanup(func() { changeWait = old })
}

// A trial adds and removes the Service minChanges times each, a prober of its own for each
// change; the figures are the data plane's schedule: 30 ms from the call to the new state,
// within the stated resolution (half the probe's 1 ms interval); the calls' own 5 ms are the
// control part and the rest the data part. The pod's clock, 250 ms ahead, is taken off the
// attempts' times. The trial ends with the Service as it found it; Close removes everything.
func TestChangeOnFake(t *testing.T) {
	shortChangeWaits(t)
	r := newChangeFake(30 * time.Millisecond)
	r.call, r.skew = 5*time.Millisecond, 250*time.Millisecond
	f, err := change{}.Setup(context.Background(), r, changeCase("service", 3), Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Services()); n != 3 {
		t.Errorf("%d Services after set-up, want 3 (2 extra and the changed one)", n)
	}
	m, err := f.Trial(context.Background(), 0)
	if err != nil {
		t.Fatalf("trial: %v\n%s", err, m.Raw)
	}
	if r.probes != 2*minChanges {
		t.Errorf("%d probers started, want one per change (%d)", r.probes, 2*minChanges)
	}
	callLag, shiftErr := r.callLagMS(t, m.Raw), r.shiftErrMS(t, m.Raw)
	for k, want := range map[string]float64{
		"add_p50_ms": 30, "add_p99_ms": 30, "add_max_ms": 30, "add_all_p50_ms": 30, "add_control_p50_ms": 5, "add_data_p50_ms": 25,
		"remove_p50_ms": 30, "remove_p99_ms": 30, "remove_all_p99_ms": 30, "remove_control_p50_ms": 5,
		"probe_clock_offset_ms": 250, "probe_interval_ms": 1, "probe_resolution_ms": 0.5, "probe_late_pct": 10,
		"changes_count": minChanges, "add_flaps_count": 0, "remove_flaps_count": 0,
	} {
		tol, lag := 0.6, 0.0 // the resolution and the made-up attempts' alignment
		if strings.Contains(k, "control") || strings.Contains(k, "data") {
			tol = 2 // the calls' sleeps
		}
		v, ok := m.Metrics[k]
		if strings.HasPrefix(k, "add_") || strings.HasPrefix(k, "remove_") {
			lag = callLag
			if !strings.Contains(k, "control") { // times of the probe's attempts, moved by the shift
				v += shiftErr
			}
		}
		if !ok || !within(v, want, tol, lag) {
			t.Errorf("%s = %v (present %v, %+.3f ms for the clock estimate's error), want %v - %v + %v (the calls ran up to %.3f ms late)",
				k, m.Metrics[k], ok, shiftErr, want, tol, tol+lag, callLag)
		}
	}
	if !strings.Contains(string(m.Raw), "# step remove call ") || !strings.Contains(string(m.Raw), "# step add call ") {
		t.Errorf("raw record:\n%.2000s", m.Raw)
	}
	if n := len(r.Services()); n != 3 {
		t.Errorf("%d Services after the trial, want 3: the trial ends as it began", n)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.AssertEmpty(t)
}

// When the data plane obeys before the call returns (the lab's kernel uses a ruleset as soon
// as its transaction commits, before the tool that sent it exits) the phases overlap: 30 ms
// from the call to the new state, a call of 40 ms. The data part is then 0 and the overlap
// 10 ms, never a negative duration (all - control was -10 ms before).
func TestChangeOverlapOnFake(t *testing.T) {
	shortChangeWaits(t)
	r := newChangeFake(30 * time.Millisecond)
	r.call = 40 * time.Millisecond
	f, err := change{}.Setup(context.Background(), r, changeCase("service", 1), Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	m, err := f.Trial(context.Background(), 0)
	if err != nil {
		t.Fatalf("trial: %v\n%s", err, m.Raw)
	}
	for k, want := range map[string]float64{"add_p50_ms": 30, "add_control_p50_ms": 40, "add_data_p50_ms": 0, "add_overlap_p50_ms": 10,
		"remove_control_p50_ms": 40, "remove_data_p50_ms": 0, "remove_overlap_p50_ms": 10} {
		if v, ok := m.Metrics[k]; !ok || !near(v, want, 2) {
			t.Errorf("%s = %v (present %v), want %v ± 2", k, v, ok, want)
		}
	}
	for k, v := range m.Metrics {
		if result.IsDuration(k) && v < 0 {
			t.Errorf("%s = %v: a negative duration", k, v)
		}
	}
}

func TestPhases(t *testing.T) {
	for _, c := range []struct{ total, control, data, overlap float64 }{
		{30, 5, 25, 0}, {30, 40, 0, 10}, {30, 30, 0, 0}, {0, 3, 0, 3},
	} {
		d, o := phases(c.total, c.control)
		if d != c.data || o != c.overlap || d-o != c.total-c.control {
			t.Errorf("phases(%v, %v) = %v, %v; want %v, %v", c.total, c.control, d, o, c.data, c.overlap)
		}
	}
}

// The policy kind: with 5 policies standing over 3 silent pods, a policy denying all ingress
// to the endpoint is added and removed minChanges times each; the prober aims at the endpoint
// pod itself, and the figures are the data plane's schedule (40 ms) in both directions.
// Set-up leaves the deny in place, so the trial allows first and ends as it began; Close
// removes every policy and pod.
func TestChangePolicyOnFake(t *testing.T) {
	shortChangeWaits(t)
	r := newChangeFake(40 * time.Millisecond)
	r.call = 3 * time.Millisecond
	c := changeCase("policy", 1)
	c.Policies = 5
	f, err := change{}.Setup(context.Background(), r, c, Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	pols := func() (n int, deny bool) {
		for _, p := range r.Policies() {
			n++
			if p.Name == "changed-deny" {
				deny = len(p.Spec.Ingress) == 0 && p.Spec.PodSelector.MatchLabels["role"] == "endpoint" && len(p.Spec.PolicyTypes) == 1
			}
		}
		return n, deny
	}
	if n, deny := pols(); n != 6 || !deny {
		t.Errorf("%d policies after set-up (deny present and right: %v), want 5 standing and the deny", n, deny)
	}
	silent := 0
	for _, p := range r.Pods() {
		if p.Labels["role"] == "silent" {
			silent++
		}
	}
	if silent != 3 {
		t.Errorf("%d silent pods, want 3 for 5 policies (two each)", silent)
	}
	m, err := f.Trial(context.Background(), 0)
	if err != nil {
		t.Fatalf("trial: %v\n%.2000s", err, m.Raw)
	}
	if want := r.endpointIP() + ":8080"; !slices.Contains(r.probeArgv, want) {
		t.Errorf("prober %q does not aim at the endpoint %s", r.probeArgv, want)
	}
	callLag := r.callLagMS(t, m.Raw)
	for k, want := range map[string]float64{"deny_p50_ms": 40, "deny_p99_ms": 40, "allow_p50_ms": 40, "allow_all_p99_ms": 40,
		"deny_control_p50_ms": 3, "changes_count": minChanges, "policies_total": 5} {
		tol, lag := 0.6, callLag
		if strings.Contains(k, "control") {
			tol = 2
		}
		if strings.HasSuffix(k, "_count") || strings.HasSuffix(k, "_total") {
			lag = 0
		}
		if v, ok := m.Metrics[k]; !ok || !within(v, want, tol, lag) {
			t.Errorf("%s = %v (present %v), want %v - %v + %v (the calls ran up to %.3f ms late)", k, v, ok, want, tol, tol+lag, callLag)
		}
	}
	if i, j := strings.Index(string(m.Raw), "# step allow"), strings.Index(string(m.Raw), "# step deny"); i < 0 || j < i {
		t.Errorf("raw record does not start with an allow (set-up left the deny in place):\n%.600s", m.Raw)
	}
	if n, deny := pols(); n != 6 || !deny {
		t.Errorf("%d policies after the trial (deny %v), want 6 with the deny: the trial ends as it began", n, deny)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.AssertEmpty(t)
}

// The kinds that edit a standing policy: the policy admits the client after set-up (the
// endpoint answers); each "deny" edit makes it stop admitting the client and each "allow"
// edit admit it again (the fake's data plane follows what the edited policy admits, so an
// edit that did not change that would never show); the figures are the schedule's 40 ms.
// The trial ends with the client admitted; Close removes every policy and pod.
func TestChangePolicyEditsOnFake(t *testing.T) {
	shortChangeWaits(t)
	for _, kind := range []string{"selector", "except"} {
		t.Run(kind, func(t *testing.T) {
			r := newChangeFake(40 * time.Millisecond)
			r.call = 3 * time.Millisecond
			c := changeCase(kind, 1)
			c.Policies = 2
			f, err := change{}.Setup(context.Background(), r, c, Options{CPUs: [2]int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			edited := func() (networkingv1.NetworkPolicy, int) {
				var out networkingv1.NetworkPolicy
				pols := r.Policies()
				for _, p := range pols {
					if p.Name == "changed-"+kind {
						out = p
					}
				}
				return out, len(pols)
			}
			if p, n := edited(); n != 3 || !r.admitsClient(p) || p.Spec.PodSelector.MatchLabels["role"] != "endpoint" {
				t.Fatalf("after set-up: %d policies, the edited one %+v admits the client: %v; want 2 standing and one admitting", n, p.Spec, r.admitsClient(p))
			}
			m, err := f.Trial(context.Background(), 0)
			if err != nil {
				t.Fatalf("trial: %v\n%.2000s", err, m.Raw)
			}
			callLag := r.callLagMS(t, m.Raw)
			for k, want := range map[string]float64{"deny_p50_ms": 40, "deny_p99_ms": 40, "allow_p50_ms": 40, "allow_all_p99_ms": 40,
				"changes_count": minChanges, "policies_total": 2} {
				// Within the resolution (half the 1 ms interval) and a little, and above it by
				// at most how late the machine ran the calls, as measured (callLagMS; 41.6 ms
				// was seen with a tolerance of 1.5 ms guessed for it).
				lag := callLag
				if strings.HasSuffix(k, "_count") || strings.HasSuffix(k, "_total") {
					lag = 0
				}
				if v, ok := m.Metrics[k]; !ok || !within(v, want, 0.6, lag) {
					t.Errorf("%s = %v (present %v), want %v - 0.6 + %v (the calls ran up to %.3f ms late)", k, v, ok, want, 0.6+lag, callLag)
				}
			}
			if p, _ := edited(); !r.admitsClient(p) {
				t.Errorf("after the trial the policy does not admit the client: the trial ends as it began")
			}
			if n := strings.Count(strings.Join(r.History(), "\n"), "update policies changed-"+kind); n != 2*minChanges {
				t.Errorf("%d updates of the policy, want %d", n, 2*minChanges)
			}
			if err := f.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			r.AssertEmpty(t)
		})
	}
}

// A data plane that obeys on and off after a change has a later "all" than "first", and the
// disobeying attempt in between is counted.
func TestChangeFlaps(t *testing.T) {
	shortChangeWaits(t)
	r := newChangeFake(20 * time.Millisecond)
	r.flap = true
	f, err := change{}.Setup(context.Background(), r, changeCase("service", 1), Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	m, err := f.Trial(context.Background(), 0)
	if err != nil {
		t.Fatalf("trial: %v\n%s", err, m.Raw)
	}
	lag := r.callLagMS(t, m.Raw)
	for _, dir := range []string{"add", "remove"} {
		first, all, flaps := m.Metrics[dir+"_p50_ms"], m.Metrics[dir+"_all_p50_ms"], m.Metrics[dir+"_flaps_count"]
		if !within(first, 20, 0.6, lag) || !within(all, 22, 0.6, lag) || flaps != minChanges {
			t.Errorf("%s: first %v, all %v, flaps %v; want 20, 22 (the attempt after the flap), %d", dir, first, all, flaps, minChanges)
		}
	}
}

// A data plane that never follows fails the trial with what the probe saw last; the next
// trial (or Close) finds the fixture as the failed step left it.
func TestChangeNeverFollows(t *testing.T) {
	shortChangeWaits(t)
	changeWait = 300 * time.Millisecond
	r := newChangeFake(0)
	f, err := change{}.Setup(context.Background(), r, changeCase("service", 1), Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	r.never = true
	m, err := f.Trial(context.Background(), 0)
	if err == nil || !strings.Contains(err.Error(), "remove: the probe of 10.96.") || !strings.Contains(err.Error(), "never settled") {
		t.Errorf("trial: %v, want: remove never settled", err)
	}
	if !strings.Contains(string(m.Raw), "# step remove call") {
		t.Errorf("raw record:\n%.1000s", m.Raw)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.AssertEmpty(t)
}

// A backend whose pods cannot run cnibench skips the case; an unknown kind is an error.
func TestChangeNeedsProber(t *testing.T) {
	_, err := change{}.Setup(context.Background(), clustertest.New(clustertest.Config{}), changeCase("service", 1), Options{})
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "prober") {
		t.Errorf("setup without cnibench in pods: %v", err)
	}
	info := change{}.Info()
	if err := info.Check(changeCase("nope", 1)); err == nil || !strings.Contains(err.Error(), `unknown change "nope"`) {
		t.Errorf("check of an unknown kind: %v", err)
	}
	if err := info.Check(changeCase("service", 0)); err == nil {
		t.Error("check of services 0: no error")
	}
	c := changeCase("service", 1)
	if c.Primary() != "add_p50_ms" || c.BaselineID() != "" || Shares(c) || info.Tool != driver.ProbeTool {
		t.Errorf("primary %s, baseline %q, shares %v, tool %s", c.Primary(), c.BaselineID(), Shares(c), info.Tool)
	}
	if !strings.Contains(c.ID, "change=service") {
		t.Errorf("id %s has no change label", c.ID)
	}
}

// realProber is cnibench's prober run in this process (connprobe.Run), its output kept.
type realProber struct {
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	out    []byte
}

func (p *realProber) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = append(p.out, b...)
	return len(b), nil
}

func (p *realProber) Output() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.out)
}

func (p *realProber) Stop() error {
	p.cancel()
	return <-p.done
}

// servingFake is changeFake with a real data plane on loopback: a listener that answers each
// connection with the endpoint's address while the schedule says the Service is served, and
// closes it unanswered otherwise; the scenario's prober is cnibench's, run in this process
// against the listener.
type servingFake struct {
	*changeFake
	ln net.Listener
}

func newServingFake(t *testing.T, delay time.Duration) *servingFake {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &servingFake{changeFake: newChangeFake(delay), ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			served, _ := s.servedAt(time.Now())
			s.mu.Unlock()
			if served {
				_, _ = c.Write([]byte(s.endpointIP() + "\n"))
			}
			c.Close()
		}
	}()
	return s
}

func (s *servingFake) Start(ctx context.Context, pod string, argv []string, ready cluster.Ready) (cluster.Process, error) {
	if !slices.Contains(argv, "probe") {
		return s.Fake.Start(ctx, pod, argv, ready)
	}
	s.mu.Lock()
	s.probes++
	s.mu.Unlock()
	pctx, cancel := context.WithCancel(context.Background())
	p := &realProber{cancel: cancel, done: make(chan error, 1)}
	opt := connprobe.Options{Targets: []netip.AddrPort{netip.MustParseAddrPort(s.ln.Addr().String())}, Interval: changeInterval, Timeout: changeTimeout,
		MaxInflight: connprobe.DefaultMaxInflight}
	go func() {
		_, err := connprobe.Run(pctx, p, opt)
		p.done <- err
	}()
	return p, nil
}

// Precision, stated and tested: a data plane that takes a known 25 ms to follow each change
// (the fake engine's delay, from the start of the call), probed over real loopback
// connections by cnibench's prober every 0.5 ms: the scenario reports 25 ms within 1 ms at
// P50, in both directions. Every change is within its own stated resolution (half the gap
// between the attempts around it) plus the way from an attempt's stamp to the listener's
// accept: P99, here the worst of 20, is within the trial's widest resolution, which is a
// quarter of a millisecond unless this VM held the prober up (a stall of a few milliseconds
// happens now and then: the figure then says the change was measured more coarsely, rather
// than a wrong time with a false precision).
func TestChangePrecision(t *testing.T) {
	shortChangeWaits(t)
	old := changeInterval
	changeInterval = 500 * time.Microsecond
	t.Cleanup(func() { changeInterval = old })
	const delay = 25 * time.Millisecond
	s := newServingFake(t, delay)
	f, err := change{}.Setup(context.Background(), s, changeCase("service", 1), Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	m, err := f.Trial(context.Background(), 0)
	if err != nil {
		t.Fatalf("trial: %v\n%.3000s", err, m.Raw)
	}
	for _, k := range []string{"add_p50_ms", "remove_p50_ms", "add_all_p50_ms", "remove_all_p50_ms"} {
		if v, ok := m.Metrics[k]; !ok || !near(v, ms(delay), 1) {
			t.Errorf("%s = %v ms (present %v), want %v ms within 1 ms", k, v, ok, ms(delay))
		}
	}
	widest := m.Metrics["probe_resolution_max_ms"]
	for _, k := range []string{"add_p99_ms", "remove_p99_ms"} {
		if v := m.Metrics[k]; !near(v, ms(delay), max(1, widest+0.3)) {
			t.Errorf("%s = %v ms, want %v ms within max(1, the widest resolution %v + 0.3) ms", k, v, ms(delay), widest)
		}
	}
	// The mean resolution is half the interval when the prober kept its schedule; a trial in
	// which the machine held it up (a CI run: 0.99 ms mean; this VM's timer wake-ups on a bad
	// day: 17-45 % of the attempts late, 0.48-1.4 ms, the test as it was failing on the
	// commit before this check too) says so in probe_late_pct, and its resolution is coarser,
	// as it reports. Up to 5 % late (seen: 2.7 %, 0.26 ms; 4.4 %, 0.33 ms) it holds.
	late, ok := m.Metrics["probe_late_pct"]
	if !ok || late < 0 || late > 100 {
		t.Errorf("probe_late_pct = %v (present %v), want a share", late, ok)
	}
	if r := m.Metrics["probe_resolution_ms"]; r <= 0 || (late <= 5 && r > 0.5) {
		t.Errorf("mean resolution %v ms with %.1f %% of the attempts late, want at most half the interval", r, late)
	}
	t.Logf("add P50 %.3f P99 %.3f, remove P50 %.3f P99 %.3f ms; resolution %.3f ms (widest %.3f), interval %.3f ms, %.1f %% of attempts late", m.Metrics["add_p50_ms"], m.Metrics["add_p99_ms"],
		m.Metrics["remove_p50_ms"], m.Metrics["remove_p99_ms"], m.Metrics["probe_resolution_ms"], widest, m.Metrics["probe_interval_ms"], late)
}

// The kinds' figures carry ClusterLoader2's measurement names in the perfdash export.
func TestChangePerfdashNames(t *testing.T) {
	want := map[string]string{"add_ms": "NetworkProgrammingLatency", "remove_ms": "NetworkProgrammingLatency",
		"deny_ms": "NetworkPolicyEnforcementLatency", "allow_ms": "NetworkPolicyEnforcementLatency"}
	metrics := map[string]result.MetricSummary{}
	for g := range want {
		metrics[strings.TrimSuffix(g, "_ms")+"_p50_ms"] = result.MetricSummary{N: 1, Mean: 1, TrimmedMean: 1, Median: 1, Min: 1, Max: 1}
	}
	r := result.Run{HasSummary: true, Summary: result.Summary{Run: "r", Results: []result.CaseResult{{Case: changeCase("policy", 1), Status: "ok", Metrics: metrics}}}}
	var b strings.Builder
	if err := result.WritePerfdash(&b, r); err != nil {
		t.Fatal(err)
	}
	var pd result.PerfData
	if err := json.Unmarshal([]byte(b.String()), &pd); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range pd.DataItems {
		got[it.Labels["metric"]] = it.Labels["measurement"]
	}
	if !maps.Equal(got, want) {
		t.Errorf("measurement names %v, want %v", got, want)
	}
}

// A step's figures end with the attempts that settled it: an attempt that disobeys after them
// is a relapse, not a flap, and does not move "all"; without a settling point every attempt
// counts, and a last attempt that disobeys is an error.
func TestChangeStepWindow(t *testing.T) {
	call := time.Unix(1000, 0)
	var as []driver.ProbeAttempt
	for i := range 300 {
		start := call.Add(time.Duration(i-10) * time.Millisecond)
		a := driver.ProbeAttempt{Seq: int64(i), Start: start, End: start.Add(time.Millisecond), Result: driver.ProbeOK, Answer: "10.0.0.9"}
		if i < 20 || i == 30 || i >= 290 { // not served before the change, once after, and at the end
			a.Result, a.Answer = "timeout", ""
		}
		as = append(as, a)
	}
	served := func(do bool, a driver.ProbeAttempt) bool { return (a.Result == driver.ProbeOK) == do }
	st := changeStep{Do: true, Call: call, Ret: call.Add(time.Millisecond), ProgramMS: -1, Attempts: as, Settled: 150}
	tm, err := st.times(served)
	if err != nil {
		t.Fatal(err)
	}
	if !near(tm.first, 9.5, 0.01) || !near(tm.all, 20.5, 0.01) || tm.flaps != 1 || tm.relapses != 10 {
		t.Errorf("first %v, all %v, flaps %d, relapses %d; want 9.5, 20.5, 1, 10", tm.first, tm.all, tm.flaps, tm.relapses)
	}
	st.Settled = -1
	if _, err := st.times(served); err == nil || !strings.Contains(err.Error(), "last attempt") {
		t.Errorf("without a settling point: %v, want the last attempt's error", err)
	}
}
