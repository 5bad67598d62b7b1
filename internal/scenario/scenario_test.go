package scenario_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

func prefix() string { return fmt.Sprintf("cnbt%04d", rand.Intn(10000)) }

func upLab(tb testing.TB, dp string) *lab.Lab {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	p := prefix()
	l, err := lab.Up(context.Background(), lab.Config{Prefix: p, Dataplane: dp})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = l.Close(context.Background())
		if left := lab.Leftovers(p); len(left) > 0 {
			tb.Errorf("leftovers: %v", left)
		}
	})
	return l
}

func setup(tb testing.TB, cl cluster.Cluster, sc, dp, pl, proto string) scenario.Fixture {
	tb.Helper()
	s, err := scenario.Get(sc)
	if err != nil {
		tb.Fatal(err)
	}
	c := result.Case{Scenario: sc, Dataplane: dp, Placement: pl, Protocol: proto, Backend: "lab"}
	c.ID = c.MakeID()
	f, err := s.Setup(context.Background(), cl, c, scenario.Options{CPUs: [2]int{0, 1}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

// TestEveryProtocolMeasures runs one short trial of every protocol pod to pod across nodes and
// checks the metrics each must produce.
func TestEveryProtocolMeasures(t *testing.T) {
	l := upLab(t, "calico")
	want := map[string][]string{
		"tcp":   {"throughput_bps", "cpu_client_proc_pct", "cpu_node_busy_pct"},
		"udp":   {"throughput_bps", "offered_bps", "loss_pct", "jitter_ms", "udp_payload_bytes"},
		"rr":    {"transactions_per_s", "latency_p50_us", "latency_p99_us"},
		"crr":   {"transactions_per_s", "latency_p99_us"},
		"udprr": {"transactions_per_s", "latency_p90_us"},
	}
	for _, proto := range []string{"tcp", "udp", "rr", "crr", "udprr"} {
		t.Run(proto, func(t *testing.T) {
			f := setup(t, l, "p2p", "calico", "inter", proto)
			m, err := f.Trial(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range want[proto] {
				if _, ok := m.Metrics[k]; !ok {
					t.Errorf("missing %s in %v", k, m.Metrics)
				}
			}
			if v := m.Metrics["throughput_bps"] + m.Metrics["transactions_per_s"]; v <= 0 {
				t.Errorf("nothing measured: %v", m.Metrics)
			}
			if proto == "udp" && m.Metrics["udp_payload_bytes"] != 1448 {
				t.Errorf("udp payload %v, want 1448 on a 1500-byte pod MTU", m.Metrics["udp_payload_bytes"])
			}
			if len(m.Raw) == 0 {
				t.Error("no raw output kept")
			}
		})
	}
}

// TestCRRServerWaitEnded: a TCP_CRR trial's netserver test processes (two streams: two of them)
// no longer wait netperf's PAD_TIME past the test length: the trial ends about when its test
// does, with every instance's figures.
func TestCRRServerWaitEnded(t *testing.T) {
	l := upLab(t, "calico")
	s, _ := scenario.Get("p2p")
	c := result.Case{Scenario: "p2p", Dataplane: "calico", Placement: "intra", Protocol: "crr", Backend: "lab", Streams: 2}
	c.ID = c.MakeID()
	f, err := s.Setup(context.Background(), l, c, scenario.Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	start := time.Now()
	m, err := f.Trial(context.Background(), 1)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if m.Metrics["transactions_per_s"] <= 0 || m.Metrics["latency_max_us"] <= 0 {
		t.Errorf("no transactions measured: %v", m.Metrics)
	}
	// Waited out, the trial takes 1 s + PadTime (5 s); ended, about 1.2 s.
	if took >= time.Second+driver.PadTime-time.Second {
		t.Errorf("a 1 s TCP_CRR trial took %v: the server's wait past the test (%v) was not ended", took, driver.PadTime)
	}
	t.Logf("a 1 s TCP_CRR trial of 2 streams took %v", took)
}

// TestUDPPayloadFitsOverlayMTU: on flannel (pod MTU 1450) datagrams are sized not to fragment.
func TestUDPPayloadFitsOverlayMTU(t *testing.T) {
	l := upLab(t, "flannel")
	f := setup(t, l, "p2p", "flannel", "inter", "udp")
	m, err := f.Trial(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Metrics["udp_payload_bytes"] != 1450-28 {
		t.Errorf("udp payload %v, want %d", m.Metrics["udp_payload_bytes"], 1450-28)
	}
}

// BenchmarkFidelityBareTCP compares cnibench's TCP throughput on the bare baseline with
// iperf3 run by hand (nsenter + taskset, the same flags and pinning) between the same
// namespaces: 5 alternating runs each (FIDELITY_SECONDS per run, default 10). It reports the
// ratio of the means (goal: within 5 %). Run: go test -run '^$' -bench Fidelity -benchtime 1x ./internal/scenario/
func BenchmarkFidelityBareTCP(b *testing.B) {
	secs := 10
	if v, err := strconv.Atoi(os.Getenv("FIDELITY_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	l := upLab(b, "bare")
	f := setup(b, l, "baseline", "bare", "intra", "tcp")
	cns, _ := l.PodNS("client")
	srv, err := l.Pod("server")
	if err != nil {
		b.Fatal(err)
	}
	var tool, hand float64
	for i := 0; i < b.N; i++ {
		tool, hand = 0, 0
		for r := 0; r < 5; r++ {
			m, err := f.Trial(context.Background(), secs)
			if err != nil {
				b.Fatal(err)
			}
			tool += m.Metrics["throughput_bps"] / 5
			out, err := exec.Command("nsenter", "--net=/run/netns/"+cns, "--", "taskset", "-c", "0",
				"iperf3", "-c", srv.IP, "-t", strconv.Itoa(secs), "-J", "-N", "-Z", "-M", "1448").Output()
			if err != nil {
				b.Fatalf("iperf3 by hand: %v", err)
			}
			var j struct {
				End struct {
					SumReceived struct {
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out, &j); err != nil || j.End.SumReceived.BitsPerSecond <= 0 {
				b.Fatalf("iperf3 by hand output: %v", err)
			}
			hand += j.End.SumReceived.BitsPerSecond / 5
			b.Logf("run %d: cnibench %.2f Gbit/s, by hand %.2f Gbit/s", r+1, m.Metrics["throughput_bps"]/1e9, j.End.SumReceived.BitsPerSecond/1e9)
		}
	}
	b.ReportMetric(tool/1e9, "cnibench_Gbit/s")
	b.ReportMetric(hand/1e9, "byhand_Gbit/s")
	b.ReportMetric(tool/hand, "ratio")
}

// TestP2PSilentPods: a p2p case with pods > 2 creates the silent pods (attached through CNI,
// spread over both nodes, each with an address that answers), measures across them, and
// Close removes them all.
func TestP2PSilentPods(t *testing.T) {
	l := upLab(t, "flannel")
	s, _ := scenario.Get("p2p")
	c := result.Case{Scenario: "p2p", Dataplane: "flannel", Placement: "inter", Protocol: "rr", Backend: "lab", Pods: 10}
	f, err := s.Setup(context.Background(), l, c, scenario.Options{CPUs: [2]int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for i := 0; i < 10; i++ {
		p, err := l.Pod(fmt.Sprintf("silent%d", i))
		if err != nil {
			t.Fatal(err)
		}
		perNode[p.Node]++
		if i == 7 {
			res, err := l.Exec(context.Background(), "client", []string{"ping", "-c1", "-W2", p.IP})
			if err != nil || res.ExitCode != 0 {
				t.Errorf("silent pod %s (%s) does not answer: %v %s", p.Name, p.IP, err, res.Stdout)
			}
		}
	}
	if perNode["node0"] != 5 || perNode["node1"] != 5 {
		t.Errorf("silent pods per node %v, want 5 and 5", perNode)
	}
	m, err := f.Trial(context.Background(), 1)
	if err != nil || m.Metrics["transactions_per_s"] <= 0 {
		t.Errorf("trial: %v %v", err, m.Metrics)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pod("silent3"); err == nil {
		t.Error("silent pod still there after Close")
	}
}

// TestP2SEveryProtocol measures every protocol pod to Service to pod (the tools' control and
// data connections all through the ClusterIP), inter node on flannel and intra node on calico.
func TestP2SEveryProtocol(t *testing.T) {
	for _, tc := range []struct{ dp, pl string }{{"flannel", "inter"}, {"calico", "intra"}, {"flannel-hostgw", "inter"}, {"flannel-hostgw", "intra"}} {
		l := upLab(t, tc.dp)
		for _, proto := range []string{"tcp", "udp", "rr", "crr", "udprr"} {
			t.Run(tc.dp+"/"+tc.pl+"/"+proto, func(t *testing.T) {
				f := setup(t, l, "p2s", tc.dp, tc.pl, proto)
				m, err := f.Trial(context.Background(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if v := m.Metrics["throughput_bps"] + m.Metrics["transactions_per_s"]; v <= 0 {
					t.Errorf("nothing measured through the Service: %v", m.Metrics)
				}
				if err := f.Close(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
	}
}
