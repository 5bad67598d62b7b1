package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/plan"
	"github.com/cnibench/cnibench/internal/runner"
)

// BenchmarkAAPair measures what rounds are for, on this host: two identical copies of
// p2p/flannel/inter/crr and of baseline/bare/intra/tcp, with make demo's trial settings
// (plans/quick.yaml: 3 trials of 1 s, no warm-up), ten runs in rounds and ten in the
// old sequential order, alternating. A copy's paired ratio to its twin must hold 1.0 (no
// difference) in at least 9 of 10 runs in rounds; the sequential figure is reported beside it.
//
//	go test -run '^$' -bench AAPair -benchtime 1x -timeout 60m ./cmd/cnibench/
func BenchmarkAAPair(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (builds labs)")
	}
	runs := 10
	lab, err := cluster.BackendNamed("lab")
	if err != nil {
		b.Fatal(err)
	}
	one, three, two := 1, 3, 2
	groups := []plan.Group{
		{Scenario: "baseline", Dataplane: []string{"bare"}, Placement: []string{"intra"}, Protocol: []string{"tcp"}, Copies: &two},
		{Scenario: "p2p", Dataplane: []string{"flannel"}, Placement: []string{"inter"}, Protocol: []string{"crr"}, Copies: &two},
	}
	for i := range groups {
		groups[i].Repeat, groups[i].Duration, groups[i].Warmup, groups[i].Source = &three, &one, &one, "aa"
	}
	cases, err := plan.Expand(groups, catalog(), "lab", plan.BuiltinDefaults())
	if err != nil {
		b.Fatal(err)
	}
	if cases, err = lab.Resolve(cases); err != nil {
		b.Fatal(err)
	}
	if err := lab.Preflight(context.Background(), cases); err != nil {
		b.Fatal(err)
	}
	held := map[string]int{}
	var lines []string
	for b.Loop() {
		for i := 0; i < runs; i++ {
			for _, order := range []string{runner.OrderRounds, runner.OrderSequential} {
				dir := filepath.Join(b.TempDir(), fmt.Sprintf("%s-%d", order, i))
				sum, err := runner.Run(context.Background(), cases, runner.Options{Dir: dir, RunID: filepath.Base(dir), NewCluster: lab.NewCluster,
					Standing: lab.Standing(), Settings: runner.Settings{Order: order, Seed: int64(i)}})
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range sum.Comparisons {
					if c.Kind != "copy" {
						continue
					}
					key := order + " " + c.Reference
					if !c.Differs() {
						held[key]++
					}
					lines = append(lines, fmt.Sprintf("%-10s run %2d %-32s %.3f [%.3f, %.3f] n=%d%s", order, i+1, c.Reference, c.Ratio, c.CI95Low, c.CI95High, c.N,
						map[bool]string{true: "  DIFFERS", false: ""}[c.Differs()]))
				}
				dist := 0
				for _, r := range sum.Results {
					dist += r.Disturbed
				}
				lines = append(lines, fmt.Sprintf("%-10s run %2d disturbed trials %d", order, i+1, dist))
			}
		}
	}
	// Printed, not logged: a benchmark's log is cut after a few lines.
	fmt.Printf("A/A paired ratios (copy 2 / copy 1):\n%s\n", strings.Join(lines, "\n"))
	for _, id := range []string{"baseline/bare/intra/tcp", "p2p/flannel/inter/crr"} {
		r, s := held[runner.OrderRounds+" "+id], held[runner.OrderSequential+" "+id]
		fmt.Printf("%s: interval holds 1.0 in %d of %d runs in rounds, %d of %d sequential\n", id, r, runs, s, runs)
		name := strings.NewReplacer("/", "-").Replace(id)
		b.ReportMetric(float64(r), "held-rounds-"+name)
		b.ReportMetric(float64(s), "held-seq-"+name)
		if r < 9 {
			b.Errorf("%s: the A/A interval held 1.0 in only %d of %d runs in rounds (want >= 9)", id, r, runs)
		}
	}
}
