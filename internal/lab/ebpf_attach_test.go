package lab

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/scenario"
)

// fwdStats reads a node's eBPF forwarding counters.
func fwdStats(t *testing.T, l *Lab, node string) bpfdp.FwdStats {
	t.Helper()
	n, err := l.node(node)
	if err != nil {
		t.Fatal(err)
	}
	s, err := bpfdp.Node{NS: n.ns, Dir: filepath.Join(l.StateDir(), "bpf-"+n.name)}.FwdStats()
	if err != nil {
		t.Fatalf("%s forwarding counters: %v", node, err)
	}
	return s
}

// TestEBPFAttach: the cilium preset's pods (attach ebpf) reach each other intra and inter node
// with full-size packets, through tc programs that skip the node's IP stack: with a rule that
// drops everything the node forwards (iptables FORWARD, inside node0's namespace) pods of node0
// still reach each other and node1's pods, and the node's counters say the packets were
// redirected into the local pod (bpf_redirect_peer) or to the overlay (bpf_redirect_neigh).
// A Service (eBPF proxy) reaches silent pods of both nodes through the holder's routes. With
// Services in iptables instead, the programs pass pod traffic up the stack: the same drop rule
// then stops it, and the Service works through iptables' DNAT.
func TestEBPFAttach(t *testing.T) {
	needRoot(t)
	if err := bpfdp.FwdUsable(); err != nil {
		t.Skipf("eBPF pod forwarding unusable here: %v", err)
	}
	for _, px := range []string{"ebpf", "iptables"} {
		t.Run("proxy="+px, func(t *testing.T) {
			// The eBPF policy engine judges before the stack's Services would translate: with
			// iptables Services the case runs without policies.
			l := upLab(t, Config{Dataplane: "cilium", Proxy: px, Policy: map[string]string{"ebpf": "ebpf", "iptables": "none"}[px]})
			ctx := context.Background()
			var ips []string
			for i, node := range []string{"node0", "node0", "node1"} {
				p, err := l.CreatePod(ctx, cluster.PodSpec{Name: fmt.Sprintf("p%d", i), Node: node})
				if err != nil {
					t.Fatal(err)
				}
				ips = append(ips, p.IP)
			}
			specs, svcs := scenario.ServicesWithEndpoints(2, "s", nil, 8080)
			specs[0].Node, specs[1].Node = "node0", "node1"
			silent, err := l.CreatePods(ctx, specs)
			if err != nil {
				t.Fatal(err)
			}
			out, err := l.CreateServices(ctx, svcs)
			if err != nil {
				t.Fatal(err)
			}
			size := l.PodMTU() - 28
			before := fwdStats(t, l, "node0")
			for _, c := range [][2]int{{0, 1}, {0, 2}, {2, 0}} {
				if err := ping(t, l, fmt.Sprintf("p%d", c[0]), ips[c[1]], size); err != nil {
					t.Errorf("p%d -> p%d: %v", c[0], c[1], err)
				}
			}
			after := fwdStats(t, l, "node0")
			redirected := px == "ebpf"
			if redirected && (after.Local-before.Local < 6 || after.Remote-before.Remote < 3) {
				t.Errorf("node0 redirected %d packets into local pods and %d to the overlay, want >= 6 and >= 3", after.Local-before.Local, after.Remote-before.Remote)
			}
			if !redirected && (after.Local != before.Local || after.Remote != before.Remote || after.Stack-before.Stack < 6) {
				t.Errorf("with iptables Services: counters %+v -> %+v, want every packet up the stack", before, after)
			}
			// Services and pods behind the holder's routes (a FIB lookup to a host veth).
			var script strings.Builder
			for i := range out {
				fmt.Fprintf(&script, "curl -s -m 3 http://%s/; echo; curl -s -m 3 http://%s:8080/; echo; ", out[i].ClusterIP, silent[i].IP)
			}
			res, err := l.Exec(ctx, "p0", []string{"sh", "-c", script.String()})
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Join([]string{silent[0].IP, silent[0].IP, silent[1].IP, silent[1].IP}, " ")
			if got := strings.Join(strings.Fields(string(res.Stdout)), " "); got != want {
				t.Errorf("through the Services and to the silent pods: %q, want %q (stderr %s)", got, want, res.Stderr)
			}
			// Drop whatever node0's IP stack forwards.
			n0, _ := l.NodeNS("node0")
			if o, err := nsenter(t, n0, "iptables", "-I", "FORWARD", "-j", "DROP"); err != nil {
				t.Fatalf("iptables: %v: %s", err, o)
			}
			for _, c := range [][2]int{{0, 1}, {0, 2}} {
				err := ping(t, l, fmt.Sprintf("p%d", c[0]), ips[c[1]], 56)
				if redirected && err != nil {
					t.Errorf("p%d -> p%d with FORWARD dropping: %v (the packets went through the stack)", c[0], c[1], err)
				}
				if !redirected && err == nil {
					t.Errorf("p%d -> p%d with FORWARD dropping got through: the programs skipped the stack", c[0], c[1])
				}
			}
		})
	}
}

