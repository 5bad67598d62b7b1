package driver

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cnibench/cnibench/internal/connprobe"
)

// The connection prober of the change scenario: `cnibench probe` in the client pod starts a
// TCP connection attempt to a target every interval and prints one line per attempt (the
// format is connprobe's). The scenario reads its output while it runs, to see when the
// attempts start to show a change, and stops it with SIGTERM.

// ProbeTool is the prober's name as a case's tool label.
const ProbeTool = "cnibench-probe"

// The results of an attempt (ProbeAttempt.Result); connprobe owns the words.
var (
	ProbeOK          = connprobe.OK.String()
	ProbeNoAnswer    = connprobe.NoAnswer.String()
	ProbeRefused     = connprobe.Refused.String()
	ProbeTimeout     = connprobe.Timeout.String()
	ProbeUnreachable = connprobe.Unreachable.String()
	ProbeError       = connprobe.Error.String()
)

// ProbeSpec is one prober run.
type ProbeSpec struct {
	Target   string        // IPv4 address:port, or several comma-separated (tried in turn)
	Interval time.Duration // between attempt starts; 0 = the prober's default (1 ms)
	Timeout  time.Duration // per attempt; 0 = the prober's default (250 ms)
	// Duration bounds the run; 0 = until SIGTERM (the scenario's way: it stops the prober
	// once the attempts show what it waits for).
	Duration time.Duration
}

// ProbeCommand is the prober's argv; self is the cnibench executable ("" = "cnibench"). Pin it
// to a CPU from outside (taskset): its runtime then uses that one CPU.
func ProbeCommand(self string, s ProbeSpec) []string {
	argv := []string{pktBinary(self), "probe", "--target", s.Target}
	if s.Interval > 0 {
		argv = append(argv, "--interval", flagDuration(s.Interval))
	}
	if s.Timeout > 0 {
		argv = append(argv, "--timeout", flagDuration(s.Timeout))
	}
	if s.Duration > 0 {
		argv = append(argv, "--duration", flagDuration(s.Duration))
	}
	return argv
}

// flagDuration writes d exactly in the largest unit that divides it, in ASCII ("500us", not
// time.Duration's "500µs": argv goes through kubectl-style exec and logs).
func flagDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// ProbeAttempt is one connection attempt, stamped with the prober's wall clock.
type ProbeAttempt struct {
	Seq    int64     // slot: the attempt was due at T0 + Seq*Interval
	Start  time.Time // just before dialing
	End    time.Time // when the result was known
	Result string    // ProbeOK, ProbeRefused, ...
	Answer string    // the endpoint's line (ok) or a short reason; "" where the prober printed "-"
}

// ProbeEnd is the prober's end line: the numbers of a run that finished.
type ProbeEnd struct {
	Attempts int // attempts started; each printed one line
	Missed   int // slots skipped because --max-inflight attempts were open
	Late     int // attempts started more than one interval after their slot
}

// ProbeRun is a prober's output, complete or read while it runs.
type ProbeRun struct {
	Target   string // from the header; "" if the header has not come yet
	Interval time.Duration
	Timeout  time.Duration
	T0       time.Time      // slot 0
	Attempts []ProbeAttempt // sorted by Seq
	Ended    bool           // the end line was read: every attempt started is in Attempts
	End      ProbeEnd       // valid if Ended
}

