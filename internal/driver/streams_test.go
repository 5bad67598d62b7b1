package driver

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// Parallel streams and message sizes: argv, and figures read from real runs recorded by
// testdata/record-streams.sh (README-streams.txt).

func TestIperf3StreamsAndMsgSize(t *testing.T) {
	d, _ := For("tcp")
	argv := strings.Join(d.Command(Spec{Protocol: "tcp", Target: "10.0.0.2", Streams: 4, MsgSize: 8192}), " ")
	for _, want := range []string{" -P 4 ", " -M 1448 ", " -l 8192"} {
		if !strings.Contains(argv+" ", want) {
			t.Errorf("tcp argv %q lacks %q", argv, want)
		}
	}
	one := strings.Join(d.Command(Spec{Protocol: "tcp", Target: "10.0.0.2", Streams: 1}), " ")
	if strings.Contains(one, "-P") || strings.Contains(one, " -l ") {
		t.Errorf("one stream of the default size: argv %q has -P or -l", one)
	}
	udp := strings.Join(d.Command(Spec{Protocol: "udp", Target: "10.0.0.2", Streams: 2, UDPLen: 512, MsgSize: 512}), " ")
	if !strings.Contains(udp, "-P 2") || !strings.Contains(udp, "-l 512") || strings.Count(udp, "-l ") != 1 {
		t.Errorf("udp argv %q: want -P 2 and one -l 512", udp)
	}
	if got := Instances(d, Spec{Protocol: "tcp", Streams: 4}); len(got) != 1 || got[0].Streams != 4 {
		t.Errorf("iperf3 runs its streams itself: Instances = %+v, want the spec once", got)
	}

	m, err := d.Parse(readTestdata(t, "iperf3_tcp_p4_l8192.json"), Spec{Protocol: "tcp", Streams: 4})
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, Metrics{
		// The server's intervals from 0.1 s on, each interval's "sum" (with -P 4 each server
		// interval has one; its bytes equal its four streams' bytes in all 20 intervals; by
		// hand as in TestParseIperf3TCP: 2308685824 bytes over 1.8998170047998428 s, 19 of 20
		// intervals; end.sum_received, the whole test, is 9728786648.274263).
		"throughput_bps":      9721718747.298965,
		"sent_bps":            9719982650.48722, // the client's intervals from 0.1 s on
		OmittedMetric:         100,
		"retransmits":         98,
		"rtt_mean_us":         (50 + 75 + 72 + 54) / 4.0, // the streams' sender mean_rtt
		"cpu_client_proc_pct": 16.187822114099156,
		"cpu_server_proc_pct": 81.824472356131,
		result.MsgSizeMetric:  8192, // start.test_start.blksize
	})
	if _, err := d.Parse(readTestdata(t, "iperf3_tcp_p4_l8192.json"), Spec{Protocol: "tcp", Streams: 2}); err == nil ||
		!strings.Contains(err.Error(), "4 streams, want 2") {
		t.Errorf("a 4-stream output read as 2 streams: err = %v", err)
	}

	u, _ := For("udp")
	m, err = u.Parse(readTestdata(t, "iperf3_udp_p2_l512.json"), Spec{Protocol: "udp", Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, Metrics{
		"throughput_bps":      1148262236.5280447, // end.sum_received over both streams
		"offered_bps":         1156478422.7570653,
		"loss_pct":            0.7069240304586506,
		"lost_packets":        3992,
		"packets":             564700,
		"jitter_ms":           0.004739328630997465,
		"cpu_client_proc_pct": 98.85781778267398,
		"cpu_server_proc_pct": 67.63983723049863,
		result.MsgSizeMetric:  512,
	})
}

func TestNetperfInstancesAndMsgSize(t *testing.T) {
	d, _ := For("rr")
	argv := d.Command(Spec{Protocol: "rr", Target: "10.0.0.2", DataPort: 12866, MsgSize: 64})
	i := slices.Index(argv, "-r")
	if i < 0 || argv[i+1] != "64,64" || i < slices.Index(argv, "--") {
		t.Errorf("argv %q: want test option -r 64,64", argv)
	}
	if slices.Contains(d.Command(Spec{Protocol: "rr", Target: "10.0.0.2"}), "-r") {
		t.Error("the default message size must leave netperf's own (1 byte)")
	}
	ins := Instances(d, Spec{Protocol: "crr", Target: "10.0.0.2", DataPort: 12866, Streams: 3, MsgSize: 64})
	if len(ins) != 3 {
		t.Fatalf("Instances = %d specs, want 3", len(ins))
	}
	for i, s := range ins {
		if s.DataPort != 12866+i || s.Streams != 1 || s.MsgSize != 64 || s.Protocol != "crr" {
			t.Errorf("instance %d = %+v: want data port %d, one stream, the trial's size and protocol", i, s, 12866+i)
		}
	}
	if got := Instances(d, Spec{Protocol: "rr", DataPort: 12866}); len(got) != 1 || got[0].DataPort != 12866 {
		t.Errorf("one stream: Instances = %+v, want the spec itself", got)
	}
}

