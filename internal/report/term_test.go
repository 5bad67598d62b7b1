package report

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cnibench/cnibench/internal/result"
)

var sgrRe = regexp.MustCompile("\x1b\\[[0-9;]*m")

// longSummary is a run with the longest case ids the project makes (p2s-replicas at 10,000
// Services and 100 replicas, p2p-policies at 20,000 policies and 10,000 pods, on the preset
// with the longest name, proxy and policy named in the id, a swept MTU and node count, a
// second copy) and every column and footnote filled: HTTP and request/response details, UDP
// loss, CPU, paired ratios to baselines, a CI target not reached for a long reason, disturbed
// and lost trials, steal, long notes, a partly failed case, a skipped and a failed case with
// long reasons, and paired comparisons between the long ids.
func longSummary() result.Summary {
	mk := func(c result.Case, metrics map[string]float64) result.CaseResult {
		c.Backend, c.MTU, c.Nodes = "lab", 9000, 3
		if c.Scenario != "baseline" {
			c.Copy = 2
		}
		c.ID = c.WithParts("proxy", "policy")
		ms := map[string]result.MetricSummary{}
		for k, v := range metrics {
			ms[k] = result.MetricSummary{N: 48, Mean: v, TrimmedMean: v, CI95Low: v * 0.93, CI95High: v * 1.07, CV: 0.1234, Min: v, Max: v}
		}
		return result.CaseResult{Case: c, Status: "ok", Metrics: ms,
			Convergence: &result.Convergence{TargetPct: 2.5, HalfWidthPct: 7, Trials: 48,
				Reason: "--time-budget 2h30m spent before the case reached its target (raise --time-budget or --max-repeat, or lower --ci-target)"}}
	}
	replicas := result.Case{Scenario: "p2s-replicas", Dataplane: "flannel-hostgw", Proxy: "nftables", Policy: "nftables", Placement: "inter", Services: 10000, Replicas: 100}
	policies := result.Case{Scenario: "p2p-policies", Dataplane: "flannel-hostgw", Proxy: "nftables", Policy: "nftables", Placement: "inter", Policies: 20000, Pods: 10000}
	with := func(c result.Case, proto string, services int) result.Case {
		c.Protocol = proto
		if services > 0 {
			c.Services = services
		}
		return c
	}
	cpuHost := map[string]float64{"cpu_client_host_pct": 100, "cpu_server_host_pct": 100}
	merge := func(a, b map[string]float64) map[string]float64 {
		for k, v := range b {
			a[k] = v
		}
		return a
	}
	rs := []result.CaseResult{
		mk(result.Case{Scenario: "baseline", Dataplane: "node2node", Placement: "inter", Protocol: "rr"}, merge(map[string]float64{"transactions_per_s": 123456, "latency_p50_us": 8, "latency_p99_us": 12345}, cpuHost)),
		mk(result.Case{Scenario: "baseline", Dataplane: "node2node", Placement: "inter", Protocol: "tcp"}, map[string]float64{"throughput_bps": 123.45e9, "cpu_client_proc_pct": 100, "cpu_server_proc_pct": 100}),
		mk(with(replicas, "http", 0), map[string]float64{"ttfb_seed_ms": 1234.567, "ttfb_p50_ms": 1111.11, "ttfb_p99_ms": 12345.67,
			"transfer_bps": 123.41e9, "replicas_served": 100, "cpu_client_proc_pct": 188, "cpu_server_proc_pct": 1021, "cpu_node_steal_pct": 12}),
		mk(with(replicas, "http", 10), map[string]float64{"ttfb_seed_ms": 2.5, "ttfb_p50_ms": 2.25, "ttfb_p99_ms": 3.75,
			"transfer_bps": 9.41e9, "replicas_served": 100, "cpu_client_proc_pct": 88, "cpu_server_proc_pct": 121, "cpu_node_steal_pct": 9}),
		{Case: with(replicas, "crr", 0), Status: "skipped", Reason: "p2s-replicas runs inter node only (seed 001 skips intra node to spare the node 100 replicas), " +
			"not \"intra\"; and besides the data plane flannel-hostgw with proxy nftables cannot program 10000 Services with 100 endpoints each on this kernel"},
		mk(with(policies, "rr", 0), merge(map[string]float64{"transactions_per_s": 99999, "latency_p50_us": 12345, "latency_p99_us": 123456}, cpuHost)),
		mk(with(policies, "udp", 0), map[string]float64{"throughput_bps": 1.23e9, "loss_pct": 12.5, "cpu_client_proc_pct": 100, "cpu_server_proc_pct": 57}),
		mk(with(policies, "tcp", 0), map[string]float64{"throughput_bps": 12.3e9, "cpu_client_proc_pct": 100, "cpu_server_proc_pct": 57}),
		{Case: with(policies, "crr", 0), Status: "failed", Reason: "netperf: exit status 255: establish control: are you sure there is a netserver listening on 10.244.1.7 at port 12865? " +
			"establish_control could not establish the control connection from 0.0.0.0 port 0 address family AF_INET to 10.244.1.7 port 12865 address family AF_INET"},
	}
	for i := range rs {
		if rs[i].Case.ID == "" {
			rs[i].Case.Backend, rs[i].Case.MTU, rs[i].Case.Nodes, rs[i].Case.Copy = "lab", 9000, 3, 2
			rs[i].Case.ID = rs[i].Case.WithParts("proxy", "policy")
		}
	}
	rs[2].Disturbed, rs[2].Lost = 13, 11
	rs[5].Disturbed = 2
	rs[7].Reason = "2 of 48 trials failed: iperf3: error - unable to receive results: Bad file descriptor (the server went away in the middle of the test)"
	rs[3].Convergence = &result.Convergence{TargetPct: 2.5, HalfWidthPct: 2.25, Trials: 24, Converged: true}
	rs[2].Notes = []string{"cpu_server_host_pct = 512 left out: a share of the whole host must be within 0..100 %",
		"raw output not saved: open runs/20261122T084337Z-p2s-replicas-at-scale/trials/" + rs[2].Case.Slug() + "/12.json: no space left on device"}
	ratio := func(a, b int, kind, metric string, r, lo, hi float64) result.Comparison {
		return result.Comparison{Case: rs[a].Case.ID, Reference: rs[b].Case.ID, Kind: kind, Metric: metric,
			RatioSummary: result.RatioSummary{N: 48, Ratio: r, CI95Low: lo, CI95High: hi}}
	}
	return result.Summary{Run: "20261122T084337Z-p2s-replicas-and-p2p-policies-at-scale", Results: rs, Comparisons: []result.Comparison{
		ratio(5, 0, "baseline", "transactions_per_s", 0.81, 0.77, 0.85),
		ratio(7, 1, "baseline", "throughput_bps", 0.1, 0.09, 0.11),
		ratio(2, 3, "scale", "ttfb_seed_ms", 493.83, 412.34, 588.88),
		ratio(3, 2, "scale", "ttfb_seed_ms", 0.002, 0.0017, 0.0024),
		ratio(6, 7, "proxy", "throughput_bps", 0.99, 0.91, 1.07),
	}}
}

