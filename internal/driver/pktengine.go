package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cnibench/cnibench/internal/pktengine"
)

// The packet engine of the VNF scenario: `cnibench pkt recv` in the receiving pod and
// `cnibench pkt gen` in the generating one, each printing one JSON object (the output types
// are pktengine.GenResult and pktengine.RecvResult: the engine owns them). The receiver is
// started first and stopped (SIGTERM, or its own --duration) after the generator has ended.

// PktTool is the packet engine's name as a case's tool label.
const PktTool = "cnibench-pkt"

// PktGenSpec is one generator run.
type PktGenSpec struct {
	Binary    string  // the cnibench executable; "" = "cnibench"
	Engine    string  // "" = the best usable one
	Dst       string  // destination IPv4 address (required)
	Dev       string  // "" = the route's interface
	DstMAC    string  // "" = resolved with ARP
	Mode      string  // "gtpu" or "udp"; "" = gtpu
	Size      string  // frame size ("64".."1518") or "imix"; "" = the generator's default (256)
	RatePPS   float64 // target rate; 0 = as fast as possible
	DurationS float64 // seconds; 0 = DefaultDurationS
	Streams   int     // TEIDs; 0 = 1
	Flows     int     // outer UDP flows (source ports) taken in turn; 0 = 1
	FirstTEID uint32  // 0 = the generator's default (1)
	RotateS   float64 // TEID rotation period; 0 = the generator's default (2 s)
	// ProbeRate is latency probes per second; 0 = the generator's default (1), < 0 = none.
	ProbeRate float64
	CPU       *int // pin the generator to this CPU; nil = no pinning
}

// PktRecvSpec is one receiver run.
type PktRecvSpec struct {
	Binary    string
	Engine    string
	Dev       string  // "" = the pod's only interface other than loopback
	DurationS float64 // 0 = until SIGTERM
	CPU       *int
}

func pktBinary(b string) string {
	if b == "" {
		return "cnibench"
	}
	return b
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func seconds(s float64) string { return fmtFloat(s) + "s" }

// PktGenCommand is the generator's argv.
func PktGenCommand(s PktGenSpec) []string {
	d := s.DurationS
	if d <= 0 {
		d = DefaultDurationS
	}
	argv := []string{pktBinary(s.Binary), "pkt", "gen", "--dst", s.Dst, "--rate", fmtFloat(s.RatePPS), "--duration", seconds(d)}
	opt := func(flag, v string, set bool) {
		if set {
			argv = append(argv, flag, v)
		}
	}
	opt("--engine", s.Engine, s.Engine != "")
	opt("--dev", s.Dev, s.Dev != "")
	opt("--dst-mac", s.DstMAC, s.DstMAC != "")
	opt("--mode", s.Mode, s.Mode != "")
	opt("--size", s.Size, s.Size != "")
	opt("--streams", strconv.Itoa(s.Streams), s.Streams > 0)
	opt("--flows", strconv.Itoa(s.Flows), s.Flows > 1)
	opt("--teid", strconv.FormatUint(uint64(s.FirstTEID), 10), s.FirstTEID > 0)
	opt("--rotate", seconds(s.RotateS), s.RotateS > 0)
	opt("--probe-rate", fmtFloat(max(s.ProbeRate, 0)), s.ProbeRate != 0)
	if s.CPU != nil {
		opt("--cpu", strconv.Itoa(*s.CPU), true)
	}
	return argv
}

// PktRecvCommand is the receiver's argv.
func PktRecvCommand(s PktRecvSpec) []string {
	argv := []string{pktBinary(s.Binary), "pkt", "recv"}
	if s.DurationS > 0 {
		argv = append(argv, "--duration", seconds(s.DurationS))
	}
	if s.Engine != "" {
		argv = append(argv, "--engine", s.Engine)
	}
	if s.Dev != "" {
		argv = append(argv, "--dev", s.Dev)
	}
	if s.CPU != nil {
		argv = append(argv, "--cpu", strconv.Itoa(*s.CPU))
	}
	return argv
}

// decodePkt reads the one JSON object of a pkt command's output (output printed before it,
// such as a warning, is skipped); whole tells whether it is the result expected.
func decodePkt[T any](what string, out []byte, whole func(T) bool) (T, error) {
	var r T
	i := bytes.IndexByte(out, '{')
	if i < 0 {
		if len(bytes.TrimSpace(out)) == 0 {
			return r, fmt.Errorf("%s: empty output", what)
		}
		return r, fmt.Errorf("%s: no result in output: %s", what, excerpt(out))
	}
	if err := json.NewDecoder(bytes.NewReader(out[i:])).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: bad JSON output (truncated?): %v", what, err)
	}
	if !whole(r) {
		return r, fmt.Errorf("%s: output is not its result: %s", what, excerpt(out))
	}
	return r, nil
}

