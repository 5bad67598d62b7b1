package scenario_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
)

// withWorkload sets a case's streams and message size (in its id, as a plan does).
func withWorkload(c result.Case, streams, msgSize int) result.Case {
	c.Streams, c.MsgSize = streams, msgSize
	c.ID = c.MakeID()
	return c
}

// iperf3 runs the streams itself: one client run with -P and -l, its summed figures.
func TestStreamsIperf3RunsOneClient(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	f := mustSetUp(t, fc, withWorkload(fakeCase("p2p", "flannel", "inter", "tcp"), 4, 8192))
	m := mustTrial(t, f)
	c := lastExec(t, fc, "client", "iperf3")
	if argAfter(c.Cmd, "-P") != "4" || argAfter(c.Cmd, "-l") != "8192" {
		t.Errorf("client ran %v, want -P 4 -l 8192", c.Cmd)
	}
	if n := countExecs(fc, "client", "iperf3"); n != 1 {
		t.Errorf("%d iperf3 runs, want 1", n)
	}
	if m.Metrics["throughput_bps"] != 9721718747.298965 || m.Metrics[result.MsgSizeMetric] != 8192 {
		t.Errorf("metrics %v: want the 4-stream recording's sum and its block size", m.Metrics)
	}
	closeEmpty(t, fc, f)
}

// netperf runs one stream per process: a trial of 3 rr streams through a Service runs three
// instances at once, each on its own data port, which the Service carries; the rates add up
// and the percentiles come out as a range.
func TestStreamsNetperfInstancesThroughService(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	f := mustSetUp(t, fc, withWorkload(fakeCase("p2s", "flannel", "inter", "rr"), 3, 64))
	m := mustTrial(t, f)
	var ports []string
	for _, c := range fc.Execs() {
		if c.Pod == "client" && len(c.Cmd) > 0 && c.Cmd[0] == "netperf" {
			ports = append(ports, argAfter(c.Cmd, "-P"))
			if argAfter(c.Cmd, "-r") != "64,64" {
				t.Errorf("instance %v: want -r 64,64", c.Cmd)
			}
		}
	}
	slices.Sort(ports)
	if want := []string{",12866", ",12867", ",12868"}; !slices.Equal(ports, want) {
		t.Errorf("instances' data ports %v, want %v", ports, want)
	}
	svcs := fc.Services()
	i := slices.IndexFunc(svcs, func(s cluster.Service) bool { return s.Name == "server" })
	if i < 0 {
		t.Fatalf("no Service server among %v", svcs)
	}
	for _, p := range []int{12866, 12867, 12868} {
		if !slices.ContainsFunc(svcs[i].Ports, func(sp cluster.ServicePort) bool { return sp.Port == p && sp.Protocol == "tcp" }) {
			t.Errorf("Service ports %v lack tcp %d", svcs[i].Ports, p)
		}
	}
	// The recording (netperf_tcp_rr.txt: 6590.708 transactions/s) three times.
	if got := m.Metrics["transactions_per_s"]; math.Abs(got-3*6590.708) > 1e-6 {
		t.Errorf("transactions_per_s %v, want 3 x 6590.708", got)
	}
	if _, ok := m.Metrics["latency_p99_us"]; ok {
		t.Errorf("a P99 of concurrent instances was reported: %v", m.Metrics)
	}
	wantMetrics(t, m.Metrics, "latency_p99_low_us", "latency_p99_high_us", "latency_mean_us", "cpu_node_busy_pct")
	if client := strings.Join(m.Client, " "); strings.Count(client, "netperf ") != 3 || strings.Count(client, " & ") != 2 {
		t.Errorf("recorded client command %q: want the three instances joined by &", client)
	}
	if strings.Count(string(m.Raw), "=== netperf (instance ") != 3 {
		t.Errorf("raw output does not keep each instance's output:\n%s", m.Raw)
	}
	closeEmpty(t, fc, f)
}

// An instance that fails fails the trial, which names it.
func TestStreamsNetperfInstanceFailureNamed(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Fail: clustertest.Failures{ToolRuns: 1}})
	f := mustSetUp(t, fc, withWorkload(fakeCase("p2p", "flannel", "intra", "crr"), 2, 0))
	_, err := f.Trial(t.Context(), 1)
	if err == nil || !strings.Contains(err.Error(), "of 2") {
		t.Errorf("one instance of two failed: err = %v, want the instance named", err)
	}
	closeEmpty(t, fc, f)
}

// A UDP message larger than one packet at the pod MTU is not fragmented behind the user's
// back: the case is unsupported, with the size that fits.
func TestStreamsUDPMsgSizeStaysUnderPodMTU(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Backend: "fake", PodMTU: 1450}})
	_, err := setUpOn(t, fc, withWorkload(fakeCase("p2p", "flannel", "inter", "udp"), 2, 1423))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "1422") {
		t.Errorf("udp 1423 B at MTU 1450: err = %v, want unsupported naming 1422", err)
	}
	fc.AssertEmpty(t)
	// netperf's UDP_RR requests are datagrams too.
	_, err = setUpOn(t, fc, withWorkload(fakeCase("p2p", "flannel", "inter", "udprr"), 0, 8192))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "fragment allow") {
		t.Errorf("udprr 8192 B at MTU 1450: err = %v, want unsupported naming fragment allow", err)
	}
	fc.AssertEmpty(t)
	// Asked for explicitly, the datagrams go fragmented, and the trial says into how many
	// fragments: 1423 + 8 bytes over (1450 - 20) &^ 7 = 1424 per fragment.
	frag := withWorkload(fakeCase("p2p", "flannel", "inter", "udp"), 0, 1423)
	frag.Fragment = result.FragmentAllow
	f := mustSetUp(t, fc, frag)
	m := mustTrial(t, f)
	if c := lastExec(t, fc, "client", "iperf3"); argAfter(c.Cmd, "-l") != "1423" || m.Metrics["udp_fragments_per_datagram"] != 2 {
		t.Errorf("client ran %v, udp_fragments_per_datagram %v: want -l 1423 in 2 fragments", c.Cmd, m.Metrics["udp_fragments_per_datagram"])
	}
	closeEmpty(t, fc, f)
	f = mustSetUp(t, fc, withWorkload(fakeCase("p2p", "flannel", "inter", "udp"), 2, 512))
	m = mustTrial(t, f)
	if _, ok := m.Metrics["udp_fragments_per_datagram"]; ok {
		t.Errorf("512 B datagrams are not fragmented: %v", m.Metrics)
	}
	if c := lastExec(t, fc, "client", "iperf3"); argAfter(c.Cmd, "-l") != "512" || argAfter(c.Cmd, "-P") != "2" || m.Metrics["udp_payload_bytes"] != 512 {
		t.Errorf("client ran %v (udp_payload_bytes %v), want -P 2 -l 512", c.Cmd, m.Metrics["udp_payload_bytes"])
	}
	closeEmpty(t, fc, f)
}

func countExecs(fc *clustertest.Fake, pod, tool string) int {
	n := 0
	for _, c := range fc.Execs() {
		if c.Pod == pod && len(c.Cmd) > 0 && c.Cmd[0] == tool {
			n++
		}
	}
	return n
}
