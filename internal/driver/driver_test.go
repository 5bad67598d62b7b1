package driver

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t *testing.T, protocol string, out []byte) (Metrics, error) {
	t.Helper()
	d, err := For(protocol)
	if err != nil {
		t.Fatal(err)
	}
	return d.Parse(out, Spec{Protocol: protocol, Target: "127.0.0.1"})
}

func assertMetrics(t *testing.T, got, want Metrics) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
		} else if math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected metric %s = %v", k, got[k])
		}
	}
}

// The wanted values below are copied by hand from the files in testdata.

// iperf3_tcp.json: -i 0.1 --get-server-output against a server run with -J -i 0.1. The wanted
// throughput and sent rates are computed by hand from the file (python3, not the parser):
//
//	d = json.load(open("iperf3_tcp.json"))
//	def rate(ivs):  # intervals starting at 0.1 s or later
//	    k = [i["sum"] for i in ivs if i["sum"]["start"] >= 0.1]
//	    return sum(x["bytes"] for x in k) * 8 / sum(x["seconds"] for x in k)
//	rate(d["server_output_json"]["intervals"])  # 13520675036.927214 (19 of 20 intervals, 1.9003 s)
//	rate(d["intervals"])                         # 13507535991.123327
//
// end.sum_received (whole test) is 13513864801.053783, the first server interval (0-0.100121 s)
// 13384606051.36408: the first interval is left out.
func TestParseIperf3TCP(t *testing.T) {
	m, err := parse(t, "tcp", readTestdata(t, "iperf3_tcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, Metrics{
		"throughput_bps":      13520675036.927214, // the server's intervals from 0.1 s on
		"sent_bps":            13507535991.123327, // the client's intervals from 0.1 s on
		OmittedMetric:         100,
		"retransmits":         0,                  // end.sum_sent
		"cpu_client_proc_pct": 13.811273483933462, // end.cpu_utilization_percent.host_total: one process
		"cpu_server_proc_pct": 76.33439077476497,
		"rtt_mean_us":         120,
		result.MsgSizeMetric:  131072, // start.test_start.blksize: iperf3's default TCP write
	})
	if got := m["throughput_bps"]; got == 13513864801.053783 {
		t.Errorf("throughput_bps is end.sum_received (whole test), want the intervals after the omit")
	}
}

// wholeTest checks that m holds iperf3_tcp.json's whole-test figures (end.sum_received,
// end.sum_sent) and says that it omitted nothing.
func wholeTest(t *testing.T, m Metrics) {
	t.Helper()
	for k, w := range map[string]float64{"throughput_bps": 13513864801.053783, "sent_bps": 13538200379.72747, OmittedMetric: 0} {
		if g, ok := m[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
}

// A TCP output without the receiver's intervals falls back to the whole test's end.sum_*, and
// says so (omitted_ms 0), for both rates. Two cases: a real recording against a server run
// without -J (iperf3_tcp_textserver.json: its intervals come as server_output_text), and
// iperf3_tcp.json with the server_output_json key removed here in the test (not in the file).
func TestParseIperf3TCPFallback(t *testing.T) {
	m, err := parse(t, "tcp", readTestdata(t, "iperf3_tcp_textserver.json"))
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, Metrics{
		"throughput_bps":      12248133177.869423, // end.sum_received
		"sent_bps":            12265280338.637861, // end.sum_sent, not its intervals (12182384256.004017)
		OmittedMetric:         0,
		"retransmits":         5787,
		"cpu_client_proc_pct": 33.7343339894195,
		"cpu_server_proc_pct": 37.104196908548545,
		"rtt_mean_us":         248,
		result.MsgSizeMetric:  131072,
	})

	var doc map[string]json.RawMessage
	if err := json.Unmarshal(readTestdata(t, "iperf3_tcp.json"), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "server_output_json")
	out, _ := json.Marshal(doc)
	if m, err = parse(t, "tcp", out); err != nil {
		t.Fatal(err)
	}
	wholeTest(t, m)

	// Server intervals that all start before 0.1 s (a test too short): the fallback too.
	var srv struct {
		Intervals []json.RawMessage `json:"intervals"`
	}
	full := readTestdata(t, "iperf3_tcp.json")
	var doc2 map[string]json.RawMessage
	_ = json.Unmarshal(full, &doc2)
	if err := json.Unmarshal(doc2["server_output_json"], &srv); err != nil {
		t.Fatal(err)
	}
	doc2["server_output_json"], _ = json.Marshal(map[string]any{"intervals": srv.Intervals[:1]})
	out, _ = json.Marshal(doc2)
	if m, err = parse(t, "tcp", out); err != nil {
		t.Fatal(err)
	}
	wholeTest(t, m)
}

func TestParseIperf3UDP(t *testing.T) {
	out := readTestdata(t, "iperf3_udp.json")
	m, err := parse(t, "udp", out)
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{
		"throughput_bps":      1969400176.4889693, // end.sum_received, not end.sum (1984765841.8319263)
		"offered_bps":         1984765841.8319263,
		"loss_pct":            0.76981440410878954,
		"lost_packets":        2638,
		"packets":             342680,
		"jitter_ms":           0.004323593065662967,
		"cpu_client_proc_pct": 99.501046088887065,
		"cpu_server_proc_pct": 69.049754616686059,
		result.MsgSizeMetric:  1448,
	}
	assertMetrics(t, m, want)

	// Without end.sum_received (older iperf3) the receiver rate is derived from end.sum:
	// (342680-2638) datagrams * 1448 bytes * 8 / 2.000125 s, the same figure.
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["end"].(map[string]any), "sum_received")
	old, _ := json.Marshal(doc)
	m, err = parse(t, "udp", old)
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, want)
}

