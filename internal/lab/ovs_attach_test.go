package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/ovs"
)

func needOVS(t *testing.T) {
	t.Helper()
	needRoot(t)
	if err := ovs.Usable(); err != nil {
		if os.Getenv("CNIBENCH_REQUIRE_TOOLS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// ovsVsctl runs ovs-vsctl against a node's own Open vSwitch.
func ovsVsctl(t *testing.T, l *Lab, node string, args ...string) string {
	t.Helper()
	sw, err := ovs.Open(ovs.Options{Dir: filepath.Join(l.StateDir(), "node-"+node, "ovs")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := sw.VsctlOutput(context.Background(), args...)
	if err != nil {
		t.Fatalf("ovs-vsctl %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// TestOVSAttach: the antrea preset's pods hang on each node's own Open vSwitch (user-space
// datapath): full-size pings intra and inter node, the pods' host veths and antrea-gw0 are
// br-int's ports, and the intra-node path really is OVS (once the node's ovs-vswitchd is
// killed, the pods of that node no longer reach each other). A Service whose endpoint is on
// the client's node answers (Filtered: the replies come back through the node's stack).
func TestOVSAttach(t *testing.T) {
	for _, dp := range []string{"antrea", "ovs-dpdk"} {
		t.Run(dp, func(t *testing.T) { ovsAttach(t, dp) })
	}
}

func ovsAttach(t *testing.T, dp string) {
	needOVS(t)
	l := upLab(t, Config{Dataplane: dp})
	ctx := context.Background()
	sel := map[string]string{"app": "b"}
	a, err := l.CreatePod(ctx, cluster.PodSpec{Name: "a", Node: "node0"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.CreatePod(ctx, cluster.PodSpec{Name: "b", Node: "node0", Labels: sel})
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.CreatePod(ctx, cluster.PodSpec{Name: "c", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	size := l.PodMTU() - 28
	for _, p := range []struct{ from, to string }{{"a", b.IP}, {"a", c.IP}, {"c", a.IP}} {
		if err := ping(t, l, p.from, p.to, size); err != nil {
			t.Errorf("%s -> %s: %v", p.from, p.to, err)
		}
	}
	ports := strings.Fields(ovsVsctl(t, l, "node0", "list-ports", "br-int"))
	if len(ports) != 3 || !strings.Contains(strings.Join(ports, " "), "antrea-gw0") {
		t.Errorf("br-int ports on node0: %v, want antrea-gw0 and the two pods' veths", ports)
	}
	if typ := ovsVsctl(t, l, "node0", "get", "Bridge", "br-int", "datapath_type"); typ != "netdev" {
		t.Errorf("datapath_type %s, want netdev", typ)
	}
	if dp == "ovs-dpdk" {
		// DPDK really runs, the pods' ports are DPDK's, and idle PMD threads may sleep (a run's
		// standing labs must not busy-poll a core each).
		if got := ovsVsctl(t, l, "node0", "get", "Open_vSwitch", ".", "dpdk_initialized"); got != "true" {
			t.Errorf("dpdk_initialized %s", got)
		}
		for _, p := range ports {
			if p == "antrea-gw0" {
				continue
			}
			if typ := ovsVsctl(t, l, "node0", "get", "Interface", p, "type"); typ != "dpdk" {
				t.Errorf("port %s type %s, want dpdk", p, typ)
			}
		}
		// Resting after set-up; awake (busy-polling) for a trial; resting after it.
		for _, step := range []struct {
			do   func() error
			want string
		}{{func() error { return nil }, `"10000"`}, {l.Wake, `"0"`}, {l.Rest, `"10000"`}} {
			if err := step.do(); err != nil {
				t.Fatal(err)
			}
			for _, node := range []string{"node0", "node1"} {
				if got := ovsVsctl(t, l, node, "get", "Open_vSwitch", ".", "other_config:pmd-maxsleep"); got != step.want {
					t.Errorf("%s: pmd-maxsleep %s, want %s", node, got, step.want)
				}
			}
		}
	}

	// A Service with its endpoint on the client's node: the reply must come back through the
	// node's stack (un-DNAT), which Filtered arranges.
	if _, err := l.Start(ctx, "b", []string{"python3", "-c", `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"hello from b\n"); c.close()
`}, cluster.Ready{TCPPort: 8080}); err != nil {
		t.Fatal(err)
	}
	svcs, err := l.CreateServices(ctx, []cluster.ServiceSpec{{Name: "web", Selector: sel,
		Ports: []cluster.ServicePort{{Name: "http", Port: 80, TargetPort: 8080, Protocol: "tcp"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"a", "c"} {
		res, err := l.Exec(ctx, from, []string{"python3", "-c", fmt.Sprintf(`
import socket
s = socket.create_connection(("%s", 80), timeout=3)
print(s.recv(100).decode().strip())`, svcs[0].ClusterIP)})
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello from b") {
			t.Errorf("%s -> Service %s: %v exit %d: %s %s", from, svcs[0].ClusterIP, err, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	if err := ping(t, l, "a", b.IP, size); err != nil {
		t.Errorf("intra through the gateway (filtered): %v", err)
	}

	// Kill node0's switch: its pods are cut off from each other.
	n0, _ := l.node("node0")
	vswitchd := daemonPID(t, filepath.Join(l.StateDir(), "node-node0", "ovs"), "ovs-vswitchd")
	inNS := false
	for _, p := range netns.PIDs(n0.ns) {
		inNS = inNS || p == vswitchd
	}
	if !inNS {
		t.Fatalf("ovs-vswitchd (pid %d) is not in node0's namespace", vswitchd)
	}
	if err := syscall.Kill(vswitchd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := ping(t, l, "a", b.IP, 56); err == nil {
		t.Errorf("a reaches b with node0's ovs-vswitchd killed: the path is not OVS")
	}
}

// TestOVSAttachPolicies: NetworkPolicies on the antrea preset (iptables engine in the nodes'
// stack) drop and pass intra and inter node.
func TestOVSAttachPolicies(t *testing.T) {
	needOVS(t)
	testPolicies(t, Config{Dataplane: "antrea", Policy: "iptables"})
}

// TestOVSAttachKilledOwner: a run SIGKILLed while an antrea lab stands leaves its detached
// switches running in the nodes' namespaces; `lab clean` removes them with the lab.
func TestOVSAttachKilledOwner(t *testing.T) {
	for _, dp := range []string{"antrea", "ovs-dpdk"} {
		t.Run(dp, func(t *testing.T) { ovsAttachKilledOwner(t, dp) })
	}
}

func ovsAttachKilledOwner(t *testing.T, dp string) {
	needOVS(t)
	prefix := testPrefix()
	owner := startKilledOwner(t, prefix, dp, "")
	var daemons []int
	for _, node := range []string{"node0", "node1"} {
		for _, d := range []string{"ovsdb-server", "ovs-vswitchd"} {
			daemons = append(daemons, daemonPID(t, filepath.Join(StateRoot, prefix, "node-"+node, "ovs"), d))
		}
	}
	owner.kill(t)
	time.Sleep(200 * time.Millisecond)
	for _, pid := range daemons {
		if syscall.Kill(pid, 0) != nil {
			t.Errorf("daemon %d died with its starter: a lab kept by lab up would lose its switch", pid)
		}
	}
	if _, skipped, err := cleanLabs([]string{prefix}, false); err != nil || len(skipped) != 0 {
		t.Fatalf("clean: skipped %v, %v", skipped, err)
	}
	for _, pid := range daemons {
		if !exits(pid, 5*time.Second) {
			t.Errorf("daemon %d still runs after lab clean", pid)
		}
	}
	if left := Leftovers(prefix); len(left) > 0 {
		t.Errorf("leftovers after clean: %v", left)
	}
}

// exits waits until a process is gone or a zombie (its reaper, init, may take a moment).
func exits(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemonPID reads an Open vSwitch daemon's pid file in dir (named after its binary:
// ovs-vswitchd.pid, or ovs-vswitchd-dpdk.pid for the DPDK build).
func daemonPID(t *testing.T, dir, daemon string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, daemon+"*.pid"))
	if len(files) != 1 {
		t.Fatalf("pid files of %s in %s: %v", daemon, dir, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", files[0], err)
	}
	return pid
}
