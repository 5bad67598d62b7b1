package driver

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// netperf drives netperf/netserver (tested with 2.7.0) for the request/response protocols.
type netperf struct{}

var netperfTests = map[string]string{"rr": "TCP_RR", "crr": "TCP_CRR", "udprr": "UDP_RR"}

// netperfSelectors are the omni output selectors requested with -k (key=value output).
// The *_LATENCY values are in microseconds and come from netperf's histogram, which the
// global -j option turns on (2.7.0 also enables it when a latency selector is requested,
// but -j makes it explicit).
const netperfSelectors = "THROUGHPUT,THROUGHPUT_UNITS,TRANSACTION_RATE," +
	"MIN_LATENCY,MEAN_LATENCY,P50_LATENCY,P90_LATENCY,P99_LATENCY,MAX_LATENCY," +
	"LOCAL_CPU_UTIL,REMOTE_CPU_UTIL,REQUEST_SIZE"

var netperfLatency = []struct{ key, metric string }{
	{"MIN_LATENCY", "latency_min_us"},
	{"MEAN_LATENCY", "latency_mean_us"},
	{"P50_LATENCY", "latency_p50_us"},
	{"P90_LATENCY", "latency_p90_us"},
	{"P99_LATENCY", "latency_p99_us"},
	{"MAX_LATENCY", "latency_max_us"},
}

func (netperf) Name() string { return "netperf" }

// dataPort: netperf's test runs on a data connection of its own (HasDataPort).
func (netperf) dataPort() {}

// ServerCommand runs netserver in the foreground: -D means "do not daemonize" in 2.7.0.
func (netperf) ServerCommand(port int) []string {
	return []string{"netserver", "-D", "-p", strconv.Itoa(orDefault(port, ServerPort("netperf")))}
}

// PadTime is netperf's PAD_TIME: a TCP_CRR test's server process waits that long past the
// test length in accept() (its end-of-test timer is set to the length plus PAD_TIME, and no
// connection of the client's tells it the test is over), and the client waits for its report:
// a 1 s TCP_CRR run takes 5 s (2.7.0 here). TCP_RR and UDP_RR end when the client closes its
// data connection.
const PadTime = 4 * time.Second

// Linger implements Lingerer: a TCP_CRR server test process lingers PadTime; SIGALRM, its
// timer's signal, ends the wait as the timer would (it reports at once, over the time it ran).
func (netperf) Linger(s Spec) (syscall.Signal, bool) {
	return syscall.SIGALRM, s.Protocol == "crr"
}

// Command builds the netperf argv. A TCP_CRR run takes DurationS+PadTime unless its server's
// wait is ended (Linger); allow for it in timeouts.
func (netperf) Command(s Spec) []string {
	test, ok := netperfTests[s.Protocol]
	if !ok {
		return nil
	}
	argv := []string{"netperf", "-H", s.Target,
		"-p", strconv.Itoa(orDefault(s.Port, ServerPort("netperf"))),
		"-t", test, "-l", strconv.Itoa(orDefault(s.DurationS, DefaultDurationS)),
		"-j", "-c", "-C", "--"}
	if s.DataPort > 0 {
		argv = append(argv, "-P", ","+strconv.Itoa(s.DataPort))
	}
	if s.MsgSize > 0 {
		argv = append(argv, "-r", strconv.Itoa(s.MsgSize)+","+strconv.Itoa(s.MsgSize))
	}
	return append(argv, "-k", netperfSelectors)
}

// Instances: netperf runs one test (one connection at a time) per process, so s.Streams
// streams are s.Streams netperf instances against the one netserver, which serves each in a
// process of its own. Instance i has data port DataPort+i (two tests cannot listen on one
// port); the ports of a Service or a policy must admit them all (DataPorts).
func (netperf) Instances(s Spec) []Spec {
	out := make([]Spec, max(s.Streams, 1))
	for i := range out {
		out[i] = s
		out[i].Streams = 1
		if s.DataPort > 0 {
			out[i].DataPort = s.DataPort + i
		}
	}
	return out
}

