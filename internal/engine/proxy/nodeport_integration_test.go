package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/proxy"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/netns"
)

// TestNodePortsDeliver programs three NodePort Services per node, as kube-proxy does on each,
// in a flannel and a calico lab, and connects to them over TCP from a namespace outside the
// cluster (a host on the underlay subnet). Each endpoint answers with the source address it
// sees:
//   - externalTrafficPolicy Cluster (np-cluster, endpoints on node0 and node1, reached
//     through node0): both endpoints answer, each sees an address of node0 (masqueraded), and
//     the answer reaches the client (reverse NAT on the way back through node0);
//   - Local (np-local, one endpoint on each node): each node sends to its own endpoint only,
//     which sees the client's address;
//   - Local with the only endpoint on node1 (np-local-remote): node1 serves it; on node0 the
//     connection fails (dropped: the client times out), but a pod there still gets through.
func TestNodePortsDeliver(t *testing.T) {
	for _, engine := range []string{"iptables", "nftables"} {
		for _, dp := range []string{"flannel", "calico"} {
			t.Run(engine+"/"+dp, func(t *testing.T) { nodePortsDeliver(t, dp, engine) })
		}
	}
}

func nodePortsDeliver(t *testing.T, dataplane, engine string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("cnbtq%04d", rand.Intn(10000))
	l, err := lab.Up(ctx, lab.Config{Prefix: prefix, Dataplane: dataplane})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Close(ctx)
		if left := lab.Leftovers(prefix); len(left) > 0 {
			t.Errorf("leftovers: %v", left)
		}
	})
	outside := prefix + "-out"
	client := outsideHost(t, l, outside)
	pods, err := l.CreatePods(ctx, []cluster.PodSpec{{Name: "s0", Node: "node0"}, {Name: "s1", Node: "node1"}})
	if err != nil {
		t.Fatal(err)
	}
	var eps []proxy.Endpoint
	for _, p := range pods {
		ns, err := l.PodNS(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		serveSource(t, ns, p.Name, 8080)
		eps = append(eps, proxy.Endpoint{IP: p.IP, Port: 8080, Node: p.Node})
	}
	np := func(name string, nodePort int, local bool, eps []proxy.Endpoint) proxy.Service {
		return proxy.Service{Namespace: "cnb", Name: name, ClusterIP: fmt.Sprintf("10.96.0.%d", nodePort-30000), Port: 80, Protocol: "tcp",
			Endpoints: eps, NodePort: nodePort, ExternalLocal: local}
	}
	svcs := []proxy.Service{np("np-cluster", 30080, false, eps), np("np-local", 30081, true, eps), np("np-local-remote", 30082, true, eps[1:])}
	programNodes(t, l, engine, svcs, proxy.Options{ClusterCIDR: "10.244.0.0/16"})

	nodes, err := l.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node0, node1 := nodes[0], nodes[1]
	node0Addrs := nodeAddrs(t, l, node0.Name)

	// (a) Cluster: every endpoint, the client's address replaced by node0's.
	seen, sources := map[string]int{}, map[string]bool{}
	for i := 0; i < 40 && (seen["s0"] == 0 || seen["s1"] == 0); i++ {
		name, src, err := askSource(outside, node0.IP, 30080, 3*time.Second)
		if err != nil {
			t.Fatalf("%s: np-cluster through node0: %v", engine, err)
		}
		seen[name]++
		sources[src] = true
		if !slices.Contains(node0Addrs, src) {
			t.Errorf("%s: np-cluster: %s saw source %s, want one of node0's addresses %v (masqueraded)", engine, name, src, node0Addrs)
		}
	}
	if seen["s0"] == 0 || seen["s1"] == 0 {
		// Each answering none of up to 40 connections at p = 1/2 has probability 2^-39.
		t.Errorf("%s: np-cluster through node0 reached %v, want both endpoints", engine, seen)
	}
	// (b) Local: the node's own endpoint, the client's address kept.
	for _, c := range []struct {
		node     cluster.Node
		nodePort int
		want     string
	}{{node0, 30081, "s0"}, {node1, 30081, "s1"}, {node1, 30082, "s1"}} {
		for i := 0; i < 10; i++ {
			name, src, err := askSource(outside, c.node.IP, c.nodePort, 3*time.Second)
			if err != nil {
				t.Fatalf("%s: NodePort %d through %s: %v", engine, c.nodePort, c.node.Name, err)
			}
			if name != c.want || src != client {
				t.Fatalf("%s: NodePort %d through %s: %s answered, saw source %s; want %s seeing the client %s", engine, c.nodePort, c.node.Name, name, src, c.want, client)
			}
		}
	}
	// (c) Local without an endpoint on node0: dropped there, the client times out.
	if name, src, err := askSource(outside, node0.IP, 30082, time.Second); err == nil {
		t.Errorf("%s: np-local-remote through node0 (no local endpoint) answered by %s (source %s), want dropped", engine, name, src)
	} else if ne := (net.Error)(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%s: np-local-remote through node0: %v, want a timeout (dropped)", engine, err)
	}
	// (d) ... except for pods: their traffic is short-circuited to every endpoint, as if it
	// came back in from an external load balancer (kube-proxy's "pod traffic" rule).
	s0NS, err := l.PodNS("s0")
	if err != nil {
		t.Fatal(err)
	}
	if name, src, err := askSource(s0NS, node0.IP, 30082, 3*time.Second); err != nil || name != "s1" || src != pods[0].IP {
		t.Errorf("%s: np-local-remote from pod s0 through node0: %s answered seeing %s (%v), want s1 seeing %s", engine, name, src, err, pods[0].IP)
	}
	t.Logf("%s/%s: np-cluster through node0 answered by %v, seeing %v; np-local and np-local-remote saw the client %s", dataplane, engine, seen, slices.Sorted(maps.Keys(sources)), client)
}

