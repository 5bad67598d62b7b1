package scenario

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

// The probe's output as busybox wrote it (testdata/reaction-probe-busybox.txt, recorded on
// this host with probeScript pinned to CPU 0: five connections to a server answering like the
// lab's silent pods, an HTTP response whose last line is the address, one accepted and closed
// without a word as that server went away, then nothing listening). Each probe's answer is the
// last line its endpoint wrote; a refused connection is a failed probe with nc's message; an
// unfinished last line waits for the next reading; the shift moves the times.
func TestParseProbes(t *testing.T) {
	out, err := os.ReadFile("testdata/reaction-probe-busybox.txt")
	if err != nil {
		t.Fatal(err)
	}
	ps := parseProbes(append(out, "p 1795629328.9"...), 0)
	if len(ps) != 77 {
		t.Fatalf("%d probes, want 77", len(ps))
	}
	for i, p := range ps {
		switch {
		case i < 5:
			if !p.OK || p.Answer != "127.0.0.1" {
				t.Errorf("probe %d: %+v, want answered by 127.0.0.1", i, p)
			}
		case i == 5:
			if !p.OK || p.Answer != "" {
				t.Errorf("probe %d: %+v, want connected without an answer", i, p)
			}
		default:
			if p.OK || p.Answer != "nc: can't connect to remote host (127.0.0.1): Connection refused" {
				t.Errorf("probe %d: %+v, want refused", i, p)
			}
		}
		if d := p.End.Sub(p.Start); d <= 0 || d > 10*time.Millisecond {
			t.Errorf("probe %d took %v", i, d)
		}
		if i > 0 && p.Start.Before(ps[i-1].End) {
			t.Errorf("probe %d starts before %d ends", i, i-1)
		}
	}
	if got := ps[0].Start; got != time.Unix(1795629328, 403254000) {
		t.Errorf("first start %v", got)
	}
	if got := parseProbes(out, 250*time.Millisecond)[0].Start; got != time.Unix(1795629328, 153254000) {
		t.Errorf("shifted start %v", got)
	}
	if len(parseProbes([]byte("p 1795629328.403254 1795629328.404431 0 10.0.0.1"), 0)) != 0 || parseProbes(nil, 0) != nil {
		t.Error("an unfinished line made a probe")
	}
	if _, err := parseEpoch("17x.5"); err == nil {
		t.Error("a bad time parsed")
	}
}

// readMetrics reads a recording's figures ("name value" lines).
func readMetrics(t *testing.T, path string) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s: %q", path, line)
		}
		m[k] = f
	}
	return m
}

