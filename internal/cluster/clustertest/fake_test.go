package clustertest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
)

var ctx = context.Background()

// The fake satisfies the seam; Bare adds the optional bare pair.
var (
	_ cluster.Cluster    = (*Fake)(nil)
	_ cluster.BarePairer = (*Bare)(nil)
)

func mustPods(t *testing.T, f *Fake, specs ...cluster.PodSpec) []cluster.Pod {
	t.Helper()
	pods, err := f.CreatePods(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func driverFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "driver", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Pods get per-node addresses (host-network pods their node's), Services sequential
// ClusterIPs and the addresses of the pods their selector picks; deleting twice is an error;
// Leftovers names what is still there.
func TestObjectsAddressesAndLeftovers(t *testing.T) {
	f := New(Config{})
	pods := mustPods(t, f,
		cluster.PodSpec{Name: "a", Node: "node0", Labels: map[string]string{"app": "x"}},
		cluster.PodSpec{Name: "b", Node: "node1", Labels: map[string]string{"app": "x"}},
		cluster.PodSpec{Name: "h", Node: "node1", HostNetwork: true, Labels: map[string]string{"app": "x"}},
		cluster.PodSpec{Name: "s"})
	if pods[0].IP != "10.244.0.2" || pods[1].IP != "10.244.1.2" || pods[2].IP != "172.30.0.11" || pods[3].Node != "node0" {
		t.Errorf("pods %+v", pods)
	}
	if _, err := f.CreatePods(ctx, []cluster.PodSpec{{Name: "c"}, {Name: "a"}}); err == nil || len(f.Pods()) != 4 {
		t.Errorf("a taken name: %v, %d pods", err, len(f.Pods()))
	}
	svcs, err := f.CreateServices(ctx, []cluster.ServiceSpec{{Name: "x", Selector: map[string]string{"app": "x"}}})
	if err != nil || svcs[0].ClusterIP != "10.96.0.1" || !slices.Equal(svcs[0].Endpoints, []string{"10.244.0.2", "10.244.1.2"}) {
		t.Errorf("service %+v, %v", svcs, err)
	}
	if err := f.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}); err != nil {
		t.Fatal(err)
	}
	p, _ := f.Start(ctx, "a", []string{"taskset", "-c", "1", "iperf3", "-s"}, cluster.Ready{TCPPort: 5201})
	want := []string{"pod a", "pod b", "pod h", "pod s", "service x", "policy p", "process iperf3 in a"}
	if got := f.Leftovers(); !slices.Equal(got, want) {
		t.Errorf("leftovers %v, want %v", got, want)
	}
	_ = p.Stop()
	if err := f.DeletePods(ctx, []string{"a", "b", "h", "s"}); err != nil {
		t.Error(err)
	}
	if err := f.DeletePods(ctx, []string{"a"}); err == nil {
		t.Error("deleting a deleted pod succeeded")
	}
	_ = f.DeleteServices(ctx, []string{"x"})
	_ = f.DeleteNetworkPolicies(ctx, []string{"p"})
	f.AssertEmpty(t)
}

// A client run replays the driver's recording of its test when its target reaches a server
// started on that port (directly or through a Service's target port), and the recorded
// failure otherwise or when asked to fail.
func TestExecReplaysRecordings(t *testing.T) {
	f := New(Config{})
	mustPods(t, f, cluster.PodSpec{Name: "client", Node: "node0"},
		cluster.PodSpec{Name: "server", Node: "node1", Labels: map[string]string{"role": "server"}})
	server, _ := f.Pod("server")
	run := func(argv ...string) cluster.ExecResult {
		t.Helper()
		res, err := f.Exec(ctx, "client", append([]string{"taskset", "-c", "0"}, argv...))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	tcp := []string{"iperf3", "-c", server.IP, "-p", "5201", "-t", "1", "-J"}
	if res := run(tcp...); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_refused.json")) {
		t.Error("no server yet: want the refused recording")
	}
	if _, err := f.Start(ctx, "server", []string{"iperf3", "-s", "-p", "5201"}, cluster.Ready{TCPPort: 5201}); err != nil {
		t.Fatal(err)
	}
	if res := run(tcp...); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_tcp.json")) {
		t.Error("want the tcp recording")
	}
	if res := run(append(tcp, "-u")...); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_udp.json")) {
		t.Error("want the udp recording")
	}
	svc, _ := f.CreateServices(ctx, []cluster.ServiceSpec{{Name: "s", Selector: map[string]string{"role": "server"},
		Ports: []cluster.ServicePort{{Port: 80, TargetPort: 5201}}}})
	if res := run("iperf3", "-c", svc[0].ClusterIP, "-p", "80"); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_tcp.json")) {
		t.Error("through the Service: want the tcp recording")
	}
	if res := run("iperf3", "-c", svc[0].ClusterIP, "-p", "5201"); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_refused.json")) {
		t.Error("a port the Service lacks: want the refused recording")
	}
	f.FailToolRuns(1)
	if res := run(tcp...); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_refused.json")) {
		t.Error("failure asked for: want the refused recording")
	}
	if res := run(tcp...); !bytes.Equal(res.Stdout, driverFile(t, "iperf3_tcp.json")) {
		t.Error("one failure only")
	}
	rr := []string{"netperf", "-H", server.IP, "-p", "12865", "-t", "TCP_RR", "-l", "1"}
	if res := run(rr...); res.ExitCode != 255 || !bytes.Equal(res.Stderr, driverFile(t, "netperf_noserver.txt")) {
		t.Errorf("netperf without netserver: %+v", res)
	}
	_, _ = f.Start(ctx, "server", []string{"netserver", "-D"}, cluster.Ready{TCPPort: 12865})
	if res := run(rr...); res.ExitCode != 0 || !bytes.Equal(res.Stdout, driverFile(t, "netperf_tcp_rr.txt")) {
		t.Errorf("netperf: %+v", res)
	}
	if _, err := f.Exec(ctx, "client", []string{"ping", server.IP}); err == nil || !strings.Contains(err.Error(), "no recorded output") {
		t.Errorf("unknown tool: %v", err)
	}
	if c := f.Execs()[0]; c.CPU != 0 || c.Cmd[0] != "iperf3" || c.Argv[0] != "taskset" {
		t.Errorf("call %+v", c)
	}
}

