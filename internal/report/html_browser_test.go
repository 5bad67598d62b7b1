package report

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/testing/browser"
)

// writePage renders runs to DIR/report.html and returns its path.
func writePage(t *testing.T, runs ...Run) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := HTML(f, runs, HTMLOptions{Base: filepath.Dir(path), Generated: time.Now(), Version: "test"}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHTMLInChromium opens the report of a real run (the demo plan, recorded under
// testdata/demo-run) in headless Chromium with the network off: no console error, no request
// for anything, one bar chart per scenario and metric group, each measured case one bar of
// its chart, every case a row of the table, and the table sorts when a header is clicked.
// The screenshot is a test artifact (go test -artifacts); CNIBENCH_SCREENSHOT=FILE also
// writes it to FILE (docs/reports.md's picture is made so).
func TestHTMLInChromium(t *testing.T) {
	run, err := LoadRun("testdata/demo-run")
	if err != nil {
		t.Fatal(err)
	}
	path := writePage(t, run)
	pg := browser.OpenForTest(t, path, 1250, 900)

	want := map[string][]string{} // "scenario|group" -> measured case ids
	cases := 0
	for _, r := range run.Summary.Results {
		cases++
		if pm, _, ok := headline(r); ok {
			k := r.Case.Scenario + "|" + pm
			want[k] = append(want[k], r.Case.ID)
		}
	}
	n, err := pg.Count(`figure.chart[data-kind="bars"]`)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("%d bar charts, want %d (one per scenario and metric group)", n, len(want))
	}
	for k, ids := range want {
		sc, group, _ := strings.Cut(k, "|")
		sel := `figure.chart[data-kind="bars"][data-scenario="` + sc + `"][data-group="` + group + `"] .pt`
		got, err := pg.Attr(sel, "data-case")
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		sort.Strings(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("%s: points %v, want one per case %v", k, got, ids)
		}
	}
	rows, err := pg.Count(`table.cases tbody tr`)
	if err != nil {
		t.Fatal(err)
	}
	if rows != cases {
		t.Errorf("%d rows in the case table, want %d", rows, cases)
	}
	// The "trimmed mean" column (5th) sorts ascending on the first click.
	if err := pg.Click(`table.cases thead th:nth-child(5)`); err != nil {
		t.Fatal(err)
	}
	vals, err := pg.Attr(`table.cases tbody tr td:nth-child(5)`, "data-v")
	if err != nil {
		t.Fatal(err)
	}
	var nums []float64
	for _, v := range vals {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			nums = append(nums, f)
		}
	}
	if len(nums) < 2 || !slices.IsSorted(nums) {
		t.Errorf("after a click on 'trimmed mean' the column is not sorted: %v", nums)
	}
	shot := filepath.Join(t.ArtifactDir(), "report.png")
	if err := pg.Screenshot(shot); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv("CNIBENCH_SCREENSHOT"); out != "" {
		if err := pg.Screenshot(out); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot: %s", shot)
}

// TestHTMLComparisonInChromium opens the comparison of a lab run and a kube run: no console
// error or request, one comparison chart per metric, the table sorts.
func TestHTMLComparisonInChromium(t *testing.T) {
	var runs []Run
	for _, d := range []string{"testdata/lab-run", "testdata/kube-run"} {
		r, err := LoadRun(d)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	pg := browser.OpenForTest(t, writePage(t, runs...), 1250, 900)
	n, err := pg.Count(`figure.chart[data-kind="compare"]`)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("%d comparison charts, want one per metric group (throughput, transactions)", n)
	}
	sections, err := pg.Count(`section.run`)
	if err != nil {
		t.Fatal(err)
	}
	if sections != 2 {
		t.Errorf("%d run sections, want 2", sections)
	}
	if err := pg.Screenshot(filepath.Join(t.ArtifactDir(), "compare.png")); err != nil {
		t.Fatal(err)
	}
}

// TestAccountingInChromium opens the report of a run whose trials were accounted (recorded
// under testdata/accounted-run: cnibench run --plan plans/ceiling.yaml --trace hops --repeat 3
// --duration 2 --warmup 0 --max-steal=-1, 2026-12-02, the bare baseline,
// calico and flannel pods, routed and bridged iptables chains) and checks that a p2p and a chain case each show their verdict, one
// stacked bar per CPU whose parts fill it (they add up to 100 %), and the hop table with a row
// per device of the path, in path order from the client to the server, and the traced steps.
func TestAccountingInChromium(t *testing.T) {
	run, err := LoadRun("testdata/accounted-run")
	if err != nil {
		t.Fatal(err)
	}
	pg := browser.OpenForTest(t, writePage(t, run), 1250, 900)
	byID := map[string]result.CaseResult{}
	for _, r := range run.Summary.Results {
		byID[r.Case.ID] = r
	}
	for _, id := range []string{"p2p/calico/intra/tcp", "chain/bare/intra/tcp/nf=route-iptables/len=1/rules=10"} {
		r, ok := byID[id]
		if !ok || r.Accounting == nil {
			t.Fatalf("%s: not in the recorded run, or not accounted", id)
		}
		sel := `.acct[data-case="` + id + `"]`
		cpus := 0
		for _, h := range r.Accounting.Hosts {
			cpus += len(h.CPUs)
		}
		n, err := pg.Count(sel + ` .cpubar`)
		if err != nil {
			t.Fatal(err)
		}
		if n != cpus || n == 0 {
			t.Errorf("%s: %d CPU bars, want %d (one per CPU accounted)", id, n, cpus)
		}
		// Each bar's parts fill it: their widths add up to the bar's (a part per share).
		var fill []float64
		if err := pg.Eval(`Array.from(document.querySelectorAll('`+sel+` .cpubar .bar')).map(b => Array.from(b.children).reduce((s, c) => s + c.getBoundingClientRect().width, 0) / b.clientWidth)`, &fill); err != nil {
			t.Fatal(err)
		}
		for i, f := range fill {
			if f < 0.98 || f > 1.02 {
				t.Errorf("%s: CPU bar %d filled to %.2f of its width", id, i, f)
			}
		}
		path, _ := pathHops(r.Accounting.Hops)
		rows, err := pg.Text(`table.hops[data-case="` + id + `"] tbody tr td:first-child`)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(path) || len(rows) < 2 {
			t.Errorf("%s: %d hop rows, want %d (the devices of the path)", id, len(rows), len(path))
		} else if rows[0] != "client" || rows[len(rows)-1] != "server" {
			t.Errorf("%s: hops from %q to %q, want from the client to the server", id, rows[0], rows[len(rows)-1])
		}
		// Traced (--trace hops): a row per step, the client's data reaching the server's eth0.
		steps, err := pg.Text(`table.latency[data-case="` + id + `"] tbody tr td:nth-child(3)`)
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != len(r.Accounting.Latency) || !slices.Contains(steps, "server eth0 ingress") {
			t.Errorf("%s: latency steps to %q, want the %d of the accounting, one to the server's eth0", id, steps, len(r.Accounting.Latency))
		}
		verdict, err := pg.Text(sel + ` .verdict`)
		if err != nil {
			t.Fatal(err)
		}
		if len(verdict) != 1 || !strings.Contains(verdict[0], "Limited by:") || !strings.Contains(verdict[0], r.Verdict.Bottleneck) {
			t.Errorf("%s: verdict %q, want %q", id, verdict, r.Verdict.Bottleneck)
		}
	}
	if err := pg.Eval(`document.getElementById("accounting").scrollIntoView()`, nil); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.ArtifactDir(), "accounting.png")
	if err := pg.Screenshot(shot); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
}
