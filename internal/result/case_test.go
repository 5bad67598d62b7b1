package result_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// externalTrafficPolicy (n2s) is a case label: in the id after the protocol ("/etp=local"),
// before scale suffixes and the parts a plan names, in the compare key (Local and Cluster are
// different measurements), not in the variant (not what the case runs on); cases without it
// keep their ids.
func TestExternalTrafficPolicyLabel(t *testing.T) {
	c := result.Case{Scenario: "n2s", Dataplane: "calico", Placement: "inter", Protocol: "tcp", Proxy: "nftables", ExternalTrafficPolicy: "local", MTU: 9000}
	if got, want := c.MakeID(), "n2s/calico/inter/tcp/etp=local/mtu=9000"; got != want {
		t.Errorf("id %q, want %q", got, want)
	}
	if got, want := c.WithParts("proxy"), "n2s/calico/inter/tcp/etp=local/mtu=9000/proxy=nftables"; got != want {
		t.Errorf("id with parts %q, want %q", got, want)
	}
	if got, want := c.CompareKey(), "n2s/inter/tcp/etp=local/mtu=9000"; got != want {
		t.Errorf("compare key %q, want %q", got, want)
	}
	c.ID = c.WithParts("proxy")
	if got := c.Variant(); got != "calico proxy=nftables" {
		t.Errorf("variant %q", got)
	}
	p2s := result.Case{Scenario: "p2s", Dataplane: "calico", Placement: "inter", Protocol: "tcp"}
	if p2s.MakeID() != "p2s/calico/inter/tcp" || len(p2s.Modes()) != 0 {
		t.Errorf("a case without the label: id %q, modes %v", p2s.MakeID(), p2s.Modes())
	}
}

// The exports carry the label where it is set, and only there.
func TestExternalTrafficPolicyExported(t *testing.T) {
	// n2s and p2p as internal/scenario registers them (this package links it: export_csv_test.go).
	cases := []result.Case{
		{Scenario: "n2s", Backend: "lab", Dataplane: "calico", Placement: "intra", Protocol: "tcp", Tool: "iperf3", ExternalTrafficPolicy: "local"},
		{Scenario: "p2p", Backend: "lab", Dataplane: "calico", Placement: "intra", Protocol: "tcp", Tool: "iperf3"},
	}
	run := result.Run{HasSummary: true, HasTrials: true}
	for i := range cases {
		cases[i].ID = cases[i].MakeID()
		run.Summary.Results = append(run.Summary.Results, result.CaseResult{Case: cases[i], Status: "ok",
			Metrics: map[string]result.MetricSummary{"throughput_bps": {N: 1, Mean: 1e9, TrimmedMean: 1e9, Median: 1e9, Min: 1e9, Max: 1e9}}})
		run.Trials = append(run.Trials, result.Trial{Case: cases[i], Trial: 1, Start: "2026-11-25T10:00:00Z", DurationS: 1, Status: "ok", Metrics: map[string]float64{"throughput_bps": 1e9}})
	}
	var prom bytes.Buffer
	if err := result.Export(&prom, result.FormatProm, run); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(prom.String(), "\n") {
		switch {
		case strings.Contains(l, `case="n2s/`) && !strings.Contains(l, `external_traffic_policy="local"`):
			t.Errorf("n2s sample without its label: %s", l)
		case strings.Contains(l, `case="p2p/`) && strings.Contains(l, "external_traffic_policy"):
			t.Errorf("p2p sample with an externalTrafficPolicy: %s", l)
		}
	}
	var csv bytes.Buffer
	if err := result.Export(&csv, result.FormatCSV, run); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv.String()), "\n")
	if !strings.Contains(lines[0], ",metric,external_traffic_policy,") || !strings.Contains(lines[1], ",throughput_bps,local,") ||
		!strings.Contains(lines[2], ",throughput_bps,,") {
		t.Errorf("csv:\n%s", csv.String())
	}
	if !strings.Contains(lines[1], "iperf3,TCP_STREAM,true,false,false,true,") {
		t.Errorf("an n2s row goes through a Service: %s", lines[1])
	}
	if !strings.Contains(lines[2], "iperf3,TCP_STREAM,true,false,false,false,") {
		t.Errorf("p2p, whose client reaches its server directly, does not: %s", lines[2])
	}
}
