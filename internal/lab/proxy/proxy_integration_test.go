package proxy_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/lab/proxy"
)

// TestIPTablesServiceDelivers programs one ClusterIP Service with three endpoints (one on the
// client's node, two on the other) the way kube-proxy's iptables mode does, in both nodes of a
// flannel lab, and fetches through it: every endpoint answers, about a third each, from the
// client (intra and inter node) and from an endpoint itself (hairpin).
func TestIPTablesServiceDelivers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("cnbt%04d", rand.Intn(10000))
	l, err := lab.Up(ctx, lab.Config{Prefix: prefix, Dataplane: "flannel"})
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
	svc := proxy.Service{Namespace: "cnb", Name: "web", ClusterIP: "10.96.0.10", Port: 80, Protocol: "tcp"}
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
	input, _ := proxy.RenderIPTables([]proxy.Service{svc}, proxy.Options{ClusterCIDR: "10.244.0.0/16"})
	for _, n := range []string{"node0", "node1"} {
		ns, err := l.NodeNS(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := lab.InNS(ns, func() error {
			return os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644)
		}); err != nil {
			t.Fatal(err)
		}
		if err := proxy.ApplyIPTables(filepath.Join(lab.NetnsDir, ns), "nft", input); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []string{"c", "s1"} {
		count := map[string]int{}
		const n = 60
		for i := 0; i < n; i++ {
			res, err := l.Exec(ctx, from, []string{"curl", "-s", "--max-time", "3", "http://10.96.0.10/name"})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("from %s, fetch %d: %v exit %d %s", from, i, err, res.ExitCode, res.Stderr)
			}
			count[strings.TrimSpace(string(res.Stdout))]++
		}
		// Each endpoint with p = 1/3 over 60 fetches: mean 20, sd 3.7; below 8 is > 3 sd off.
		for _, s := range []string{"s0", "s1", "s2"} {
			if count[s] < 8 {
				t.Errorf("from %s: %s answered %d of %d fetches (%v), want about a third", from, s, count[s], n, count)
			}
		}
		t.Logf("from %s: %v", from, count)
	}
}