// TestEBPFSockLB: with the ebpf-sock proxy (the cilium preset's), a pod's connection to a
// Service is made to a backend at connect time: the answers come from the endpoints of both
// nodes, the node's socket counters count every connect, the per-packet load balancer sees no
// new connection to a Service (no packet carries the ClusterIP), and the socket still reports
// the Service as its peer (getpeername4). A UDP exchange over an unconnected socket (sendto,
// recvfrom) reaches the backend and the reply reports the Service as its source. A Service
// without endpoints refuses the connect. The pod processes run in the node's cgroup.
func TestEBPFSockLB(t *testing.T) {
	needRoot(t)
	if err := bpfdp.SockLBUsable(); err != nil {
		t.Skipf("socket load balancing unusable here: %v", err)
	}
	l := upLab(t, Config{Dataplane: "cilium"})
	if px := l.Parts().Proxy.Name(); px != "ebpf-sock" {
		t.Fatalf("cilium's proxy is %s, want ebpf-sock", px)
	}
	ctx := context.Background()
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "client", Node: "node0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "udp", Node: "node1"}); err != nil {
		t.Fatal(err)
	}
	specs, _ := scenario.ServicesWithEndpoints(2, "s", nil, 8080)
	specs[0].Node, specs[1].Node = "node0", "node1"
	sel := map[string]string{"app": "web"}
	for i := range specs {
		specs[i].Labels["app"] = "web"
	}
	silent, err := l.CreatePods(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.CreateServices(ctx, []cluster.ServiceSpec{
		{Name: "web", Selector: sel, Ports: []cluster.ServicePort{{Name: "http", Port: 80, TargetPort: 8080, Protocol: "tcp"}}},
		{Name: "echo", Selector: map[string]string{"app": "none"}, Ports: []cluster.ServicePort{{Name: "u", Port: 53, TargetPort: 5353, Protocol: "udp"}}},
		{Name: "empty", Selector: map[string]string{"app": "none"}, Ports: []cluster.ServicePort{{Name: "http", Port: 80, Protocol: "tcp"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n0, _ := l.node("node0")
	bn := bpfdp.Node{NS: n0.ns, Dir: filepath.Join(l.StateDir(), "bpf-node0")}
	sock0, _ := bn.SockLBStats()
	lb0, _ := bn.LBStats()
	const conns = 20
	py := fmt.Sprintf(`
import socket
seen = {}
for i in range(%d):
    s = socket.create_connection(("%s", 80), timeout=3)
    peer = s.getpeername()
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    body = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        body += d
    s.close()
    seen[body.split(b"\r\n\r\n")[-1].decode().strip()] = 1
    print("peer", peer[0], peer[1])
print("answered", " ".join(sorted(seen)))
`, conns, out[0].ClusterIP)
	res, err := l.Exec(ctx, "client", []string{"python3", "-c", py})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("client: %v exit %d: %s %s", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	text := string(res.Stdout)
	if got := strings.Count(text, "peer "+out[0].ClusterIP+" 80\n"); got != conns {
		t.Errorf("%d of %d sockets report the Service as their peer:\n%s", got, conns, text)
	}
	if want := "answered " + silent[0].IP + " " + silent[1].IP; !strings.Contains(text, want) && !strings.Contains(text, "answered "+silent[1].IP+" "+silent[0].IP) {
		t.Errorf("answers: want both endpoints (%s):\n%s", want, text)
	}
	sock1, _ := bn.SockLBStats()
	lb1, _ := bn.LBStats()
	if d := sock1.Picked - sock0.Picked; d != conns {
		t.Errorf("socket LB picked a backend %d times for %d connects", d, conns)
	}
	if lb1.New != lb0.New {
		t.Errorf("the per-packet LB saw %d new connections to a Service: the socket LB did not rewrite them", lb1.New-lb0.New)
	}
	// A Service without endpoints: connect refused by the socket program.
	res, err = l.Exec(ctx, "client", []string{"python3", "-c", fmt.Sprintf(`
import socket
try:
    socket.create_connection(("%s", 80), timeout=2)
    print("connected")
except OSError as e:
    print("refused", e.errno)
`, out[2].ClusterIP)})
	if err != nil || !strings.Contains(string(res.Stdout), "refused") {
		t.Errorf("connect to a Service without endpoints: %v %s %s", err, res.Stdout, res.Stderr)
	}
	if s, _ := bn.SockLBStats(); s.NoBackend == sock1.NoBackend {
		t.Errorf("no refusal counted: %+v", s)
	}
	// UDP, unconnected: the echo Service's backend is pod "udp" (selector set by hand).
	udp, _ := l.Pod("udp")
	if err := bn.SetServices([]bpfdp.Service{
		{Addr: netip.MustParseAddr(out[0].ClusterIP), Port: 80, Proto: "tcp", Backends: []bpfdp.Backend{{AddrPort: netip.MustParseAddrPort(silent[0].IP + ":8080")}}},
		{Addr: netip.MustParseAddr(out[1].ClusterIP), Port: 53, Proto: "udp", Backends: []bpfdp.Backend{{AddrPort: netip.MustParseAddrPort(udp.IP + ":5353")}}},
	}); err != nil {
		t.Fatal(err)
	}
	srv, err := l.Start(ctx, "udp", []string{"python3", "-c", `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5353))
while True:
    d, a = s.recvfrom(100)
    s.sendto(d + b" from " + a[0].encode(), a)
`}, cluster.Ready{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	res, err = l.Exec(ctx, "client", []string{"python3", "-c", fmt.Sprintf(`
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.5)
for i in range(20):
    s.sendto(b"ping", ("%s", 53))
    try:
        d, a = s.recvfrom(100)
        print(d.decode(), "reply-from", a[0], a[1])
        break
    except socket.timeout:
        pass
`, out[1].ClusterIP)})
	client, _ := l.Pod("client")
	if want := fmt.Sprintf("ping from %s reply-from %s 53", client.IP, out[1].ClusterIP); err != nil || !strings.Contains(string(res.Stdout), want) {
		t.Errorf("UDP through the Service: want %q, got %v %s %s", want, err, res.Stdout, res.Stderr)
	}
	// The pods' processes run in their node's cgroup.
	res, err = l.Exec(ctx, "client", []string{"cat", "/proc/self/cgroup"})
	if want := "0::/cnibench/" + n0.ns + "\n"; err != nil || !strings.Contains(string(res.Stdout), want) {
		t.Errorf("a process of a pod on node0: want cgroup v2 line %q in %s (%v)", want, res.Stdout, err)
	}
}

// TestEBPFNodePorts: the eBPF proxies serve NodePorts from outside the cluster (an external
// client on the underlay), for the per-packet proxy on calico and the cilium preset:
//   - externalTrafficPolicy Cluster at node0's address reaches the endpoints of both nodes;
//     node1's sees node0's address as the source (SNAT, so its reply comes back through node0),
//     node0's the client's own; the answers reach the client (reverse NAT on the way back);
//   - Local reaches node0's endpoint only, which sees the client's address;
//   - Local whose only endpoint is on node1, at node0: dropped (the connection times out,
//     node0 counts it as without backend);
//
// and node0 counts the NodePort packets it sent on by the FIB.
func TestEBPFNodePorts(t *testing.T) {
	needRoot(t)
	if err := bpfdp.LBUsable(); err != nil {
		t.Skipf("eBPF load balancer unusable here: %v", err)
	}
	for _, cfg := range []Config{{Dataplane: "calico", Proxy: "ebpf"}, {Dataplane: "cilium"}} {
		t.Run(cfg.Dataplane, func(t *testing.T) {
			l := upLab(t, cfg)
			ctx := context.Background()
			x, err := l.CreatePod(ctx, cluster.PodSpec{Name: "x", External: true})
			if err != nil {
				t.Fatal(err)
			}
			var ips []string
			for i, node := range []string{"node0", "node1"} {
				name := fmt.Sprintf("s%d", i)
				p, err := l.CreatePod(ctx, cluster.PodSpec{Name: name, Node: node, Labels: map[string]string{"app": "src", "idx": fmt.Sprint(i)}})
				if err != nil {
					t.Fatal(err)
				}
				ips = append(ips, p.IP)
				// Answers every connection with its own address and the source it sees.
				if _, err := l.Start(ctx, name, []string{"python3", "-c", `
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(64)
while True:
    c, a = s.accept()
    try:
        c.sendall(("%s %s\n" % (c.getsockname()[0], a[0])).encode())
        n = 0
        while True:
            d = c.recv(65536)
            if not d:
                break
            n += len(d)
        c.sendall(("%d\n" % n).encode())
    except OSError:
        pass
    c.close()
`}, cluster.Ready{TCPPort: 8080}); err != nil {
					t.Fatal(err)
				}
			}
			port := func(np int) []cluster.ServicePort {
				return []cluster.ServicePort{{Name: "http", Port: 80, TargetPort: 8080, Protocol: "tcp", NodePort: np}}
			}
			if _, err := l.CreateServices(ctx, []cluster.ServiceSpec{
				{Name: "np-cluster", Selector: map[string]string{"app": "src"}, Ports: port(30080), NodePort: true},
				{Name: "np-local", Selector: map[string]string{"app": "src"}, Ports: port(30081), NodePort: true, ExternalLocal: true},
				{Name: "np-remote", Selector: map[string]string{"idx": "1"}, Ports: port(30082), NodePort: true, ExternalLocal: true},
				{Name: "np-far", Selector: map[string]string{"idx": "1"}, Ports: port(30083), NodePort: true},
			}); err != nil {
				t.Fatal(err)
			}
			nodes, _ := l.Nodes(ctx)
			node0 := nodes[0].IP
			n0, _ := l.node("node0")
			bn := bpfdp.Node{NS: n0.ns, Dir: filepath.Join(l.StateDir(), "bpf-node0")}
			before, _ := bn.LBStats()
			ask := func(np, n int) map[string]int {
				t.Helper()
				res, err := l.Exec(ctx, "x", []string{"python3", "-c", fmt.Sprintf(`
import socket
for i in range(%d):
    try:
        s = socket.create_connection(("%s", %d), timeout=1)
        print(s.recv(100).decode().strip())
        s.close()
    except OSError as e:
        print("failed", e)
`, n, node0, np)})
				if err != nil {
					t.Fatal(err)
				}
				seen := map[string]int{}
				for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
					seen[line]++
				}
				return seen
			}
			got := ask(30080, 30)
			want := map[string]bool{ips[0] + " " + x.IP: true, ips[1] + " " + node0: true}
			for k := range got {
				if !want[k] {
					t.Errorf("Cluster: answer %q (%d times), want only %v", k, got[k], want)
				}
			}
			if len(got) != 2 {
				t.Errorf("Cluster: answers %v, want both endpoints", got)
			}
			if got := ask(30081, 10); len(got) != 1 || got[ips[0]+" "+x.IP] != 10 {
				t.Errorf("Local: answers %v, want node0's endpoint seeing %s, 10 times", got, x.IP)
			}
			if got := ask(30082, 2); len(got) != 1 || got["failed timed out"] != 2 {
				t.Errorf("Local without a local endpoint: answers %v, want 2 time-outs", got)
			}
			// A bulk transfer to the other node's endpoint: full-size (GSO) segments take the
			// translated path too.
			res, err := l.Exec(ctx, "x", []string{"python3", "-c", fmt.Sprintf(`
import socket
s = socket.create_connection(("%s", 30083), timeout=5)
f = s.makefile("rb")
hello = f.readline().decode().strip()
buf = b"x" * 65536
for i in range(320):
    s.sendall(buf)
s.shutdown(socket.SHUT_WR)
print(hello, f.readline().decode().strip())
`, node0)})
			if want := fmt.Sprintf("%s %s %d", ips[1], node0, 320*65536); err != nil || strings.TrimSpace(string(res.Stdout)) != want {
				t.Errorf("20 MB through node0's NodePort to node1's endpoint: got %q %s (%v), want %q", res.Stdout, res.Stderr, err, want)
			}
			after, _ := bn.LBStats()
			if after.NodePort-before.NodePort < 80 || after.NoBackend == before.NoBackend {
				t.Errorf("node0's counters %+v -> %+v: want NodePort packets sent on by the FIB and drops without backend", before, after)
			}
		})
	}
}
