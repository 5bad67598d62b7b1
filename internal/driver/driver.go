// Package driver holds the measurement-tool drivers (iperf3 and netperf). A driver only
// builds argv and parses output; it never executes anything itself.
package driver

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

// Spec describes one trial.
type Spec struct {
	Protocol  string // "tcp", "udp" (iperf3 streams), "rr", "crr", "udprr" (netperf TCP_RR, TCP_CRR, UDP_RR)
	Target    string // server IP
	Port      int    // control port of the server (iperf3 -p / netperf -p); 0 = ServerPort(tool)
	DataPort  int    // netperf only: fixed remote data port (test option -P ,DATAPORT); 0 = netperf chooses
	DurationS int    // seconds (iperf3 -t / netperf -l); 0 = DefaultDurationS
	MSS       int    // tcp only: iperf3 -M; 0 = DefaultLen
	UDPLen    int    // udp only: iperf3 -l; 0 = DefaultLen
	// Streams is how many parallel streams the trial runs (iperf3 -P; for netperf, concurrent
	// instances: Instances); 0 and 1 = one.
	Streams int
	// MsgSize is the message size in bytes: iperf3 -l of a tcp stream (a udp stream's is
	// UDPLen), netperf -r of a request and of its response; 0 = the tool's default.
	MsgSize int
}

// Instances are the client runs of one trial, started together: one for a tool that runs
// parallel streams itself (iperf3 -P), Streams runs of one stream each for a driver that
// cannot (netperf: a MultiDriver). Each run's spec is complete (its own data port).
func Instances(d Driver, s Spec) []Spec {
	if m, ok := d.(MultiDriver); ok && s.Streams > 1 {
		return m.Instances(s)
	}
	return []Spec{s}
}

// MultiDriver is a driver whose tool runs one stream per process: a trial of several streams
// runs several instances at once and merges what they measured.
type MultiDriver interface {
	Driver
	// Instances are the specs of s.Streams instances, each a one-stream spec.
	Instances(s Spec) []Spec
	// Merge makes one trial's metrics of what the instances of s measured (in Instances'
	// order, each as Parse returned it).
	Merge(ms []Metrics, s Spec) (Metrics, error)
}

// MaxUDPMsg is the largest UDP payload one datagram carries (65535 less the IPv4 and UDP
// headers).
const MaxUDPMsg = 65507

// CheckWorkload rejects parallel streams or a message size that protocol's tool cannot run:
// HTTP fetches a file with curl (neither applies), a UDP message is one datagram.
func CheckWorkload(protocol string, streams, msgSize int) error {
	switch protocol {
	case "http":
		if streams > 1 || msgSize > 0 {
			return fmt.Errorf("protocol http fetches a file with curl: streams and msg-size do not apply (remove them, or measure tcp,udp,rr,crr)")
		}
	case "udp", "udprr":
		if msgSize > MaxUDPMsg {
			return fmt.Errorf("msg-size %d: a UDP datagram carries at most %d bytes", msgSize, MaxUDPMsg)
		}
	}
	return nil
}

// Metrics maps metric names (which carry their unit, e.g. "throughput_bps") to values.
type Metrics map[string]float64

// Driver builds the argv of one measurement tool and parses its output.
type Driver interface {
	Name() string                    // "iperf3" or "netperf"
	ServerCommand(port int) []string // long-running foreground server; port 0 = ServerPort(Name())
	// Command is the client argv for s; nil if the driver does not handle s.Protocol
	// (For never returns such a pairing).
	Command(s Spec) []string
	Parse(out []byte, s Spec) (Metrics, error)
}

// Lingerer is a driver whose server runs each test in a process of its own that, for some
// protocols, outlives the client's test: it waits for a timer before it reports and exits.
type Lingerer interface {
	// Linger tells whether s's server test process lingers, and the signal (the timer's own)
	// that ends the wait at once, as the timer would.
	Linger(s Spec) (sig syscall.Signal, ok bool)
}

// Linger is Lingerer.Linger of d, or false for a driver whose server does not linger.
func Linger(d Driver, s Spec) (syscall.Signal, bool) {
	if l, ok := d.(Lingerer); ok {
		return l.Linger(s)
	}
	return 0, false
}