// curl's recording is repeated to the requests of the URL glob, renumbered, and credited to
// the Service's endpoints that run a server, in turn; it parses as real curl output.
func TestCurlReplayCreditsEndpoints(t *testing.T) {
	f := New(Config{})
	mustPods(t, f, cluster.PodSpec{Name: "client", Node: "node0"},
		cluster.PodSpec{Name: "r0", Node: "node1", Labels: map[string]string{"role": "r"}},
		cluster.PodSpec{Name: "r1", Node: "node1", Labels: map[string]string{"role": "r"}})
	for _, p := range []string{"r0", "r1"} {
		_, _ = f.Start(ctx, p, driver.NginxCommand("/tmp/x"), cluster.Ready{TCPPort: driver.HTTPPort})
	}
	svc, _ := f.CreateServices(ctx, []cluster.ServiceSpec{{Name: "web", Selector: map[string]string{"role": "r"},
		Ports: []cluster.ServicePort{{Port: 80, TargetPort: driver.HTTPPort}}}})
	res, err := f.Exec(ctx, "client", driver.CurlCommand(svc[0].ClusterIP, 80, 150))
	if err != nil {
		t.Fatal(err)
	}
	fetches, err := driver.ParseCurl(res.Stdout)
	if err != nil || len(fetches) != 150 {
		t.Fatalf("%d fetches, %v", len(fetches), err)
	}
	m, counts := driver.HTTPStats(fetches)
	if len(counts) != 2 || counts["r0"] == 0 || counts["r1"] == 0 || m["requests"] != 150 {
		t.Errorf("counts %v, metrics %v", counts, m)
	}
	res, _ = f.Exec(ctx, "client", driver.CurlCommand("10.99.0.1", 80, 2))
	if res.ExitCode != 7 || !bytes.Equal(res.Stdout, driverFile(t, "curl-refused.txt")) {
		t.Errorf("curl to nothing: %+v", res)
	}
}

