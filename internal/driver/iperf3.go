package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/result"
)

// iperf3 drives iperf3 (tested with 3.12) for the "tcp" and "udp" protocols.
type iperf3 struct{}

// TCPOmitS is the span at the start of a TCP trial that runs but is left out of its figures
// (slow start). It lies INSIDE the trial's duration: iperf3 runs -t D without -O, both ends
// report every TCPOmitS seconds (-i), and Parse drops the intervals that start before
// TCPOmitS, so a trial of D seconds measures D - TCPOmitS and takes no longer than D.
//
// Evidence (by hand, lab flannel pods, inter node, 20 runs of iperf3 -t 3 -i 0.1, client
// CPU 0, server CPU 1): the first 100 ms interval ran at 0.82 [0.71, 0.93] of the steady rate
// (mean of 1.0-2.0 s), the second at 1.03 [0.96, 1.09]: the transient is over within the
// first 100 ms. (Until 2026-12 the omit was iperf3 -O 1: one extra second per trial.)
const TCPOmitS = 0.1

// tcpIntervalS is iperf3's reporting interval (-i) in TCP trials, on both ends: the omitted
// span is the first interval.
const tcpIntervalS = TCPOmitS

// OmitS is how long a trial of protocol runs before it measures: TCPOmitS for tcp, else 0.
// The span lies inside the trial's duration (it adds no wall time): a trial of D seconds
// measures D - OmitS seconds.
func OmitS(protocol string) float64 {
	if protocol == "tcp" {
		return TCPOmitS
	}
	return 0
}

// OmittedMetric says, per TCP trial, how many milliseconds at its start throughput_bps and
// sent_bps leave out: TCPOmitS, or 0 when the output lacked the interval figures and the
// figures are iperf3's whole-test end.sum_received/end.sum_sent (see Parse).
const OmittedMetric = "omitted_ms"

func (iperf3) Name() string { return "iperf3" }

// ServerCommand runs the server with -J and -i tcpIntervalS: a TCP client's
// --get-server-output then carries the server's (the receiver's) intervals as JSON
// (server_output_json); without -J iperf3 3.12 sends them as text (server_output_text), and
// the server reports every second whatever the client's -i.
func (iperf3) ServerCommand(port int) []string {
	return []string{"iperf3", "-s", "-J", "-i", fmtSeconds(tcpIntervalS), "-p", strconv.Itoa(orDefault(port, ServerPort("iperf3")))}
}

func fmtSeconds(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }

func (iperf3) Command(s Spec) []string {
	argv := []string{"iperf3", "-c", s.Target,
		"-p", strconv.Itoa(orDefault(s.Port, ServerPort("iperf3"))),
		"-t", strconv.Itoa(orDefault(s.DurationS, DefaultDurationS)), "-J"}
	if s.Streams > 1 {
		argv = append(argv, "-P", strconv.Itoa(s.Streams))
	}
	switch s.Protocol {
	case "tcp":
		// No -O: the first TCPOmitS seconds (slow start) are dropped from the intervals by
		// Parse, inside the duration. -i: intervals of tcpIntervalS; --get-server-output: the
		// receiver's intervals (the server's, run with -J -i by ServerCommand).
		argv = append(argv, "-i", fmtSeconds(tcpIntervalS), "--get-server-output",
			"-N", "-Z", "-M", strconv.Itoa(orDefault(s.MSS, DefaultLen)))
		if s.MsgSize > 0 {
			argv = append(argv, "-l", strconv.Itoa(s.MsgSize))
		}
		return argv
	case "udp":
		// --get-server-output is not needed: 3.12 puts the receiver's figures in end.sum_received.
		return append(argv, "-u", "-b", "0", "-l", strconv.Itoa(orDefault(s.UDPLen, DefaultLen)))
	}
	return nil
}