// Merge makes one trial of concurrent instances' figures: the transaction rates add up (each
// instance ran for the same -l); the mean latency is the instances' means weighted by their
// transactions and min/max the extremes, which are exact. netperf (Debian's 2.7.0, built
// without --enable-histogram) prints only its P50/P90/P99, not the histogram they come from,
// so the percentiles of all transactions together cannot be computed: Merge reports the
// range they lie in instead, latency_pNN_low_us..latency_pNN_high_us (the least and the
// greatest instance's: a mixture's quantile lies between its parts'), never an average of
// percentiles under the name of a percentile. CPU figures are the host's as each instance saw
// it over the same period: the largest is kept.
func (netperf) Merge(ms []Metrics, s Spec) (Metrics, error) {
	if len(ms) == 0 {
		return nil, fmt.Errorf("netperf: no instance to merge")
	}
	if len(ms) == 1 {
		return ms[0], nil
	}
	out := Metrics{}
	var rate, weighted float64
	for i, m := range ms {
		r, ok := m["transactions_per_s"]
		if !ok {
			return nil, fmt.Errorf("netperf: instance %d of %d measured no transaction rate", i+1, len(ms))
		}
		rate += r
		weighted += r * m["latency_mean_us"]
	}
	out["transactions_per_s"] = rate
	if rate > 0 && all(ms, "latency_mean_us") {
		out["latency_mean_us"] = weighted / rate
	}
	extreme := func(key string, pick func(a, b float64) float64) (float64, bool) {
		if !all(ms, key) {
			return 0, false
		}
		v := ms[0][key]
		for _, m := range ms[1:] {
			v = pick(v, m[key])
		}
		return v, true
	}
	lo, hi := func(a, b float64) float64 { return math.Min(a, b) }, func(a, b float64) float64 { return math.Max(a, b) }
	for _, k := range []struct {
		key, out string
		pick     func(a, b float64) float64
	}{
		{"latency_min_us", "latency_min_us", lo},
		{"latency_max_us", "latency_max_us", hi},
		{"latency_p50_us", "latency_p50_low_us", lo}, {"latency_p50_us", "latency_p50_high_us", hi},
		{"latency_p90_us", "latency_p90_low_us", lo}, {"latency_p90_us", "latency_p90_high_us", hi},
		{"latency_p99_us", "latency_p99_low_us", lo}, {"latency_p99_us", "latency_p99_high_us", hi},
		{"cpu_client_host_pct", "cpu_client_host_pct", hi},
		{"cpu_server_host_pct", "cpu_server_host_pct", hi},
		{result.MsgSizeMetric, result.MsgSizeMetric, hi},
	} {
		if v, ok := extreme(k.key, k.pick); ok {
			out[k.out] = v
		}
	}
	return out, nil
}

// all tells whether every instance measured key.
func all(ms []Metrics, key string) bool {
	for _, m := range ms {
		if _, ok := m[key]; !ok {
			return false
		}
	}
	return true
}

// Parse reads the key=value lines of netperf -k output; other lines (the test banner) are
// ignored.
func (netperf) Parse(out []byte, s Spec) (Metrics, error) {
	if _, ok := netperfTests[s.Protocol]; !ok {
		return nil, fmt.Errorf("netperf: unsupported protocol %q", s.Protocol)
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && k != "" && strings.Trim(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == "" {
			kv[k] = strings.TrimSpace(v)
		}
	}
	if len(kv) == 0 {
		if len(bytes.TrimSpace(out)) == 0 {
			return nil, fmt.Errorf("netperf: empty output")
		}
		return nil, fmt.Errorf("netperf: no results in output: %s", excerpt(out))
	}
	num := func(key string) (float64, error) {
		v, ok := kv[key]
		if !ok {
			return 0, fmt.Errorf("netperf: output lacks %s: %s", key, excerpt(out))
		}
		if strings.EqualFold(strings.TrimLeft(v, "+-"), "nan") {
			return math.NaN(), nil // C's printf says -nan too
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("netperf: bad %s value %q", key, v)
		}
		return f, nil
	}
	m := Metrics{}
	rate, err := num("TRANSACTION_RATE")
	if err != nil {
		return nil, err
	}
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		return nil, fmt.Errorf("netperf: TRANSACTION_RATE is %s: no measurement", kv["TRANSACTION_RATE"])
	}
	m["transactions_per_s"] = rate
	for _, l := range netperfLatency {
		v, err := num(l.key)
		if err != nil {
			return nil, err
		}
		if v >= 0 && !math.IsInf(v, 0) { // -1: no histogram was kept; nan/inf: none either
			m[l.metric] = v
		}
	}
	// CPU utilisation is the whole host's (of all its CPUs) as netperf measures it on each
	// side: -1 means not measured and is left out. Values over 100 happen (REMOTE_CPU_UTIL of
	// ~500 was seen for 1 s TCP_CRR runs on loopback); they are kept as the tool said them:
	// the runner leaves impossible shares out with a note.
	for key, metric := range map[string]string{"LOCAL_CPU_UTIL": "cpu_client_host_pct", "REMOTE_CPU_UTIL": "cpu_server_host_pct"} {
		if v, err := num(key); err == nil && v >= 0 && !math.IsInf(v, 0) {
			m[metric] = v
		}
	}
	// The request size (the response's is the same: -r B,B) is what the test used; recordings
	// made before it was asked for lack it.
	if v, err := num("REQUEST_SIZE"); err == nil && v > 0 {
		m[result.MsgSizeMetric] = v
	}
	return m, nil
}
