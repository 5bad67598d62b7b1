package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// TestChangeRun runs the change scenario through the CLI on the lab: one Service added and
// removed again and again (minChanges times each, cnibench's prober in the client pod) with 100
// Services standing, kube-proxy's nftables layout programmed by partial and by full syncs, and
// the eBPF load balancer. Every case measures both directions, each within a second; the
// sync mode is a label of the case and the lab records what the proxy did: a partial sync
// touches a few objects, a full one all of them.
func TestChangeRun(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "change-run")
	r := runCnb(t, runOpts{}, "run", "--scenario", "change", "--change", "service", "--dataplane", "calico", "--proxy", "nftables,ebpf", "--placement", "inter",
		"--services", "100", "--sync", "partial,full", "--repeat", "1", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s)", err, r.code, r.stderr)
	}
	if len(s.Results) != 4 {
		t.Errorf("%d results, want 4 (2 proxies x 2 sync modes)", len(s.Results))
	}
	for _, cr := range s.Results {
		c := cr.Case
		if cr.Status != "ok" || c.Change != "service" || !strings.Contains(c.ID, "change=service") || !strings.Contains(c.ID, "sync="+c.Sync) {
			t.Errorf("%s: %s (%s), change %q sync %q", c.ID, cr.Status, cr.Reason, c.Change, c.Sync)
			continue
		}
		m := cr.Metrics
		for _, k := range []string{"add_p50_ms", "add_p99_ms", "add_all_p50_ms", "remove_p50_ms", "remove_p99_ms", "add_control_p50_ms"} {
			if v := m[k].Mean; v <= 0 || v > 1000 {
				t.Errorf("%s: %s = %v, want a positive figure under a second", c.ID, k, v)
			}
		}
		if m["changes_count"].Mean < 20 || m["probe_interval_ms"].Mean <= 0 || m["probe_interval_ms"].Mean > 2 {
			t.Errorf("%s: changes %v, probe interval %v ms", c.ID, m["changes_count"].Mean, m["probe_interval_ms"].Mean)
		}
		changed, ok := m["add_changed_p50_count"]
		switch {
		case c.Sync == "full" && (!ok || changed.Mean != 0):
			t.Errorf("%s: a full sync reports %v changed objects (present %v), want 0", c.ID, changed.Mean, ok)
		case c.Sync == "partial" && (!ok || changed.Mean <= 0 || changed.Mean > 20):
			t.Errorf("%s: a partial sync touched %v objects (present %v), want a few", c.ID, changed.Mean, ok)
		}
		t.Logf("%s: add P50 %.2f ms P99 %.2f (control %.2f), remove P50 %.2f ms, changed %v", c.ID, m["add_p50_ms"].Mean, m["add_p99_ms"].Mean,
			m["add_control_p50_ms"].Mean, m["remove_p50_ms"].Mean, changed.Mean)
	}
}

// TestChangePolicyRun runs the policy kinds through the CLI on the lab, with 100 policies
// standing over 50 silent pods, programmed by partial syncs (each engine's partial rendering is
// held to its full one by the policy package's tests): a policy denying all ingress to the
// endpoint added and removed again and again ("policy") on kube-router's iptables layout
// (calico) and the eBPF engine (cilium); and a standing policy whose ingress peer is edited so
// that it stops admitting the client and admits it again, through its podSelector
// ("selector", on calico) and an ipBlock except of the client's address ("except", on
// cilium; TestNetworkPoliciesEnforced edits a policy on every engine). Every case measures
// both directions within a second, and a change touches a few objects.
func TestChangePolicyRun(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	planFile := filepath.Join(dir, "policy-kinds.yaml")
	group := "- scenario: change\n  change: %s\n  dataplane: %s\n  placement: inter\n  policies: 100\n  sync: partial\n"
	plan := fmt.Sprintf(group, "policy", "[calico, cilium]") + fmt.Sprintf(group, "selector", "calico") + fmt.Sprintf(group, "except", "cilium")
	if err := os.WriteFile(planFile, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "change-policy-run")
	r := runCnb(t, runOpts{timeout: 12 * time.Minute}, "run", "--plan", planFile, "--repeat", "1", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s)", err, r.code, r.stderr)
	}
	if len(s.Results) != 4 {
		t.Errorf("%d results, want 4 (the policy kind on 2 engines, each edit kind on one)", len(s.Results))
	}
	for _, cr := range s.Results {
		c := cr.Case
		if cr.Status != "ok" || !slices.Contains([]string{"policy", "selector", "except"}, c.Change) || c.Policies != 100 {
			t.Errorf("%s: %s (%s), change %q, policies %d", c.ID, cr.Status, cr.Reason, c.Change, c.Policies)
			continue
		}
		m := cr.Metrics
		for _, k := range []string{"deny_p50_ms", "deny_p99_ms", "allow_p50_ms", "allow_p99_ms", "deny_program_p50_ms"} {
			if v := m[k].Mean; v <= 0 || v > 1000 {
				t.Errorf("%s: %s = %v, want a positive figure under a second", c.ID, k, v)
			}
		}
		if m["changes_count"].Mean < 20 || m["policies_total"].Mean != 100 {
			t.Errorf("%s: changes %v, standing policies %v", c.ID, m["changes_count"].Mean, m["policies_total"].Mean)
		}
		changed, ok := m["deny_changed_p50_count"]
		if !ok || changed.Mean <= 0 || changed.Mean > 20 {
			t.Errorf("%s: a partial sync touched %v objects (present %v), want a few", c.ID, changed.Mean, ok)
		}
		t.Logf("%s: deny P50 %.2f ms P99 %.2f, allow P50 %.2f ms, program %.2f ms, changed %v", c.ID, m["deny_p50_ms"].Mean, m["deny_p99_ms"].Mean,
			m["allow_p50_ms"].Mean, m["deny_program_p50_ms"].Mean, changed.Mean)
	}
}
