package policy

import (
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// BenchmarkPolicyAddOneAt20k: a node's nftables table holds 10,000 pods (half of them local)
// with two policies each (ingress from / egress to a client and server pair:
// BenchmarkLab20kPolicies's load); one policy is added that isolates one more pod (the
// client). Timed: Compile + RenderNFTablesPartial + ApplyNFTables of the change, and, from
// the same table, Compile + RenderNFTables + ApplyNFTables (a full sync of the same change).
// Run as root:
//
//	go test -run '^$' -bench PolicyAddOneAt20k -benchtime 1x ./internal/engine/policy/
func BenchmarkPolicyAddOneAt20k(b *testing.B) {
	nsp, _ := netnstest.Scratch(b)
	pods, nss, pols, extra := nftpStandingCluster(10000, 20000)
	with := append(slices.Clone(pols), extra)
	compile := func(pols []networkingv1.NetworkPolicy) *Program {
		p, err := Compile(pods, nss, pols)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	base := compile(pols)
	baseFull, baseState, baseCnt := RenderNFTablesPartial(nil, base)
	apply := func(in []byte, what string) time.Duration {
		t0 := time.Now()
		if err := ApplyNFTables(nsp, in); err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		return time.Since(t0)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }

	var pCompile, pRender, pApply, fCompile, fRender, fApply, firstApply time.Duration
	var inBytes, changed int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		firstApply += apply(baseFull, "full rendering of the standing policies")
		b.StartTimer()

		t0 := time.Now()
		p := compile(with)
		t1 := time.Now()
		in, _, cnt := RenderNFTablesPartial(baseState, p)
		t2 := time.Now()
		pCompile, pRender = pCompile+t1.Sub(t0), pRender+t2.Sub(t1)
		pApply += apply(in, "partial rendering")
		inBytes, changed = len(in), cnt.Changed

		b.StopTimer()
		apply(baseFull, "full rendering of the standing policies") // the same table again
		b.StartTimer()

		t0 = time.Now()
		p = compile(with)
		t1 = time.Now()
		full, _ := RenderNFTables(p)
		t2 = time.Now()
		fCompile, fRender = fCompile+t1.Sub(t0), fRender+t2.Sub(t1)
		fApply += apply(full, "full rendering")
	}
	b.StopTimer()
	b.ReportMetric(ms(pCompile+pRender+pApply), "partial-ms")
	b.ReportMetric(ms(fCompile+fRender+fApply), "full-ms")
	b.ReportMetric(ms(pCompile), "partial-compile-ms")
	b.ReportMetric(ms(pRender), "partial-render-ms")
	b.ReportMetric(ms(pApply), "partial-apply-ms")
	b.ReportMetric(ms(fCompile), "full-compile-ms")
	b.ReportMetric(ms(fRender), "full-render-ms")
	b.ReportMetric(ms(fApply), "full-apply-ms")
	b.ReportMetric(float64(inBytes), "partial-bytes")
	b.ReportMetric(float64(changed), "changed")
	b.Logf("standing: %+v (first apply %.0f ms); partial input %d bytes, %d changes", baseCnt, ms(firstApply), inBytes, changed)
}
