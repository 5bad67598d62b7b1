package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/runner"
)

// --backend kube,lab plans every group on both backends, the cluster's cases first (the
// reference of the backend comparisons), each resolved by its own backend: the real cluster
// measures its installed data plane whatever preset the group names.
func TestRunOnTwoBackends(t *testing.T) {
	bs, err := parseBackends("kube, lab")
	if err != nil || bs.String() != "kube,lab" {
		t.Fatalf("parseBackends: %v %v", bs, err)
	}
	cases, _, err := expandCases("", map[string]string{"scenario": "p2p", "dataplane": "flannel", "placement": "inter", "protocol": "tcp,rr"}, bs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cs := range cases {
		got = append(got, cs.Case.Backend+" "+cs.Case.ID+" "+cs.Case.CompareKey())
	}
	want := []string{
		"kube p2p/cluster/inter/tcp p2p/inter/tcp",
		"kube p2p/cluster/inter/rr p2p/inter/rr",
		"lab p2p/flannel/inter/tcp p2p/inter/tcp",
		"lab p2p/flannel/inter/rr p2p/inter/rr",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A baseline has the same id on both: a run holds a case once.
	_, _, err = expandCases("", map[string]string{"scenario": "baseline", "dataplane": "node2node", "placement": "inter", "protocol": "tcp"}, bs)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "planned on both the kube and the lab backend") {
		t.Errorf("a baseline on both backends: %v, want a usage error naming both", err)
	}
	for _, bad := range []string{"", "lab,lab", "lab,nosuch"} {
		if _, err := parseBackends(bad); err == nil {
			t.Errorf("parseBackends(%q): no error", bad)
		}
	}
}

// Mistakes with several backends exit 2 before anything is created: an unknown one, one named
// twice, the kube backend without a kubeconfig that loads, resuming a run on other backends.
func TestRunOnTwoBackendsMistakes(t *testing.T) {
	dir := t.TempDir()
	bs, _ := parseBackends("kube,lab")
	cases, _, err := expandCases("", map[string]string{"scenario": "p2p", "dataplane": "flannel", "placement": "inter", "protocol": "tcp"}, bs)
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.SavePlan(dir, "mixed", cases, runner.Settings{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--backend", "lab,nosuch", "--scenario", "p2p"}, `unknown backend "nosuch"`},
		{[]string{"run", "--backend", "lab,lab", "--scenario", "p2p"}, "backend lab named twice"},
		{[]string{"run", "--backend", "kube,lab", "--kubeconfig", filepath.Join(dir, "none"), "--scenario", "p2p", "--out", filepath.Join(dir, "run")}, "--backend kube"},
		{[]string{"run", "--resume", dir, "--backend", "lab"}, "the run is on the kube,lab backend, not lab"},
	} {
		var out bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(tc.args)
		err := root.Execute()
		if fail(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cnibench %s: exit %d (%v), want 2 and an error saying %q", strings.Join(tc.args, " "), fail(err), err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a run refused before it started left %s/run (%v)", dir, err)
	}
}
