package driver

import (
	"slices"
	"strings"
	"testing"
)

// The wanted values below are copied by hand from the pkt_* files in testdata (README-pkt.txt
// says how they were recorded).

func TestPktGenCommand(t *testing.T) {
	cpu := 0
	for _, c := range []struct {
		spec PktGenSpec
		want string
	}{
		{PktGenSpec{Dst: "10.0.0.2"}, "cnibench pkt gen --dst 10.0.0.2 --rate 0 --duration 10s"},
		{PktGenSpec{Binary: "/proc/self/exe", Engine: "af_packet", Dst: "10.0.0.2", Dev: "eth0", DstMAC: "02:00:00:00:00:01",
			Mode: "udp", Size: "imix", RatePPS: 20000.5, DurationS: 2.5, Streams: 3, FirstTEID: 1000, RotateS: 0.5, ProbeRate: 10, CPU: &cpu},
			"/proc/self/exe pkt gen --dst 10.0.0.2 --rate 20000.5 --duration 2.5s --engine af_packet --dev eth0 --dst-mac 02:00:00:00:00:01" +
				" --mode udp --size imix --streams 3 --teid 1000 --rotate 0.5s --probe-rate 10 --cpu 0"},
		{PktGenSpec{Dst: "10.0.0.2", RatePPS: 1e6, ProbeRate: -1}, "cnibench pkt gen --dst 10.0.0.2 --rate 1000000 --duration 10s --probe-rate 0"},
	} {
		if got := strings.Join(PktGenCommand(c.spec), " "); got != c.want {
			t.Errorf("PktGenCommand(%+v):\n got %s\nwant %s", c.spec, got, c.want)
		}
	}
}

func TestPktRecvCommand(t *testing.T) {
	cpu := 1
	if got, want := PktRecvCommand(PktRecvSpec{}), []string{"cnibench", "pkt", "recv"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got := PktRecvCommand(PktRecvSpec{Binary: "/bin/cnibench", Engine: "af_packet", Dev: "eth0", DurationS: 12, CPU: &cpu})
	if want := []string{"/bin/cnibench", "pkt", "recv", "--duration", "12s", "--engine", "af_packet", "--dev", "eth0", "--cpu", "1"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParsePktGen(t *testing.T) {
	m, err := ParsePktGen(readTestdata(t, "pkt_gen_gtpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, Metrics{
		"offered_pps":  19995.29531696252,
		"offered_bps":  40950364.809139244,
		"target_pps":   20000,
		"sent_packets": 40000,
		"sent_probes":  11,
		"tx_errors":    0,
	})
	r, err := PktGenResult(readTestdata(t, "pkt_gen_gtpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Streams) != 3 || r.Streams[1].TEID != 1001 || r.Streams[1].Sent != 10024 || r.Mode != "gtpu" || r.FrameSize != "256" {
		t.Errorf("generator result %+v", r)
	}
}

func TestParsePktRecv(t *testing.T) {
	m, err := ParsePktRecv(readTestdata(t, "pkt_recv_gtpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	assertMetrics(t, m, Metrics{
		"received_packets":  40000,
		"unique_packets":    40000,
		"duplicate_packets": 0,
		"reordered_packets": 0,
		"gap_lost_packets":  0,
		"rx_pps":            20006.47198539954,
		"probes":            11,
		"ring_drop_packets": 0,
		"other_packets":     1, // the datagram that made the kernel resolve the receiver's MAC
		"latency_min_us":    2.61,
		"latency_mean_us":   7.36,
		"latency_p50_us":    3.92,
		"latency_p90_us":    6.21,
		"latency_p99_us":    40.58,
		"latency_max_us":    40.58,
	})
	// Without probes there is no latency at all (not a latency of 0).
	m, err = ParsePktRecv(readTestdata(t, "pkt_recv_idle.json"))
	if err != nil {
		t.Fatal(err)
	}
	for k := range m {
		if strings.HasPrefix(k, "latency_") {
			t.Errorf("an idle receiver reports %s", k)
		}
	}
	if m["received_packets"] != 0 || len(m) != 9 {
		t.Errorf("idle receiver: %v", m)
	}
}

func TestParsePktTrial(t *testing.T) {
	m, err := ParsePktTrial(readTestdata(t, "pkt_gen_udp_imix.json"), readTestdata(t, "pkt_recv_udp_imix.json"))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{
		"sent_packets":     344768,
		"unique_packets":   344768,
		"lost_packets":     0,
		"loss_pct":         0,
		"throughput_pps":   344768 / 1.000179607,
		"offered_bps":      997802883.6174822,
		"latency_max_us":   33.31,
		"gap_lost_packets": 0,
	} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	// Fewer frames arrived than were sent: the tail a receiver cannot see by sequence gaps
	// counts as lost.
	gen := readTestdata(t, "pkt_gen_gtpu.json")
	recv := strings.Replace(string(readTestdata(t, "pkt_recv_gtpu.json")), `"unique":40000`, `"unique":39000`, 1)
	m, err = ParsePktTrial(gen, []byte(recv))
	if err != nil {
		t.Fatal(err)
	}
	if m["lost_packets"] != 1000 || m["loss_pct"] != 2.5 {
		t.Errorf("lost %v (%v %%), want 1000 (2.5 %%)", m["lost_packets"], m["loss_pct"])
	}
}

func TestParsePktErrors(t *testing.T) {
	for _, c := range []struct {
		name, out, want string
		parse           func([]byte) (Metrics, error)
	}{
		{"no ARP reply", string(readTestdata(t, "pkt_gen_noarp.txt")), "no MAC address for next hop 10.252.0.99", ParsePktGen},
		{"empty", "", "empty output", ParsePktGen},
		{"truncated", `{"engine":"af_packet","tx":"TPACKET_V2`, "truncated", ParsePktGen},
		{"receiver's output to the generator's parser", string(readTestdata(t, "pkt_recv_gtpu.json")), "not its result", ParsePktGen},
		{"generator's output to the receiver's parser", string(readTestdata(t, "pkt_gen_gtpu.json")), "not its result", ParsePktRecv},
		{"nothing sent", `{"engine":"af_packet","tx":"x","streams":[],"duration_s":0}`, "sent nothing", ParsePktGen},
	} {
		if _, err := c.parse([]byte(c.out)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}
