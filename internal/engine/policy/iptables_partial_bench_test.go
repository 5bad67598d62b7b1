package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// BenchmarkPolicyIPTAddOneAt20k: a node of the lab's p2p-policies load at 20,000 policies
// (10,000 pods, half of them on this node, each isolated both ways by a policy of its own
// admitting a client and a server: 10,000 policy chains and 5,000 pod chains here) is
// programmed in full in a scratch namespace; then one policy is added that isolates one more
// pod, timed as Compile + RenderIPTablesPartial + ApplyIPTablesPartial (partial-ms), and, from
// the same standing rules, as Compile + RenderIPTables + ApplyIPTables (full-ms), with
// iptables-nft and iptables-legacy. Run:
//
//	go test -run '^$' -bench PolicyIPTAddOneAt20k -benchtime 1x ./internal/engine/policy/
func BenchmarkPolicyIPTAddOneAt20k(b *testing.B) {
	pods, nss, pols := iptScaleCluster(10000, 20000, func(i int) bool { return i%2 == 0 })
	added := append(slices.Clone(pols), iptExtraPolicy())
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, backend := range []string{"nft", "legacy"} {
		b.Run(backend, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ns, del := netnstest.Scratch(b)
				base, err := Compile(pods, nss, pols)
				if err != nil {
					b.Fatal(err)
				}
				first, state, _ := RenderIPTablesPartial(nil, base)
				t := time.Now()
				if err := ApplyIPTablesPartial(ns, backend, first); err != nil {
					b.Fatal(err)
				}
				standing := time.Since(t)

				// Partial.
				b.StartTimer()
				t0 := time.Now()
				prog, err := Compile(pods, nss, added)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				r, _, cnt := RenderIPTablesPartial(state, prog)
				t2 := time.Now()
				if err := ApplyIPTablesPartial(ns, backend, r); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				b.StopTimer()
				chain := PodChainName("t", "extra")
				if save := iptPartialRun(b, ns, nil, "iptables-"+backend+"-save", "-t", "filter"); !strings.Contains(save, "-j "+chain+"\n") {
					b.Fatalf("the partial change did not install %s", chain)
				}

				// Full, from the same standing rules.
				if err := ApplyIPTablesPartial(ns, backend, first); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t4 := time.Now()
				prog, err = Compile(pods, nss, added)
				if err != nil {
					b.Fatal(err)
				}
				t5 := time.Now()
				sets, filter, _ := RenderIPTables(prog)
				t6 := time.Now()
				if err := ApplyIPTables(ns, backend, sets, filter); err != nil {
					b.Fatal(err)
				}
				t7 := time.Now()
				b.StopTimer()
				del()

				b.ReportMetric(ms(t3.Sub(t0)), "partial-ms")
				b.ReportMetric(ms(t3.Sub(t2)), "partial-apply-ms")
				b.ReportMetric(ms(t2.Sub(t1)), "partial-render-ms")
				b.ReportMetric(ms(t7.Sub(t4)), "full-ms")
				b.ReportMetric(ms(t7.Sub(t6)), "full-apply-ms")
				b.ReportMetric(ms(t6.Sub(t5)), "full-render-ms")
				b.ReportMetric(ms(t1.Sub(t0)), "compile-ms")
				b.ReportMetric(float64(cnt.Changed), "changed")
				b.ReportMetric(float64(len(r.Filter)), "partial-filter-bytes")
				b.ReportMetric(float64(len(filter)), "full-filter-bytes")
				b.Logf("%s: standing rules applied in %v; %d rules, %d chains; partial %.1f ms (apply %.1f), full %.1f ms (apply %.1f)",
					backend, standing.Round(time.Millisecond), cnt.Rules, cnt.Policies+cnt.PodChains,
					ms(t3.Sub(t0)), ms(t3.Sub(t2)), ms(t7.Sub(t4)), ms(t7.Sub(t6)))
			}
		})
	}
}
