package proxy

import (
	"os"
	"testing"
	"time"
)

// partialBenchEngine is a proxy with partial syncs as BenchmarkAddOneAt10k drives it.
type partialBenchEngine struct {
	benchEngine // name, apply, chains (the render there is unused)
	render      func(prev any, svcs []Service, opt Options) ([]byte, any, Counts)
}

func nftPartial(prev any, svcs []Service, opt Options) ([]byte, any, Counts) {
	p, _ := prev.(*NFTState)
	return RenderNFTablesPartial(p, svcs, opt)
}

func iptPartial(prev any, svcs []Service, opt Options) ([]byte, any, Counts) {
	p, _ := prev.(*IPTState)
	return RenderIPTablesPartial(p, svcs, opt)
}

var partialBenchEngines = []partialBenchEngine{
	{benchEngineNamed("iptables-nft"), iptPartial},
	{benchEngineNamed("iptables-legacy"), iptPartial},
	{benchEngineNamed("nftables"), nftPartial},
}

func benchEngineNamed(name string) benchEngine {
	for _, e := range benchEngines {
		if e.name == name {
			return e
		}
	}
	panic("no benchmark engine " + name)
}

// BenchmarkAddOneAt10k programs 10,000 Services with one endpoint each into a fresh namespace
// (a full rendering), then adds one Service with a partial sync (RenderNFTablesPartial,
// RenderIPTablesPartial: only what changed), then one more with a full resync (everything
// rendered and applied again, as the lab's "full" sync mode does), for iptables-nft,
// iptables-legacy and nftables. Reported per iteration: partial_render_s + partial_apply_s
// and full_render_s + full_apply_s for the +1 Service, the partial input's size and what it
// touches (changed), and the first programming (initial_s). The namespace is checked after
// both updates. Each iteration takes seconds:
//
//	go test -run '^$' -bench AddOneAt10k -benchtime 1x ./internal/lab/proxy/
func BenchmarkAddOneAt10k(b *testing.B) {
	for _, e := range partialBenchEngines {
		b.Run(e.name, func(b *testing.B) { benchAddOne(b, e, Options{ClusterCIDR: "10.244.0.0/16"}) })
	}
}

func benchAddOne(b *testing.B, e partialBenchEngine, opt Options) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	svcs := benchSvcs(benchServices + 2)
	var initial, prender, papply, frender, fapply time.Duration
	var size, changed int
	check := func(ns string, c Counts, services int) {
		b.Helper()
		if n, err := e.chains(ns); err != nil || n != c.Chains || c.Services != services {
			b.Fatalf("%d chains installed (%v), rendered %d chains for %d Services", n, err, c.Chains, c.Services)
		}
	}
	for range b.N {
		ns := benchNS(b)
		t0 := time.Now()
		in, st, cnt := e.render(nil, svcs[:benchServices], opt)
		if err := e.apply(ns, in); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		in, st, cnt = e.render(st, svcs[:benchServices+1], opt)
		t2 := time.Now()
		if err := e.apply(ns, in); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		check(ns, cnt, benchServices+1)
		size, changed = len(in), cnt.Changed
		o := opt
		o.Stale = cnt.Names // what the lab passes to a full rendering: the chains it installed
		t4 := time.Now()
		in, _, cnt = e.render(nil, svcs[:benchServices+2], o)
		t5 := time.Now()
		if err := e.apply(ns, in); err != nil {
			b.Fatal(err)
		}
		t6 := time.Now()
		check(ns, cnt, benchServices+2)
		initial += t1.Sub(t0)
		prender, papply = prender+t2.Sub(t1), papply+t3.Sub(t2)
		frender, fapply = frender+t5.Sub(t4), fapply+t6.Sub(t5)
	}
	n := float64(b.N)
	b.ReportMetric(initial.Seconds()/n, "initial_s")
	b.ReportMetric(prender.Seconds()/n, "partial_render_s")
	b.ReportMetric(papply.Seconds()/n, "partial_apply_s")
	b.ReportMetric(frender.Seconds()/n, "full_render_s")
	b.ReportMetric(fapply.Seconds()/n, "full_apply_s")
	b.ReportMetric(float64(size), "partial_input_B")
	b.ReportMetric(float64(changed), "changed")
	b.ReportMetric(0, "ns/op") // the seconds above say it better
}
