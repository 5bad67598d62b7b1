package proxy_test

import (
	"context"
	"fmt"
	"github.com/cnibench/cnibench/internal/netns"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/proxy"
	"github.com/cnibench/cnibench/internal/lab"
)

// TestIPTablesServiceDelivers programs one ClusterIP Service with three endpoints (one on the
// client's node, two on the other) the way kube-proxy's iptables mode does, in both nodes of a
// flannel lab and of a calico lab, and fetches through it: from the client (intra and inter
// node) and from an endpoint itself (hairpin), every fetch is answered and each endpoint
// answers about a third of them (binomial bounds, see distribution).
func TestIPTablesServiceDelivers(t *testing.T) {
	for _, dp := range []string{"flannel", "calico"} {
		t.Run(dp, func(t *testing.T) { serviceDelivers(t, dp, "iptables") })
	}
}

// TestNFTablesServiceDelivers is TestIPTablesServiceDelivers with kube-proxy's nftables mode
// (one nft transaction per node), plus what only that rendering does: a Service without
// endpoints and a ClusterIP port the Service does not have are rejected at once.
func TestNFTablesServiceDelivers(t *testing.T) {
	for _, dp := range []string{"flannel", "calico"} {
		t.Run(dp, func(t *testing.T) { serviceDelivers(t, dp, "nftables") })
	}
}

const (
	fetches = 300
	// falseFailure bounds the probability that a correct proxy fails a test function: it is
	// shared (union bound) by the 2 sources x 3 endpoints whose counts are checked.
	falseFailure = 1e-4
	checks       = 2 * 3
)

// binomialPMF is P(X = k) for X ~ Binomial(n, p), computed in log space.
func binomialPMF(n int, p float64, k int) float64 {
	lgN, _ := math.Lgamma(float64(n + 1))
	a, _ := math.Lgamma(float64(k + 1))
	b, _ := math.Lgamma(float64(n - k + 1))
	return math.Exp(lgN - a - b + float64(k)*math.Log(p) + float64(n-k)*math.Log1p(-p))
}

// binomialBounds returns the acceptance interval [lo, hi] for X ~ Binomial(n, p): the
// tightest one with P(X < lo) <= alpha/2 and P(X > hi) <= alpha/2, summed exactly.
func binomialBounds(n int, p, alpha float64) (lo, hi int) {
	tail := 0.0
	for lo = 0; tail+binomialPMF(n, p, lo) <= alpha/2; lo++ {
		tail += binomialPMF(n, p, lo)
	}
	tail = 0
	for hi = n; tail+binomialPMF(n, p, hi) <= alpha/2; hi-- {
		tail += binomialPMF(n, p, hi)
	}
	return lo, hi
}

// TestBinomialBounds checks the acceptance interval of the distribution tests: each tail it
// leaves is within the level, and one step tighter would not be.
func TestBinomialBounds(t *testing.T) {
	alpha := falseFailure / checks
	lo, hi := binomialBounds(fetches, 1.0/3, alpha)
	below, atLo, above, atHi := 0.0, 0.0, 0.0, 0.0
	for k := 0; k <= fetches; k++ {
		pk := binomialPMF(fetches, 1.0/3, k)
		switch {
		case k < lo:
			below += pk
		case k == lo:
			atLo = pk
		}
		switch {
		case k > hi:
			above += pk
		case k == hi:
			atHi = pk
		}
	}
	if below > alpha/2 || above > alpha/2 || below+atLo <= alpha/2 || above+atHi <= alpha/2 {
		t.Errorf("[%d, %d]: P(X<lo)=%.3g P(X>hi)=%.3g, P(X<=lo)=%.3g P(X>=hi)=%.3g, level %.3g each", lo, hi, below, above, below+atLo, above+atHi, alpha/2)
	}
	// Mean 100, sd 8.16: the interval is about 4.3 sd wide on each side.
	if lo < 60 || lo > 70 || hi < 130 || hi > 140 {
		t.Errorf("bounds [%d, %d] for Bin(300, 1/3)", lo, hi)
	}
	t.Logf("Bin(%d, 1/3): each count in [%d, %d]; P(outside) = %.3g per endpoint, <= %.0e per test (%d counts)", fetches, lo, hi, below+above, falseFailure, checks)
}

