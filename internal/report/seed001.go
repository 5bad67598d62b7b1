package report

import (
	"slices"

	"github.com/cnibench/cnibench/internal/result"
)

// seedTable is one of seed 001's Tables 5.1-5.6 ("Analysis and Benchmarking of Kubernetes
// Networking", Ch. 5): which measurements it lists (scenarios and protocols), laid out as the
// seed lays it out (protocol, server command, client command) with our figures beside them,
// a sweep down and the data planes across.
type seedTable struct {
	title     string
	scenarios []string
	protocols []string
}

// seedTables is seed 001's Tables 5.1-5.6. The seed measured UDP through a Service with
// iperf2 and TCP streams with netperf too; we measure with the tools the run recorded (their
// command lines are in the table), and netperf's request/response tests take Table 5.2's and
// 5.5's place.
var seedTables = []seedTable{
	{"Table 5.1: iperf3, TCP and UDP, pod to pod (PTP), also under silent pods and NetworkPolicies", []string{"p2p", "p2p-policies"}, []string{"tcp", "udp"}},
	{"Table 5.2: netperf, pod to pod (PTP), also under silent pods and NetworkPolicies", []string{"p2p", "p2p-policies"}, []string{"rr", "crr"}},
	{"Table 5.3: iperf3, TCP, pod to Service to pod (PSP)", []string{"p2s"}, []string{"tcp"}},
	{"Table 5.4: UDP, pod to Service to pod (PSP)", []string{"p2s"}, []string{"udp"}},
	{"Table 5.5: netperf, pod to Service to pod (PSP)", []string{"p2s"}, []string{"rr", "crr"}},
	{"Table 5.6: HTTP through a Service to several server replicas (curl time to first byte)", []string{"p2s-replicas"}, []string{"http"}},
}

// commands is each case's server and client command line, from its first trial that recorded
// them.
func commands(trials []result.Trial) map[string][2]string {
	out := map[string][2]string{}
	for _, t := range trials {
		if _, ok := out[t.Case.ID]; ok {
			continue
		}
		s, _ := t.Conditions[result.ServerCommandKey].(string)
		c, _ := t.Conditions[result.ClientCommandKey].(string)
		if s != "" || c != "" {
			out[t.Case.ID] = [2]string{s, c}
		}
	}
	return out
}

// seedPivots are those of seed 001's tables the results have cases for.
func seedPivots(rs []result.CaseResult) []pivot {
	var out []pivot
	for _, st := range seedTables {
		pv := buildPivot(st.title, rs, func(c result.Case) bool {
			return slices.Contains(st.scenarios, c.Scenario) && slices.Contains(st.protocols, c.Protocol)
		})
		if len(pv.rows) > 0 {
			out = append(out, pv)
		}
	}
	return out
}

// seedTables writes those of seed 001's tables the run has cases for.
func (p *page) seedTables(id string, rs []result.CaseResult, trials []result.Trial) {
	cmds := commands(trials)
	p.f(`<section id="%s" class="seed001"><h2>Seed 001's tables with our figures</h2><p>The layout of Tables 5.1-5.6 of seed 001 (commands per protocol), with this run's figures: trimmed mean ± 95 %% CI half-width per data plane.</p>`, id)
	pvs := seedPivots(rs)
	for _, pv := range pvs {
		p.pivotTable(pv, cmds)
	}
	if len(pvs) == 0 {
		p.s(`<p class="none">This run has no case of seed 001's tables (p2p, p2p-policies, p2s, p2s-replicas).</p>`)
	}
	p.s(`</section>`)
}
