package scenario_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
)

// Every protocol's client targets the server pod's address with the tool of that protocol,
// and the trial carries that tool's metrics and raw output.
func TestP2PClientTargetsServerPodIPForEveryProtocol(t *testing.T) {
	for _, tc := range []struct{ proto, tool, target, metric string }{
		{"tcp", "iperf3", "-c", "throughput_bps"},
		{"udp", "iperf3", "-c", "throughput_bps"},
		{"rr", "netperf", "-H", "transactions_per_s"},
		{"crr", "netperf", "-H", "transactions_per_s"},
		{"udprr", "netperf", "-H", "transactions_per_s"},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			fc := clustertest.New(clustertest.Config{})
			f := mustSetUp(t, fc, fakeCase("p2p", "flannel", "inter", tc.proto))
			server, _ := fc.Pod("server")
			m := mustTrial(t, f)
			if c := lastExec(t, fc, "client", tc.tool); argAfter(c.Cmd, tc.target) != server.IP {
				t.Errorf("client ran %v, want %s %s %s", c.Cmd, tc.tool, tc.target, server.IP)
			}
			if m.Metrics[tc.metric] <= 0 || len(m.Raw) == 0 {
				t.Errorf("metrics %v, %d raw bytes", m.Metrics, len(m.Raw))
			}
			closeEmpty(t, fc, f)
		})
	}
}

// The server runs pinned to the server CPU and the client to the client CPU (taskset -c).
func TestP2PPinsClientAndServerToTheirCPUs(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	f, err := setUpPinned(t, fc, fakeCase("p2p", "calico", "intra", "tcp"), [2]int{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	mustTrial(t, f)
	if s := fc.Starts(); len(s) != 1 || s[0].Argv[0] != "taskset" || s[0].CPU != 3 || s[0].Pod != "server" {
		t.Errorf("server started as %+v, want taskset -c 3 in server", s)
	}
	if c := lastExec(t, fc, "client", "iperf3"); c.Argv[0] != "taskset" || c.CPU != 2 {
		t.Errorf("client ran %v, want taskset -c 2 ...", c.Argv)
	}
	closeEmpty(t, fc, f)
}

// UDP datagrams are as large as the pod MTU lets them be unfragmented (MTU - 28), at most
// iperf3's 1448; the trial records the payload it used.
func TestP2PUDPPayloadFollowsPodMTU(t *testing.T) {
	for _, tc := range []struct{ mtu, want int }{{1450, 1422}, {1500, 1448}, {9000, 1448}, {0, 1448}} {
		fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Backend: "fake", PodMTU: tc.mtu}})
		f := mustSetUp(t, fc, fakeCase("p2p", "flannel", "inter", "udp"))
		m := mustTrial(t, f)
		c := lastExec(t, fc, "client", "iperf3")
		if got := argAfter(c.Cmd, "-l"); got != itoa(tc.want) || m.Metrics["udp_payload_bytes"] != float64(tc.want) {
			t.Errorf("pod MTU %d: iperf3 -l %s, udp_payload_bytes %v, want %d", tc.mtu, got, m.Metrics["udp_payload_bytes"], tc.want)
		}
		closeEmpty(t, fc, f)
	}
}

// The trial's node CPU figures are computed from the client node's samples before and after
// the run: busy (steal, idle and iowait excluded), softirq and steal shares of the interval.
func TestP2PTrialComputesNodeCPUFromSamples(t *testing.T) {
	step := cluster.CPUSample{User: 50, System: 10, SoftIRQ: 10, Idle: 20, IOWait: 5, Steal: 5} // 100 ticks
	fc := clustertest.New(clustertest.Config{CPUStep: step})
	f := mustSetUp(t, fc, fakeCase("p2p", "flannel", "inter", "rr"))
	m := mustTrial(t, f)
	for k, want := range map[string]float64{"cpu_node_busy_pct": 70, "cpu_node_softirq_pct": 10, "cpu_node_steal_pct": 5} {
		if math.Abs(m.Metrics[k]-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, m.Metrics[k], want)
		}
	}
	closeEmpty(t, fc, f)
}

