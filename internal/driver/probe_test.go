package driver

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The wanted values below are copied by hand from the probe-*.txt files in testdata
// (README-probe.txt says how record-probe.sh recorded them).

func TestProbeCommand(t *testing.T) {
	for _, c := range []struct {
		self string
		spec ProbeSpec
		want string
	}{
		{"", ProbeSpec{Target: "10.96.0.10:80"}, "cnibench probe --target 10.96.0.10:80"},
		{"/proc/self/exe", ProbeSpec{Target: "10.96.0.10:80", Interval: time.Millisecond, Timeout: 250 * time.Millisecond},
			"/proc/self/exe probe --target 10.96.0.10:80 --interval 1ms --timeout 250ms"},
		{"/usr/local/bin/cnibench", ProbeSpec{Target: "10.244.1.5:8080", Interval: 500 * time.Microsecond, Timeout: time.Second, Duration: 90 * time.Second},
			"/usr/local/bin/cnibench probe --target 10.244.1.5:8080 --interval 500us --timeout 1s --duration 90s"},
		{"cnibench", ProbeSpec{Target: "10.0.0.1:1", Interval: 1500 * time.Microsecond, Timeout: 1500 * time.Nanosecond},
			"cnibench probe --target 10.0.0.1:1 --interval 1500us --timeout 1500ns"},
	} {
		if got := strings.Join(ProbeCommand(c.self, c.spec), " "); got != c.want {
			t.Errorf("ProbeCommand(%q, %+v) = %q, want %q", c.self, c.spec, got, c.want)
		}
	}
}

// change is where the result of a recorded run changes: from attempt Seq on it is Result.
type change struct {
	seq    int64
	result string
}