// ParsePktGen reads the generator's output: the rate it offered (offered_pps: frames handed
// to the kernel per second; offered_bps: in frame bits with the FCS), the target, the counts.
func ParsePktGen(out []byte) (Metrics, error) {
	r, err := PktGenResult(out)
	if err != nil {
		return nil, err
	}
	return genMetrics(r), nil
}

func genMetrics(r pktengine.GenResult) Metrics {
	return Metrics{
		"offered_pps":  r.AchievedPPS,
		"offered_bps":  r.AchievedBPS,
		"target_pps":   r.TargetPPS,
		"sent_packets": float64(r.SentPackets),
		"sent_probes":  float64(r.ProbesSent),
		"tx_errors":    float64(r.TXErrors),
	}
}

// PktGenResult decodes the generator's output (for its per-stream counts).
func PktGenResult(out []byte) (pktengine.GenResult, error) {
	r, err := decodePkt[pktengine.GenResult]("pkt gen", out, func(r pktengine.GenResult) bool { return r.TX != "" && r.Streams != nil })
	if err == nil && r.DurationS <= 0 {
		err = errors.New("pkt gen: the generator sent nothing (duration 0)")
	}
	return r, err
}

// ParsePktRecv reads the receiver's output: counts by sequence numbers, the receive rate,
// the probes' latency (µs; only when probes arrived) and the receive ring's drops.
func ParsePktRecv(out []byte) (Metrics, error) {
	r, err := PktRecvResult(out)
	if err != nil {
		return nil, err
	}
	m := Metrics{
		"received_packets":  float64(r.Received),
		"unique_packets":    float64(r.Unique),
		"duplicate_packets": float64(r.Duplicates),
		"reordered_packets": float64(r.Reordered),
		"gap_lost_packets":  float64(r.Lost),
		"rx_pps":            r.RxPPS,
		"probes":            float64(r.Probes),
		"ring_drop_packets": float64(r.RingDrops),
		"other_packets":     float64(r.Other),
	}
	if l := r.Latency; l.Count > 0 {
		m["latency_min_us"] = l.Min
		m["latency_mean_us"] = l.Mean
		m["latency_p50_us"] = l.P50
		m["latency_p90_us"] = l.P90
		m["latency_p99_us"] = l.P99
		m["latency_max_us"] = l.Max
	}
	return m, nil
}

// PktRecvResult decodes the receiver's output (for its per-stream counts).
func PktRecvResult(out []byte) (pktengine.RecvResult, error) {
	return decodePkt[pktengine.RecvResult]("pkt recv", out, func(r pktengine.RecvResult) bool { return r.RX != "" && r.Streams != nil })
}

// ParsePktTrial reads the outputs of a generator run and of the receiver that counted it:
// their metrics, and what arrived of what was sent (throughput_pps: distinct frames received
// per second of sending; lost_packets and loss_pct: frames sent and never received, the tail
// after the last one received included).
func ParsePktTrial(genOut, recvOut []byte) (Metrics, error) {
	gen, err := PktGenResult(genOut)
	if err != nil {
		return nil, err
	}
	m := genMetrics(gen)
	rm, err := ParsePktRecv(recvOut)
	if err != nil {
		return nil, err
	}
	for k, v := range rm {
		m[k] = v
	}
	sent, got := m["sent_packets"], m["unique_packets"]
	m["lost_packets"] = max(sent-got, 0)
	if sent > 0 {
		m["loss_pct"] = m["lost_packets"] / sent * 100
	}
	m["throughput_pps"] = got / gen.DurationS
	return m, nil
}
