package lab

import (
	"context"
	"fmt"
	"github.com/cnibench/cnibench/internal/scenario"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

func TestSilentBlock(t *testing.T) {
	_, cc, _ := net.ParseCIDR("10.244.0.0/16")
	for _, c := range []struct {
		nodes, mask, i int
		want           string
	}{{2, 24, 0, "10.244.128.0/18"}, {2, 24, 1, "10.244.192.0/18"}, {3, 24, 2, "10.244.192.0/19"}, {64, 24, 63, "10.244.254.0/23"}, {2, 22, 1, "10.244.192.0/18"}} {
		if got := silentBlock(cc, c.nodes, c.mask, c.i); got == nil || got.String() != c.want {
			t.Errorf("silentBlock(%d nodes with a /%d, node %d) = %v, want %s", c.nodes, c.mask, c.i, got, c.want)
		}
	}
	_, small, _ := net.ParseCIDR("10.244.0.0/23")
	if b := silentBlock(small, 2, 24, 0); b != nil {
		t.Errorf("a /23 for 2 nodes has no room for silent pods, got %v", b)
	}
	// The lower half holds the pod CIDRs: 64 nodes with a /22 each need more than a /17.
	if b := silentBlock(cc, 64, 22, 0); b != nil {
		t.Errorf("64 nodes with a /22 each leave no room for silent pods in a /16, got %v", b)
	}
	if got := nodePodCIDR(cc, 22, 1).String(); got != "10.244.4.0/22" {
		t.Errorf("node 1's /22 = %s, want 10.244.4.0/22", got)
	}
}

// TestSilentPodsAnswerThroughServices: silent pods are addresses in a per-node holder, yet
// each is a reachable endpoint: 300 silent pods, one Service each, and from a real pod on
// node0 twenty random Services answer with the address of their own endpoint (on node0 and
// node1, so intra and inter node), on a bridge and a routed data plane. Deleting pods and
// Services takes the addresses and rules away.
func TestSilentPodsAnswerThroughServices(t *testing.T) {
	for _, dp := range []string{"flannel", "calico"} {
		t.Run(dp, func(t *testing.T) {
			l := upLab(t, Config{Dataplane: dp})
			ctx := context.Background()
			if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "client", Node: "node0"}); err != nil {
				t.Fatal(err)
			}
			const n = 300
			specs, svcs := scenario.ServicesWithEndpoints(n, "s", nil, 8080)
			start := time.Now()
			pods, err := l.CreatePods(ctx, specs)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d silent pods in %v", n, time.Since(start))
			out, err := l.CreateServices(ctx, svcs)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Programmed(ctx)["proxy_services_count"]; got != n {
				t.Errorf("programmed %v Services, want %d", got, n)
			}
			nodes := map[string]bool{}
			var script strings.Builder
			var want []string
			for _, i := range rand.Perm(n)[:20] {
				if len(out[i].Endpoints) != 1 || out[i].Endpoints[0] != pods[i].IP {
					t.Fatalf("service %d endpoints %v, want [%s]", i, out[i].Endpoints, pods[i].IP)
				}
				nodes[pods[i].Node] = true
				fmt.Fprintf(&script, "curl -s -m 3 http://%s/; ", out[i].ClusterIP)
				want = append(want, pods[i].IP)
			}
			res, err := l.Exec(ctx, "client", []string{"sh", "-c", script.String()})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(string(res.Stdout)); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("answers %v\nwant      %v\nstderr %s", got, want, res.Stderr)
			}
			if !nodes["node0"] || !nodes["node1"] {
				t.Errorf("random endpoints only on %v", nodes)
			}
			// Deleting a silent pod takes its address away: its Service no longer answers.
			if err := l.DeleteServices(ctx, []string{svcs[0].Name}); err != nil {
				t.Fatal(err)
			}
			if err := l.DeletePod(ctx, pods[0].Name); err != nil {
				t.Fatal(err)
			}
			res, err = l.Exec(ctx, "client", []string{"curl", "-s", "-m", "2", "http://" + pods[0].IP + ":8080/"})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode == 0 {
				t.Errorf("deleted silent pod %s still answers: %s", pods[0].IP, res.Stdout)
			}
			if got := l.Programmed(ctx)["proxy_services_count"]; got != n-1 {
				t.Errorf("programmed %v Services after a delete, want %d", got, n-1)
			}
		})
	}
}

// scaleServices creates n silent pods with one Service each in l and returns how long the
// Services took to program (render + apply in every node).
func scaleServices(b *testing.B, l *Lab, n int) time.Duration {
	ctx := context.Background()
	specs, svcs := scenario.ServicesWithEndpoints(n, "s", nil, 8080)
	start := time.Now()
	if _, err := l.CreatePods(ctx, specs); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "pods_s")
	start = time.Now()
	if _, err := l.CreateServices(ctx, svcs); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkLab10kServices: 10,000 Services, each with its own endpoint (a silent pod that
// answers), programmed in both nodes of a flannel lab, per proxy (goal: under 1 s each on 2
// cores; program_s is CreateServices: rendering and applying in both nodes at once; nftables
// 0.64-0.66 s since full renderings go through netlink, 1.79 s with nft -f before; iptables
// 0.80-0.85 s since the endpoint chains go without comments as kube-proxy writes them past
// 1,000 endpoints and the translation marshals in place, 1.0-1.07 s before, paired by hand
// with test binaries of both trees on 2026-12-03; about 0.35 s of a node's share is the
// kernel's work on the transaction). Run:
func BenchmarkLab10kServices(b *testing.B) {
	needRootB(b)
	for _, px := range []string{"iptables", "iptables-legacy", "nftables"} {
		b.Run(px, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				prefix := testPrefix()
				l, err := Up(context.Background(), Config{Prefix: prefix, Dataplane: "flannel", Proxy: px})
				if err != nil {
					b.Fatal(err)
				}
				d := scaleServices(b, l, 10000)
				p := l.Programmed(context.Background())
				b.ReportMetric(d.Seconds(), "program_s")
				// Of program_s: the slowest node's rendering, and the rendering and applying
				// in both nodes (the rest is the lab's bookkeeping of the Services).
				b.ReportMetric(p["proxy_render_ms"]/1000, "render_s")
				b.ReportMetric(p["proxy_program_ms"]/1000, "nodes_s")
				b.ReportMetric(p["proxy_rules_count"], "rules")
				b.ReportMetric(p["proxy_chains_count"], "chains")
				if err := l.Close(context.Background()); err != nil {
					b.Error(err)
				}
			}
		})
	}
}

// ClusterIPs of deleted Services are reused once the range is used up (a long run creates
// many more Services than the range holds, never more at once), oldest first.
func TestClusterIPReuse(t *testing.T) {
	l := &Lab{services: map[string]*service{}}
	seen := map[int]bool{}
	for i := 0; i < 1<<16-11; i++ {
		n, ok := l.allocClusterIP()
		if !ok || seen[n] || n < 10 || n >= 1<<16-1 {
			t.Fatalf("allocation %d: %d %v (seen %v)", i, n, ok, seen[n])
		}
		seen[n] = true
	}
	if _, ok := l.allocClusterIP(); ok {
		t.Fatal("allocated beyond the range")
	}
	l.svcFree = []int{500, 20}
	if n, _ := l.allocClusterIP(); n != 500 {
		t.Errorf("reused %d first, want the oldest freed (500)", n)
	}
	if n, _ := l.allocClusterIP(); n != 20 {
		t.Errorf("reused %d, want 20", n)
	}
}