func TestParseIperf3Errors(t *testing.T) {
	udp := readTestdata(t, "iperf3_udp.json")
	for _, tc := range []struct {
		name, protocol, out, want string
	}{
		{"refused", "tcp", string(readTestdata(t, "iperf3_refused.json")), "iperf3: unable to connect to server: Connection refused"},
		{"empty", "tcp", " \n", "empty output"},
		{"text", "udp", "iperf3: error - unable to connect to server", "no JSON"},
		{"truncated", "udp", string(udp[:len(udp)/2]), "truncated"},
		{"wrong protocol", "tcp", string(udp), "UDP test"},
		{"no sums", "tcp", `{"start":{},"end":{}}`, "lacks"},
	} {
		_, err := parse(t, tc.protocol, []byte(tc.out))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestParseNetperf(t *testing.T) {
	for _, tc := range []struct {
		protocol, file string
		want           Metrics
	}{
		{"rr", "netperf_tcp_rr.txt", Metrics{
			"transactions_per_s": 6590.708, "latency_min_us": 16, "latency_mean_us": 151.50,
			"latency_p50_us": 126, "latency_p90_us": 204, "latency_p99_us": 507, "latency_max_us": 4044,
			"cpu_client_host_pct": 44.40, "cpu_server_host_pct": 44.40}},
		{"crr", "netperf_tcp_crr.txt", Metrics{
			"transactions_per_s": 6010.522, "latency_min_us": 97, "latency_mean_us": 166.12,
			"latency_p50_us": 156, "latency_p90_us": 197, "latency_p99_us": 359, "latency_max_us": 4388,
			"cpu_client_host_pct": 53.41, "cpu_server_host_pct": 54.43}},
		{"udprr", "netperf_udp_rr.txt", Metrics{
			"transactions_per_s": 8517.232, "latency_min_us": 13, "latency_mean_us": 117.16,
			"latency_p50_us": 111, "latency_p90_us": 136, "latency_p99_us": 313, "latency_max_us": 3808,
			"cpu_client_host_pct": 31.82, "cpu_server_host_pct": 31.82}},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			m, err := parse(t, tc.protocol, readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			assertMetrics(t, m, tc.want)
		})
	}
}

// -1 is netperf's "not measured": left out. A share over 100 % is impossible but is what
// the tool said: kept (the runner leaves it out with a note, never silently).
func TestParseNetperfCPUUnmeasured(t *testing.T) {
	out := strings.NewReplacer("LOCAL_CPU_UTIL=44.40", "LOCAL_CPU_UTIL=-1.00",
		"REMOTE_CPU_UTIL=44.40", "REMOTE_CPU_UTIL=499.41").Replace(string(readTestdata(t, "netperf_tcp_rr.txt")))
	m, err := parse(t, "rr", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["cpu_client_host_pct"]; ok {
		t.Error("cpu_client_host_pct reported for LOCAL_CPU_UTIL=-1.00")
	}
	if m["cpu_server_host_pct"] != 499.41 {
		t.Errorf("cpu_server_host_pct = %v, want 499.41 as netperf said it", m["cpu_server_host_pct"])
	}
	if m["transactions_per_s"] != 6590.708 {
		t.Errorf("transactions_per_s = %v", m["transactions_per_s"])
	}
}

// netperf prints nan and inf for fields it could not compute: the rate is then no
// measurement (an error naming it; a NaN used to reach the store and abort the run), an
// optional field is left out.
func TestParseNetperfNonFinite(t *testing.T) {
	rr := string(readTestdata(t, "netperf_tcp_rr.txt"))
	m, err := parse(t, "rr", []byte(strings.NewReplacer("P99_LATENCY=507", "P99_LATENCY=nan", "MAX_LATENCY=4044", "MAX_LATENCY=inf",
		"LOCAL_CPU_UTIL=44.40", "LOCAL_CPU_UTIL=-nan").Replace(rr)))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"latency_p99_us", "latency_max_us", "cpu_client_host_pct"} {
		if v, ok := m[k]; ok {
			t.Errorf("%s = %v kept", k, v)
		}
	}
	if m["latency_p50_us"] != 126 {
		t.Errorf("p50 %v", m["latency_p50_us"])
	}
	for _, bad := range []string{"nan", "-nan", "inf"} {
		_, err := parse(t, "rr", []byte(strings.Replace(rr, "TRANSACTION_RATE=6590.708", "TRANSACTION_RATE="+bad, 1)))
		if err == nil || !strings.Contains(err.Error(), "TRANSACTION_RATE is "+bad) {
			t.Errorf("rate %s: %v", bad, err)
		}
	}
}

func TestParseNetperfErrors(t *testing.T) {
	rr := string(readTestdata(t, "netperf_tcp_rr.txt"))
	for _, tc := range []struct {
		name, protocol, out, want string
	}{
		{"no server", "rr", string(readTestdata(t, "netperf_noserver.txt")), "are you sure there is a netserver listening on 127.0.0.1 at port 42999"},
		{"empty", "rr", "", "empty output"},
		{"truncated", "rr", rr[:strings.Index(rr, "P90_LATENCY")], "lacks P90_LATENCY"},
		{"bad value", "rr", strings.Replace(rr, "TRANSACTION_RATE=6590.708", "TRANSACTION_RATE=x", 1), "bad TRANSACTION_RATE"},
		{"protocol", "tcp", rr, "unsupported protocol"},
	} {
		_, err := netperf{}.Parse([]byte(tc.out), Spec{Protocol: tc.protocol})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestCommands(t *testing.T) {
	const sel = "THROUGHPUT,THROUGHPUT_UNITS,TRANSACTION_RATE,MIN_LATENCY,MEAN_LATENCY,P50_LATENCY,P90_LATENCY,P99_LATENCY,MAX_LATENCY,LOCAL_CPU_UTIL,REMOTE_CPU_UTIL,REQUEST_SIZE"
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Protocol: "tcp", Target: "10.0.0.2", DurationS: 30},
			"iperf3 -c 10.0.0.2 -p 5201 -t 30 -J -i 0.1 --get-server-output -N -Z -M 1448"},
		{Spec{Protocol: "tcp", Target: "10.0.0.2", Port: 6000, DurationS: 5, MSS: 1400},
			"iperf3 -c 10.0.0.2 -p 6000 -t 5 -J -i 0.1 --get-server-output -N -Z -M 1400"},
		{Spec{Protocol: "udp", Target: "10.0.0.2", DurationS: 30, MSS: 9000},
			"iperf3 -c 10.0.0.2 -p 5201 -t 30 -J -u -b 0 -l 1448"},
		{Spec{Protocol: "udp", Target: "10.0.0.2", Port: 6000, UDPLen: 512},
			"iperf3 -c 10.0.0.2 -p 6000 -t 10 -J -u -b 0 -l 512"},
		{Spec{Protocol: "rr", Target: "10.0.0.2", DurationS: 30},
			"netperf -H 10.0.0.2 -p 12865 -t TCP_RR -l 30 -j -c -C -- -k " + sel},
		{Spec{Protocol: "crr", Target: "10.0.0.2", Port: 7000, DataPort: 7001, DurationS: 30},
			"netperf -H 10.0.0.2 -p 7000 -t TCP_CRR -l 30 -j -c -C -- -P ,7001 -k " + sel},
		{Spec{Protocol: "udprr", Target: "10.0.0.2"},
			"netperf -H 10.0.0.2 -p 12865 -t UDP_RR -l 10 -j -c -C -- -k " + sel},
	} {
		d, err := For(tc.spec.Protocol)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(d.Command(tc.spec), " "); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.spec, got, tc.want)
		}
	}
	if got := (iperf3{}).Command(Spec{Protocol: "rr"}); got != nil {
		t.Errorf("iperf3 rr command = %q, want nil", got)
	}
	if got := (netperf{}).Command(Spec{Protocol: "tcp"}); got != nil {
		t.Errorf("netperf tcp command = %q, want nil", got)
	}
}

