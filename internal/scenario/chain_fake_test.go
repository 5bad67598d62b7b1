package scenario_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

func chainCase(proto string, rules int) result.Case {
	c := fakeCase("chain", "bare", "intra", proto)
	c.NF, c.ChainLength, c.Rules = "route-iptables", 2, rules
	c.ID = c.MakeID()
	return c
}

// A backend that cannot build chains skips them with a reason naming it, creating nothing.
func TestChainUnsupportedWithoutChainer(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Backend: "kube", Dataplane: "cluster"}})
	_, err := setUpOn(t, fc, chainCase("tcp", 10))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "backend kube cannot build service-function chains") {
		t.Fatalf("got %v", err)
	}
	if h := fc.History(); len(h) != 0 {
		t.Errorf("created %v", h)
	}
}

// A rule count below what the measured flow needs is bad input, named with the fix.
func TestChainCheckRules(t *testing.T) {
	sc, _ := scenario.Get("chain")
	if err := sc.Info().Check(chainCase("rr", 5)); err == nil || !strings.Contains(err.Error(), "rules 5: the rr flow alone needs 6 allow rules") {
		t.Errorf("rr with 5 rules: %v", err)
	}
	if err := sc.Info().Check(chainCase("tcp", 4)); err != nil {
		t.Errorf("tcp with 4 rules: %v", err)
	}
	if !sc.Info().Exclusive(chainCase("tcp", 10)) {
		t.Error("chains must not share their cluster")
	}
}