// Trials recorded on the lab (internal/lab TestReactionOnLab with CNIBENCH_RECORD_REACTION:
// calico with kube-proxy's iptables and nftables layouts and the eBPF load balancer, three
// scale ups and downs each) read back from their raw output into the figures the trial
// computed: the probes that tell each change's story, the track's events, the client's node.
func TestReactionRecordings(t *testing.T) {
	files, _ := filepath.Glob("testdata/reaction-*.metrics")
	if len(files) < 3 {
		t.Fatalf("recordings: %v", files)
	}
	for _, f := range files {
		name := strings.TrimSuffix(f, ".metrics")
		t.Run(filepath.Base(name), func(t *testing.T) {
			want := readMetrics(t, f)
			raw, err := os.ReadFile(name + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			steps, evs, node, err := readReactionRecord(raw)
			if err != nil {
				t.Fatal(err)
			}
			if node == "" || len(steps) != 2*int(want["reaction_changes_count"]) {
				t.Fatalf("node %q, %d steps for %v changes", node, len(steps), want["reaction_changes_count"])
			}
			got, err := reactionMetrics(steps, evs, node)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range want {
				if k == "probe_interval_ms" || strings.HasPrefix(k, "probe_clock") { // the record keeps some probes; the clock is the trial's
					continue
				}
				// Recorded before the overlap was split off, the data part was total - control
				// (negative where the kernel followed before the programming returned): now it is
				// data - overlap, each part never negative.
				if dir, ok := strings.CutSuffix(k, "_data_ms"); ok {
					d, o := got[k], got[dir+"_overlap_ms"]
					if d < 0 || o < 0 || !near(d-o, v, 0.005) {
						t.Errorf("%s = %v and %s_overlap_ms = %v, recorded data %v (= data - overlap)", k, d, dir, o, v)
					}
					continue
				}
				if !near(got[k], v, 0.005) {
					t.Errorf("%s = %v, recorded %v", k, got[k], v)
				}
			}
			if got["reaction_up_ms"] <= 0 || got["reaction_down_ms"] < 0 || got["reaction_up_control_ms"] <= 0 {
				t.Errorf("figures %v", got)
			}
		})
	}
}

// One change's figures from its probes and events: up, from the pod being ready to the end of
// the first probe the new endpoint answered (the change happened before it connected, which may
// be after the probe's stamp); down, from the deletion to the last probe that did not reach
// the endpoint that stays (failed ones count as reaching the removed one, and are counted; none
// since the deletion: 0); the control part until the client's node (or the cluster) held the
// new set, whichever the backend reports. A step without its events, or whose probes never
// show a new endpoint, is an error.
func TestStepTimes(t *testing.T) {
	t0 := time.Unix(1795629000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	probes := func(answers ...string) []probe {
		var ps []probe
		for i, a := range answers {
			p := probe{Start: at(float64(i)), End: at(float64(i) + 0.5), OK: a != "x", Answer: a}
			if a == "x" {
				p.Answer = "nc: can't connect to remote host (10.96.0.10): Connection refused"
			}
			ps = append(ps, p)
		}
		return ps
	}
	up := reactionStep{Up: true, Pod: "ep1", IP: "B", Call: at(0), Remaining: []string{"A"}, Probes: probes("A", "A", "A", "A", "A", "B", "A", "B")}
	evs := []cluster.EndpointEvent{
		{Kind: cluster.EndpointPodReady, At: at(1), IP: "B"},
		{Kind: cluster.EndpointsSet, At: at(3), Endpoints: []string{"A", "B"}, Node: "node1"},
		{Kind: cluster.EndpointsSet, At: at(4), Endpoints: []string{"A", "B"}, Node: "node0"},
	}
	got, err := up.times(evs, "node0")
	if err != nil || got != (stepTimes{total: 4.5, control: 3, data: 1.5, ready: 1}) {
		t.Errorf("up: %+v %v", got, err)
	}
	cl := []cluster.EndpointEvent{evs[0], {Kind: cluster.EndpointsSet, At: at(2.5), Endpoints: []string{"A", "B"}}}
	if got, err := up.times(cl, "node0"); err != nil || got.control != 1.5 {
		t.Errorf("up on a cluster: %+v %v", got, err)
	}

	down := reactionStep{Pod: "ep1", IP: "B", Call: at(0), Remaining: []string{"A"}, Probes: probes("B", "A", "B", "x", "A", "A", "A")}
	devs := []cluster.EndpointEvent{
		{Kind: cluster.EndpointPodDeleting, At: at(0.5), IP: "B"},
		{Kind: cluster.EndpointsSet, At: at(2), Endpoints: []string{"A"}, Node: "node0"},
	}
	got, err = down.times(devs, "node0")
	if err != nil || got != (stepTimes{total: 2.5, control: 1.5, data: 1, failed: 1}) {
		t.Errorf("down: %+v %v", got, err)
	}
	fast := down
	fast.Probes = probes("B", "A", "A")
	// Faster than a probe: the data plane followed before the control plane's part ended, so
	// the data part is 0 and the 1.5 ms overlap is reported as such (it was data -1.5).
	if got, err := fast.times(devs, "node0"); err != nil || got.total != 0 || got.data != 0 || got.overlap != 1.5 {
		t.Errorf("down faster than a probe: %+v %v, want total 0, data 0, overlap 1.5", got, err)
	}

	for name, c := range map[string]struct {
		st  reactionStep
		evs []cluster.EndpointEvent
	}{
		"no ready event":   {up, evs[1:]},
		"no endpoint set":  {up, evs[:1]},
		"never reached":    {reactionStep{Up: true, IP: "B", Call: at(0), Probes: probes("A", "A")}, evs},
		"set of the past":  {reactionStep{Up: true, IP: "B", Call: at(5), Probes: probes("B")}, evs},
		"another endpoint": {reactionStep{Up: true, IP: "C", Call: at(0), Probes: probes("C")}, evs},
	} {
		if _, err := c.st.times(c.evs, "node0"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The clock offset is applied only when it is larger than its uncertainty.
func TestAppliedOffset(t *testing.T) {
	for _, c := range []struct{ off, unc, want time.Duration }{
		{time.Millisecond, 2 * time.Millisecond, 0},
		{-time.Millisecond, 2 * time.Millisecond, 0},
		{5 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond},
		{-5 * time.Millisecond, 2 * time.Millisecond, -5 * time.Millisecond},
	} {
		if got := applied(c.off, c.unc); got != c.want {
			t.Errorf("applied(%v, %v) = %v, want %v", c.off, c.unc, got, c.want)
		}
	}
}

type remoteProc struct{}

func (remoteProc) Stop() error    { return nil }
func (remoteProc) Output() []byte { return nil }

type localProc struct{ remoteProc }

func (localProc) LocalOutput() {}

// A probe's output in this program's memory (the lab's) is looked at every localPoll; one a
// cluster must exec to read, from reactionPoll growing to reactionPollMax.
func TestPollEvery(t *testing.T) {
	if f, m := pollEvery(localProc{}); f != localPoll || m != localPoll {
		t.Errorf("local output: every %v to %v, want %v", f, m, localPoll)
	}
	if f, m := pollEvery(remoteProc{}); f != reactionPoll || m != reactionPollMax {
		t.Errorf("output an exec away: every %v to %v, want %v to %v", f, m, reactionPoll, reactionPollMax)
	}
}