func TestServerCommands(t *testing.T) {
	for _, tc := range []struct {
		d    Driver
		port int
		want string
	}{
		{iperf3{}, 0, "iperf3 -s -J -i 0.1 -p 5201"},
		{iperf3{}, 6000, "iperf3 -s -J -i 0.1 -p 6000"},
		{netperf{}, 0, "netserver -D -p 12865"},
		{netperf{}, 7000, "netserver -D -p 7000"},
	} {
		if got := strings.Join(tc.d.ServerCommand(tc.port), " "); got != tc.want {
			t.Errorf("%s.ServerCommand(%d) = %q, want %q", tc.d.Name(), tc.port, got, tc.want)
		}
	}
}

func TestFor(t *testing.T) {
	want := map[string]string{"tcp": "iperf3", "udp": "iperf3", "rr": "netperf", "crr": "netperf", "udprr": "netperf"}
	if got := Protocols(); !reflect.DeepEqual(got, []string{"tcp", "udp", "rr", "crr", "udprr"}) {
		t.Errorf("Protocols() = %v", got)
	}
	for _, p := range Protocols() {
		d, err := For(p)
		if err != nil || d.Name() != want[p] {
			t.Errorf("For(%q) = %v, %v; want %s", p, d, err, want[p])
		}
	}
	for _, p := range []string{"", "TCP", "sctp"} {
		_, err := For(p)
		if err == nil || !strings.Contains(err.Error(), "tcp, udp, rr, crr, udprr") {
			t.Errorf("For(%q) error = %v, want one naming the valid protocols", p, err)
		}
	}
	Protocols()[0] = "changed"
	if Protocols()[0] != "tcp" {
		t.Error("Protocols() exposes its backing array")
	}
}

