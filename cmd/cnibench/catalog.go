package main

import (
	"runtime"

	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/plan"
	"github.com/cnibench/cnibench/internal/scenario"
)

// catalog tells the plan what scenarios, dataplanes and protocols exist.
func catalog() plan.Catalog {
	cat := plan.Catalog{Scenarios: map[string]plan.ScenarioInfo{}, Dataplanes: lab.PresetNames(), NumCPU: runtime.NumCPU(),
		Proxies: lab.Proxies, Policies: lab.PolicyEngines,
		Tools: func(p string) string {
			d, err := driver.For(p)
			if err != nil {
				return ""
			}
			return d.Name()
		}}
	for _, n := range scenario.Names() {
		sc, _ := scenario.Get(n)
		i := sc.Info()
		cat.Scenarios[n] = plan.ScenarioInfo{Dataplanes: i.Dataplanes, DefaultDataplanes: i.DefaultDataplanes,
			Placements: i.Placements, Protocols: i.Protocols, DefaultProtocols: i.DefaultProtocols, Params: i.Params, Valid: i.Valid}
	}
	return cat
}
