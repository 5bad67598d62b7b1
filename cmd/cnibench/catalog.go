package main

import (
	"runtime"
	"slices"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
	"github.com/cnibench/cnibench/internal/nf"
	_ "github.com/cnibench/cnibench/internal/nf/kinds" // every network-function kind
	"github.com/cnibench/cnibench/internal/plan"
	"github.com/cnibench/cnibench/internal/scenario"
)

// catalog tells the plan what scenarios, dataplanes, protocols and data-plane parts exist: the
// scenario registry, every backend's dataplanes (the same plan runs on each) and the lab's
// engine registries.
func catalog() plan.Catalog {
	cat := plan.Catalog{Scenarios: map[string]scenario.Info{}, NumCPU: runtime.NumCPU(),
		Words: map[string][]string{"proxy": dataplane.Proxies(), "policy": dataplane.PolicyEngines(), "nf": nf.Names(),
			"change": scenario.ChangeKinds()},
		Tools: func(p string) string {
			d, err := driver.For(p)
			if err != nil {
				return ""
			}
			return d.Name()
		}}
	for _, b := range cluster.Backends() {
		for _, d := range b.Dataplanes() {
			if !slices.Contains(cat.Dataplanes, d) {
				cat.Dataplanes = append(cat.Dataplanes, d)
			}
		}
	}
	for _, n := range scenario.Names() {
		sc, _ := scenario.Get(n)
		cat.Scenarios[n] = sc.Info()
	}
	return cat
}