// HasDataPort tells whether driver d's tool opens a data connection besides its control
// connection, on the port the client names (Spec.DataPort: netperf's test connection), which a
// Service or a NodePort in front of the server must forward too.
func HasDataPort(d Driver) bool {
	_, ok := d.(interface{ dataPort() })
	return ok
}

const (
	// DefaultDurationS replaces a zero Spec.DurationS: iperf3 -t 0 would run forever.
	DefaultDurationS = 10
	// DefaultLen is the default TCP MSS and UDP datagram length: a 1500-byte MTU minus
	// IPv4/TCP headers with timestamps, so that TCP and UDP carry the same payload size.
	DefaultLen = 1448
)

var protocols = []string{"tcp", "udp", "rr", "crr", "udprr"}

// Protocols returns the valid protocol names in order.
func Protocols() []string { return append([]string(nil), protocols...) }

// For returns the driver measuring protocol.
func For(protocol string) (Driver, error) {
	switch protocol {
	case "tcp", "udp":
		return iperf3{}, nil
	case "rr", "crr", "udprr":
		return netperf{}, nil
	case "http":
		return curlDriver{}, nil
	}
	return nil, fmt.Errorf("unknown protocol %q (valid: %s)", protocol, strings.Join(protocols, ", "))
}

// ServerPort returns the default control port of tool ("iperf3", "netperf" or "netserver"),
// or 0 for an unknown tool.
func ServerPort(tool string) int {
	switch tool {
	case "iperf3":
		return 5201
	case "netperf", "netserver":
		return 12865
	case "curl", "nginx":
		return HTTPPort
	}
	return 0
}

// tools are the executables each driver's client and server need, where the measurement
// runs (a lab pod shares the host's files; on a cluster they come with the tools image).
var tools = map[string][]string{
	"iperf3":  {"iperf3"},
	"netperf": {"netperf", "netserver"},
	"curl":    {"curl", "nginx", BusyboxPath},
}

// CaseTools returns the host executables a case measured by tool (its label: "" = the
// protocol's driver) over protocol needs: the packet engine is cnibench itself, and its
// scenario reads the pods' CPUs with busybox.
func CaseTools(tool, protocol string) ([]string, error) {
	if tool == PktTool || tool == ProbeTool {
		return []string{BusyboxPath}, nil
	}
	return Tools(protocol)
}

// Tools returns the executables measuring protocol needs (client and server).
func Tools(protocol string) ([]string, error) {
	d, err := For(protocol)
	if err != nil {
		return nil, err
	}
	return append([]string(nil), tools[d.Name()]...), nil
}

// AllTools returns the executables of every driver, sorted (what the tools image ships and
// what doctor checks).
func AllTools() []string {
	var out []string
	for _, t := range tools {
		out = append(out, t...)
	}
	sort.Strings(out)
	return out
}

var versionRE = map[string]*regexp.Regexp{
	"iperf3":    regexp.MustCompile(`iperf\s+(\d+\.\d+\S*)`),      // "iperf 3.12 (cJSON 1.7.15)"
	"netperf":   regexp.MustCompile(`[Vv]ersion\s+(\d+\.\d+\S*)`), // "Netperf version 2.7.0"
	"netserver": regexp.MustCompile(`[Vv]ersion\s+(\d+\.\d+\S*)`),
	"curl":      regexp.MustCompile(`curl\s+(\d+\.\d+\S*)`), // "curl 7.88.1 (x86_64-pc-linux-gnu) ..."
	"nginx":     regexp.MustCompile(`nginx/(\d+\.\d+\S*)`),  // "nginx version: nginx/1.22.1" (on stderr)
}

// Version extracts the version string from `iperf3 --version` or `netperf -V` output;
// "" if it cannot be found.
func Version(tool string, out []byte) string {
	re, ok := versionRE[tool]
	if !ok {
		return ""
	}
	if m := re.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// excerpt shortens tool output for an error message.
func excerpt(out []byte) string {
	s := strings.Join(strings.Fields(string(out)), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