func serviceDelivers(t *testing.T, dataplane, engine string) {
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
	specs := []cluster.PodSpec{{Name: "c", Node: "node0"}, {Name: "s0", Node: "node0"}, {Name: "s1", Node: "node1"}, {Name: "s2", Node: "node1"}}
	pods, err := l.CreatePods(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	const vip = "10.96.0.10"
	svc := proxy.Service{Namespace: "cnb", Name: "web", ClusterIP: vip, Port: 80, Protocol: "tcp"}
	empty := proxy.Service{Namespace: "cnb", Name: "empty", ClusterIP: "10.96.0.11", Port: 80, Protocol: "tcp"}
	for _, p := range pods[1:] {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "name"), []byte(p.Name), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Start(ctx, p.Name, []string{"busybox", "httpd", "-f", "-p", "8080", "-h", dir}, cluster.Ready{TCPPort: 8080}); err != nil {
			t.Fatal(err)
		}
		svc.Endpoints = append(svc.Endpoints, proxy.Endpoint{IP: p.IP, Port: 8080})
	}
	svcs := []proxy.Service{svc, empty}
	opt := proxy.Options{ClusterCIDR: "10.244.0.0/16"}
	programNodes(t, l, engine, svcs, opt)
	for _, n := range []string{"node0", "node1"} {
		ns, err := l.NodeNS(n)
		if err != nil {
			t.Fatal(err)
		}
		path := netns.Path(ns)
		if engine == "nftables" {
			// The Services are in the kube-proxy table, and in no iptables chain.
			out, err := exec.Command("nsenter", "--net="+path, "nft", "list", "map", "ip", proxy.NFTable, "service-ips").CombinedOutput()
			if err != nil || !strings.Contains(string(out), vip+" . tcp . 80") {
				t.Fatalf("service-ips in %s: %v\n%s", n, err, out)
			}
			if out, _ := exec.Command("nsenter", "--net="+path, "iptables-save", "-t", "nat").CombinedOutput(); strings.Contains(string(out), "KUBE-SVC") {
				t.Fatalf("iptables Service chains in %s:\n%s", n, out)
			}
		}
	}
	lo, hi := binomialBounds(fetches, 1.0/3, falseFailure/checks)
	for _, from := range []string{"c", "s1"} { // s1 fetching from itself is the hairpin case
		count, failed, err := fetchMany(ctx, l, from, "http://"+vip+":80/name", fetches)
		if err != nil {
			t.Fatal(err)
		}
		if failed > 0 {
			t.Errorf("%s from %s: %d of %d fetches failed (%v)", engine, from, failed, fetches, count)
		}
		for _, s := range []string{"s0", "s1", "s2"} {
			if count[s] < lo || count[s] > hi {
				t.Errorf("%s from %s: %s answered %d of %d fetches (%v), want %d..%d (a third, binomial bounds at %.2g)",
					engine, from, s, count[s], fetches, count, lo, hi, falseFailure/checks)
			}
		}
		if from == "s1" && count["s1"] == 0 {
			t.Errorf("%s: hairpin (s1 reaching itself through the Service) never worked", engine)
		}
		t.Logf("%s/%s from %s: %v (accepted %d..%d each)", dataplane, engine, from, count, lo, hi)
	}
	if engine != "nftables" {
		return
	}
	// A new rendering replacing the table (as the lab programs every change) takes s0 out: it
	// gets no new connections, the two others share them (each answering none of 30 at p = 1/2
	// has probability 2^-29).
	less := svc
	less.Endpoints = svc.Endpoints[1:]
	upd, _ := proxy.RenderNFTables([]proxy.Service{less, empty}, opt)
	for _, n := range []string{"node0", "node1"} {
		ns, _ := l.NodeNS(n)
		if err := proxy.ApplyNFTables(netns.Path(ns), upd); err != nil {
			t.Fatalf("update in %s: %v", n, err)
		}
	}
	count, failed, err := fetchMany(ctx, l, "c", "http://"+vip+":80/name", 30)
	if err != nil {
		t.Fatal(err)
	}
	if failed > 0 || count["s0"] > 0 || count["s1"] == 0 || count["s2"] == 0 {
		t.Errorf("after removing s0 by an update: %v, %d failed", count, failed)
	}
	// kube-proxy's nftables mode rejects what it cannot serve instead of letting it time out.
	for _, url := range []string{"http://10.96.0.11:80/name", "http://" + vip + ":81/name"} {
		start := time.Now()
		res, err := l.Exec(ctx, "c", []string{"curl", "-sSv", "--max-time", "5", url})
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		// ICMP port unreachable makes connect fail with ECONNREFUSED (a missing route would
		// be EHOSTUNREACH, a drop a timeout).
		if res.ExitCode == 0 || took > 2*time.Second || !strings.Contains(string(res.Stderr), "Connection refused") {
			t.Errorf("%s: exit %d after %v, want connection refused at once:\n%s", url, res.ExitCode, took.Round(time.Millisecond), res.Stderr)
		}
	}
}

