package scenario_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
)

// The client targets the ClusterIP of the measured Service, whose endpoint is the server pod;
// the Service carries every port the tool needs (netperf's control and fixed data port).
func TestP2SClientTargetsClusterIPOfMeasuredService(t *testing.T) {
	for _, tc := range []struct {
		proto, tool, target string
		ports               []cluster.ServicePort
	}{
		{"tcp", "iperf3", "-c", []cluster.ServicePort{{Name: "iperf3-tcp", Port: 5201, Protocol: "tcp"}, {Name: "iperf3-udp", Port: 5201, Protocol: "udp"}}},
		{"rr", "netperf", "-H", []cluster.ServicePort{{Name: "netperf-ctl", Port: 12865, Protocol: "tcp"},
			{Name: "netperf-tcp", Port: 12866, Protocol: "tcp"}, {Name: "netperf-udp", Port: 12866, Protocol: "udp"}}},
	} {
		fc := clustertest.New(clustertest.Config{})
		f := mustSetUp(t, fc, fakeCase("p2s", "flannel", "inter", tc.proto))
		server, _ := fc.Pod("server")
		svcs := fc.Services()
		if len(svcs) != 1 || svcs[0].Name != "server" || !slices.Equal(svcs[0].Endpoints, []string{server.IP}) ||
			!slices.Equal(svcs[0].Ports, tc.ports) {
			t.Fatalf("%s: Services %+v, want one Service over %s with ports %v", tc.proto, svcs, server.IP, tc.ports)
		}
		mustTrial(t, f)
		c := lastExec(t, fc, "client", tc.tool)
		if argAfter(c.Cmd, tc.target) != svcs[0].ClusterIP {
			t.Errorf("%s: client ran %v, want %s %s %s", tc.proto, c.Cmd, tc.tool, tc.target, svcs[0].ClusterIP)
		}
		if tc.tool == "netperf" && argAfter(c.Cmd, "-P") != ",12866" {
			t.Errorf("netperf data port not fixed to the Service's: %v", c.Cmd)
		}
		closeEmpty(t, fc, f)
	}
}

// services=N makes N-1 extra Services, each over its own endpoint pod, before the measured
// one, so that the measured Service is programmed with (and after) all of them.
func TestP2SExtraServicesBeforeMeasuredOne(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	c := fakeCase("p2s", "flannel", "inter", "tcp")
	c.Services = 5
	f := mustSetUp(t, fc, c)
	svcs := fc.Services()
	if len(svcs) != 5 || svcs[4].Name != "server" {
		t.Fatalf("Services %+v, want 4 extras and server last", svcs)
	}
	for i, s := range svcs[:4] {
		p, ok := fc.Pod(fmt.Sprintf("extra%d", i))
		if s.Name != fmt.Sprintf("extra%d", i) || !ok || !slices.Equal(s.Endpoints, []string{p.IP}) {
			t.Errorf("extra Service %+v, endpoint pod %+v", s, p)
		}
	}
	extras, measured := historyIndex(fc, "create services extra0 extra1 extra2 extra3"), historyIndex(fc, "create services server")
	if extras < 0 || measured < extras {
		t.Errorf("extras created at %d, the measured Service at %d: %v", extras, measured, fc.History())
	}
	mustTrial(t, f)
	closeEmpty(t, fc, f)
}

// The setup figures (Service programming times, what the backend reports as programmed) are
// in every trial's metrics.
func TestP2SSetupMetricsInEveryTrial(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Programmed: map[string]float64{"proxy_rules_count": 42, "proxy_chains_count": 7}})
	c := fakeCase("p2s", "calico", "intra", "crr")
	c.Services = 3
	f := mustSetUp(t, fc, c)
	for i := 0; i < 3; i++ {
		m := mustTrial(t, f)
		wantMetrics(t, m.Metrics, "services_program_ms", "service_program_ms", "transactions_per_s", "cpu_node_busy_pct")
		if m.Metrics["proxy_rules_count"] != 42 || m.Metrics["proxy_chains_count"] != 7 {
			t.Errorf("trial %d: programmed counts missing: %v", i, m.Metrics)
		}
	}
	closeEmpty(t, fc, f)
}

// A setup that fails halfway (an extra's pod, an extra Service, the measured Service, the
// server) deletes every pod and Service it created.
func TestP2SSetupFailingHalfwayLeavesNothing(t *testing.T) {
	for _, fail := range []clustertest.Failures{
		{Pods: []string{"extra2"}},
		{Services: []string{"extra1"}},
		{Services: []string{"server"}},
		{Start: []string{"server"}},
	} {
		fc := clustertest.New(clustertest.Config{Fail: fail})
		c := fakeCase("p2s", "flannel", "inter", "tcp")
		c.Services = 4
		if _, err := setUpOn(t, fc, c); err == nil {
			t.Errorf("%+v: setup succeeded", fail)
		}
		fc.AssertEmpty(t)
	}
}
