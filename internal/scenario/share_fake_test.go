package scenario_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/scenario"
)

// On a shared cluster (kube) the runner keeps the fixtures of every case that scenario.Shares
// standing at once, each with its own name. Every scenario's such cases must then set up side
// by side (no two objects with one name), measure, and each Service must select its own
// fixture's pods only: a Service over another fixture's server would measure the wrong path.
func TestLightFixturesStandTogetherInOneCluster(t *testing.T) {
	ctx := context.Background()
	fc := clustertest.NewBare(clustertest.Config{})
	type standing struct {
		name, id string
		f        scenario.Fixture
	}
	var all []standing
	defer func() {
		for _, s := range all {
			if err := s.f.Close(ctx); err != nil {
				t.Errorf("close %s: %v", s.id, err)
			}
		}
		fc.AssertEmpty(t)
	}()
	for _, name := range scenario.Names() {
		sc, _ := scenario.Get(name)
		info := sc.Info()
		dps := info.DefaultDataplanes
		if len(dps) == 0 {
			dps = []string{"flannel"}
		}
		for _, dp := range dps {
			for _, pl := range info.Placements {
				if info.Valid != nil && !info.Valid(dp, pl) {
					continue
				}
				for _, proto := range info.DefaultProtocols {
					etps := info.DefaultStrs["external-traffic-policy"]
					if len(etps) == 0 {
						etps = []string{""}
					}
					for _, etp := range etps {
						c := fakeCase(name, dp, pl, proto)
						c.ExternalTrafficPolicy = etp
						c.ID = c.MakeID()
						if !scenario.Shares(c) {
							continue
						}
						opt := scenario.Options{CPUs: [2]int{0, 1}, Name: fmt.Sprintf("f%d", len(all))}
						f, err := sc.Setup(ctx, fc, c, opt)
						if errors.Is(err, cluster.ErrUnsupported) {
							continue
						}
						if err != nil {
							t.Fatalf("%s as %s next to %d other fixtures: %v", c.ID, opt.Name, len(all), err)
						}
						all = append(all, standing{opt.Name, c.ID, f})
					}
				}
			}
		}
	}
	if len(all) < 10 {
		t.Fatalf("only %d light fixtures found: the test no longer covers the scenarios", len(all))
	}
	pods := map[string]string{} // pod IP -> pod name
	for _, p := range fc.Pods() {
		pods[p.IP] = p.Name
	}
	services := fc.Services()
	for _, svc := range services {
		owner, _, _ := strings.Cut(svc.Name, "-")
		if len(svc.Endpoints) == 0 {
			t.Errorf("Service %s selects no pod", svc.Name)
		}
		for _, ep := range svc.Endpoints {
			if !strings.HasPrefix(pods[ep], owner+"-") {
				t.Errorf("Service %s of fixture %s selects pod %s (%s) of another fixture", svc.Name, owner, pods[ep], ep)
			}
		}
	}
	if len(services) == 0 {
		t.Fatal("no Service among the standing fixtures: p2s is not covered")
	}
	for _, s := range all {
		if m, err := s.f.Trial(ctx, 1); err != nil {
			t.Errorf("%s (%s) with %d fixtures standing: %v\n%s", s.id, s.name, len(all), err, m.Raw)
		}
	}
}
