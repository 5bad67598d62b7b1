package scenario_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/driver"
)

// One curl run through the Service's ClusterIP, pinned to the client CPU, with nginx pinned
// to the server CPU in every replica on the other node; the trial counts requests per
// replica, the replicas that served, and carries the setup figures.
func TestP2SReplicasTrialCountsRequestsPerReplica(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Programmed: map[string]float64{"proxy_rules_count": 9}})
	c := fakeCase("p2s-replicas", "flannel", "inter", "http")
	c.Replicas = 3
	f := mustSetUp(t, fc, c)
	svcs := fc.Services()
	if len(svcs) != 1 || svcs[0].Name != "web" || len(svcs[0].Endpoints) != 3 {
		t.Fatalf("Services %+v, want web over 3 replicas", svcs)
	}
	for _, s := range fc.Starts() {
		if p, _ := fc.Pod(s.Pod); s.Cmd[0] != "nginx" || s.CPU != 1 || p.Node != "node1" {
			t.Errorf("started %+v on %s, want nginx on CPU 1 of node1", s, p.Node)
		}
	}
	m := mustTrial(t, f)
	cl := lastExec(t, fc, "client", "curl")
	if cl.CPU != 0 || !strings.HasPrefix(cl.Cmd[len(cl.Cmd)-1], "http://"+svcs[0].ClusterIP+":80/file?[1-") {
		t.Errorf("client ran %v on CPU %d, want curl of http://%s:80/file on CPU 0", cl.Cmd, cl.CPU, svcs[0].ClusterIP)
	}
	want := map[string]float64{"requests": driver.MinHTTPRequests, "replicas_served": 3, "service_endpoints": 3, "proxy_rules_count": 9}
	for k, v := range want {
		if m.Metrics[k] != v {
			t.Errorf("%s = %v, want %v", k, m.Metrics[k], v)
		}
	}
	if lo, hi := m.Metrics["replica_requests_min"], m.Metrics["replica_requests_max"]; lo < 1 || hi < lo || lo+hi > driver.MinHTTPRequests {
		t.Errorf("requests per replica: min %v, max %v", lo, hi)
	}
	wantMetrics(t, m.Metrics, "ttfb_seed_ms", "ttfb_p99_ms", "transfer_bps", "services_program_ms", "service_program_ms", "cpu_node_busy_pct")
	closeEmpty(t, fc, f)
}

// With enough requests (at least 10 per replica), a replica that served none fails the trial;
// the figures stay beside the failure, the idle replica counting 0.
func TestP2SReplicasTrialFailsWhenAReplicaServedNone(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	c := fakeCase("p2s-replicas", "flannel", "inter", "http")
	c.Replicas = 4 // the recording's three replicas serve all 100 requests: replica3 none
	f := mustSetUp(t, fc, c)
	m, err := f.Trial(context.Background(), 1)
	if err == nil || !strings.Contains(err.Error(), "1 of 4 replicas served none of 100 requests: replica3") {
		t.Errorf("trial: %v, want replica3 idle", err)
	}
	if m.Metrics["replica_requests_min"] != 0 || m.Metrics["replicas_served"] != 3 || m.Metrics["requests"] != 100 {
		t.Errorf("metrics beside the failure: %v", m.Metrics)
	}
	closeEmpty(t, fc, f)
}

// services=N makes N-1 extra Services before the measured one, as in p2s; Close stops every
// nginx, removes every replica's directory it prepared, and deletes pods and Services.
func TestP2SReplicasCloseRemovesDirectoriesPodsAndServices(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	c := fakeCase("p2s-replicas", "calico", "inter", "http")
	c.Replicas, c.Services = 2, 3
	f := mustSetUp(t, fc, c)
	if n := len(fc.Services()); n != 3 || historyIndex(fc, "create services extra0 extra1") > historyIndex(fc, "create services web") {
		t.Errorf("%d Services, history %v: want extras before web", n, fc.History())
	}
	mustTrial(t, f)
	closeEmpty(t, fc, f)
	// Each replica's directory is the one its NginxSetupCommand prepared (busybox sh -c SCRIPT
	// busybox DIR ...), removed by NginxCleanupCommand.
	prepared, removed := map[string]string{}, map[string][]string{}
	for _, e := range fc.Execs() {
		switch {
		case len(e.Cmd) > 5 && e.Cmd[1] == "sh":
			if dir := e.Cmd[5]; slices.Equal(e.Cmd, driver.NginxSetupCommand(dir, driver.HTTPPort, e.Pod)) {
				prepared[e.Pod] = dir
			}
		case len(e.Cmd) > 1 && e.Cmd[1] == "rm":
			removed[e.Pod] = e.Cmd
		}
	}
	if len(prepared) != 2 || prepared["replica0"] == prepared["replica1"] {
		t.Errorf("prepared directories %v, want one of its own per replica", prepared)
	}
	// Inside the cluster's scratch directory, which the backend removes with the cluster (they
	// used to be /tmp/cnibench-http-*, which outlived a killed run).
	for pod, dir := range prepared {
		if !strings.HasPrefix(dir, fc.Facts().TempDir+"/cnibench-http-") {
			t.Errorf("%s: directory %s not under the cluster's TempDir %s", pod, dir, fc.Facts().TempDir)
		}
	}
	for pod, dir := range prepared {
		if !slices.Equal(removed[pod], driver.NginxCleanupCommand(dir)) {
			t.Errorf("%s: prepared %s, then ran %q", pod, dir, removed[pod])
		}
	}
}

// A setup failing halfway (nginx in one replica, preparing one, an extra pod, the Service)
// stops the nginx started, removes the directories prepared and deletes everything created.
func TestP2SReplicasSetupFailingHalfwayLeavesNothing(t *testing.T) {
	for _, fail := range []clustertest.Failures{
		{Start: []string{"replica1"}},
		{Exec: []string{"replica2"}},
		{Pods: []string{"extra0"}},
		{Services: []string{"web"}},
	} {
		fc := clustertest.New(clustertest.Config{Fail: fail})
		c := fakeCase("p2s-replicas", "flannel", "inter", "http")
		c.Replicas, c.Services = 3, 2
		if _, err := setUpOn(t, fc, c); err == nil {
			t.Errorf("%+v: setup succeeded", fail)
		}
		fc.AssertEmpty(t)
	}
}

// p2s-replicas runs inter node only, on at least two nodes: anything else is unsupported and
// creates nothing.
func TestP2SReplicasUnsupportedIntraNodeOrOnOneNode(t *testing.T) {
	for _, tc := range []struct {
		pl    string
		nodes []cluster.Node
	}{{"intra", nil}, {"inter", []cluster.Node{{Name: "solo", IP: "172.30.0.10"}}}} {
		fc := clustertest.New(clustertest.Config{Nodes: tc.nodes})
		c := fakeCase("p2s-replicas", "flannel", tc.pl, "http")
		c.Replicas = 2
		if _, err := setUpOn(t, fc, c); !errors.Is(err, cluster.ErrUnsupported) {
			t.Errorf("%s on %d nodes: %v, want unsupported", tc.pl, len(tc.nodes), err)
		}
		fc.AssertEmpty(t)
	}
}
