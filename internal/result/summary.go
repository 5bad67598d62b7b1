package result

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// File names of the run summary inside a results directory.
const (
	SummaryJSONFile = "summary.json"
	SummaryCSVFile  = "summary.csv"
)

// CSVHeader is the header of summary.csv. The file is in long format: one row per case and
// metric (metrics sorted by name); a case without metrics (skipped, failed) gets one row
// whose metric columns are empty.
var CSVHeader = []string{
	"run", "case", "scenario", "backend", "dataplane", "attach", "overlay", "proxy", "policy",
	"placement", "protocol", "tool", "services", "policies", "pods", "replicas", "status",
	"reason", "metric", "n", "mean", "trimmed_mean", "median", "stdev", "ci95_low",
	"ci95_high", "cv", "min", "max",
}

// WriteSummary writes DIR/summary.json (indented) and DIR/summary.csv. Each file is
// replaced atomically (written to a temporary file, synced, then renamed), so readers
// never see a partial summary.
func WriteSummary(dir string, s Summary) error {
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode summary: %w", err)
	}
	js = append(js, '\n')
	cs, err := summaryCSV(s)
	if err != nil {
		return fmt.Errorf("encode summary csv: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create results dir: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, SummaryJSONFile), js); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, SummaryCSVFile), cs)
}

// ReadSummary reads DIR/summary.json.
func ReadSummary(dir string) (Summary, error) {
	var s Summary
	path := filepath.Join(dir, SummaryJSONFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return Summary{}, fmt.Errorf("decode %s: %w", path, err)
	}
	return s, nil
}

func summaryCSV(s Summary) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(CSVHeader); err != nil {
		return nil, err
	}
	for _, r := range s.Results {
		c := r.Case
		id := c.Key()
		labels := []string{
			s.Run, id, c.Scenario, c.Backend, c.Dataplane, c.Attach, c.Overlay, c.Proxy,
			c.Policy, c.Placement, c.Protocol, c.Tool, strconv.Itoa(c.Services),
			strconv.Itoa(c.Policies), strconv.Itoa(c.Pods), strconv.Itoa(c.Replicas),
			r.Status, r.Reason,
		}
		if len(r.Metrics) == 0 {
			row := append(slices.Clone(labels), make([]string, len(CSVHeader)-len(labels))...)
			if err := w.Write(row); err != nil {
				return nil, err
			}
			continue
		}
		names := make([]string, 0, len(r.Metrics))
		for name := range r.Metrics {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			m := r.Metrics[name]
			row := append(slices.Clone(labels), name, strconv.Itoa(m.N),
				ff(m.Mean), ff(m.TrimmedMean), ff(m.Median), ff(m.Stdev),
				ff(m.CI95Low), ff(m.CI95High), ff(m.CV), ff(m.Min), ff(m.Max))
			if err := w.Write(row); err != nil {
				return nil, err
			}
		}
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}

func ff(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// writeFileAtomic writes data to a temporary file in path's directory, syncs it and renames
// it over path.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// Make the rename durable; not all platforms support syncing a directory.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