// longRuns are runs whose comparison has the longest labels: long run directories of one
// backend, data planes with their proxy and policy, beside the fixtures.
func longRuns(t *testing.T) []Run {
	s := longSummary()
	return append([]Run{
		{Dir: "runs/20261122T084337Z-p2s-replicas-and-p2p-policies-at-scale-on-flannel-hostgw", Summary: s},
		{Dir: "runs/20261123T101010Z-p2s-replicas-and-p2p-policies-at-scale-on-flannel-hostgw-again", Summary: s},
	}, fixtureRuns(t)...)
}

// checkWidth fails for a line of out wider than the terminal width, escapes left out.
func checkWidth(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(sgrRe.ReplaceAllString(l, "")); n > termWidth {
			t.Errorf("%s: line of %d columns:\n%s\nin\n%s", what, n, l, out)
		}
	}
}

// Every line of the run table and of the comparison fits 100 columns, whatever the ids, and
// the table still says everything: each case's figures, why it did not converge, reasons,
// notes and comparisons.
func TestTerminalWidth(t *testing.T) {
	fix := fixtureRuns(t)
	long := longSummary()
	for _, color := range []bool{false, true} {
		st := Style{Color: color}
		for name, s := range map[string]result.Summary{"lab-run": fix[0].Summary, "kube-run": fix[1].Summary, "long ids": long} {
			var b bytes.Buffer
			if err := Table(&b, s, st); err != nil {
				t.Fatal(err)
			}
			checkWidth(t, fmt.Sprintf("Table %s (colour %v)", name, color), b.String())
		}
		for name, runs := range map[string][]Run{"lab": fix[:1], "lab+kube": fix, "long": longRuns(t), "long alone": longRuns(t)[:1]} {
			var b bytes.Buffer
			if err := Compare(&b, runs, st); err != nil {
				t.Fatal(err)
			}
			checkWidth(t, fmt.Sprintf("Compare %s (colour %v)", name, color), b.String())
		}
	}

	var b bytes.Buffer
	_ = Table(&b, long, Style{})
	out := b.String()
	_, rows := parseTable(t, out)
	foot := 0
	for _, r := range long.Results {
		row := rows[r.Case.ID]
		if row == nil {
			t.Errorf("no row %s in\n%s", r.Case.ID, out)
			continue
		}
		if r.Status != "ok" {
			if want := r.Status + ": " + r.Reason; row.text != want {
				t.Errorf("%s: %q, want %q", r.Case.ID, row.text, want)
			}
			continue
		}
		pm := r.Case.Primary()
		m := r.Metrics[pm]
		want := []string{format(pm, m.TrimmedMean), ciHalfWidth(m), "12.3%", trials(m, r).String(), cpu(r), detail(r)}
		if b := r.Case.BaselineID(); b != "" {
			want = append(want, "-") // no baseline of the case's protocol in the run, unless paired below
		}
		for _, c := range long.Comparisons {
			if c.Kind == result.KindBaseline && c.Case == r.Case.ID {
				want[len(want)-1] = ratioText(c.RatioSummary, "no diff.")
			}
		}
		if c := r.Convergence; !c.Converged {
			foot++
			want = append(want, fmt.Sprintf("no (7.0%% > 2.5%%) [%d]", foot))
			if f := fmt.Sprintf("[%d] %s: %s", foot, r.Case.ID, converged(c)); !strings.Contains(flat(out), f) {
				t.Errorf("no footnote %q in\n%s", f, out)
			}
		} else {
			want = append(want, "yes (2.2% <= 2.5%, 24 trials)")
		}
		for _, w := range want {
			if !strings.Contains(row.text, w) {
				t.Errorf("%s: no %q in %q", r.Case.ID, w, row.text)
			}
		}
	}
	noBlank := func(s string) string { return strings.Join(strings.Fields(s), "") }
	for _, r := range long.Results {
		for _, n := range append(r.Notes, r.Reason) {
			// A note may hold a word longer than a line (a file name), cut where the line ends.
			if r.Status == "ok" && n != "" && !strings.Contains(noBlank(out), noBlank(r.Case.ID+": "+n)) {
				t.Errorf("no note %q in\n%s", r.Case.ID+": "+n, out)
			}
		}
	}
	for _, c := range long.Comparisons {
		if c.Kind != result.KindBaseline && !strings.Contains(flat(out), c.Case+" vs "+c.Reference+": "+Ratio(c.RatioSummary)) {
			t.Errorf("no comparison %s vs %s in\n%s", c.Case, c.Reference, out)
		}
	}
	for _, w := range []string{"disturbed trials: 15 (", "11 could not be made good", "during 2 case(s)", long.Results[2].Case.ID + " 12%"} {
		if !strings.Contains(flat(out), w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
}

// colourSummary has a cell of each colour: a worse and a better ratio (higher and lower is
// better), one that does not differ, disturbed and lost trials, a skipped and a failed case.
func colourSummary() result.Summary {
	s := result.Summary{Results: []result.CaseResult{
		res("baseline", "bare", "intra", "tcp", "throughput_bps", 20e9),
		res("baseline", "bare", "intra", "http", "ttfb_seed_ms", 2),
		res("p2p", "flannel", "intra", "tcp", "throughput_bps", 15e9),
		res("p2p", "flannel", "intra", "http", "ttfb_seed_ms", 1.6),
		res("p2p", "calico", "intra", "tcp", "throughput_bps", 19.8e9),
		{Case: result.Case{ID: "p2p/cilium/inter/tcp"}, Status: "skipped", Reason: "dataplane cilium: not built"},
		{Case: result.Case{ID: "p2p/calico/inter/tcp"}, Status: "failed", Reason: "iperf3: boom"},
	}, Comparisons: []result.Comparison{
		{Case: "p2p/flannel/intra/tcp", Reference: "baseline/bare/intra/tcp", Kind: "baseline", Metric: "throughput_bps",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 0.74, CI95Low: 0.70, CI95High: 0.78}},
		{Case: "p2p/flannel/intra/http", Reference: "baseline/bare/intra/http", Kind: "baseline", Metric: "ttfb_seed_ms",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 0.80, CI95Low: 0.75, CI95High: 0.85}},
		{Case: "p2p/calico/intra/tcp", Reference: "baseline/bare/intra/tcp", Kind: "baseline", Metric: "throughput_bps",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 0.99, CI95Low: 0.95, CI95High: 1.03}},
		{Case: "p2p/calico/intra/tcp", Reference: "p2p/flannel/intra/tcp", Kind: "dataplane", Metric: "throughput_bps",
			RatioSummary: result.RatioSummary{N: 12, Ratio: 1.32, CI95Low: 1.25, CI95High: 1.40}},
	}}
	s.Results[2].Disturbed = 2
	s.Results[4].Disturbed, s.Results[4].Lost = 3, 1
	return s
}

