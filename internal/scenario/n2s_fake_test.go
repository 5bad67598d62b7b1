package scenario_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

func n2sCase(pl, proto, etp string) result.Case {
	c := result.Case{Scenario: "n2s", Backend: "fake", Dataplane: "calico", Placement: pl, Protocol: proto, ExternalTrafficPolicy: etp}
	c.ID = c.MakeID()
	return c
}

// The client is outside the cluster (an external pod, never an endpoint) and targets the
// NodePort of the server's node (intra) or of the other node (inter), sitting on a node other
// than the targeted one; the NodePort Service carries the ports of the tool's connections, and
// netperf's data port is its own NodePort (netperf -P ,PORT makes netserver listen where the
// client connects).
func TestN2SClientTargetsNodePort(t *testing.T) {
	for _, tc := range []struct {
		pl, proto, tool, flag string
		target, clientNode    string // node0 172.30.0.10, node1 172.30.0.11; the server is on node0
	}{
		{"intra", "tcp", "iperf3", "-c", "172.30.0.10", "node1"},
		{"inter", "tcp", "iperf3", "-c", "172.30.0.11", "node0"},
		{"intra", "udp", "iperf3", "-c", "172.30.0.10", "node1"},
		{"intra", "rr", "netperf", "-H", "172.30.0.10", "node1"},
		{"inter", "crr", "netperf", "-H", "172.30.0.11", "node0"},
		{"inter", "udprr", "netperf", "-H", "172.30.0.11", "node0"},
	} {
		name := tc.pl + "/" + tc.proto
		fc := clustertest.New(clustertest.Config{})
		f := mustSetUp(t, fc, n2sCase(tc.pl, tc.proto, "cluster"))
		client, _ := fc.Pod("client")
		server, _ := fc.Pod("server")
		if !client.External || client.Node != tc.clientNode || server.Node != "node0" {
			t.Errorf("%s: client %+v, server %+v: want an external client by %s, the server on node0", name, client, server, tc.clientNode)
		}
		svcs := fc.Services()
		if len(svcs) != 1 || !slices.Equal(svcs[0].Endpoints, []string{server.IP}) {
			t.Fatalf("%s: Services %+v, want one over the server %s", name, svcs, server.IP)
		}
		ctlPort := map[string]int{"iperf3": 5201, "netperf": 12865}[tc.tool]
		var ctl, data int
		for _, p := range svcs[0].Ports {
			if p.NodePort == 0 {
				t.Errorf("%s: port %+v without a NodePort", name, p)
			}
			switch {
			case p.Port == ctlPort && p.Protocol == "tcp":
				ctl = p.NodePort
			case tc.tool == "netperf":
				data = p.NodePort
				if p.Port != p.NodePort || p.NodePort < 30000 || p.NodePort >= 30086 || p.Protocol != map[string]string{"udprr": "udp"}[tc.proto]+map[string]string{"rr": "tcp", "crr": "tcp"}[tc.proto] {
					t.Errorf("%s: data port %+v: want port = NodePort in the static band, in the test's protocol", name, p)
				}
			case tc.proto == "udp" && p.Protocol == "udp":
				if p.Port != ctlPort {
					t.Errorf("%s: udp port %+v", name, p)
				}
			default:
				t.Errorf("%s: port %+v the tool does not use", name, p)
			}
		}
		if want := map[string]int{"tcp": 1, "udp": 2}[tc.proto] + map[string]int{"netperf": 2}[tc.tool]; len(svcs[0].Ports) != want {
			t.Errorf("%s: ports %+v, want %d", name, svcs[0].Ports, want)
		}
		m := mustTrial(t, f)
		c := lastExec(t, fc, "client", tc.tool)
		if argAfter(c.Cmd, tc.flag) != tc.target || argAfter(c.Cmd, "-p") != itoa(ctl) {
			t.Errorf("%s: client ran %v, want %s %s %s -p %d", name, c.Cmd, tc.tool, tc.flag, tc.target, ctl)
		}
		if tc.tool == "netperf" && argAfter(c.Cmd, "-P") != ","+itoa(data) {
			t.Errorf("%s: netperf data port not its NodePort %d: %v", name, data, c.Cmd)
		}
		if m.Metrics["client_ip_preserved"] != 0 {
			t.Errorf("%s: Cluster: client_ip_preserved %v, want 0 (masqueraded)", name, m.Metrics["client_ip_preserved"])
		}
		wantMetrics(t, m.Metrics, "service_program_ms", "client_ip_preserved", "cpu_node_busy_pct")
		closeEmpty(t, fc, f)
	}
}

