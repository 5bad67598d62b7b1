package main

// In-process tests of 'cnibench report' (no root, no binary): the root command is built with
// newRoot, as main does.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/report"
)

// reportFixtures are the report package's fixture runs: a lab run (flannel, calico, baselines)
// and a kube run (the cluster's CNI, node2node, a skipped bare baseline).
var reportFixtures = []string{"../../internal/report/testdata/lab-run", "../../internal/report/testdata/kube-run"}

func runReportCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runInProcess(append([]string{"report"}, args...)...)
}

// runInProcess runs the root command with args in this process, as main does, and returns
// what it printed (stdout and stderr together).
func runInProcess(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestReportTwoRuns(t *testing.T) {
	md := filepath.Join(t.TempDir(), "cmp.md")
	page := filepath.Join(t.TempDir(), "cmp.html")
	out, err := runReportCmd(t, reportFixtures[0], reportFixtures[1], "--markdown", md, "--out", page)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	for _, s := range []string{"lab flannel", "lab calico", "kube cluster (cni calico)", "\np2p\n  intra/tcp  15.00 Gbit/s", "0.68x", "report: " + page + " (and " + md + ")"} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "| p2p/inter/tcp |") || !strings.Contains(string(b), "kube cluster (cni calico)") {
		t.Errorf("markdown:\n%s", b)
	}
	if h, err := os.ReadFile(page); err != nil || !strings.Contains(string(h), `<section id="comparison">`) {
		t.Errorf("%s: %v (want the comparison)", page, err)
	}
	for _, d := range reportFixtures {
		for _, f := range []string{reportFile, reportHTMLFile} {
			if _, err := os.Stat(filepath.Join(d, f)); err == nil {
				t.Errorf("a report of several runs must not write into a run directory: %s", filepath.Join(d, f))
			}
		}
	}
}

func TestReportOneRunWritesReportMD(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(reportFixtures[0], "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runReportCmd(t, dir)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if strings.Contains(out, "kube") || !strings.Contains(out, "lab calico") {
		t.Errorf("one run:\n%s", out)
	}
	if md, err := os.ReadFile(filepath.Join(dir, reportFile)); err != nil || !strings.Contains(string(md), "| p2p/inter/tcp |") {
		t.Errorf("%s: %v\n%s", reportFile, err, md)
	}
	if h, err := os.ReadFile(filepath.Join(dir, reportHTMLFile)); err != nil || !strings.Contains(string(h), `<table class="cases sortable"`) {
		t.Errorf("%s: %v", reportHTMLFile, err)
	}
	js, err := runReportCmd(t, dir, "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep report.JSONReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Runs) != 1 || len(rep.Runs[0].Summary.Results) == 0 {
		t.Errorf("--output json: %v\n%.300s", err, js)
	}
}

func TestReportUsageErrors(t *testing.T) {
	empty := t.TempDir()
	for name, args := range map[string][]string{
		"no summary": {reportFixtures[0], empty},
		"no dir":     {filepath.Join(empty, "nope")},
		"no args":    nil,
		"bad flag":   {reportFixtures[0], "--html"},
	} {
		_, err := runReportCmd(t, args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%s: want a usage error (exit 2), got %v", name, err)
			continue
		}
		if strings.Contains(ue.msg, "\n") {
			t.Errorf("%s: not one line: %q", name, ue.msg)
		}
	}
	_, err := runReportCmd(t, empty)
	want := "report: " + empty + " has no summary.json (is it a cnibench run directory? an interrupted run writes it on --resume)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	if code := execute([]string{"report", empty}); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if _, err := os.Stat(filepath.Join(empty, reportFile)); err == nil {
		t.Errorf("a failed report wrote %s", reportFile)
	}
}
