package report

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// fixtureRuns reads testdata/lab-run (flannel, calico and both baselines) and
// testdata/kube-run (the cluster's CNI, node2node, the bare baseline skipped).
func fixtureRuns(t *testing.T) []Run {
	t.Helper()
	var runs []Run
	for _, d := range []string{"testdata/lab-run", "testdata/kube-run"} {
		s, err := result.ReadSummary(d)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, Run{Dir: d, Summary: s})
	}
	return runs
}

// cols splits a terminal table line on the padding between its columns (two spaces or more).
func cols(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

// tableRows reads a comparison back: its rows keyed by comparison key (the group heading above
// a row, then the row's first column), its header under "CASE"; a table continued in blocks
// below adds its columns to the same rows.
func tableRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	group := ""
	for _, l := range strings.Split(out, "\n") {
		c := cols(l)
		switch {
		case l == "":
			continue
		case !strings.HasPrefix(l, " ") && len(c) == 1:
			group = l
			continue
		case len(c) < 2:
			continue
		}
		key := c[0]
		if strings.HasPrefix(l, " ") && group != "" {
			key = group + "/" + key
		}
		if rows[key] == nil {
			rows[key] = append([]string{key}, c[1:]...)
		} else {
			rows[key] = append(rows[key], c[1:]...)
		}
	}
	return rows
}

// lines is out's lines with the continuation lines of wrapped text (indented by two blanks)
// joined to the line they continue.
func lines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  ") && len(ls) > 0 {
			ls[len(ls)-1] += " " + strings.TrimSpace(l)
			continue
		}
		ls = append(ls, l)
	}
	return ls
}

func TestCompareKey(t *testing.T) {
	for _, tc := range []struct {
		c    result.Case
		want string
	}{
		{result.Case{Scenario: "p2p", Dataplane: "flannel", Placement: "inter", Protocol: "tcp"}, "p2p/inter/tcp"},
		{result.Case{Scenario: "p2p", Dataplane: "cluster", Placement: "inter", Protocol: "tcp"}, "p2p/inter/tcp"},
		{result.Case{Scenario: "p2s", Dataplane: "calico", Placement: "inter", Protocol: "rr", Services: 100, Pods: 10}, "p2s/inter/rr/svc=100/pods=10"},
		{result.Case{Scenario: "baseline", Dataplane: "bare", Placement: "intra", Protocol: "tcp"}, "baseline/bare/intra/tcp"},
		{result.Case{Scenario: "baseline", Dataplane: "node2node", Placement: "inter", Protocol: "tcp"}, "baseline/node2node/inter/tcp"},
		// The lab's shape is part of what a case measures: runs with other MTUs or node counts
		// never line up on one row (they used to).
		{result.Case{Scenario: "p2p", Dataplane: "flannel", Placement: "inter", Protocol: "tcp", MTU: 9000}, "p2p/inter/tcp/mtu=9000"},
		{result.Case{Scenario: "p2p", Dataplane: "flannel", Placement: "inter", Protocol: "tcp", MTU: 1500, Nodes: 3}, "p2p/inter/tcp/nodes=3"},
		{result.Case{Scenario: "p2p", Dataplane: "flannel", Placement: "inter", Protocol: "tcp", MTU: 1500, Nodes: 2}, "p2p/inter/tcp"},
		// externalTrafficPolicy is what is measured, not a variant: Local never lines up with
		// Cluster.
		{result.Case{Scenario: "n2s", Dataplane: "calico", Placement: "intra", Protocol: "crr", ExternalTrafficPolicy: "local"}, "n2s/intra/crr/etp=local"},
	} {
		if got := tc.c.CompareKey(); got != tc.want {
			t.Errorf("%s: CompareKey %q, want %q", tc.c.MakeID(), got, tc.want)
		}
		if tc.c.Scenario == "baseline" && tc.c.CompareKey() != tc.c.MakeID() {
			t.Errorf("baseline key %q is not its id", tc.c.CompareKey())
		}
	}
}

