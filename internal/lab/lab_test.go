package lab

import (
	"context"
	"fmt"
	"github.com/cnibench/cnibench/internal/scenario"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

// TestMain ends the package's tests by checking that nothing with the test prefix is left.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range Leftovers("") {
		if strings.Contains(l, "cnbt") {
			fmt.Fprintf(os.Stderr, "leftover after tests: %s\n", l)
			code = 1
		}
	}
	os.Exit(code)
}

func TestConfigValidation(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Prefix: "xyz", Dataplane: "flannel"}, "invalid prefix"},
		{Config{Prefix: "cnbTOOLONGNAME", Dataplane: "flannel"}, "invalid prefix"},
		{Config{Prefix: "cnbt1", MTU: 100}, "mtu 100 out of range"},
		{Config{Prefix: "cnbt1", Nodes: 99}, "nodes 99 out of range"},
		{Config{Prefix: "cnbt1", ClusterCIDR: "nope"}, "not an IPv4 CIDR"},
		{Config{Prefix: "cnbt1", ClusterCIDR: "10.244.0.0/24", Nodes: 2}, "too small for 2 nodes"},
		{Config{Prefix: "cnbt1", ClusterCIDR: "10.244.0.0/22", Nodes: 2, NodeCIDRMaskSize: 22}, "too small for 2 nodes with a /22 each"},
		{Config{Prefix: "cnbt1", NodeCIDRMaskSize: 30}, "node CIDR mask size 30 out of range"},
		{Config{Prefix: "cnbt1", UnderlayCIDR: "10.244.5.0/24"}, "overlaps"},
	}
	for _, b := range bad {
		err := b.cfg.defaults()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: got %v, want %q", b.cfg, err, b.want)
		}
	}
	c := Config{Prefix: "cnbt1"}
	if err := c.defaults(); err != nil || c.Nodes != 2 || c.MTU != 1500 || c.NodeCIDRMaskSize != 24 {
		t.Errorf("defaults: %v %+v", err, c)
	}
}

