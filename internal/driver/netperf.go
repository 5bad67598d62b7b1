package driver

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
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
	"LOCAL_CPU_UTIL,REMOTE_CPU_UTIL"

var netperfLatency = []struct{ key, metric string }{
	{"MIN_LATENCY", "latency_min_us"},
	{"MEAN_LATENCY", "latency_mean_us"},
	{"P50_LATENCY", "latency_p50_us"},
	{"P90_LATENCY", "latency_p90_us"},
	{"P99_LATENCY", "latency_p99_us"},
	{"MAX_LATENCY", "latency_max_us"},
}

func (netperf) Name() string { return "netperf" }

// ServerCommand runs netserver in the foreground: -D means "do not daemonize" in 2.7.0.
func (netperf) ServerCommand(port int) []string {
	return []string{"netserver", "-D", "-p", strconv.Itoa(orDefault(port, ServerPort("netperf")))}
}

// Command builds the netperf argv. Note that with 2.7.0 a TCP_CRR test was observed to
// take about DurationS+4 s (netperf's PAD_TIME is 4 s); allow for it in timeouts.
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
	return append(argv, "-k", netperfSelectors)
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
	return m, nil
}
