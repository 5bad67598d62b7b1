package scenario_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
)

// Baseline bare runs between the two pods of the backend's bare pair, server pinned to the
// server CPU and client to the client CPU, and Close removes both.
func TestBaselineBareMeasuresOverTheBackendsBarePair(t *testing.T) {
	fc := clustertest.NewBare(clustertest.Config{})
	f := mustSetUp(t, fc, fakeCase("baseline", "bare", "intra", "tcp"))
	if historyIndex(fc.Fake, "bare pair client server") < 0 {
		t.Errorf("no bare pair made: %v", fc.History())
	}
	server, _ := fc.Pod("server")
	m := mustTrial(t, f)
	c := lastExec(t, fc.Fake, "client", "iperf3")
	if argAfter(c.Cmd, "-c") != server.IP || c.CPU != 0 {
		t.Errorf("client ran %v on CPU %d, want iperf3 -c %s on CPU 0", c.Cmd, c.CPU, server.IP)
	}
	if s := fc.Starts(); len(s) != 1 || s[0].Pod != "server" || s[0].CPU != 1 || s[0].Cmd[0] != "iperf3" {
		t.Errorf("servers started: %+v", s)
	}
	if m.Metrics["throughput_bps"] <= 0 {
		t.Errorf("no throughput: %v", m.Metrics)
	}
	closeEmpty(t, fc.Fake, f)
}

// A backend that cannot make a bare pair skips baseline bare with a reason naming it, and
// nothing is created.
func TestBaselineBareUnsupportedWithoutBarePairer(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Backend: "kube", Dataplane: "cluster"}})
	_, err := setUpOn(t, fc, fakeCase("baseline", "bare", "intra", "tcp"))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "one veth pair, which backend kube cannot make") {
		t.Errorf("setup: %v, want unsupported naming backend kube", err)
	}
	if h := fc.History(); len(h) != 0 {
		t.Errorf("calls made: %v", h)
	}
}

// Baseline node2node measures between host-network pods on two nodes: the client targets the
// server node's own address.
func TestBaselineNode2NodeTargetsServerNodeAddress(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	f := mustSetUp(t, fc, fakeCase("baseline", "node2node", "inter", "rr"))
	client, _ := fc.Pod("client")
	server, _ := fc.Pod("server")
	if !client.HostNetwork || !server.HostNetwork || client.Node != "node0" || server.Node != "node1" {
		t.Errorf("client %+v, server %+v: want host-network pods on node0 and node1", client, server)
	}
	m := mustTrial(t, f)
	if c := lastExec(t, fc, "client", "netperf"); argAfter(c.Cmd, "-H") != "172.30.0.11" {
		t.Errorf("client ran %v, want netperf -H 172.30.0.11 (node1)", c.Cmd)
	}
	if m.Metrics["transactions_per_s"] <= 0 {
		t.Errorf("no transactions: %v", m.Metrics)
	}
	closeEmpty(t, fc, f)
}

// A baseline setup failing halfway (the bare pair's server, the server process, the second
// host-network pod) deletes what it created.
func TestBaselineSetupFailingHalfwayLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		dp   string
		fail clustertest.Failures
	}{
		{"bare", clustertest.Failures{Pods: []string{"server"}}},
		{"bare", clustertest.Failures{Start: []string{"server"}}},
		{"node2node", clustertest.Failures{Pods: []string{"server"}}},
		{"node2node", clustertest.Failures{Start: []string{"server"}}},
	} {
		fc := clustertest.NewBare(clustertest.Config{Fail: tc.fail})
		if _, err := setUpOn(t, fc, fakeCase("baseline", tc.dp, "intra", "crr")); err == nil {
			t.Errorf("%s with %+v: setup succeeded", tc.dp, tc.fail)
		}
		fc.AssertEmpty(t)
	}
}
