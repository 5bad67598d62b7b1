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

	"github.com/cnibench/cnibench/internal/report/browser"
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
// writes it to FILE (the README's picture is made so).
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
