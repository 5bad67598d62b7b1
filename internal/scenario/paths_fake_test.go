package scenario_test

import (
	"slices"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster/clustertest"
)

// p2h measures from a pod to a server on a node's own network; h2p the other way round. The
// host-network side is the node's address, on the client's node (intra) or the other.
func TestPathsHostNetworkSides(t *testing.T) {
	for _, tc := range []struct {
		scen, placement          string
		clientHost, serverHost   bool
		serverNode, targetNodeIP string
	}{
		{"p2h", "intra", false, true, "node0", "172.30.0.10"},
		{"p2h", "inter", false, true, "node1", "172.30.0.11"},
		{"h2p", "intra", true, false, "node0", ""},
		{"h2p", "inter", true, false, "node1", ""},
	} {
		t.Run(tc.scen+"/"+tc.placement, func(t *testing.T) {
			fc := clustertest.New(clustertest.Config{})
			f := mustSetUp(t, fc, withWorkload(fakeCase(tc.scen, "calico", tc.placement, "tcp"), 4, 0))
			client, _ := fc.Pod("client")
			server, _ := fc.Pod("server")
			if client.HostNetwork != tc.clientHost || server.HostNetwork != tc.serverHost || client.Node != "node0" || server.Node != tc.serverNode {
				t.Errorf("client %+v, server %+v: want host network %v/%v, server on %s", client, server, tc.clientHost, tc.serverHost, tc.serverNode)
			}
			m := mustTrial(t, f)
			c := lastExec(t, fc, "client", "iperf3")
			want := server.IP
			if tc.targetNodeIP != "" {
				want = tc.targetNodeIP
			}
			if argAfter(c.Cmd, "-c") != want || argAfter(c.Cmd, "-P") != "4" {
				t.Errorf("client ran %v, want iperf3 -c %s -P 4", c.Cmd, want)
			}
			if m.Metrics["throughput_bps"] <= 0 {
				t.Errorf("metrics %v", m.Metrics)
			}
			closeEmpty(t, fc, f)
		})
	}
}

// hairpin: one pod, the only endpoint of its Service, measures to the Service's address from
// inside itself, for every protocol (netperf's data port crosses the Service too).
func TestHairpinPodReachesItselfThroughItsService(t *testing.T) {
	for _, proto := range []string{"tcp", "udp", "rr", "crr"} {
		t.Run(proto, func(t *testing.T) {
			fc := clustertest.New(clustertest.Config{})
			f := mustSetUp(t, fc, fakeCase("hairpin", "flannel", "intra", proto))
			pods := fc.Pods()
			if len(pods) != 1 || pods[0].Name != "server" {
				t.Fatalf("pods %v: want the one pod server", pods)
			}
			svcs := fc.Services()
			if len(svcs) != 1 {
				t.Fatalf("Services %v: want one", svcs)
			}
			m := mustTrial(t, f)
			tool, flag := "iperf3", "-c"
			if proto == "rr" || proto == "crr" {
				tool, flag = "netperf", "-H"
			}
			if c := lastExec(t, fc, "server", tool); argAfter(c.Cmd, flag) != svcs[0].ClusterIP {
				t.Errorf("the pod ran %v, want %s %s %s (its Service)", c.Cmd, tool, flag, svcs[0].ClusterIP)
			}
			if len(m.Metrics) == 0 {
				t.Error("no metrics")
			}
			if slices.ContainsFunc(fc.Execs(), func(c clustertest.Call) bool { return c.Pod == "client" }) {
				t.Error("something ran in a pod named client: hairpin has one pod")
			}
			closeEmpty(t, fc, f)
		})
	}
}

// Each scenario says whether its client goes through a Service (the csv export's "Service"
// column): hairpin and p2s do, p2p and the host paths do not.
func TestScenariosSayThroughService(t *testing.T) {
	for scen, want := range map[string]bool{"hairpin": true, "p2s": true, "n2s": true, "reaction": true, "p2s-replicas": true,
		"p2p": false, "p2h": false, "h2p": false, "baseline": false} {
		if got := fakeCase(scen, "flannel", "intra", "tcp").ThroughService(); got != want {
			t.Errorf("%s: ThroughService %v, want %v", scen, got, want)
		}
	}
	vnf := fakeCase("vnf", "flannel", "intra", "gtpu")
	for lb, want := range map[string]bool{"": true, "service": true, "ingress": false, "ingress-remote": false} {
		vnf.SetWord("lb", lb)
		if got := vnf.ThroughService(); got != want {
			t.Errorf("vnf lb %q: ThroughService %v, want %v", lb, got, want)
		}
	}
}