// programNodes renders svcs with engine for every node of l (opt with the node's name and
// address) and applies it there, after readying bridged pods' traffic for the IP hooks.
func programNodes(t *testing.T, l *lab.Lab, engine string, svcs []proxy.Service, opt proxy.Options) {
	t.Helper()
	nodes, err := l.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		ns, err := l.NodeNS(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Parts().Attach.Name() == "bridge" {
			// Bridged replies of DNATed pod-to-pod connections must pass the IP hooks.
			if err := netns.Do(ns, func() error {
				return os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644)
			}); err != nil {
				t.Fatal(err)
			}
		}
		o := opt
		o.NodeName, o.NodeIPs = n.Name, []string{n.IP}
		if engine == "nftables" {
			input, _ := proxy.RenderNFTables(svcs, o)
			err = proxy.ApplyNFTables(netns.Path(ns), input)
		} else {
			input, _ := proxy.RenderIPTables(svcs, o)
			err = proxy.ApplyIPTables(netns.Path(ns), "nft", "", input)
		}
		if err != nil {
			t.Fatalf("%s in %s: %v", engine, n.Name, err)
		}
	}
}

// fetchMany fetches url n times from a pod in one shell loop (one process per fetch, so one
// connection per fetch) and counts the answers; a failed fetch prints a marker line.
func fetchMany(ctx context.Context, l *lab.Lab, pod, url string, n int) (map[string]int, int, error) {
	// (busybox wget -T segfaults in Debian 12's busybox 1.35, hence curl.)
	script := fmt.Sprintf(`for i in $(seq %d); do curl -s --max-time 3 %s || printf FAILED; echo; done`, n, url)
	res, err := l.Exec(ctx, pod, []string{"sh", "-c", script})
	if err != nil {
		return nil, 0, err
	}
	if res.ExitCode != 0 {
		return nil, 0, fmt.Errorf("fetch loop in %s: exit %d: %s", pod, res.ExitCode, res.Stderr)
	}
	count, failed := map[string]int{}, 0
	lines := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
	if len(lines) != n {
		return nil, 0, fmt.Errorf("fetch loop in %s: %d answers for %d fetches", pod, len(lines), n)
	}
	for _, line := range lines {
		if strings.Contains(line, "FAILED") {
			failed++
			continue
		}
		count[strings.TrimSpace(line)]++
	}
	return count, failed, nil
}