// outsideHost makes a namespace named name plugged into the lab's underlay bridge (in its
// fabric namespace, as the lab plugs its nodes), with an address of the underlay subnet that
// no node has, and returns that address. The namespace is deleted at the end of the test,
// before the lab.
func outsideHost(t *testing.T, l *lab.Lab, name string) string {
	t.Helper()
	if err := netns.Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(name); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	fab, err := netns.Netlink(l.FabricNS())
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	links, err := fab.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(links, func(l netlink.Link) bool { return l.Type() == "bridge" })
	if i < 0 {
		t.Fatalf("no bridge in %s", l.FabricNS())
	}
	br := links[i]
	addrs, err := fab.AddrList(br, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("underlay bridge address: %v %v", addrs, err)
	}
	gw := addrs[0].IP.To4()
	ip := net.IPv4(gw[0], gw[1], gw[2], 200).To4() // the lab's gateway is .1, its nodes .10 and up
	target, err := vns.GetFromPath(netns.Path(name))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "out", MTU: br.Attrs().MTU, MasterIndex: br.Attrs().Index},
		PeerName: "eth0", PeerNamespace: netlink.NsFd(int(target))}
	if err := fab.LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	if err := fab.LinkSetUp(v); err != nil {
		t.Fatal(err)
	}
	out, err := netns.Netlink(name)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	eth, err := out.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := out.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: addrs[0].Mask}}); err != nil {
		t.Fatal(err)
	}
	if err := out.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	return ip.String()
}

// serveSource listens on port in the namespace ns (the socket stays there, the goroutine
// serving it does not need to) and answers every connection with "<name> <source address>",
// the source being what the endpoint sees. The listener is closed at the end of the test.
func serveSource(t *testing.T, ns, name string, port int) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			src, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s %s\n", name, src)
			c.Close()
		}
	}()
}

// askSource connects from the namespace ns to ip:port and returns the answer of serveSource:
// which endpoint answered and the source address it saw.
func askSource(ns, ip string, port int, timeout time.Duration) (name, src string, err error) {
	var c net.Conn
	err = netns.Do(ns, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(ip, fmt.Sprint(port)), timeout)
		return err
	})
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("connected, no answer: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return "", "", fmt.Errorf("answer %q", line)
	}
	return f[0], f[1], nil
}

// nodeAddrs are the IPv4 addresses of a lab node's namespace: what a connection masqueraded
// by the node may come from.
func nodeAddrs(t *testing.T, l *lab.Lab, node string) []string {
	t.Helper()
	ns, err := l.NodeNS(node)
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.Netlink(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			out = append(out, a.IP.String())
		}
	}
	return out
}