// iperfSum is one of the end.sum* objects of iperf3 -J output.
type iperfSum struct {
	Seconds       float64  `json:"seconds"`
	Bytes         float64  `json:"bytes"`
	BitsPerSecond float64  `json:"bits_per_second"`
	Retransmits   *float64 `json:"retransmits"` // tcp sender only
	JitterMs      float64  `json:"jitter_ms"`   // udp
	LostPackets   float64  `json:"lost_packets"`
	Packets       float64  `json:"packets"`
	LostPercent   float64  `json:"lost_percent"`
}

// iperfInterval is one of the intervals[] of iperf3 -J output; sum totals its streams (with
// -P as with one stream).
type iperfInterval struct {
	Sum *struct {
		Start   float64 `json:"start"`
		Seconds float64 `json:"seconds"`
		Bytes   float64 `json:"bytes"`
		Omitted bool    `json:"omitted"`
		// Retransmits: the sender's (client's) intervals of a TCP test only.
		Retransmits *float64 `json:"retransmits"`
	} `json:"sum"`
}

type iperfOutput struct {
	Error     string          `json:"error"`
	Intervals []iperfInterval `json:"intervals"`
	// Server is the server's own -J output (--get-server-output, server run with -J).
	Server *struct {
		Intervals []iperfInterval `json:"intervals"`
	} `json:"server_output_json"`
	Start struct {
		TestStart struct {
			Protocol   string `json:"protocol"`
			Blksize    int    `json:"blksize"`
			NumStreams int    `json:"num_streams"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		Streams []struct {
			Sender *struct {
				MeanRTT *float64 `json:"mean_rtt"` // microseconds, Linux only
			} `json:"sender"`
		} `json:"streams"`
		Sum         *iperfSum `json:"sum"`
		SumSent     *iperfSum `json:"sum_sent"`
		SumReceived *iperfSum `json:"sum_received"`
		CPU         *struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
}

// Parse reads iperf3 -J output. Note that iperf3 3.12 exits 0 even when it reports an
// "error" (e.g. connection refused), so the output is the only reliable failure signal.
func (iperf3) Parse(out []byte, s Spec) (Metrics, error) {
	i := bytes.IndexByte(out, '{') // skip anything printed before the JSON document
	if i < 0 {
		if len(bytes.TrimSpace(out)) == 0 {
			return nil, errors.New("iperf3: empty output")
		}
		return nil, fmt.Errorf("iperf3: no JSON in output: %s", excerpt(out))
	}
	var r iperfOutput
	if err := json.NewDecoder(bytes.NewReader(out[i:])).Decode(&r); err != nil {
		return nil, fmt.Errorf("iperf3: bad JSON output (truncated?): %v", err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", r.Error)
	}
	if p := r.Start.TestStart.Protocol; p != "" && !strings.EqualFold(p, s.Protocol) {
		return nil, fmt.Errorf("iperf3: output is a %s test, want %s", p, s.Protocol)
	}
	if want, got := max(s.Streams, 1), r.Start.TestStart.NumStreams; got > 0 && got != want {
		return nil, fmt.Errorf("iperf3: output is a test of %d streams, want %d", got, want)
	}
	m := Metrics{}
	if b := r.Start.TestStart.Blksize; b > 0 {
		m[result.MsgSizeMetric] = float64(b) // what iperf3 wrote at a time (-l, or its default)
	}
	if c := r.End.CPU; c != nil {
		// iperf3's figures are each process's own CPU time over the test, in % of one core
		// (more than 100 when it used more than one): not a share of the host.
		m["cpu_client_proc_pct"] = c.HostTotal
		m["cpu_server_proc_pct"] = c.RemoteTotal
	}
	switch s.Protocol {
	case "tcp":
		sent, recv := r.End.SumSent, r.End.SumReceived
		if sent == nil || recv == nil {
			return nil, errors.New("iperf3: output lacks end.sum_sent/end.sum_received")
		}
		// throughput_bps: what the receiver (server) counted in its intervals from TCPOmitS on;
		// sent_bps likewise from the sender's (client's) own intervals, so that both cover the
		// same span. Without both (a server not run with -J -i, an older iperf3, a test too
		// short for an interval after TCPOmitS) both are iperf3's whole-test end.sum_received
		// and end.sum_sent, slow start included, and omitted_ms says 0: never a mix.
		var srv []iperfInterval
		if r.Server != nil {
			srv = r.Server.Intervals
		}
		rb, rs := afterOmit(srv)
		sb, ss, retr, retrOK := afterOmitRetr(r.Intervals)
		if rs > 0 && ss > 0 {
			m["throughput_bps"] = rb * 8 / rs
			m["sent_bps"] = sb * 8 / ss
			m[OmittedMetric] = TCPOmitS * 1000
			// retransmits over the same span: on the lab's flannel pods a third to a half
			// of a 1 s trial's retransmits fell in its first 0.1 s.
			if retrOK {
				m["retransmits"] = retr
			}
		} else {
			m["throughput_bps"] = recv.BitsPerSecond
			m["sent_bps"] = sent.BitsPerSecond
			m[OmittedMetric] = 0
			if sent.Retransmits != nil {
				m["retransmits"] = *sent.Retransmits
			}
		}
		// rtt_mean_us and the CPU figures are iperf3's end.*: the whole trial, slow start
		// included (iperf3 gives them per test only).
		var rtt float64
		var n int
		for _, st := range r.End.Streams {
			if st.Sender != nil && st.Sender.MeanRTT != nil {
				rtt += *st.Sender.MeanRTT
				n++
			}
		}
		if n > 0 {
			m["rtt_mean_us"] = rtt / float64(n)
		}
	case "udp":
		// In UDP output end.sum (like end.streams[].udp) is a hybrid: bytes and
		// bits_per_second are the sender's (the offered load) while jitter and loss are the
		// receiver's. end.sum_received holds the receiver's bytes and rate.
		sum, recv := r.End.Sum, r.End.SumReceived
		if sum == nil {
			return nil, errors.New("iperf3: output lacks end.sum")
		}
		offered := sum.BitsPerSecond
		if r.End.SumSent != nil {
			offered = r.End.SumSent.BitsPerSecond
		}
		if recv == nil {
			// Older iperf3 without end.sum_received: the receiver got (packets - lost)
			// datagrams of blksize bytes during sum.seconds (the receiver's duration).
			if sum.Seconds <= 0 || r.Start.TestStart.Blksize <= 0 {
				return nil, errors.New("iperf3: output lacks end.sum_received and the data to derive it")
			}
			got := *sum
			got.BitsPerSecond = (sum.Packets - sum.LostPackets) * float64(r.Start.TestStart.Blksize) * 8 / sum.Seconds
			recv = &got
		}
		m["throughput_bps"] = recv.BitsPerSecond
		m["offered_bps"] = offered
		m["loss_pct"] = recv.LostPercent
		m["lost_packets"] = recv.LostPackets
		m["packets"] = recv.Packets
		m["jitter_ms"] = recv.JitterMs
	default:
		return nil, fmt.Errorf("iperf3: unsupported protocol %q", s.Protocol)
	}
	return m, nil
}

// afterOmit sums the bytes and seconds of the intervals that start at TCPOmitS or later (and
// that iperf3 did not mark omitted). An interval's start lags its tick by microseconds (the
// second starts at 0.1000x s); half an interval of slack keeps a tick that came a hair early.
func afterOmit(ivs []iperfInterval) (bytes, seconds float64) {
	bytes, seconds, _, _ = afterOmitRetr(ivs)
	return bytes, seconds
}

// afterOmitRetr is afterOmit with the retransmits those intervals count (ok: every one of
// them has the field, as a TCP sender's do).
func afterOmitRetr(ivs []iperfInterval) (bytes, seconds, retr float64, ok bool) {
	ok = true
	for _, iv := range ivs {
		if s := iv.Sum; s != nil && !s.Omitted && s.Start >= TCPOmitS-tcpIntervalS/2 {
			bytes += s.Bytes
			seconds += s.Seconds
			if s.Retransmits == nil {
				ok = false
			} else {
				retr += *s.Retransmits
			}
		}
	}
	return bytes, seconds, retr, ok && seconds > 0
}