func TestUpRejectsBadInputWithoutTouchingHost(t *testing.T) {
	needRoot(t)
	before := Namespaces("")
	for _, cfg := range []Config{
		{Prefix: "cnbt0bad", Dataplane: "nope"},
		{Prefix: "cnbt0bad", Dataplane: "antrea", Proxy: "ebpf"},                     // OVS reads the veth before tc
		{Prefix: "cnbt0bad", Dataplane: "cilium", Proxy: "iptables", Policy: "ebpf"}, // parts that do not combine
		{Prefix: "cnbt0bad", Dataplane: "flannel", MTU: 600},
	} {
		if _, err := Up(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	if after := Namespaces(""); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("namespaces changed: %v -> %v", before, after)
	}
}

func TestParseProcStat(t *testing.T) {
	s, err := cluster.ParseProcStat([]byte("cpu  10 1 20 300 4 5 6 7 0 0\ncpu0 1 2 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.User != 10 || s.SoftIRQ != 6 || s.Steal != 7 || s.Total() != 353 {
		t.Errorf("%+v", s)
	}
	if _, err := cluster.ParseProcStat([]byte("intr 1 2\n")); err == nil {
		t.Error("bad first line accepted")
	}
	a := cluster.CPUSample{User: 0, Idle: 100}
	b := cluster.CPUSample{User: 50, SoftIRQ: 10, Idle: 140}
	busy, sirq := cluster.Busy(a, b)
	if busy != 60 || sirq != 10 {
		t.Errorf("busy %v softirq %v", busy, sirq)
	}
}

// TestProcessesAndClean: a server started in a pod answers from another pod; Clean alone (as
// after a SIGKILLed run) kills it and removes every namespace and the state directory.
func TestProcessesAndClean(t *testing.T) {
	needRoot(t)
	prefix := testPrefix()
	l, err := Up(context.Background(), Config{Prefix: prefix, Dataplane: "flannel"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "c", Node: "node0"}); err != nil {
		t.Fatal(err)
	}
	s, err := l.CreatePod(ctx, cluster.PodSpec{Name: "s", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := l.Start(ctx, "s", []string{"iperf3", "-s", "-p", "5999"}, cluster.Ready{TCPPort: 5999})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Exec(ctx, "c", []string{"iperf3", "-c", s.IP, "-p", "5999", "-t", "1", "-J"})
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "sum_received") {
		t.Fatalf("client: %v exit %d %s", err, res.ExitCode, res.Stderr)
	}
	ns, _ := l.PodNS("s")
	if pids := nsPIDs(ns); len(pids) != 1 {
		t.Fatalf("pids in server pod: %v", pids)
	}
	// A failing command reports its exit code, not an error.
	res, err = l.Exec(ctx, "c", []string{"sh", "-c", "exit 3"})
	if err != nil || res.ExitCode != 3 {
		t.Errorf("exit code: %v %d", err, res.ExitCode)
	}
	// Start of a server that exits at once is an error carrying its output.
	if _, err := l.Start(ctx, "s", []string{"iperf3", "-s", "-p", "nope"}, cluster.Ready{TCPPort: 1}); err == nil {
		t.Error("start of a failing server succeeded")
	}
	if err := Clean(prefix); err != nil {
		t.Fatal(err)
	}
	if left := Leftovers(prefix); len(left) > 0 {
		t.Fatalf("leftovers after Clean: %v", left)
	}
	_ = srv.Stop()
	if err := Clean(prefix); err != nil {
		t.Errorf("second Clean: %v", err)
	}
}

func TestBarePair(t *testing.T) {
	l := upLab(t, Config{Dataplane: "bare", Nodes: 1})
	ctx := context.Background()
	c, s, err := l.BarePair(ctx, "client", "server")
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(t, l, c.Name, s.IP, 1500-28); err != nil {
		t.Fatal(err)
	}
	ns, _ := l.PodNS("client")
	out, _ := nsenter(t, ns, "ip", "-o", "link")
	if strings.Count(out, "\n") != 2 { // lo and eth0 only
		t.Errorf("bare client has links beyond lo and eth0:\n%s", out)
	}
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "x", Node: "node0"}); err == nil {
		t.Error("pod created on a dataplane without a pod network")
	}
}

func buildLab(b *testing.B, pods int) {
	for i := 0; i < b.N; i++ {
		prefix := testPrefix()
		start := time.Now()
		// A /22 per node: 1,000 pods on 2 nodes outgrow the default /24.
		l, err := Up(context.Background(), Config{Prefix: prefix, Dataplane: "flannel", NodeCIDRMaskSize: 22})
		if err != nil {
			b.Fatal(err)
		}
		up := time.Since(start)
		specs := scenario.SilentPods(pods, "p", nil)
		for i := range specs {
			specs[i].Silent = false // pods attached through CNI, not silent addresses
		}
		start = time.Now()
		_, err = l.CreatePods(context.Background(), specs)
		attach := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Error(err)
		}
		b.ReportMetric(up.Seconds(), "up_s")
		b.ReportMetric(attach.Seconds(), "attach_s")
		if err := l.Close(context.Background()); err != nil {
			b.Error(err)
		}
		b.StartTimer()
	}
}

// BenchmarkLabUp2Pods, BenchmarkLabUp200Pods and BenchmarkLabUp1000Pods: time to build a 2-node
// flannel lab with its pods attached through the CNI plugins; up_s is the lab's Up, attach_s the
// pods' (goal: 1,000 pods attached in under 10 s on 2 cores).
// Run: go test -run XXX -bench LabUp1000Pods -benchtime 1x ./internal/lab/
func BenchmarkLabUp2Pods(b *testing.B)    { needRootB(b); buildLab(b, 2) }
func BenchmarkLabUp200Pods(b *testing.B)  { needRootB(b); buildLab(b, 200) }
func BenchmarkLabUp1000Pods(b *testing.B) { needRootB(b); buildLab(b, 1000) }

func needRootB(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
}
