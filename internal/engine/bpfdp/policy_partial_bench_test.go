package bpfdp

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/engine/policy"
)

// benchPolicyCluster is BenchmarkLab20kPolicies' load on one node: n silent pods (role=silent,
// n=<j>) with two NetworkPolicies each (ingress from and egress to the client and server
// only), and the client and server, every pod local. The silent pods' addresses follow each
// other from 10.244.0.2; the client's comes after them when clientFirst is false (the order
// the lab's address allocation gives pods created after the silent ones), before them (at
// 10.244.0.1) when true.
func benchPolicyCluster(n int, clientFirst bool) ([]policy.Pod, []policy.Namespace, []networkingv1.NetworkPolicy) {
	nss := []policy.Namespace{{Name: "t", Labels: map[string]string{"kubernetes.io/metadata.name": "t"}}}
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}).String() }
	pods := make([]policy.Pod, 0, n+2)
	for j := range n {
		pods = append(pods, policy.Pod{Name: fmt.Sprintf("s%d", j), Namespace: "t", IP: addr(j + 2),
			Labels: map[string]string{"role": "silent", "n": fmt.Sprint(j)}, Local: true})
	}
	client := addr(n + 2)
	if clientFirst {
		client = addr(1)
	}
	pods = append(pods, policy.Pod{Name: "client", Namespace: "t", IP: client, Labels: map[string]string{"role": "client"}, Local: true},
		policy.Pod{Name: "server", Namespace: "t", IP: addr(n + 3), Labels: map[string]string{"role": "server"}, Local: true})
	pair := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "server"}}}}}}
	pols := make([]networkingv1.NetworkPolicy, 0, 2*n+1)
	for j := range n {
		sel := metav1.LabelSelector{MatchLabels: map[string]string{"n": fmt.Sprint(j)}}
		pols = append(pols,
			networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: fmt.Sprintf("s%d-in", j)}, Spec: networkingv1.NetworkPolicySpec{
				PodSelector: sel, Ingress: []networkingv1.NetworkPolicyIngressRule{{From: pair}}}},
			networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: fmt.Sprintf("s%d-out", j)}, Spec: networkingv1.NetworkPolicySpec{
				PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: pair}}}})
	}
	return pods, nss, pols
}

// clientIn is the policy the benchmark adds: ingress to the client from the client and server,
// which isolates one more pod.
func clientIn() networkingv1.NetworkPolicy {
	pair := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "server"}}}}}}
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "client-in"}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}, Ingress: []networkingv1.NetworkPolicyIngressRule{{From: pair}}}}
}

// BenchmarkPolicyChangeAt20k: 10,000 pods with two NetworkPolicies each (benchPolicyCluster,
// all on the node), compiled, rendered and written whole into two nodes' policy engines
// (first_ms: Compile + RenderBPF + SetPolicy); then one policy added that isolates the client,
// programmed in one node by a full resync (full_ms: Compile + RenderBPF + SetPolicy, every entry
// written again and every map walked) and in the other by a change as the eBPF engines'
// RenderPartial makes it (partial_ms: Compile + RenderBPF + RenumberLike, the rendering
// renumbered like the previous one + DiffBPF against it + ChangePolicy). Also reported: the
// parts (compile_ms, render_ms: done once, counted in both; set_ms, renumber_ms, diff_ms,
// change_ms), the change's size (change_entries), what it would be between RenderBPF's
// renderings without renumbering (plain_entries), and the policy's (entries: IP cache, rules and
// endpoints); the partial node's maps are checked to be those of a node given the renumbered
// policy whole. Sub-benchmarks: client-last (the client's address sorts after the silent
// pods': RenderBPF numbers its endpoint last) and client-first (it sorts before them:
// RenderBPF renumbers every endpoint, so that every rule would move).
//
//	go test -run '^$' -bench PolicyChangeAt20k -benchtime 1x ./internal/engine/bpfdp/
func BenchmarkPolicyChangeAt20k(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (BPF maps)")
	}
	if err := PolicyUsable(); err != nil {
		b.Skip(err)
	}
	const n = 10000
	for _, first := range []bool{false, true} {
		name := "client-last"
		if first {
			name = "client-first"
		}
		b.Run(name, func(b *testing.B) {
			pods, nss, pols := benchPolicyCluster(n, first)
			var firstD, compileD, renderD, setD, renumberD, diffD, changeD time.Duration
			var size, plainSize, entries int
			for range b.N {
				b.StopTimer()
				part, full := scratchNode(b, false), scratchNode(b, false)
				b.StartTimer()
				t0 := time.Now()
				p0, err := policy.Compile(pods, nss, pols)
				if err != nil {
					b.Fatal(err)
				}
				prev, _ := policy.RenderBPF(p0)
				if err := full.SetPolicy(prev); err != nil {
					b.Fatal(err)
				}
				firstD += time.Since(t0)
				b.StopTimer()
				if err := part.SetPolicy(prev); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()

				t0 = time.Now()
				p1, err := policy.Compile(pods, nss, append(pols[:len(pols):len(pols)], clientIn()))
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				rendered, _ := policy.RenderBPF(p1)
				t2 := time.Now()
				if err := full.SetPolicy(rendered); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				next := policy.RenumberLike(prev, rendered)
				t4 := time.Now()
				c := policy.DiffBPF(prev, next)
				t5 := time.Now()
				if err := part.ChangePolicy(c); err != nil {
					b.Fatal(err)
				}
				t6 := time.Now()
				compileD, renderD, setD = compileD+t1.Sub(t0), renderD+t2.Sub(t1), setD+t3.Sub(t2)
				renumberD, diffD, changeD = renumberD+t4.Sub(t3), diffD+t5.Sub(t4), changeD+t6.Sub(t5)
				b.StopTimer()
				size, plainSize = c.Size(), policy.DiffBPF(prev, rendered).Size()
				entries = len(next.IPCache) + len(next.Rules) + len(next.Endpoints)
				if err := full.SetPolicy(next); err != nil { // the renumbered policy whole, to compare
					b.Fatal(err)
				}
				sameMaps(b, "after the change", part, full, polPins...)
				b.Logf("%s: %d endpoints, %d ip cache entries, %d rules; change: %d ip cache written, %d deleted, %d rules added, %d deleted, %d endpoints written, %d deleted (without renumbering: %d entries)",
					name, len(next.Endpoints), len(next.IPCache), len(next.Rules), len(c.IPCache), len(c.GoneIPCache), len(c.Rules), len(c.GoneRules), len(c.Endpoints), len(c.GoneEndpoints), plainSize)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(ms(firstD), "first_ms")
			b.ReportMetric(ms(compileD+renderD+setD), "full_ms")
			b.ReportMetric(ms(compileD+renderD+renumberD+diffD+changeD), "partial_ms")
			b.ReportMetric(ms(compileD), "compile_ms")
			b.ReportMetric(ms(renderD), "render_ms")
			b.ReportMetric(ms(setD), "set_ms")
			b.ReportMetric(ms(renumberD), "renumber_ms")
			b.ReportMetric(ms(diffD), "diff_ms")
			b.ReportMetric(ms(changeD), "change_ms")
			b.ReportMetric(float64(size), "change_entries")
			b.ReportMetric(float64(plainSize), "plain_entries")
			b.ReportMetric(float64(entries), "entries")
			b.ReportMetric(0, "ns/op") // the figures above say it better
		})
	}
}