// With policies enforced, a pod selected by a policy of a direction talks only to the peers
// and ports its rules name; a pod selected by none is open; without enforcement all is open.
func TestPolicyEnforcement(t *testing.T) {
	for _, enforce := range []bool{true, false} {
		f := New(Config{EnforcePolicies: enforce})
		mustPods(t, f,
			cluster.PodSpec{Name: "client", Node: "node0", Labels: map[string]string{"role": "client"}},
			cluster.PodSpec{Name: "other", Node: "node0", Labels: map[string]string{"role": "other"}},
			cluster.PodSpec{Name: "server", Node: "node1", Labels: map[string]string{"role": "server"},
				Ports: []cluster.ContainerPort{{Name: "web", Port: 8080, Protocol: "tcp"}}})
		for _, port := range []int{8080, 9090} {
			_, _ = f.Start(ctx, "server", []string{"nginx"}, cluster.Ready{TCPPort: port})
		}
		_, _ = f.Start(ctx, "other", []string{"nginx"}, cluster.Ready{TCPPort: 8080})
		web := intstr.FromString("web")
		err := f.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{{
			ObjectMeta: metav1.ObjectMeta{Name: "server-in"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &web}}}}}}, {
			ObjectMeta: metav1.ObjectMeta{Name: "client-out"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.1.0/24"}}}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		server, _ := f.Pod("server")
		other, _ := f.Pod("other")
		for _, tc := range []struct {
			from, ip string
			port     int
			want     bool
		}{
			{"client", server.IP, 8080, true},      // named port, admitted peer, egress block
			{"client", server.IP, 9090, false},     // a port the rule does not name
			{"other", server.IP, 8080, false},      // a peer the rule does not name
			{"client", other.IP, 8080, false},      // outside the client's egress block
			{"server", other.IP, 8080, true},       // selected by no policy of either direction
			{"client", "10.244.1.99", 8080, false}, // nobody there
		} {
			want := tc.want || (!enforce && tc.ip != "10.244.1.99")
			if got := len(f.Reaches(tc.from, tc.ip, tc.port)) > 0; got != want {
				t.Errorf("enforce %v: %s -> %s:%d reaches %v, want %v", enforce, tc.from, tc.ip, tc.port, got, want)
			}
		}
		res, err := f.Exec(ctx, "other", []string{"/bin/busybox", "nc", "-w", "2", server.IP, "8080"})
		if err != nil || (res.ExitCode == 0) == enforce {
			t.Errorf("enforce %v: nc from other: %+v %v", enforce, res, err)
		}
	}
}

// Failures: named creations fail and create nothing of the call; Exec and Start fail in the
// named pods; NodeCPU grows by one step per call, per node.
func TestFailuresAndCPU(t *testing.T) {
	f := New(Config{Fail: Failures{Pods: []string{"bad"}, Exec: []string{"a"}, Start: []string{"a"}, Services: []string{"s"}}})
	if _, err := f.CreatePods(ctx, []cluster.PodSpec{{Name: "ok"}, {Name: "bad"}}); err == nil || len(f.Pods()) != 0 {
		t.Errorf("failing pod: %v, %d pods", err, len(f.Pods()))
	}
	mustPods(t, f, cluster.PodSpec{Name: "a"})
	if _, err := f.Exec(ctx, "a", []string{"/bin/busybox", "rm", "-rf", "/tmp/x"}); err == nil {
		t.Error("exec in a succeeded")
	}
	if _, err := f.Start(ctx, "a", []string{"nginx"}, cluster.Ready{}); err == nil {
		t.Error("start in a succeeded")
	}
	if _, err := f.CreateServices(ctx, []cluster.ServiceSpec{{Name: "s"}}); err == nil || len(f.Services()) != 0 {
		t.Error("failing Service created")
	}
	a, _ := f.NodeCPU(ctx, "node0")
	b, _ := f.NodeCPU(ctx, "node0")
	if busy, sirq := cluster.Busy(a, b); busy != 45 || sirq != 5 || cluster.StealPct(a, b) != 5 || b.Total() != 200 {
		t.Errorf("samples %+v %+v: busy %v softirq %v", a, b, busy, sirq)
	}
	if c, _ := f.NodeCPU(ctx, "node1"); c.Total() != 100 {
		t.Errorf("node1 first sample %+v", c)
	}
	if _, err := f.NodeCPU(ctx, "node9"); err == nil {
		t.Error("NodeCPU of an unknown node")
	}
	bare := NewBare(Config{Facts: cluster.Facts{Backend: "lab", PodMTU: 1450}})
	c, s, err := bare.BarePair(ctx, "client", "server")
	if err != nil || c.Node != "node0" || s.Node != "node0" || bare.Facts().PodMTU != 1450 || New(Config{}).Facts().Backend != "fake" {
		t.Errorf("bare pair %+v %+v %v", c, s, err)
	}
}

