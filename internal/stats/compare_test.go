package stats

import (
	"reflect"
	"testing"

	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/result"
)

func labCase(scen, dp, pl, proto string, mod func(*result.Case)) result.Case {
	c := result.Case{Scenario: scen, Backend: "lab", Dataplane: dp, Placement: pl, Protocol: proto, Replicas: 1, MTU: 1500, Nodes: 2}
	if mod != nil {
		mod(&c)
	}
	c.ID = c.MakeID()
	return c
}

func TestCompareKindsAndPairing(t *testing.T) {
	svc := func(n int) func(*result.Case) { return func(c *result.Case) { c.Services = n } }
	cases := []result.Case{
		labCase("baseline", "bare", "intra", "tcp", nil),
		labCase("baseline", "node2node", "inter", "crr", nil),
		labCase("p2p", "flannel", "intra", "tcp", nil),
		labCase("p2p", "calico", "intra", "tcp", nil),
		labCase("p2p", "flannel", "inter", "crr", nil),
		labCase("p2p", "flannel", "inter", "crr", func(c *result.Case) { c.Copy = 2 }),
		labCase("p2s", "flannel", "inter", "crr", svc(1)),
		labCase("p2s", "flannel", "inter", "crr", svc(1000)),
	}
	cases[4].Copy = 1 // the first of two copies
	cases[4].ID = cases[4].MakeID()
	val := map[string]float64{
		cases[0].ID: 20, cases[1].ID: 4000, cases[2].ID: 15, cases[3].ID: 12, cases[4].ID: 3000,
		cases[5].ID: 3000, cases[6].ID: 2000, cases[7].ID: 1000,
	}
	var trials []result.Trial
	for k := 1; k <= 3; k++ {
		for _, c := range cases {
			trials = append(trials, result.Trial{Case: c, Trial: k, Status: "ok", Metrics: map[string]float64{c.Primary(): val[c.ID]}})
		}
	}
	// A warm-up, a disturbed trial and a failed one never pair; a re-run replaces what it re-ran.
	trials = append(trials,
		result.Trial{Case: cases[2], Trial: 0, Warmup: true, Status: "ok", Metrics: map[string]float64{"throughput_bps": 1}},
		result.Trial{Case: cases[3], Trial: 4, Status: "disturbed", Metrics: map[string]float64{"throughput_bps": 1}},
		result.Trial{Case: cases[2], Trial: 4, Status: "ok", Metrics: map[string]float64{"throughput_bps": 15}},
		result.Trial{Case: cases[2], Trial: 3, Status: "failed", Error: "timeout"},
	)
	got := Compare(cases, trials)
	type row struct {
		c, ref, kind string
		n            int
		ratio        float64
	}
	var rows []row
	for _, c := range got {
		rows = append(rows, row{c.Case, c.Reference, c.Kind, c.N, float64(int(c.Ratio*1000+0.5)) / 1000})
	}
	want := []row{
		{cases[2].ID, cases[0].ID, "baseline", 2, 0.75}, // trial 3 failed, trial 4 has no partner
		{cases[3].ID, cases[0].ID, "baseline", 3, 0.6},
		{cases[3].ID, cases[2].ID, "dataplane", 2, 0.8}, // against flannel, the first of its compare key
		{cases[4].ID, cases[1].ID, "baseline", 3, 0.75},
		{cases[5].ID, cases[1].ID, "baseline", 3, 0.75},
		{cases[5].ID, cases[4].ID, "copy", 3, 1},
		{cases[6].ID, cases[1].ID, "baseline", 3, 0.5},
		{cases[7].ID, cases[1].ID, "baseline", 3, 0.25},
		{cases[7].ID, cases[6].ID, "scale", 3, 0.5},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("comparisons\n got %v\nwant %v", rows, want)
	}
}

// Request/response cases are also compared with their baseline on P99 latency; streams are not.
func TestCompareBaselineP99(t *testing.T) {
	nfKind := func(k string) func(*result.Case) {
		return func(c *result.Case) { c.NF, c.ChainLength, c.Rules = k, 1, 10 }
	}
	cases := []result.Case{
		labCase("baseline", "bare", "intra", "rr", nil),
		labCase("baseline", "bare", "intra", "tcp", nil),
		labCase("chain", "bare", "intra", "rr", nfKind("ovs-userspace")),
		labCase("chain", "bare", "intra", "tcp", nfKind("ovs-userspace")),
	}
	var trials []result.Trial
	for k := 1; k <= 4; k++ {
		trials = append(trials,
			result.Trial{Case: cases[0], Trial: k, Status: "ok", Metrics: map[string]float64{"transactions_per_s": 18000, "latency_p99_us": 100}},
			result.Trial{Case: cases[1], Trial: k, Status: "ok", Metrics: map[string]float64{"throughput_bps": 3e10}},
			result.Trial{Case: cases[2], Trial: k, Status: "ok", Metrics: map[string]float64{"transactions_per_s": 9000, "latency_p99_us": 250}},
			result.Trial{Case: cases[3], Trial: k, Status: "ok", Metrics: map[string]float64{"throughput_bps": 6e9}})
	}
	var p99 []result.Comparison
	for _, c := range Compare(cases, trials) {
		if c.Kind == "baseline-p99" {
			p99 = append(p99, c)
		}
	}
	if len(p99) != 1 || p99[0].Case != cases[2].ID || p99[0].Reference != cases[0].ID || p99[0].Metric != "latency_p99_us" || p99[0].N != 4 ||
		p99[0].Ratio < 2.49 || p99[0].Ratio > 2.51 {
		t.Fatalf("P99 comparisons: %+v", p99)
	}
}

