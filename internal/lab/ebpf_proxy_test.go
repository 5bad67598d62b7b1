package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/scenario"
)

// lbProgName is the kernel's name of the load balancer's program (bpf/svc_lb.c).
const lbProgName = "svc_lb"

// lbPrograms lists the IDs of the load balancer's programs in the kernel now.
func lbPrograms(t *testing.T) map[ebpf.ProgramID]bool {
	t.Helper()
	ids := map[ebpf.ProgramID]bool{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ids
		}
		if err != nil {
			t.Fatalf("list BPF programs: %v", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // freed meanwhile
		}
		info, err := p.Info()
		p.Close()
		if err == nil && info.Name == lbProgName {
			ids[id] = true
		}
	}
}

// newLBPrograms lists the load balancer's programs that are not in before, sorted.
func newLBPrograms(t *testing.T, before map[ebpf.ProgramID]bool) []ebpf.ProgramID {
	t.Helper()
	var out []ebpf.ProgramID
	for id := range lbPrograms(t) {
		if !before[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// lbProgramsGone waits up to 15 s (namespaces, and the links in them, go asynchronously)
// until no load balancer's program absent from before is left, and returns those left.
func lbProgramsGone(t *testing.T, before map[ebpf.ProgramID]bool) []ebpf.ProgramID {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := newLBPrograms(t, before)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pinnedLBProgram is the ID of the program pinned in a node's bpf directory.
func pinnedLBProgram(t *testing.T, dir string) ebpf.ProgramID {
	t.Helper()
	p, err := ebpf.LoadPinnedProgram(filepath.Join(dir, lbProgName), nil)
	if err != nil {
		t.Fatalf("pinned load balancer: %v", err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

func needEBPFProxy(t *testing.T) {
	t.Helper()
	needRoot(t)
	if err := bpfdp.LBUsable(); err != nil {
		t.Skipf("the eBPF load balancer cannot run here: %v", err)
	}
}

// upEBPFLab builds a lab of a data plane with the eBPF proxy. Its teardown asserts, besides
// upLab's "no leftovers", that the load balancer's programs are gone from the kernel: the ones
// pinned in its nodes (one per node, checked to be new before the lab closes) and every other
// one loaded since the lab came up.
func upEBPFLab(t *testing.T, dp string) *Lab {
	t.Helper()
	needEBPFProxy(t)
	before := lbPrograms(t)
	var pinned []ebpf.ProgramID
	t.Cleanup(func() { // runs last: after the lab's Close
		if left := lbProgramsGone(t, before); len(left) > 0 {
			t.Errorf("BPF programs %s left in the kernel after close: %v (pinned by the lab: %v)", lbProgName, left, pinned)
		}
	})
	l := upLab(t, Config{Dataplane: dp, Proxy: "ebpf"})
	t.Cleanup(func() { // runs first: before the lab's Close
		for _, n := range l.nodes {
			if _, err := os.Stat(filepath.Join(lbDir(l, n.name), lbProgName)); err != nil {
				continue // never programmed (the test ended early)
			}
			id := pinnedLBProgram(t, lbDir(l, n.name))
			if before[id] || slices.Contains(pinned, id) {
				t.Errorf("node %s: pinned program %d is not a new one of its own", n.name, id)
			}
			pinned = append(pinned, id)
		}
		if !t.Failed() && len(pinned) != len(l.nodes) {
			t.Errorf("load balancers pinned %v, want one per node (%d)", pinned, len(l.nodes))
		}
	})
	return l
}

// lbDir is a node's bpf file system (dataplane.Node.BPFDir).
func lbDir(l *Lab, node string) string { return filepath.Join(l.StateDir(), "bpf-"+node) }

// lbStats reads a node's load balancer counters.
func lbStats(t *testing.T, l *Lab, node string) bpfdp.LBStats {
	t.Helper()
	ns, err := l.NodeNS(node)
	if err != nil {
		t.Fatal(err)
	}
	s, err := bpfdp.Node{NS: ns, Dir: lbDir(l, node)}.LBStats()
	if err != nil {
		t.Fatalf("LB stats of %s: %v", node, err)
	}
	return s
}

func statsDelta(a, b bpfdp.LBStats) bpfdp.LBStats {
	return bpfdp.LBStats{Packets: b.Packets - a.Packets, New: b.New - a.New, Forward: b.Forward - a.Forward,
		Reply: b.Reply - a.Reply, NoBackend: b.NoBackend - a.NoBackend}
}

// lbServicesInKernel counts the Services in a node's pinned services map.
func lbServicesInKernel(t *testing.T, l *Lab, node string) int {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(lbDir(l, node), "svc_lb_services"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	n := 0
	for it := m.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
}

// natRules lists the lines of a node's iptables (nft and legacy backends) nat tables and of its
// nftables ruleset that translate addresses.
func natRules(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	dnat := regexp.MustCompile(`(?i)\b[ds]nat\b|masquerade|redirect`)
	for _, argv := range [][]string{{"iptables-save", "-t", "nat"}, {"iptables-legacy-save", "-t", "nat"}, {"nft", "list", "ruleset"}} {
		if _, err := exec.LookPath(argv[0]); err != nil {
			continue
		}
		text, err := nsenter(t, ns, argv...)
		if err != nil && !strings.Contains(text, "does not exist") {
			t.Fatalf("%s in %s: %v\n%s", argv[0], ns, err, text)
		}
		chain := ""
		for _, line := range strings.Split(text, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "chain" {
				chain = f[1]
			}
			// flanneld's masquerading of what leaves the pod network (the flannel presets'
			// node agent) is not a Service's NAT.
			if strings.HasPrefix(chain, "FLANNEL-") || strings.Contains(line, "FLANNEL-POSTRTG") {
				continue
			}
			if dnat.MatchString(line) {
				out = append(out, argv[0]+": "+line)
			}
		}
	}
	return out
}

// execOK runs a command in a pod and returns its stdout; any failure ends the test.
func execOK(t *testing.T, l *Lab, pod string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := l.Exec(ctx, pod, argv)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v in %s: %v, exit %d\n%s%s", argv, pod, err, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// iperf3Result is the part of iperf3 -J output the tests read.
type iperf3Result struct {
	Error string `json:"error"`
	End   struct {
		SumSent     struct{ Bytes float64 } `json:"sum_sent"`
		SumReceived struct{ Bytes float64 } `json:"sum_received"`
		Sum         struct {
			Bytes, Packets, LostPackets float64
		} `json:"sum"`
	} `json:"end"`
}

func parseIperf3(t *testing.T, out string) iperf3Result {
	t.Helper()
	var r iperf3Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("iperf3 output: %v\n%s", err, out)
	}
	if r.Error != "" {
		t.Fatalf("iperf3: %s", r.Error)
	}
	return r
}

// TestEBPFProxy: with Proxy "ebpf", Services are load-balanced by the eBPF program alone, on a
// routed (calico) and a bridge + VXLAN (flannel) data plane. A client pod on node0 reaches a
// Service of two endpoints, one per node: 40 connections through its ClusterIP all complete
// (the handshake needs the reply SNATed back to the ClusterIP), each answered by one of the
// endpoints, both of them (intra and inter node). It is the eBPF program: the nodes have no
// NAT rule in iptables or nftables, and node0's load balancer counted exactly one new
// connection per connection, and their forward packets and replies (node1 none: the packets
// reach it translated already). A 2 s TCP transfer is carried by the connection table (at least
// one DNATed packet per 64 KiB sent); UDP through a Service works (iperf3 -u: its control
// connection, the datagrams and the server's reply datagram); a Service without endpoints drops
// (curl times out, NoBackend counts); a deleted Service stops answering and leaves the
// kernel's map. Teardown leaves nothing, in the kernel neither (upEBPFLab).
func TestEBPFProxy(t *testing.T) {
	for _, dp := range []string{"calico", "flannel"} {
		t.Run(dp, func(t *testing.T) {
			l := upEBPFLab(t, dp)
			ctx := context.Background()
			if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "client", Node: "node0"}); err != nil {
				t.Fatal(err)
			}
			web := map[string]string{"app": "web"}
			port := []cluster.ContainerPort{{Name: "http", Port: 8080, Protocol: "tcp"}}
			eps, err := l.CreatePods(ctx, []cluster.PodSpec{
				{Name: "web0", Node: "node0", Silent: true, Labels: web, Ports: port},
				{Name: "web1", Node: "node1", Silent: true, Labels: web, Ports: port},
				{Name: "perf", Node: "node1", Labels: map[string]string{"app": "perf"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Start(ctx, "perf", []string{"iperf3", "-s", "-p", "5201"}, cluster.Ready{TCPPort: 5201}); err != nil {
				t.Fatal(err)
			}
			svcs, err := l.CreateServices(ctx, []cluster.ServiceSpec{
				{Name: "web", Selector: web, Ports: []cluster.ServicePort{{Port: 80, TargetPort: 8080, Protocol: "tcp"}}},
				{Name: "perf", Selector: map[string]string{"app": "perf"}, Ports: []cluster.ServicePort{
					{Name: "tcp", Port: 5201, Protocol: "tcp"}, {Name: "udp", Port: 5201, Protocol: "udp"}}},
				{Name: "void", Selector: map[string]string{"app": "none"}, Ports: []cluster.ServicePort{{Port: 80, TargetPort: 8080, Protocol: "tcp"}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if eps[0].Node != "node0" || eps[1].Node != "node1" {
				t.Fatalf("endpoints on %s and %s, want node0 and node1", eps[0].Node, eps[1].Node)
			}
			webSvc, perfSvc, voidSvc := svcs[0], svcs[1], svcs[2]
			if len(webSvc.Endpoints) != 2 || len(voidSvc.Endpoints) != 0 {
				t.Fatalf("endpoints: web %v, void %v", webSvc.Endpoints, voidSvc.Endpoints)
			}
			for _, n := range []string{"node0", "node1"} {
				if got := lbServicesInKernel(t, l, n); got != 4 {
					t.Errorf("%s: %d Service ports in the kernel's map, want 4", n, got)
				}
				ns, _ := l.NodeNS(n)
				if rules := natRules(t, ns); len(rules) > 0 {
					t.Errorf("%s has NAT rules besides the eBPF load balancer:\n%s", n, strings.Join(rules, "\n"))
				}
			}

			t.Run("balances", func(t *testing.T) {
				const conns = 40
				before0, before1 := lbStats(t, l, "node0"), lbStats(t, l, "node1")
				out := execOK(t, l, "client", "sh", "-c", `for i in $(seq "$1"); do curl -sS -m 3 "http://$2/" || echo failed; done`, "sh", fmt.Sprint(conns), webSvc.ClusterIP)
				got := map[string]int{}
				for _, a := range strings.Fields(out) {
					got[a]++
				}
				if got[eps[0].IP]+got[eps[1].IP] != conns || got[eps[0].IP] == 0 || got[eps[1].IP] == 0 {
					t.Errorf("%d connections to %s answered %v; want all by %s (node0) or %s (node1), both", conns, webSvc.ClusterIP, got, eps[0].IP, eps[1].IP)
				}
				d0, d1 := statsDelta(before0, lbStats(t, l, "node0")), statsDelta(before1, lbStats(t, l, "node1"))
				t.Logf("answers %v; LB node0 %+v, node1 %+v", got, d0, d1)
				if d0.New != conns || d0.Forward < 2*conns || d0.Reply < 2*conns || d0.NoBackend != 0 {
					t.Errorf("node0's load balancer counted %+v for %d connections: want New %d, Forward and Reply >= %d each", d0, conns, conns, 2*conns)
				}
				if d1.New != 0 || d1.Forward != 0 || d1.Reply != 0 {
					t.Errorf("node1's load balancer translated packets already translated in node0: %+v", d1)
				}
			})

			t.Run("long TCP", func(t *testing.T) {
				before := lbStats(t, l, "node0")
				r := parseIperf3(t, execOK(t, l, "client", "iperf3", "-c", perfSvc.ClusterIP, "-p", "5201", "-t", "2", "-J"))
				d := statsDelta(before, lbStats(t, l, "node0"))
				sent, recvd := r.End.SumSent.Bytes, r.End.SumReceived.Bytes
				t.Logf("iperf3 TCP through %s: sent %.0f bytes, received %.0f; LB node0 %+v", perfSvc.ClusterIP, sent, recvd, d)
				if recvd <= 0 || recvd < sent/2 {
					t.Errorf("the server received %.0f of %.0f bytes", recvd, sent)
				}
				// iperf3 opens two connections (control, data); every later packet of them is
				// DNATed by the connection table, at most 64 KiB per (GSO) packet.
				if d.New != 2 || float64(d.Forward) < sent/65536 || d.Forward < 100 {
					t.Errorf("load balancer counted %+v for 2 connections carrying %.0f bytes: want New 2, Forward >= %.0f", d, sent, sent/65536)
				}
			})

			t.Run("UDP", func(t *testing.T) {
				before := lbStats(t, l, "node0")
				r := parseIperf3(t, execOK(t, l, "client", "iperf3", "-c", perfSvc.ClusterIP, "-p", "5201", "-u", "-b", "20M", "-t", "1", "-J"))
				d := statsDelta(before, lbStats(t, l, "node0"))
				t.Logf("iperf3 UDP through %s: sent %.0f bytes, received %.0f (%.0f of %.0f packets lost); LB node0 %+v",
					perfSvc.ClusterIP, r.End.SumSent.Bytes, r.End.SumReceived.Bytes, r.End.Sum.LostPackets, r.End.Sum.Packets, d)
				if r.End.SumReceived.Bytes <= 0 {
					t.Errorf("the server received no UDP bytes")
				}
				if d.New != 2 || d.Forward < 100 || d.Reply == 0 {
					t.Errorf("load balancer counted %+v: want New 2 (control, datagrams), Forward >= 100 datagrams, replies", d)
				}
			})

			t.Run("no backend", func(t *testing.T) {
				before := lbStats(t, l, "node0")
				res, err := l.Exec(ctx, "client", []string{"curl", "-sS", "-m", "2", "http://" + voidSvc.ClusterIP + "/"})
				if err != nil {
					t.Fatal(err)
				}
				d := statsDelta(before, lbStats(t, l, "node0"))
				if res.ExitCode != 28 { // timeout: the SYNs are dropped, nothing refuses them
					t.Errorf("curl to a Service without endpoints: exit %d (want 28, timeout) %s%s", res.ExitCode, res.Stdout, res.Stderr)
				}
				if d.NoBackend == 0 || d.New != 0 {
					t.Errorf("load balancer counted %+v: want NoBackend > 0, New 0", d)
				}
			})

			t.Run("delete", func(t *testing.T) {
				execOK(t, l, "client", "curl", "-sS", "-m", "3", "http://"+webSvc.ClusterIP+"/")
				if err := l.DeleteServices(ctx, []string{"web"}); err != nil {
					t.Fatal(err)
				}
				if got := l.Programmed(ctx)["proxy_services_count"]; got != 3 {
					t.Errorf("programmed %v Service ports after the delete, want 3", got)
				}
				for _, n := range []string{"node0", "node1"} {
					if got := lbServicesInKernel(t, l, n); got != 3 {
						t.Errorf("%s: %d Service ports in the kernel's map after the delete, want 3", n, got)
					}
				}
				res, err := l.Exec(ctx, "client", []string{"curl", "-sS", "-m", "2", "http://" + webSvc.ClusterIP + "/"})
				if err != nil {
					t.Fatal(err)
				}
				if res.ExitCode == 0 {
					t.Errorf("deleted Service %s still answers: %s", webSvc.ClusterIP, res.Stdout)
				}
			})
		})
	}
}

// TestEBPFProxy10kServices: 10,000 Services, each with its own silent pod as endpoint, are
// programmed by the eBPF proxy on calico (both nodes' kernel maps hold them all), and ten
// random ClusterIPs answer with the address of their own endpoint.
func TestEBPFProxy10kServices(t *testing.T) {
	l := upEBPFLab(t, "calico")
	ctx := context.Background()
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "client", Node: "node0"}); err != nil {
		t.Fatal(err)
	}
	const n = 10000
	specs, svcs := scenario.ServicesWithEndpoints(n, "s", nil, 8080)
	start := time.Now()
	pods, err := l.CreatePods(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	podTime := time.Since(start)
	start = time.Now()
	out, err := l.CreateServices(ctx, svcs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d silent pods in %v; %d Services programmed in %v (%v)", n, podTime, n, time.Since(start), l.Programmed(ctx))
	if got := l.Programmed(ctx)["proxy_services_count"]; got != n {
		t.Errorf("programmed %v Services, want %d", got, n)
	}
	for _, node := range []string{"node0", "node1"} {
		if got := lbServicesInKernel(t, l, node); got != n {
			t.Errorf("%s: %d Services in the kernel's map, want %d", node, got, n)
		}
	}
	before := lbStats(t, l, "node0")
	var script strings.Builder
	var want []string
	for _, i := range rand.Perm(n)[:10] {
		if len(out[i].Endpoints) != 1 || out[i].Endpoints[0] != pods[i].IP {
			t.Fatalf("service %d endpoints %v, want [%s]", i, out[i].Endpoints, pods[i].IP)
		}
		fmt.Fprintf(&script, "curl -s -m 3 http://%s/ || echo failed; ", out[i].ClusterIP)
		want = append(want, pods[i].IP)
	}
	got := strings.Fields(execOK(t, l, "client", "sh", "-c", script.String()))
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("answers %v\nwant      %v", got, want)
	}
	if d := statsDelta(before, lbStats(t, l, "node0")); d.New != 10 {
		t.Errorf("load balancer counted %+v for 10 connections, want New 10", d)
	}
}

// TestEBPFProxySIGKILLClean: a run SIGKILLed while its eBPF lab stands leaves the pins of its
// load balancer, which keep the programs in the kernel after their process is gone, and the
// cgroups of its pods' CPU resources; `lab clean` (cleanLabs, the owner being dead) removes
// the lab, with the pins the programs, and the cgroups.
func TestEBPFProxySIGKILLClean(t *testing.T) {
	needEBPFProxy(t)
	prefix := testPrefix()
	before := lbPrograms(t)
	owner := startKilledOwner(t, prefix, "calico", "ebpf")

	var mounts []string
	for _, l := range Leftovers(prefix) {
		if strings.HasPrefix(l, "mount ") {
			mounts = append(mounts, l)
		}
	}
	if len(mounts) != 2 {
		t.Fatalf("mounts of the child's lab %v, want the bpf file systems of 2 nodes (leftovers %v)", mounts, Leftovers(prefix))
	}
	var pinned []ebpf.ProgramID
	for _, node := range []string{"node0", "node1"} {
		pinned = append(pinned, pinnedLBProgram(t, filepath.Join(StateRoot, prefix, "bpf-"+node)))
	}
	slices.Sort(pinned)
	if child := newLBPrograms(t, before); !slices.Equal(child, pinned) {
		t.Errorf("load balancer programs loaded since the test began %v, want those the child pinned %v", child, pinned)
	}

	// The child's pod with CPU resources has cgroups of its own (and the shared pool's).
	var cgroups []string
	for _, l := range Leftovers(prefix) {
		if strings.HasPrefix(l, "cgroup ") && !strings.HasSuffix(l, "-node0") && !strings.HasSuffix(l, "-node1") {
			cgroups = append(cgroups, l)
		}
	}
	if cpu, _ := CPURoots(); cpu != "" && !slices.Contains(cgroups, "cgroup "+filepath.Join(cpu, prefix+"-vnf")) {
		t.Errorf("the child's CPU-limited pod has no cgroup among %v", cgroups)
	}

	owner.kill(t)
	// The owner is dead; its pins keep the programs alive.
	if r, err := Owner(prefix); err != nil || r.Alive() {
		t.Fatalf("owner of %s after the kill: %+v %v", prefix, r, err)
	}
	time.Sleep(200 * time.Millisecond)
	if now := newLBPrograms(t, before); !slices.Equal(now, pinned) {
		t.Fatalf("after the kill, programs %v, want the pinned ones %v still there", now, pinned)
	}

	removed, skipped, err := cleanLabs([]string{prefix}, false)
	if err != nil || len(skipped) != 0 {
		t.Fatalf("clean: skipped %v, %v", skipped, err)
	}
	for _, m := range append(mounts, cgroups...) {
		if !slices.Contains(removed, m) {
			t.Errorf("clean removed %v, not %s", removed, m)
		}
	}
	if left := Leftovers(prefix); len(left) > 0 {
		t.Errorf("leftovers after clean: %v", left)
	}
	if _, err := os.Stat(filepath.Join(StateRoot, prefix)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after clean: %v", err)
	}
	if left := lbProgramsGone(t, before); len(left) > 0 {
		t.Errorf("programs %v left in the kernel after clean (the child pinned %v)", left, pinned)
	}
}