// NodePorts: allocated as Kubernetes does (shared by the ports of one number, the static band
// left to requests, a requested one taken is ErrNodePortTaken), served on every node's address;
// an external client reaches only NodePorts; Local sends it to the targeted node's endpoints
// only and keeps its address, Cluster masquerades it to the node's.
func TestNodePorts(t *testing.T) {
	f := New(Config{})
	var _ cluster.NodePortChecker = f
	pods := mustPods(t, f, cluster.PodSpec{Name: "s0", Node: "node0", Labels: map[string]string{"app": "s"}},
		cluster.PodSpec{Name: "s1", Node: "node1", Labels: map[string]string{"app": "s"}},
		cluster.PodSpec{Name: "x", External: true, Node: "node1", Labels: map[string]string{"app": "s"}})
	if x := pods[2]; !x.External || x.IP != "172.30.0.254" || x.Node != "node1" {
		t.Errorf("external client %+v", x)
	}
	for _, p := range pods[:2] {
		if _, err := f.Start(ctx, p.Name, []string{"/bin/busybox", "nc", "-l", "-p", "80", "-e", "/bin/busybox", "netstat", "-tn"}, cluster.Ready{TCPPort: 80}); err != nil {
			t.Fatal(err)
		}
	}
	svcs, err := f.CreateServices(ctx, []cluster.ServiceSpec{
		{Name: "cl", Selector: map[string]string{"app": "s"}, NodePort: true, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}, {Port: 80, Protocol: "udp"}}},
		{Name: "lo", Selector: map[string]string{"app": "s"}, NodePort: true, ExternalLocal: true, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp", NodePort: 30005}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := svcs[0].Ports; p[0].NodePort != 30086 || p[1].NodePort != 30086 || svcs[1].Ports[0].NodePort != 30005 {
		t.Errorf("NodePorts %+v %+v", svcs[0].Ports, svcs[1].Ports)
	}
	if len(svcs[0].Endpoints) != 2 {
		t.Errorf("endpoints %v: the external client is never one", svcs[0].Endpoints)
	}
	if _, err := f.CreateServices(ctx, []cluster.ServiceSpec{{Name: "again", NodePort: true, Ports: []cluster.ServicePort{{Port: 1, NodePort: 30005}}}}); !errors.Is(err, cluster.ErrNodePortTaken) {
		t.Errorf("a taken NodePort: %v", err)
	}
	for _, c := range []struct {
		ip     string
		port   int
		reach  int
		source string
	}{
		{"172.30.0.10", 30086, 2, "172.30.0.10"}, // Cluster: every endpoint, masqueraded
		{"172.30.0.10", 30005, 1, "172.30.0.254"},
		{"172.30.0.11", 30005, 1, "172.30.0.254"},
		{svcs[0].ClusterIP, 80, 0, ""}, // not from outside
		{pods[0].IP, 80, 0, ""},
	} {
		if got := f.Reaches("x", c.ip, c.port); len(got) != c.reach || (c.port == 30005 && got[0].Node != map[string]string{"172.30.0.10": "node0", "172.30.0.11": "node1"}[c.ip]) {
			t.Errorf("x to %s:%d reaches %v", c.ip, c.port, got)
		}
		if got := f.Source("x", c.ip, c.port); got != c.source {
			t.Errorf("x to %s:%d: source %q, want %q", c.ip, c.port, got, c.source)
		}
	}
	res, err := f.Exec(ctx, "x", []string{"/bin/busybox", "nc", "-w", "2", "172.30.0.11", "30005"})
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), pods[1].IP+":80        172.30.0.254:") {
		t.Errorf("nc through Local: %v %q", err, res.Stdout)
	}
	if got := f.Reaches("s0", "172.30.0.11", 30005); len(got) != 2 {
		t.Errorf("a pod through a Local NodePort reaches %v, want every endpoint (kube-proxy's pod traffic rule)", got)
	}
	f2 := New(Config{NoNodePorts: "engine x"})
	if err := f2.NodePorts(); !errors.Is(err, cluster.ErrUnsupported) || f.NodePorts() != nil {
		t.Errorf("NodePorts: %v / %v", err, f.NodePorts())
	}
}
