package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// TestSeedPlanCI runs plans/seed-001-ci.yaml (seed 001's matrix at CI scale) on the lab: every
// case is measured, except p2p-policies on Flannel, which enforces no policy and is skipped
// with that reason; the scale figures recorded with each case match what was asked for.
func TestSeedPlanCI(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "seed")
	plan, err := filepath.Abs("../../plans/seed-001-ci.yaml")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	r := runCnb(t, runOpts{timeout: 15 * time.Minute}, "run", "--plan", plan, "--max-steal=-1", "--out", out)
	t.Logf("plans/seed-001-ci.yaml in %s\n%s", time.Since(start).Round(time.Second), r.stdout)
	if r.code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", r.code, r.stderr)
	}
	sum, err := result.ReadSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Results) != 40 {
		t.Errorf("%d cases, want 40", len(sum.Results))
	}
	checkSeedReport(t, out, r.stdout)
	for _, c := range sum.Results {
		id := c.Case.ID
		mean := func(k string) float64 { return c.Metrics[k].Mean }
		if c.Case.Scenario == "p2p-policies" && c.Case.Dataplane == "flannel" {
			if c.Status != "skipped" || !strings.Contains(c.Reason, "enforces no NetworkPolicy") {
				t.Errorf("%s: %s (%s), want skipped: flannel enforces no NetworkPolicy", id, c.Status, c.Reason)
			}
			continue
		}
		if c.Status != "ok" {
			t.Errorf("%s: %s (%s)", id, c.Status, c.Reason)
			continue
		}
		switch c.Case.Scenario {
		case "p2s":
			// The measured Service has a port per protocol of its tool, each extra one port.
			if got, want := mean("proxy_services_count"), float64(c.Case.Services-1+2); got < want {
				t.Errorf("%s: %v Service ports programmed, want >= %v", id, got, want)
			}
		case "p2p-policies":
			if got, want := mean("policy_count"), float64(2*c.Case.Pods+2); got != want {
				t.Errorf("%s: %v policies programmed, want %v", id, got, want)
			}
		case "p2s-replicas":
			if got := c.Metrics["replicas_served"].Min; got != float64(c.Case.Replicas) {
				t.Errorf("%s: %v replicas served, want %d", id, got, c.Case.Replicas)
			}
			if mean("ttfb_seed_ms") <= 0 || mean("transfer_bps") <= 0 {
				t.Errorf("%s: TTFB %v ms, rate %v", id, mean("ttfb_seed_ms"), mean("transfer_bps"))
			}
		}
	}
}

// checkSeedReport: the run wrote report.html and report.md and said where; the Markdown holds
// seed 001's Tables 5.1-5.6, each row with the server and client command lines the trials
// recorded, and a figure or a status in every data plane column.
func checkSeedReport(t *testing.T, out, stdout string) {
	t.Helper()
	if !strings.Contains(stdout, "report: "+filepath.Join(out, reportHTMLFile)+" and "+reportFile) {
		t.Errorf("the run did not say where its report is:\n%s", stdout)
	}
	if fi, err := os.Stat(filepath.Join(out, reportHTMLFile)); err != nil || fi.Size() == 0 {
		t.Errorf("no %s: %v", reportHTMLFile, err)
	}
	md, err := os.ReadFile(filepath.Join(out, reportFile))
	if err != nil {
		t.Fatal(err)
	}
	tables := strings.Split(string(md), "\n### ")
	for i := 1; i <= 6; i++ {
		var table string
		for _, tb := range tables {
			if strings.HasPrefix(tb, fmt.Sprintf("Table 5.%d:", i)) {
				table = tb
			}
		}
		if table == "" {
			t.Errorf("report.md has no Table 5.%d", i)
			continue
		}
		rows := 0
		for _, l := range strings.Split(table, "\n")[4:] {
			if !strings.HasPrefix(l, "| ") {
				break
			}
			rows++
			cells := strings.Split(strings.Trim(l, "| "), " | ")
			if len(cells) != 7 { // protocol, placement, scale, server, client, flannel, calico
				t.Errorf("Table 5.%d row %q: %d cells, want 7", i, l, len(cells))
				continue
			}
			if strings.Contains(cells[3], "not recorded") || strings.Contains(cells[4], "not recorded") {
				t.Errorf("Table 5.%d row %q: commands not recorded", i, l)
			}
			for _, c := range cells[5:] {
				if c == "" {
					t.Errorf("Table 5.%d row %q: an empty figure", i, l)
				}
			}
		}
		if rows == 0 {
			t.Errorf("Table 5.%d has no rows:\n%s", i, table)
		}
	}
}
