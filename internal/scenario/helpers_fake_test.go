package scenario_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

// The unit tests of every scenario run on clustertest's fake cluster: no root, no lab, and
// real tool output recorded under internal/driver/testdata.

// fakeCase is a case of a scenario on the fake backend.
func fakeCase(sc, dp, pl, proto string) result.Case {
	c := result.Case{Scenario: sc, Backend: "fake", Dataplane: dp, Placement: pl, Protocol: proto}
	c.ID = c.MakeID()
	return c
}

// setUpOn sets c up on cl with the default pinning (client CPU 0, server CPU 1).
func setUpOn(t *testing.T, cl cluster.Cluster, c result.Case) (scenario.Fixture, error) {
	t.Helper()
	return setUpPinned(t, cl, c, [2]int{0, 1})
}

func setUpPinned(t *testing.T, cl cluster.Cluster, c result.Case, cpus [2]int) (scenario.Fixture, error) {
	t.Helper()
	s, err := scenario.Get(c.Scenario)
	if err != nil {
		t.Fatal(err)
	}
	return s.Setup(context.Background(), cl, c, scenario.Options{CPUs: cpus})
}

// mustSetUp sets c up and fails the test on an error.
func mustSetUp(t *testing.T, cl cluster.Cluster, c result.Case) scenario.Fixture {
	t.Helper()
	f, err := setUpOn(t, cl, c)
	if err != nil {
		t.Fatalf("setup %s: %v", c.ID, err)
	}
	return f
}

// mustTrial runs a one-second trial and fails the test on an error.
func mustTrial(t *testing.T, f scenario.Fixture) scenario.Measurement {
	t.Helper()
	m, err := f.Trial(context.Background(), 1)
	if err != nil {
		t.Fatalf("trial: %v\n%s", err, m.Raw)
	}
	return m
}

// closeEmpty closes the fixture and checks that the fake holds nothing it created.
func closeEmpty(t *testing.T, fc *clustertest.Fake, f scenario.Fixture) {
	t.Helper()
	if err := f.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
	fc.AssertEmpty(t)
}

// lastExec is the last command run in pod whose tool (after taskset) is tool.
func lastExec(t *testing.T, fc *clustertest.Fake, pod, tool string) clustertest.Call {
	t.Helper()
	execs := fc.Execs()
	for i := len(execs) - 1; i >= 0; i-- {
		if c := execs[i]; c.Pod == pod && len(c.Cmd) > 0 && c.Cmd[0] == tool {
			return c
		}
	}
	t.Fatalf("no %s run in %s among %v", tool, pod, execs)
	return clustertest.Call{}
}

// argAfter is the argument after flag in argv.
func argAfter(argv []string, flag string) string {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// historyIndex is the position of the first history line starting with prefix (-1: none).
func historyIndex(fc *clustertest.Fake, prefix string) int {
	return slices.IndexFunc(fc.History(), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// wantMetrics fails the test for each metric missing from m.
func wantMetrics(t *testing.T, m map[string]float64, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, ok := m[n]; !ok {
			t.Errorf("metric %s missing from %v", n, m)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
