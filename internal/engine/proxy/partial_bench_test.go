package proxy

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cpupin"
	"github.com/cnibench/cnibench/internal/nftnl"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"

	"github.com/cnibench/cnibench/internal/stats"
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
//	go test -run '^$' -bench AddOneAt10k -benchtime 1x ./internal/engine/proxy/
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

// BenchmarkNFTNetlinkVsNft adds one Service to 10,000 (a partial rendering) and removes it
// again, through netlink (applyNFTNetlink, what ApplyNFTables does with a partial input) and
// through `nft -f`, the two ways alternating which goes first, in one namespace. Reported: the
// mean times, and nft's over netlink's paired by iteration with its 95 % interval (ratio_lo,
// ratio_hi), for the addition and the removal:
//
//	go test -run '^$' -bench NFTNetlinkVsNft -benchtime 20x ./internal/engine/proxy/
func BenchmarkNFTNetlinkVsNft(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ns := benchNS(b)
	opt := Options{ClusterCIDR: "10.244.0.0/16"}
	svcs := benchSvcs(benchServices + 1)
	in, st, _ := RenderNFTablesPartial(nil, svcs[:benchServices], opt)
	if err := ApplyNFTables(ns, in); err != nil {
		b.Fatal(err)
	}
	add, st2, _ := RenderNFTablesPartial(st, svcs, opt)
	del, _, _ := RenderNFTablesPartial(st2, svcs[:benchServices], opt)
	ways := map[string]func([]byte) error{
		"netlink": func(in []byte) error { return applyNFTNetlink(ns, in) },
		"nft":     func(in []byte) error { return run(ns, "nft", []string{"-f", "-"}, in) },
	}
	took := map[string]map[int]float64{} // "<way> add|remove" -> iteration -> ms
	for i := range b.N {
		order := []string{"netlink", "nft"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, w := range order {
			for _, step := range []struct {
				what string
				in   []byte
			}{{"add", add}, {"remove", del}} {
				t0 := time.Now()
				if err := ways[w](step.in); err != nil {
					b.Fatalf("%s %s: %v", w, step.what, err)
				}
				k := w + " " + step.what
				if took[k] == nil {
					took[k] = map[int]float64{}
				}
				took[k][i] = float64(time.Since(t0).Microseconds()) / 1000
			}
		}
	}
	for _, what := range []string{"add", "remove"} {
		for _, w := range []string{"netlink", "nft"} {
			sum := 0.0
			for _, v := range took[w+" "+what] {
				sum += v
			}
			b.ReportMetric(sum/float64(b.N), what+"_"+w+"_ms")
		}
		r := stats.PairedRatio(took["nft "+what], took["netlink "+what])
		b.ReportMetric(r.Ratio, what+"_nft/netlink")
		b.ReportMetric(r.CI95Low, what+"_ratio_lo")
		b.ReportMetric(r.CI95High, what+"_ratio_hi")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkNFTFullNetlinkVsNft programs the full rendering of 10,000 Services (one endpoint
// each) into fresh namespaces with `nft -f` and through netlink (applyNFTNetlink: one
// transaction, one sendmsg), on one namespace and on two at once (the lab's two nodes, each
// programmed by its own process or goroutine), the ways alternating which goes first.
// Reported: the mean times (s), nft's over netlink's paired by iteration with its 95 %
// interval, and the netlink path's parts on one namespace: translating the text, marshalling
// the messages, and sending them (the kernel's work happens inside the sendmsg). The "lab"
// case is what the lab's CreateServices does for its two nodes at once: each node's agent,
// pinned to its CPU (cpupin.Run, CPUs 0 and 1), renders the node's full rendering and
// applies it (internal/lab BenchmarkLab10kServices, program_s, measures the same without
// the pairing):
//
//	go test -run '^$' -bench NFTFullNetlinkVsNft -benchtime 6x ./internal/engine/proxy/
func BenchmarkNFTFullNetlinkVsNft(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	svcs := benchSvcs(benchServices)
	in, _ := RenderNFTables(svcs, Options{ClusterCIDR: "10.244.0.0/16"})
	ways := map[string]func(ns string, in []byte) error{
		"netlink": applyNFTNetlink,
		"nft":     func(ns string, in []byte) error { return run(ns, "nft", []string{"-f", "-"}, in) },
	}
	took := map[string]map[int]float64{} // "<way> 1|2" -> iteration -> s
	var parse, marshal, send float64
	for i := range b.N {
		order := []string{"netlink", "nft"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, w := range order {
			for _, nodes := range []int{1, 2} {
				nss := make([]string, nodes)
				for j := range nss {
					nss[j] = benchNS(b)
				}
				errs := make(chan error, nodes)
				t0 := time.Now()
				for _, ns := range nss {
					go func() { errs <- ways[w](ns, in) }()
				}
				for range nss {
					if err := <-errs; err != nil {
						b.Fatalf("%s on %d namespaces: %v", w, nodes, err)
					}
				}
				k := fmt.Sprintf("%s %d", w, nodes)
				if took[k] == nil {
					took[k] = map[int]float64{}
				}
				took[k][i] = time.Since(t0).Seconds()
			}
		}
		for _, w := range order {
			nss := []string{benchNS(b), benchNS(b)}
			errs := make(chan error, 2)
			t0 := time.Now()
			for j, ns := range nss {
				go func() {
					errs <- cpupin.Run(j, func() error {
						opt := Options{ClusterCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", NodeName: fmt.Sprintf("node%d", j), NodeIPs: []string{fmt.Sprintf("172.30.0.%d", 10+j)}}
						in, _ := RenderNFTables(svcs, opt)
						return ways[w](ns, in)
					})
				}()
			}
			for range nss {
				if err := <-errs; err != nil {
					b.Fatalf("%s in the lab's way: %v", w, err)
				}
			}
			k := w + " lab"
			if took[k] == nil {
				took[k] = map[int]float64{}
			}
			took[k][i] = time.Since(t0).Seconds()
		}
		tr, ma, se := nftnltest.Parts(b, benchNS(b), func() (*nftnl.Batch, error) {
			bt := nftnl.New(NFTable)
			for line := range strings.SplitSeq(strings.TrimSpace(string(in)), "\n") {
				if err := command(bt, line); err != nil {
					return nil, err
				}
			}
			return bt, nil
		})
		parse, marshal, send = parse+tr, marshal+ma, send+se
	}
	n := float64(b.N)
	for _, nodes := range []int{1, 2} {
		for _, w := range []string{"netlink", "nft"} {
			sum := 0.0
			for _, v := range took[fmt.Sprintf("%s %d", w, nodes)] {
				sum += v
			}
			b.ReportMetric(sum/n, fmt.Sprintf("%s_%dns_s", w, nodes))
		}
		r := stats.PairedRatio(took[fmt.Sprintf("nft %d", nodes)], took[fmt.Sprintf("netlink %d", nodes)])
		b.ReportMetric(r.Ratio, fmt.Sprintf("nft/netlink_%dns", nodes))
		b.ReportMetric(r.CI95Low, fmt.Sprintf("ratio_lo_%dns", nodes))
		b.ReportMetric(r.CI95High, fmt.Sprintf("ratio_hi_%dns", nodes))
	}
	sum := map[string]float64{}
	for _, w := range []string{"netlink", "nft"} {
		for _, v := range took[w+" lab"] {
			sum[w] += v
		}
		b.ReportMetric(sum[w]/n, "lab_"+w+"_s")
	}
	r := stats.PairedRatio(took["nft lab"], took["netlink lab"])
	b.ReportMetric(r.Ratio, "nft/netlink_lab")
	b.ReportMetric(r.CI95Low, "ratio_lo_lab")
	b.ReportMetric(r.CI95High, "ratio_hi_lab")
	b.ReportMetric(parse/n, "nl_translate_s")
	b.ReportMetric(marshal/n, "nl_marshal_s")
	b.ReportMetric(send/n, "nl_send_s")
	b.ReportMetric(0, "ns/op")
}