func TestTableColour(t *testing.T) {
	s := colourSummary()
	var plainOut, colour bytes.Buffer
	if err := Table(&plainOut, s, Style{}); err != nil {
		t.Fatal(err)
	}
	if err := Table(&colour, s, Style{Color: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plainOut.String(), "\x1b") {
		t.Errorf("escape without colour:\n%q", plainOut.String())
	}
	out := colour.String()
	for _, want := range []string{
		"\x1b[1m15.00 Gbit/s\x1b[0m",                    // the headline value bold
		"\x1b[31m0.74x [0.70, 0.78]\x1b[0m",             // less throughput than the baseline: worse
		"\x1b[32m0.80x [0.75, 0.85]\x1b[0m",             // a shorter time to first byte: better
		"\x1b[32m1.32x [1.25, 1.40]\x1b[0m",             // more throughput than the other data plane
		"  0.99x [0.95, 1.03] no diff.",                 // no difference: no colour
		"12 \x1b[33m(-2 dist.)\x1b[0m",                  // disturbed
		"12 \x1b[31m(-3 dist., 1 lost)\x1b[0m",          // lost
		"\x1b[33mskipped\x1b[0m: dataplane cilium",      // skipped
		"\x1b[31mfailed\x1b[0m: iperf3: boom",           // failed
		"\x1b[33mdisturbed trials: 5\x1b[0m (",          // the count of disturbed trials
		"green when it is better, red when it is worse", // the legend says so
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	// Colour adds escapes and the legend of the colours, nothing else.
	stripped := strings.Replace(sgrRe.ReplaceAllString(out, ""), "A ratio that differs is green when it is better, red when it is worse.\n", "", 1)
	if stripped != plainOut.String() {
		t.Errorf("coloured table without its escapes:\n%s\nplain:\n%s", stripped, plainOut.String())
	}
}

func TestCompareColour(t *testing.T) {
	var plainOut, colour, none bytes.Buffer
	if err := Compare(&plainOut, fixtureRuns(t), Style{}); err != nil {
		t.Fatal(err)
	}
	if err := Compare(&none, fixtureRuns(t)); err != nil {
		t.Fatal(err)
	}
	if err := Compare(&colour, fixtureRuns(t), Style{Color: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plainOut.String(), "\x1b") || none.String() != plainOut.String() {
		t.Errorf("escape without colour, or no style is not plain:\n%q", none.String())
	}
	out := colour.String()
	for _, want := range []string{"\x1b[1m24.00 Gbit/s ±2.0%\x1b[0m", "\x1b[33mskipped\x1b[0m", "  1.50x  "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if sgrRe.ReplaceAllString(out, "") != plainOut.String() {
		t.Errorf("coloured comparison without its escapes differs from the plain one:\n%s", out)
	}
}

func TestHigherIsBetter(t *testing.T) {
	for metric, want := range map[string]bool{
		"throughput_bps": true, "transactions_per_s": true, "requests_per_s": true, "replicas_served": true, "resolvable_pct": true,
		"ttfb_seed_ms": false, "latency_p99_us": false, "jitter_ms": false, "program_s": false, "loss_pct": false,
		"retransmits": false, "cpu_client_proc_pct": false, "cpu_node_steal_pct": false,
	} {
		if got := HigherIsBetter(metric); got != want {
			t.Errorf("HigherIsBetter(%s) = %v, want %v", metric, got, want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	t.Setenv("CLICOLOR_FORCE", "")
	t.Setenv("TERM", "xterm")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, out := range map[string]io.Writer{"buffer": &bytes.Buffer{}, "pipe": w, "/dev/null (a character device)": null} {
		if IsTerminal(out) {
			t.Errorf("%s is a terminal", name)
		}
	}
	if pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err == nil {
		defer pty.Close()
		if !IsTerminal(pty) {
			t.Errorf("a pseudo-terminal is not a terminal")
		}
		t.Setenv("NO_COLOR", "1")
		if IsTerminal(pty) {
			t.Errorf("NO_COLOR set: colour on a terminal")
		}
		t.Setenv("NO_COLOR", "")
		t.Setenv("TERM", "dumb")
		if IsTerminal(pty) {
			t.Errorf("TERM=dumb: colour on a terminal")
		}
	} else {
		t.Logf("no pseudo-terminal to test with: %v", err)
	}
	t.Setenv("CLICOLOR_FORCE", "1")
	if !IsTerminal(&bytes.Buffer{}) {
		t.Errorf("CLICOLOR_FORCE=1: no colour")
	}
	t.Setenv("NO_COLOR", "1")
	if IsTerminal(&bytes.Buffer{}) {
		t.Errorf("NO_COLOR and CLICOLOR_FORCE set: NO_COLOR must win")
	}
}

func TestBreakLines(t *testing.T) {
	for _, tc := range []struct {
		text  string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"one two three", 7, []string{"one two", "three"}},
		{"p2s-replicas/calico/inter/http/svc=10000", 20, []string{"p2s-replicas/calico/", "inter/http/svc=10000"}},
		{"p2s-replicas/calico/inter/http/svc=10000/", 20, []string{"p2s-replicas/calico/", "inter/http/", "svc=10000/"}},
		// a word too long for a line breaks on the line it starts on
		{"[3] p2s-replicas/calico/inter/http/svc=10000/rep=100 x", 20, []string{"[3] p2s-replicas/", "calico/inter/http/", "svc=10000/rep=100 x"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"a 88/121 %core", 6, []string{"a", "88/121", "%core"}}, // spaces before slashes
	} {
		var got []string
		rs := []rune(tc.text)
		for _, r := range breakLines(tc.text, tc.width) {
			got = append(got, string(rs[r[0]:r[1]]))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("breakLines(%q, %d) = %q, want %q", tc.text, tc.width, got, tc.want)
		}
	}
}