// Intra-node placement puts both pods on the first node, inter-node on the first two; a
// one-node cluster cannot place inter node: unsupported, nothing created.
func TestP2PPlacesPodsByPlacement(t *testing.T) {
	for pl, want := range map[string][2]string{"intra": {"node0", "node0"}, "inter": {"node0", "node1"}} {
		fc := clustertest.New(clustertest.Config{})
		f := mustSetUp(t, fc, fakeCase("p2p", "flannel", pl, "tcp"))
		client, _ := fc.Pod("client")
		server, _ := fc.Pod("server")
		if client.Node != want[0] || server.Node != want[1] {
			t.Errorf("%s: client on %s, server on %s, want %v", pl, client.Node, server.Node, want)
		}
		closeEmpty(t, fc, f)
	}
	fc := clustertest.New(clustertest.Config{Nodes: []cluster.Node{{Name: "solo", IP: "172.30.0.10"}}})
	if _, err := setUpOn(t, fc, fakeCase("p2p", "flannel", "inter", "tcp")); !errors.Is(err, cluster.ErrUnsupported) {
		t.Errorf("inter node on one node: %v, want unsupported", err)
	}
	fc.AssertEmpty(t)
}

// pods=N adds N silent pods beside the pair; Close deletes them with the pair.
func TestP2PSilentPodsCreatedAndDeleted(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	c := fakeCase("p2p", "flannel", "inter", "rr")
	c.Pods = 10
	f := mustSetUp(t, fc, c)
	silent := 0
	for _, p := range fc.Pods() {
		if strings.HasPrefix(p.Name, "silent") && p.Labels["role"] == "silent" {
			silent++
		}
	}
	if silent != 10 || len(fc.Pods()) != 12 {
		t.Errorf("%d silent pods of %d, want 10 of 12", silent, len(fc.Pods()))
	}
	mustTrial(t, f)
	closeEmpty(t, fc, f)
}

// A tool that fails fails the trial with what the tool said: iperf3's JSON error, netperf's
// stderr; an Exec that fails names the tool. No metrics are reported for a failed trial.
func TestP2PToolFailureFailsTrialWithToolsMessage(t *testing.T) {
	for _, tc := range []struct {
		proto string
		fail  clustertest.Failures
		want  string
	}{
		{"tcp", clustertest.Failures{ToolRuns: 1}, "iperf3: unable to connect to server: Connection refused"},
		{"rr", clustertest.Failures{ToolRuns: 1}, "(stderr: establish control: are you sure there is a netserver listening"},
		{"rr", clustertest.Failures{Exec: []string{"client"}}, "netperf: clustertest: exec in client fails on purpose"},
	} {
		fc := clustertest.New(clustertest.Config{Fail: tc.fail})
		f := mustSetUp(t, fc, fakeCase("p2p", "flannel", "inter", tc.proto))
		m, err := f.Trial(context.Background(), 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) || m.Metrics != nil {
			t.Errorf("%s with %+v: %v, metrics %v; want an error containing %q", tc.proto, tc.fail, err, m.Metrics, tc.want)
		}
		closeEmpty(t, fc, f)
	}
}

// A setup that fails halfway (a pod, the server, a silent pod) deletes what it created.
func TestP2PSetupFailingHalfwayLeavesNothing(t *testing.T) {
	for _, fail := range []clustertest.Failures{
		{Pods: []string{"server"}},
		{Pods: []string{"silent3"}},
		{Start: []string{"server"}},
	} {
		fc := clustertest.New(clustertest.Config{Fail: fail})
		c := fakeCase("p2p", "flannel", "inter", "tcp")
		c.Pods = 5
		if _, err := setUpOn(t, fc, c); err == nil {
			t.Errorf("%+v: setup succeeded", fail)
		}
		fc.AssertEmpty(t)
	}
}