func TestParseProbeRecorded(t *testing.T) {
	for _, c := range []struct {
		file              string
		target            string
		interval, timeout time.Duration
		counts            map[string]int
		late              int
		changes           []change
		answers           map[string]string // result -> the answer every attempt with it has
		took              [2]time.Duration  // bounds of End-Start of every attempt
	}{
		{"probe-ok.txt", "10.253.0.2:8080", 2 * time.Millisecond, 250 * time.Millisecond,
			map[string]int{ProbeOK: 200}, 0, []change{{0, ProbeOK}},
			map[string]string{ProbeOK: "10.253.0.2"}, [2]time.Duration{0, 250 * time.Millisecond}},
		{"probe-refused.txt", "10.253.0.2:8081", time.Millisecond, 250 * time.Millisecond,
			map[string]int{ProbeRefused: 200}, 0, []change{{0, ProbeRefused}},
			map[string]string{ProbeRefused: "connection_refused"}, [2]time.Duration{0, 10 * time.Millisecond}},
		{"probe-timeout.txt", "10.253.0.2:8082", 5 * time.Millisecond, 50 * time.Millisecond,
			map[string]int{ProbeTimeout: 40}, 0, []change{{0, ProbeTimeout}},
			// The deadline counts from just before dialing, START from just before connect:
			// a timeout's END-START is a little under the timeout.
			map[string]string{ProbeTimeout: ""}, [2]time.Duration{49 * time.Millisecond, 60 * time.Millisecond}},
		// 6 ICMP errors, then the rejecting namespace's ICMP rate limit (README-probe.txt).
		{"probe-unreachable.txt", "10.253.0.2:8083", 5 * time.Millisecond, 250 * time.Millisecond,
			map[string]int{ProbeUnreachable: 6, ProbeTimeout: 14}, 0, []change{{0, ProbeUnreachable}, {6, ProbeTimeout}},
			map[string]string{ProbeUnreachable: "no_route_to_host", ProbeTimeout: ""}, [2]time.Duration{0, 260 * time.Millisecond}},
		// A listener from 0.2 s to 0.5 s, SIGTERM at 0.7 s.
		{"probe-transition.txt", "10.253.0.2:8084", 2 * time.Millisecond, 250 * time.Millisecond,
			map[string]int{ProbeRefused: 195, ProbeOK: 149}, 0, []change{{0, ProbeRefused}, {94, ProbeOK}, {243, ProbeRefused}},
			map[string]string{ProbeRefused: "connection_refused", ProbeOK: "10.253.0.2"}, [2]time.Duration{0, 250 * time.Millisecond}},
	} {
		t.Run(c.file, func(t *testing.T) {
			r, err := ParseProbe(readTestdata(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if r.Target != c.target || r.Interval != c.interval || r.Timeout != c.timeout || r.T0.Year() < 2026 {
				t.Errorf("header: %s %v %v %v", r.Target, r.Interval, r.Timeout, r.T0)
			}
			n := 0
			for _, v := range c.counts {
				n += v
			}
			if !r.Ended || r.End != (ProbeEnd{Attempts: n, Missed: 0, Late: c.late}) || len(r.Attempts) != n {
				t.Errorf("ended %v, end %+v, %d attempts; want %d attempts, %d late", r.Ended, r.End, len(r.Attempts), n, c.late)
			}
			for res, want := range c.counts {
				if got := r.Count(res); got != want {
					t.Errorf("%d %s, want %d", got, res, want)
				}
			}
			var changes []change
			for i, a := range r.Attempts {
				if a.Seq != int64(i) {
					t.Fatalf("attempt #%d has seq %d: want 0, 1, 2, ... (none missed)", i, a.Seq)
				}
				if i == 0 || a.Result != r.Attempts[i-1].Result {
					changes = append(changes, change{a.Seq, a.Result})
				}
				if i > 0 && !a.Start.After(r.Attempts[i-1].Start) {
					t.Errorf("seq %d started %v, not after seq %d (%v)", a.Seq, a.Start, i-1, r.Attempts[i-1].Start)
				}
				// Never before its slot (the slot is t0 + seq*interval on the same clock).
				if slot := r.T0.Add(time.Duration(a.Seq) * r.Interval); a.Start.Before(slot) {
					t.Errorf("seq %d started %v before its slot", a.Seq, slot.Sub(a.Start))
				}
				if d := a.End.Sub(a.Start); d < c.took[0] || d > c.took[1] {
					t.Errorf("seq %d took %v, want %v..%v", a.Seq, d, c.took[0], c.took[1])
				}
				if want, ok := c.answers[a.Result]; !ok || a.Answer != want {
					t.Errorf("seq %d: %s %q, want answer %q", a.Seq, a.Result, a.Answer, want)
				}
			}
			if fmt.Sprint(changes) != fmt.Sprint(c.changes) {
				t.Errorf("results change at %v, want %v", changes, c.changes)
			}
			if g := r.MedianStartGap(); g < c.interval*9/10 || g > c.interval*11/10 {
				t.Errorf("median gap between starts %v, want %v ± 10 %%", g, c.interval)
			}
		})
	}
}

// The output is read while the prober writes it: cut anywhere, it parses without an error,
// with the attempts whose lines are complete, and ends only with the end line's '\n'.
func TestParseProbePartial(t *testing.T) {
	out := readTestdata(t, "probe-transition.txt")
	cuts := map[int]bool{}
	for k := 0; k < 300; k++ {
		cuts[k] = true
	}
	for i, b := range out {
		if b == '\n' {
			cuts[i] = true
			cuts[i+1] = true
			cuts[i+2] = true
		}
	}
	for k := range cuts {
		if k > len(out) {
			continue
		}
		part := out[:k]
		r, err := ParseProbe(part)
		if err != nil {
			t.Fatalf("cut at byte %d: %v", k, err)
		}
		complete := part[:bytes.LastIndexByte(part, '\n')+1]
		if want := bytes.Count(complete, []byte("\nc ")); len(r.Attempts) != want {
			t.Fatalf("cut at byte %d: %d attempts, want %d", k, len(r.Attempts), want)
		}
		if ended := bytes.Contains(complete, []byte("# end ")); r.Ended != ended {
			t.Fatalf("cut at byte %d: ended %v, want %v", k, r.Ended, ended)
		}
		if header := bytes.IndexByte(part, '\n') >= 0; (r.Target != "") != header {
			t.Fatalf("cut at byte %d: target %q with a complete header %v", k, r.Target, header)
		}
	}
}

func TestParseProbeNothingYet(t *testing.T) {
	for _, out := range []string{"", "# probe target 10.0.0.1:80 interval_ns 1000000 timeo"} {
		r, err := ParseProbe([]byte(out))
		if err != nil || r.Target != "" || r.Attempts != nil || r.Ended {
			t.Errorf("ParseProbe(%q) = %+v, %v; want an empty run", out, r, err)
		}
	}
	// A warning (stderr comes with stdout) is a comment, before the header or between lines.
	out := "# warning: cnibench probe: --max-inflight 4096 is near the open-file limit 1024\n" +
		"# probe target 10.0.0.1:80 interval_ns 1000000 timeout_ns 250000000 t0_ns 1795874547204888251\n" +
		"c 1 1795874547205938276 1795874547205996022 ok 10.0.0.9\n" +
		"# a comment\n" +
		"c 0 1795874547204995331 1795874547205169290 refused connection_refused\n"
	r, err := ParseProbe([]byte(out))
	if err != nil || len(r.Attempts) != 2 || r.Attempts[0].Seq != 0 || r.Attempts[1].Answer != "10.0.0.9" || r.Ended {
		t.Errorf("ParseProbe = %+v, %v", r, err)
	}
	if g := r.MedianStartGap(); g != 1795874547205938276-1795874547204995331 {
		t.Errorf("median gap %v", g)
	}
}

// A complete line that is not the prober's is an error naming its line number: the prober
// failed (its error message), or the output is not the prober's.
func TestParseProbeMalformed(t *testing.T) {
	const (
		header = "# probe target 10.0.0.1:80 interval_ns 1000000 timeout_ns 250000000 t0_ns 1795874547204888251\n"
		ok     = "c 0 1795874547204995331 1795874547205169290 ok 10.0.0.9\n"
	)
	for _, c := range []struct {
		out, want string
	}{
		{ok, "line 1: attempt before the header"},
		{"cnibench: probe: timerfd_create: too many open files\n", "line 1: not a line of the prober"},
		{header + ok + "panic: runtime error\n", "line 3: not a line of the prober"},
		{header + "\n", "line 2: not a line of the prober"},
		{header + header, "line 2: a second header"},
		{"# probe target 10.0.0.1:80 interval_ns 1000000 timeout_ns 250000000\n", "line 1: malformed header"},
		{"# probe target 10.0.0.1:80 interval_ns 0 timeout_ns 250000000 t0_ns 1\n", "line 1: malformed header"},
		{"# probe target 10.0.0.1:80 interval_ms 1 timeout_ns 250000000 t0_ns 1\n", "line 1: malformed header"},
		{header + "c 0 1795874547204995331 1795874547205169290 ok\n", "line 2: an attempt has 6 fields, this 5"},
		{header + "c 0 1795874547204995331 1795874547205169290 ok 10.0.0.9 x\n", "line 2: an attempt has 6 fields, this 7"},
		{header + "c 0 1795874547204995331  1795874547205169290 ok 10.0.0.9\n", "line 2: an attempt has 6 fields, this 7"},
		{header + "c -1 1795874547204995331 1795874547205169290 ok 10.0.0.9\n", "line 2: malformed attempt"},
		{header + "c x 1795874547204995331 1795874547205169290 ok 10.0.0.9\n", "line 2: malformed attempt"},
		{header + "c 0 99999999999999999999 1795874547205169290 ok 10.0.0.9\n", "line 2: malformed attempt"},
		{header + "c 0 1795874547205169290 1795874547204995331 ok 10.0.0.9\n", "line 2: attempt ends before it starts"},
		{header + "c 0 1795874547204995331 1795874547205169290 dropped -\n", `line 2: unknown result "dropped"`},
		{header + ok + ok, "line 3: attempt 0 a second time"},
		{header + "# end attempts 1 missed 0\n", "line 2: malformed end line"},
		{header + "# end attempts 1 missed 0 late x\n", "line 2: malformed end line"},
		{"# end attempts 0 missed 0 late 0\n", "line 1: end line before the header"},
		{header + "# end attempts 0 missed 0 late 0\n" + ok, "line 3: after the end line"},
	} {
		_, err := ParseProbe([]byte(c.out))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseProbe(%q): %v, want an error with %q", c.out, err, c.want)
		}
	}
}

func TestMedianStartGap(t *testing.T) {
	at := func(starts ...int64) ProbeRun {
		var r ProbeRun
		for i, s := range starts {
			r.Attempts = append(r.Attempts, ProbeAttempt{Seq: int64(i), Start: time.Unix(0, s)})
		}
		return r
	}
	for _, c := range []struct {
		r    ProbeRun
		want time.Duration
	}{
		{at(), 0},
		{at(5), 0},
		{at(0, 10), 10},
		{at(0, 10, 30), 15},
		{at(0, 10, 30, 31), 10},
	} {
		if got := c.r.MedianStartGap(); got != c.want {
			t.Errorf("MedianStartGap of %d attempts = %v, want %v", len(c.r.Attempts), got, c.want)
		}
	}
}
