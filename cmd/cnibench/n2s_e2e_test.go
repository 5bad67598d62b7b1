package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// TestN2SRun runs n2s through the CLI on the lab: --external-traffic-policy sweeps the label
// (in the ids and summary.json), Local inter is skipped with the reason, the rest measured
// through the NodePort (the server sees the client's address with Local, the node's with
// Cluster).
func TestN2SRun(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "n2s-run")
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	r := runCnb(t, runOpts{}, "run", "--scenario", "n2s", "--dataplane", "calico", "--proxy", "nftables", "--protocol", "crr",
		"--external-traffic-policy", "cluster,local", "--repeat", "1", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v (exit %d, stderr %s)", err, r.code, r.stderr)
	}
	want := map[string]string{
		"n2s/calico/intra/crr/etp=cluster/proxy=nftables": "ok", "n2s/calico/intra/crr/etp=local/proxy=nftables": "ok",
		"n2s/calico/inter/crr/etp=cluster/proxy=nftables": "ok", "n2s/calico/inter/crr/etp=local/proxy=nftables": "skipped",
	}
	if len(s.Results) != len(want) {
		t.Errorf("%d results, want %d", len(s.Results), len(want))
	}
	for _, cr := range s.Results {
		local := cr.Case.ExternalTrafficPolicy == "local"
		if st, ok := want[cr.Case.ID]; !ok || cr.Status != st {
			t.Errorf("%s: %s (%s), want %q", cr.Case.ID, cr.Status, cr.Reason, st)
			continue
		}
		if cr.Status == "skipped" {
			if !strings.Contains(cr.Reason, "no endpoint") {
				t.Errorf("%s: skipped because %q", cr.Case.ID, cr.Reason)
			}
			continue
		}
		if cr.Metrics["transactions_per_s"].TrimmedMean <= 0 || (cr.Metrics["client_ip_preserved"].Mean == 1) != local {
			t.Errorf("%s: %+v", cr.Case.ID, cr.Metrics)
		}
	}
	if !strings.Contains(r.stdout, "intra/crr/etp=local") {
		t.Errorf("the table does not name the policy:\n%s", r.stdout)
	}
}