func TestServerPort(t *testing.T) {
	for tool, want := range map[string]int{"iperf3": 5201, "netperf": 12865, "netserver": 12865, "ping": 0} {
		if got := ServerPort(tool); got != want {
			t.Errorf("ServerPort(%q) = %d, want %d", tool, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct{ tool, out, want string }{
		{"iperf3", "iperf 3.12 (cJSON 1.7.15)\nLinux vm 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0 x86_64\nOptional features available: CPU affinity setting\n", "3.12"},
		{"iperf3", "iperf 3.9 (cJSON 1.7.13)\n", "3.9"},
		{"iperf3", "iperf 3.17.1 (cJSON 1.7.15)\n", "3.17.1"},
		{"netperf", "Netperf version 2.7.0\n", "2.7.0"},
		{"netserver", "Netperf version 2.7.0\n", "2.7.0"},
		{"netperf", "netperf: command not found\n", ""},
		{"iperf3", "", ""},
		{"ping", "ping version 1.0", ""},
	} {
		if got := Version(tc.tool, []byte(tc.out)); got != tc.want {
			t.Errorf("Version(%q, %q) = %q, want %q", tc.tool, tc.out, got, tc.want)
		}
	}
}

// Retransmits cover the span the rates cover: those of the client's intervals from 0.1 s on.
// The loopback recordings have none in their first interval, so here the test gives
// iperf3_tcp_p4_l8192.json's first client interval 7 (and its end.sum_sent 7 more, as iperf3
// would count them): the figure stays the 98 of the later intervals.
func TestParseIperf3TCPRetransmitsAfterOmit(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(readTestdata(t, "iperf3_tcp_p4_l8192.json"), &doc); err != nil {
		t.Fatal(err)
	}
	first := doc["intervals"].([]any)[0].(map[string]any)["sum"].(map[string]any)
	first["retransmits"] = first["retransmits"].(float64) + 7
	sent := doc["end"].(map[string]any)["sum_sent"].(map[string]any)
	sent["retransmits"] = sent["retransmits"].(float64) + 7
	out, _ := json.Marshal(doc)
	d, _ := For("tcp")
	m, err := d.Parse(out, Spec{Protocol: "tcp", Streams: 4})
	if err != nil {
		t.Fatal(err)
	}
	if m["retransmits"] != 98 || m[OmittedMetric] != 100 {
		t.Errorf("retransmits %v (omitted_ms %v), want 98: the first 0.1 s left out", m["retransmits"], m[OmittedMetric])
	}
	// On the whole-test fallback they are end.sum_sent's, like the rates.
	delete(doc, "server_output_json")
	out, _ = json.Marshal(doc)
	if m, err = d.Parse(out, Spec{Protocol: "tcp", Streams: 4}); err != nil || m["retransmits"] != 105 {
		t.Errorf("fallback: retransmits %v (err %v), want end.sum_sent's 105", m["retransmits"], err)
	}
}