// ParseProbe reads a prober's output (stdout and stderr together). It is meant to be called
// again and again while the prober runs: a last line without its '\n' yet is ignored, and
// output without a complete line is an empty run (no header yet), not an error. A complete
// line that is not the prober's (an error message, say) is an error naming its line number;
// lines starting with '#' other than the header and the end line are comments (warnings).
func ParseProbe(out []byte) (ProbeRun, error) {
	var run ProbeRun
	seen := map[int64]bool{}
	header := false
	for lineNo := 1; ; lineNo++ {
		i := bytes.IndexByte(out, '\n')
		if i < 0 {
			break // nothing, or a line still being written
		}
		line := out[:i]
		out = out[i+1:]
		bad := func(why string) (ProbeRun, error) {
			return ProbeRun{}, fmt.Errorf("probe output line %d: %s: %q", lineNo, why, probeExcerpt(line))
		}
		if run.Ended {
			return bad("after the end line")
		}
		f := fields(line)
		switch {
		case len(f) > 1 && string(f[0]) == "#" && string(f[1]) == "probe":
			if header {
				return bad("a second header")
			}
			if len(f) != 10 || string(f[2]) != "target" || string(f[4]) != "interval_ns" || string(f[6]) != "timeout_ns" || string(f[8]) != "t0_ns" {
				return bad("malformed header")
			}
			iv, ok1 := atoi(f[5])
			to, ok2 := atoi(f[7])
			t0, ok3 := atoi(f[9])
			if !ok1 || !ok2 || !ok3 || iv <= 0 || to <= 0 {
				return bad("malformed header")
			}
			header = true
			run.Target, run.Interval, run.Timeout, run.T0 = string(f[3]), time.Duration(iv), time.Duration(to), time.Unix(0, t0)
		case len(f) > 1 && string(f[0]) == "#" && string(f[1]) == "end":
			if !header {
				return bad("end line before the header")
			}
			if len(f) != 8 || string(f[2]) != "attempts" || string(f[4]) != "missed" || string(f[6]) != "late" {
				return bad("malformed end line")
			}
			n, ok1 := atoi(f[3])
			m, ok2 := atoi(f[5])
			l, ok3 := atoi(f[7])
			if !ok1 || !ok2 || !ok3 {
				return bad("malformed end line")
			}
			run.Ended, run.End = true, ProbeEnd{Attempts: int(n), Missed: int(m), Late: int(l)}
		case len(line) > 0 && line[0] == '#':
			// a comment
		case len(f) > 0 && string(f[0]) == connprobe.AttemptTag:
			if !header {
				return bad("attempt before the header")
			}
			a, why := parseAttempt(f)
			if why != "" {
				return bad(why)
			}
			if seen[a.Seq] {
				return bad(fmt.Sprintf("attempt %d a second time", a.Seq))
			}
			seen[a.Seq] = true
			run.Attempts = append(run.Attempts, a)
		default:
			return bad("not a line of the prober")
		}
	}
	slices.SortFunc(run.Attempts, func(a, b ProbeAttempt) int { return cmp.Compare(a.Seq, b.Seq) })
	return run, nil
}

// parseAttempt reads `c SEQ START_NS END_NS RESULT ANSWER`; why says what is wrong.
func parseAttempt(f [][]byte) (ProbeAttempt, string) {
	if len(f) != 6 {
		return ProbeAttempt{}, fmt.Sprintf("an attempt has 6 fields, this %d", len(f))
	}
	seq, ok1 := atoi(f[1])
	start, ok2 := atoi(f[2])
	end, ok3 := atoi(f[3])
	if !ok1 || !ok2 || !ok3 || start <= 0 {
		return ProbeAttempt{}, "malformed attempt"
	}
	if end < start {
		return ProbeAttempt{}, "attempt ends before it starts"
	}
	a := ProbeAttempt{Seq: seq, Start: time.Unix(0, start), End: time.Unix(0, end)}
	for _, r := range connprobe.ResultNames() {
		if string(f[4]) == r {
			a.Result = r
		}
	}
	if a.Result == "" {
		return a, fmt.Sprintf("unknown result %q", f[4])
	}
	if string(f[5]) != "-" {
		a.Answer = string(f[5])
	}
	return a, ""
}

// fields splits a line at single spaces, the prober's separator (so that a doubled or
// trailing space is an empty field, and a malformed line).
func fields(line []byte) [][]byte {
	if len(line) == 0 {
		return nil
	}
	return bytes.Split(line, []byte{' '})
}

// atoi parses decimal integers without a sign (every number the prober prints is >= 0).
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' || n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func probeExcerpt(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

// Count is the number of attempts with result r.
func (r ProbeRun) Count(result string) int {
	n := 0
	for _, a := range r.Attempts {
		if a.Result == result {
			n++
		}
	}
	return n
}

// MedianStartGap is the median time between the starts of consecutive attempts (by Seq): the
// interval the prober kept, which bounds how precisely a change can be placed in time. It is
// 0 with fewer than two attempts.
func (r ProbeRun) MedianStartGap() time.Duration {
	if len(r.Attempts) < 2 {
		return 0
	}
	gaps := make([]time.Duration, 0, len(r.Attempts)-1)
	for i := 1; i < len(r.Attempts); i++ {
		gaps = append(gaps, r.Attempts[i].Start.Sub(r.Attempts[i-1].Start))
	}
	slices.Sort(gaps)
	if n := len(gaps); n%2 == 0 {
		return (gaps[n/2-1] + gaps[n/2]) / 2
	}
	return gaps[len(gaps)/2]
}
