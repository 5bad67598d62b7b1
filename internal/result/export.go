package result

import (
	"github.com/cnibench/cnibench/internal/param"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Export formats: what `cnibench export DIR --format F` writes, each in the format its
// consumer already reads.
const (
	// FormatCSV is k8s-netperf's result CSV (its columns, in its order, in its units) followed
	// by cnibench's case labels: one row per case.
	FormatCSV = "csv"
	// FormatPerfdash is the perf-tests PerfData JSON that perfdash (and cilium connectivity
	// perf) use: one data item per case and metric group.
	FormatPerfdash = "perfdash"
	// FormatProm is OpenMetrics 1.0.0 text: one sample per measured trial and metric at the
	// trial's start, for promtool tsdb create-blocks-from openmetrics.
	FormatProm = "prom"
)

// ExportFormats lists the export formats in the order help texts name them.
var ExportFormats = []string{FormatCSV, FormatPerfdash, FormatProm}

// ErrNotRun is returned (wrapped) when a directory lacks what an export reads: it is not a
// cnibench run directory, or not a finished one.
var ErrNotRun = errors.New("not a cnibench run directory")

// PlanFile is the expanded plan a run records (written by the runner; read here for the cases'
// durations).
const PlanFile = "plan.json"

// Run is what the exports read from a run directory. Each part is optional on its own: a run
// interrupted before its summary has trials but no Summary; an old run may have no plan.
type Run struct {
	Dir        string
	Summary    Summary
	HasSummary bool
	Trials     []Trial
	HasTrials  bool
	// Plan holds the run's case specs by case id and Settings the runner's settings (both nil
	// without plan.json).
	Plan     map[string]CaseSpec
	Settings map[string]any
}

// LoadRun reads summary.json, results.jsonl and plan.json from dir. It fails with an error
// wrapping ErrNotRun when dir holds neither a summary nor trials; a part that exists but cannot
// be read is an error of its own.
func LoadRun(dir string) (Run, error) {
	r := Run{Dir: dir}
	s, err := ReadSummary(dir)
	switch {
	case err == nil:
		r.Summary, r.HasSummary = s, true
	case !errors.Is(err, fs.ErrNotExist) && !isNotDir(err):
		return Run{}, err
	}
	trials, err := LoadTrials(dir)
	switch {
	case err == nil:
		r.Trials, r.HasTrials = trials, true
	case !errors.Is(err, fs.ErrNotExist) && !isNotDir(err):
		return Run{}, err
	}
	if !r.HasSummary && !r.HasTrials {
		return Run{}, fmt.Errorf("%s has neither %s nor %s: %w", dir, SummaryJSONFile, TrialsFile, ErrNotRun)
	}
	plan, settings, err := readPlan(dir)
	if err != nil {
		return Run{}, err
	}
	r.Plan, r.Settings = plan, settings
	return r, nil
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

// readPlan reads the cases of dir/plan.json by id and the run's settings; a missing plan is
// not an error.
func readPlan(dir string) (map[string]CaseSpec, map[string]any, error) {
	path := filepath.Join(dir, PlanFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var p struct {
		Settings map[string]any `json:"settings"`
		Cases    []CaseSpec     `json:"cases"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, nil, fmt.Errorf("decode %s: %w", path, err)
	}
	out := make(map[string]CaseSpec, len(p.Cases))
	for _, cs := range p.Cases {
		out[cs.Case.Key()] = cs
	}
	return out, p.Settings, nil
}

// Export writes run r in format to w.
func Export(w io.Writer, format string, r Run) error {
	switch format {
	case FormatCSV:
		return WriteNetperfCSV(w, r)
	case FormatPerfdash:
		return WritePerfdash(w, r)
	case FormatProm:
		return WriteOpenMetrics(w, r)
	}
	return fmt.Errorf("unknown export format %q (valid: %s)", format, strings.Join(ExportFormats, ", "))
}

// WriteFileAtomic writes data to path through a temporary file in the same directory that is
// synced and renamed over path: readers see the old file or the whole new one.
func WriteFileAtomic(path string, data []byte) error { return writeFileAtomic(path, data) }

// needSummary fails, wrapping ErrNotRun, when r has no summary.json.
func (r Run) needSummary(format string) error {
	if r.HasSummary {
		return nil
	}
	return fmt.Errorf("%s has no %s (the %s export reads it; 'cnibench run --resume %s' writes it): %w",
		r.Dir, SummaryJSONFile, format, r.Dir, ErrNotRun)
}

// caseLabels are a case's labels as name/value pairs, in the order of the case labels
// (docs/design.md, result schema); the Word parameters other than proxy and policy (nf,
// external_traffic_policy, ..., internal/param) and scale dimensions beyond the four counts
// (mtu, nodes, copy) only when set.
func caseLabels(c Case) [][2]string {
	l := [][2]string{
		{"case", c.Key()}, {"scenario", c.Scenario}, {"backend", c.Backend},
		{"dataplane", c.Dataplane}, {"attach", c.Attach}, {"overlay", c.Overlay},
		{"proxy", c.Proxy}, {"policy", c.Policy}, {"placement", c.Placement},
		{"protocol", c.Protocol}, {"tool", c.Tool},
	}
	for _, p := range param.All() {
		if v := c.wordOf(p); p.Kind == param.Word && p.Place != param.Named && v != "" {
			l = append(l, [2]string{p.Label, v})
		}
	}
	for _, d := range c.Dims() {
		switch d.Name {
		case "services", "policies", "pods", "replicas":
			l = append(l, [2]string{d.Name, strconv.Itoa(d.Value)})
		default:
			if d.Set {
				l = append(l, [2]string{d.Name, strconv.Itoa(d.Value)})
			}
		}
	}
	return l
}