// Declared parameters (as the vnf scenario declares its own; internal/scenario is not linked
// here): kinds of a variant parameter are variants named by its key, a scale parameter's
// values a scale against the case without them, on the scenario's primary metric; the
// scenario's rates have no baseline.
func TestCompareVNF(t *testing.T) {
	result.RegisterScenario("vnf", result.Judge{Primary: func(result.Case) string { return "ndr_pps" }, NoBaseline: true})
	param.Register(param.Param{Key: "test-vnf", Label: "test_vnf", Kind: param.Word, ID: "tvnf", Place: param.Variant})
	param.Register(param.Param{Key: "test-noisy", Label: "test_noisy", Max: 64, ID: "tnoisy", Load: true, Compare: param.Scale})
	param.Register(param.Param{Key: "test-ncpu", Label: "test_ncpu", Max: 64000, ID: "tncpu", Compare: param.Scale})
	vnf := func(kind string, noisy, ncpu int) result.Case {
		return labCase("vnf", "flannel", "intra", "gtpu", func(c *result.Case) {
			c.SetWord("test-vnf", kind)
			c.SetInt("test-noisy", noisy)
			c.SetInt("test-ncpu", ncpu)
		})
	}
	cases := []result.Case{vnf("userspace", 0, 0), vnf("kernel", 0, 0), vnf("userspace", 4, 0), vnf("userspace", 4, 250)}
	val := []float64{100, 150, 40, 80}
	var trials []result.Trial
	for k := 1; k <= 3; k++ {
		for i, c := range cases {
			trials = append(trials, result.Trial{Case: c, Trial: k, Status: "ok", Metrics: map[string]float64{"ndr_pps": val[i] + float64(k)}})
		}
	}
	got := map[string]string{}
	for _, c := range Compare(cases, trials) {
		got[c.Case] = c.Kind + " vs " + c.Reference
	}
	want := map[string]string{
		cases[1].ID: "test-vnf vs " + cases[0].ID,
		cases[2].ID: "scale vs " + cases[0].ID,
		cases[3].ID: "scale vs " + cases[0].ID,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("comparisons\n got %v\nwant %v", got, want)
	}
}

// Each lab proxy's full programming of a change is compared with its partial one (kind
// "sync"), and only with it; the proxies are compared with one another within one sync mode.
func TestCompareSync(t *testing.T) {
	result.RegisterScenario("change", result.Judge{Primary: func(result.Case) string { return "add_p50_ms" }, NoBaseline: true})
	change := func(proxy, sync string) result.Case {
		c := labCase("change", "calico", "inter", "tcp", func(c *result.Case) { c.Proxy, c.Sync, c.Change, c.Services = proxy, sync, "service", 10000 })
		c.ID = c.WithParts("proxy") // as a plan naming its proxies makes it
		return c
	}
	cases := []result.Case{change("nftables", "partial"), change("nftables", "full"), change("iptables", "partial"), change("iptables", "full")}
	val := []float64{40, 1300, 1500, 3500}
	var trials []result.Trial
	for k := 1; k <= 3; k++ {
		for i, c := range cases {
			trials = append(trials, result.Trial{Case: c, Trial: k, Status: "ok", Metrics: map[string]float64{"add_p50_ms": val[i] * (1 + float64(k)/100)}})
		}
	}
	got := map[string]bool{}
	for _, c := range Compare(cases, trials) {
		got[c.Kind+" "+c.Case+" vs "+c.Reference] = true
	}
	want := map[string]bool{
		"sync " + cases[1].ID + " vs " + cases[0].ID:  true,
		"sync " + cases[3].ID + " vs " + cases[2].ID:  true,
		"proxy " + cases[2].ID + " vs " + cases[0].ID: true,
		"proxy " + cases[3].ID + " vs " + cases[1].ID: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("comparisons\n got %v\nwant %v", got, want)
	}
}