// Before the trials one connection crosses the NodePort to a one-shot listener in the server
// that tells the source address it sees: with Local the client's own.
func TestN2SChecksThePathAndSeesTheSource(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	f := mustSetUp(t, fc, n2sCase("intra", "crr", "local"))
	client, _ := fc.Pod("client")
	probe := slices.IndexFunc(fc.Execs(), func(c clustertest.Call) bool { return c.Pod == "client" && slices.Contains(c.Cmd, "nc") })
	listener := slices.IndexFunc(fc.Starts(), func(c clustertest.Call) bool { return c.Pod == "server" && slices.Contains(c.Cmd, "netstat") })
	server := slices.IndexFunc(fc.Starts(), func(c clustertest.Call) bool { return c.Pod == "server" && slices.Contains(c.Cmd, "netserver") })
	if probe < 0 || listener < 0 || server < listener {
		t.Errorf("probe %d, listener %d, server %d: want the check through the NodePort before the tool's server: %v", probe, listener, server, fc.History())
	}
	if c := fc.Execs()[probe]; argAfter(c.Cmd, "-w") == "" || c.Cmd[len(c.Cmd)-2] != "172.30.0.10" {
		t.Errorf("probe %v, want nc -w N to node0's NodePort", c.Cmd)
	}
	m := mustTrial(t, f)
	if m.Metrics["client_ip_preserved"] != 1 {
		t.Errorf("Local: client_ip_preserved %v, want 1 (the server sees %s)", m.Metrics["client_ip_preserved"], client.IP)
	}
	closeEmpty(t, fc, f)
}

// Local inter: the targeted node has no endpoint and drops by design: skipped with that
// reason, nothing created. A cluster that serves no NodePorts skips every case with its reason.
func TestN2SSkips(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	_, err := setUpOn(t, fc, n2sCase("inter", "tcp", "local"))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "no endpoint") || !strings.Contains(err.Error(), "by design") {
		t.Errorf("Local inter: %v, want unsupported: no endpoint, dropped by design", err)
	}
	fc = clustertest.New(clustertest.Config{NoNodePorts: "proxy ebpf serves no NodePorts"})
	_, err = setUpOn(t, fc, n2sCase("intra", "crr", "cluster"))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "NodePorts") {
		t.Errorf("no NodePorts: %v, want unsupported naming NodePorts", err)
	}
	if len(fc.History()) != 0 {
		t.Errorf("skipped cases created %v", fc.History())
	}
	if _, err := setUpOn(t, fc, n2sCase("intra", "crr", "")); err == nil {
		t.Error("a case without an externalTrafficPolicy set up")
	}
}

// A path that drops the connection fails the case (not skipped), naming the address it tried;
// a failure at any step leaves nothing behind.
func TestN2SBrokenPathFails(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Fail: clustertest.Failures{Drop: []string{"172.30.0.11"}}})
	_, err := setUpOn(t, fc, n2sCase("inter", "tcp", "cluster"))
	if err == nil || errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "172.30.0.11:30086") || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("dropped path: %v, want a failure naming 172.30.0.11:30086", err)
	}
	fc.AssertEmpty(t)
	for _, fail := range []clustertest.Failures{{Pods: []string{"server"}}, {Services: []string{"server"}}, {Start: []string{"server"}}, {Exec: []string{"client"}}} {
		fc := clustertest.New(clustertest.Config{Fail: fail})
		if _, err := setUpOn(t, fc, n2sCase("intra", "rr", "local")); err == nil {
			t.Errorf("%+v: setup succeeded", fail)
		}
		fc.AssertEmpty(t)
	}
}

// netperf's data NodePort is picked in the static band; one another Service has is passed over.
func TestN2SDataNodePortTakenTriesAnother(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	var taken []cluster.ServicePort
	for p := 30000; p < 30086; p += 2 {
		taken = append(taken, cluster.ServicePort{Name: fmt.Sprint("p", p), Port: p, Protocol: "tcp", NodePort: p})
	}
	if _, err := fc.CreateServices(context.Background(), []cluster.ServiceSpec{{Name: "other", NodePort: true, Ports: taken}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		f := mustSetUp(t, fc, n2sCase("intra", "rr", "cluster"))
		svcs := fc.Services()
		data := svcs[1].Ports[0]
		if data.NodePort%2 != 1 || data.Port != data.NodePort {
			t.Errorf("data port %+v, want a free (odd) NodePort", data)
		}
		mustTrial(t, f)
		if err := f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := fc.DeleteServices(context.Background(), []string{"other"}); err != nil {
		t.Fatal(err)
	}
	fc.AssertEmpty(t)
}

// iperf3's UDP test goes to the NodePort of its control connection: a cluster that gives TCP
// and UDP of one port different NodePorts cannot carry it, and says so.
func TestN2SUDPNeedsOneNodePort(t *testing.T) {
	fc := splitNodePorts{clustertest.New(clustertest.Config{})}
	_, err := setUpOn(t, fc, n2sCase("intra", "udp", "cluster"))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "TCP 30000 and UDP 30001") {
		t.Errorf("split NodePorts: %v, want unsupported naming both", err)
	}
	fc.AssertEmpty(t)
}

// splitNodePorts allocates a NodePort per port, as the lab's allocator does today.
type splitNodePorts struct{ *clustertest.Fake }

func (s splitNodePorts) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	for i := range specs {
		ports := slices.Clone(specs[i].Ports)
		for j := range ports {
			if ports[j].NodePort == 0 {
				ports[j].NodePort = 30000 + j
			}
		}
		specs[i].Ports = ports
	}
	return s.Fake.CreateServices(ctx, specs)
}

// The plan's check: an n2s case has an externalTrafficPolicy.
func TestN2SCheck(t *testing.T) {
	s, err := scenario.Get("n2s")
	if err != nil {
		t.Fatal(err)
	}
	for etp, ok := range map[string]bool{"cluster": true, "local": true, "": false, "Local": false} {
		if err := s.Info().Check(n2sCase("intra", "tcp", etp)); (err == nil) != ok {
			t.Errorf("%q: %v", etp, err)
		}
	}
}