// TestNetperfMerge merges three instances recorded at the same time against one netserver.
// Their distributions differ (P50 37, 29 and 14 µs): an average of percentiles would be a
// number no transaction mix has, so percentiles come out as the range they must lie in.
func TestNetperfMerge(t *testing.T) {
	d, _ := For("rr")
	md := d.(MultiDriver)
	spec := Spec{Protocol: "rr", Streams: 3}
	ms := parseInstances(t, d, "netperf_tcp_rr_x3_%d.txt", spec)
	got, err := md.Merge(ms, spec)
	if err != nil {
		t.Fatal(err)
	}
	rates := []float64{24698.825, 32276.802, 54661.370}
	means := []float64{40.43, 30.93, 18.25}
	sum := rates[0] + rates[1] + rates[2]
	assertMetrics(t, got, Metrics{
		"transactions_per_s":  sum,
		"latency_mean_us":     (rates[0]*means[0] + rates[1]*means[1] + rates[2]*means[2]) / sum,
		"latency_min_us":      13,
		"latency_max_us":      4134,
		"latency_p50_low_us":  14,
		"latency_p50_high_us": 37,
		"latency_p90_low_us":  31,
		"latency_p90_high_us": 67,
		"latency_p99_low_us":  51,
		"latency_p99_high_us": 101,
		"cpu_client_host_pct": 100,
		"cpu_server_host_pct": 100,
		result.MsgSizeMetric:  64,
	})
	// The weighted mean is what all transactions' mean is: the total latency over the count.
	if plain := (means[0] + means[1] + means[2]) / 3; math.Abs(got["latency_mean_us"]-plain) < 1 {
		t.Errorf("mean %v is the plain average of the means %v: not weighted by transactions", got["latency_mean_us"], plain)
	}
	one, err := md.Merge(ms[:1], Spec{Protocol: "rr"})
	if err != nil || one["latency_p99_us"] != 101 {
		t.Errorf("one instance merges to itself: %v, %v", one, err)
	}
	delete(ms[1], "transactions_per_s")
	if _, err := md.Merge(ms, spec); err == nil || !strings.Contains(err.Error(), "instance 2 of 3") {
		t.Errorf("an instance without a rate: err = %v, want it named", err)
	}
}

func TestCheckWorkload(t *testing.T) {
	for _, tc := range []struct {
		protocol         string
		streams, msgSize int
		want             string // "" = accepted
	}{
		{"tcp", 8, 1 << 20, ""},
		{"udp", 2, MaxUDPMsg, ""},
		{"udp", 1, MaxUDPMsg + 1, "at most 65507"},
		{"udprr", 1, 70000, "at most 65507"},
		{"rr", 64, 70000, ""},
		{"http", 2, 0, "streams and msg-size do not apply"},
		{"http", 0, 100, "streams and msg-size do not apply"},
		{"http", 1, 0, ""},
	} {
		err := CheckWorkload(tc.protocol, tc.streams, tc.msgSize)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckWorkload(%s, %d, %d) = %v, want %q", tc.protocol, tc.streams, tc.msgSize, err, tc.want)
		}
	}
}

// Three TCP_CRR instances recorded at once, each connecting to its own data port again and
// again: their rates add up, and P99 is the instances' range.
func TestNetperfMergeCRR(t *testing.T) {
	d, _ := For("crr")
	spec := Spec{Protocol: "crr", Streams: 3}
	ms := parseInstances(t, d, "netperf_tcp_crr_x3_%d.txt", spec)
	got, err := d.(MultiDriver).Merge(ms, spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := 7637.259 + 7063.735 + 12593.605; math.Abs(got["transactions_per_s"]-want) > 1e-6 {
		t.Errorf("transactions_per_s %v, want %v", got["transactions_per_s"], want)
	}
	if got["latency_p99_low_us"] != 185 || got["latency_p99_high_us"] != 361 {
		t.Errorf("P99 range %v..%v, want 185..361", got["latency_p99_low_us"], got["latency_p99_high_us"])
	}
}

// parseInstances parses the three recorded instances named by pattern (%d: 0, 1, 2).
func parseInstances(t *testing.T, d Driver, pattern string, spec Spec) []Metrics {
	t.Helper()
	var ms []Metrics
	for i := range 3 {
		m, err := d.Parse(readTestdata(t, fmt.Sprintf(pattern, i)), spec)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}