func TestCompareAlignsRunsByKey(t *testing.T) {
	var b bytes.Buffer
	if err := Compare(&b, fixtureRuns(t)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := tableRows(t, out)
	head := rows["CASE"]
	wantHead := []string{"CASE", "lab flannel", "lab calico", "RATIO", "kube cluster (cni calico)", "RATIO"}
	if strings.Join(head, "|") != strings.Join(wantHead, "|") {
		t.Fatalf("header %q, want %q\n%s", head, wantHead, out)
	}
	// lab flannel 8, calico 12, the cluster 5.44 Gbit/s: one row, ratios to flannel.
	want := map[string][]string{
		"p2p/inter/tcp": {"8.00 Gbit/s ±2.0%", "12.00 Gbit/s ±2.0%", "1.50x", "5.44 Gbit/s ±3.0%", "0.68x"},
		"p2p/inter/crr": {"3000 trans/s ±5.0%", "3600 trans/s ±5.0%", "1.20x", "1500 trans/s ±5.0%", "0.50x"},
		// A run's baselines once, in its first column (not repeated under each data plane).
		"baseline/node2node/inter/tcp": {"16.00 Gbit/s ±2.0%", "-", "-", "9.40 Gbit/s ±2.0%", "0.59x"},
		"baseline/bare/intra/tcp":      {"24.00 Gbit/s ±2.0%", "-", "-", "skipped", "-"},
	}
	for key, w := range want {
		got := rows[key]
		if len(got) == 0 {
			t.Errorf("no row %s in\n%s", key, out)
			continue
		}
		if strings.Join(got[1:], "|") != strings.Join(w, "|") {
			t.Errorf("row %s: %q, want %q", key, got[1:], w)
		}
	}
	for _, id := range []string{"p2p/flannel/inter/tcp", "p2p/cluster/inter/tcp"} {
		if _, ok := rows[id]; ok {
			t.Errorf("row by case id %s: rows must be keyed without the dataplane\n%s", id, out)
		}
	}
	// Rows under a heading per scenario (per baseline), in first-seen order: the lab run's
	// baselines, then its pod cases.
	if i, j := strings.Index(out, "\nbaseline/bare\n  intra/tcp "), strings.Index(out, "\np2p\n  intra/tcp "); i < 0 || j < i {
		t.Errorf("rows not under their headings in first-seen order:\n%s", out)
	}
	for _, f := range []string{
		"lab flannel: kernel 6.18.44-fc-v595, pod_mtu 1450",
		"kube cluster (cni calico): kernel 6.1.0-28-amd64, kubernetes_version v1.31.2, cni calico, kube_proxy_mode iptables",
	} {
		if !slices.Contains(lines(out), f) {
			t.Errorf("no environment line %q in\n%s", f, out)
		}
	}
}

func TestCompareOneRunIsPerDataplane(t *testing.T) {
	var b bytes.Buffer
	if err := Compare(&b, fixtureRuns(t)[:1]); err != nil {
		t.Fatal(err)
	}
	rows := tableRows(t, b.String())
	if got := strings.Join(rows["p2p/intra/tcp"], "|"); got != "p2p/intra/tcp|15.00 Gbit/s ±2.0%|18.00 Gbit/s ±2.0%|1.20x" {
		t.Errorf("one run: %s\n%s", got, b.String())
	}
}

func TestCompareLabelsRunsOfOneBackend(t *testing.T) {
	runs := fixtureRuns(t)
	lab := runs[0]
	lab2 := Run{Dir: "runs/other", Summary: lab.Summary}
	var b bytes.Buffer
	if err := Compare(&b, []Run{lab, lab2, runs[1]}); err != nil {
		t.Fatal(err)
	}
	head := strings.Join(tableRows(t, b.String())["CASE"], "|")
	want := "CASE|lab-run lab flannel|lab-run lab calico|RATIO|other lab flannel|RATIO|other lab calico|RATIO|kube cluster (cni calico)|RATIO"
	if head != want {
		t.Errorf("header %s, want %s", head, want)
	}
}

func TestCompareFailedAndAbsent(t *testing.T) {
	lab := result.Summary{Results: []result.CaseResult{
		res("p2p", "flannel", "inter", "tcp", "throughput_bps", 8e9),
		res("p2p", "flannel", "inter", "rr", "transactions_per_s", 20000),
	}}
	other := result.Summary{Results: []result.CaseResult{
		{Case: result.Case{Scenario: "p2p", Dataplane: "calico", Placement: "inter", Protocol: "tcp"}, Status: "failed", Reason: "iperf3: boom"},
	}}
	var b bytes.Buffer
	if err := Compare(&b, []Run{{Dir: "a", Summary: lab}, {Dir: "b", Summary: other}}); err != nil {
		t.Fatal(err)
	}
	rows := tableRows(t, b.String())
	if got := strings.Join(rows["p2p/inter/tcp"][1:], "|"); got != "8.00 Gbit/s ±2.0%|failed|-" {
		t.Errorf("failed: %s\n%s", got, b.String())
	}
	if got := strings.Join(rows["p2p/inter/rr"][1:], "|"); got != "20000 trans/s ±2.0%|-|-" {
		t.Errorf("absent: %s\n%s", got, b.String())
	}
}

func TestCompareMarkdownIsATable(t *testing.T) {
	var b bytes.Buffer
	if err := CompareMarkdown(&b, fixtureRuns(t)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var table []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			table = append(table, l)
		}
	}
	// header, separator, 5 keys
	if len(table) != 7 {
		t.Fatalf("%d table lines, want 7:\n%s", len(table), out)
	}
	pipes := strings.Count(table[0], "|")
	if pipes != 7 { // case + 3 columns + 2 ratios, 6 cells
		t.Errorf("header has %d pipes, want 7: %s", pipes, table[0])
	}
	for _, l := range table {
		if strings.Count(l, "|") != pipes || !strings.HasSuffix(l, "|") {
			t.Errorf("ragged row (%d pipes, header %d): %s", strings.Count(l, "|"), pipes, l)
		}
	}
	if !regexp.MustCompile(`^\|(---\|)+$`).MatchString(table[1]) {
		t.Errorf("separator: %s", table[1])
	}
	for _, s := range []string{
		"| p2p/inter/tcp | 8.00 Gbit/s ±2.0% | 12.00 Gbit/s ±2.0% | 1.50x | 5.44 Gbit/s ±3.0% | 0.68x |",
		"| baseline/bare/intra/tcp | 24.00 Gbit/s ±2.0% | - | - | skipped | - |",
		"- **kube cluster (cni calico)**: kernel 6.1.0-28-amd64",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
}

// TestCompareUsesPairedRatios: within one run the ratio of two data planes is the run's paired
// ratio with its interval, not the quotient of their trimmed means; across runs (not paired)
// it is the quotient.
func TestCompareUsesPairedRatios(t *testing.T) {
	runs := fixtureRuns(t)
	runs[0].Summary.Comparisons = append(runs[0].Summary.Comparisons, result.Comparison{
		Case: "p2p/calico/inter/tcp", Reference: "p2p/flannel/inter/tcp", Kind: "dataplane", Metric: "throughput_bps",
		RatioSummary: result.RatioSummary{N: 5, Ratio: 1.43, CI95Low: 1.31, CI95High: 1.56}})
	var b bytes.Buffer
	if err := CompareMarkdown(&b, runs); err != nil {
		t.Fatal(err)
	}
	want := "| p2p/inter/tcp | 8.00 Gbit/s ±2.0% | 12.00 Gbit/s ±2.0% | 1.43x [1.31, 1.56] | 5.44 Gbit/s ±3.0% | 0.68x |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("no %q in\n%s", want, b.String())
	}
}
