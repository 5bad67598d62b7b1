package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/report"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/spf13/cobra"
)

// Report files written into a run directory by default.
const (
	reportFile     = "report.md"
	reportHTMLFile = "report.html"
)

func newReportCmd() *cobra.Command {
	var markdown, out, output string
	cmd := &cobra.Command{
		Use:   "report DIR [DIR..]",
		Short: "Write the HTML and Markdown report of a run, or of several runs side by side",
		Long: `Write one self-contained HTML page (it loads nothing: open it offline, mail it, attach it to a
ticket) and the same tables as Markdown, and print the runs side by side.

The page shows, per scenario, a bar chart per metric with 95 % CI whiskers (one bar per case,
one colour per data plane), a line chart per swept dimension (services, policies, pods,
replicas...), latency percentiles, CPU per Gbit/s, paired ratios to the baselines, pivot tables
(a sweep down, data planes across) and seed 001's Tables 5.1-5.6 with our figures; then every
skipped, failed, disturbed or non-converged case with its reason, every case in a sortable table
with links to its raw trial files, the environment and the plan.

With several runs, cases are matched by id without the data plane (p2p/flannel/inter/tcp on the
lab and p2p/cluster/inter/tcp on a cluster share the row p2p/inter/tcp); the page adds the %
change to the first column and marks where the 95 % intervals do not overlap.

Where it writes: with one DIR, DIR/report.html and DIR/report.md; with several, --out FILE
(default ./report-<run>-vs-<run>.html) and the Markdown beside it (.md), or --markdown FILE.

Examples:
  cnibench report runs/20261122T071000Z-quick
  cnibench report runs/lab-run runs/kube-run --out lab-vs-kube.html
  cnibench report runs/20261122T071000Z-quick --output json | jq '.runs[0].summary.results[0]'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s needs at least one run directory (see 'cnibench %s --help')", cmd.CommandPath(), cmd.Name())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, args, out, markdown, output)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the HTML report to `FILE` (default with one DIR: DIR/"+reportHTMLFile+", with several: ./report-<run>-vs-<run>.html)")
	cmd.Flags().StringVar(&markdown, "markdown", "", "write the Markdown report to `FILE` (default: beside the HTML report, .md)")
	cmd.Flags().StringVar(&output, "output", "table", "what to print: table (the runs side by side) or json (the runs' summaries and the comparison, for scripts)")
	return cmd
}

// loadRuns reads run directories for a report; a directory that is not a run is a usage error.
func loadRuns(dirs []string) ([]report.Run, error) {
	var runs []report.Run
	for _, dir := range dirs {
		r, err := report.LoadRun(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, usagef("report: %s has no %s (is it a cnibench run directory? an interrupted run writes it on --resume)", dir, result.SummaryJSONFile)
		}
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func runReport(cmd *cobra.Command, dirs []string, out, markdown, output string) error {
	if output != "table" && output != "json" {
		return usagef("--output: unknown format %q (valid: table, json)", output)
	}
	runs, err := loadRuns(dirs)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if out == "" {
		out = defaultReportPath(dirs)
	}
	if markdown == "" {
		markdown = strings.TrimSuffix(out, filepath.Ext(out)) + ".md"
	}
	if output == "json" {
		if err := report.JSON(w, runs); err != nil {
			return err
		}
	} else if err := report.Compare(w, runs, report.Style{Color: report.IsTerminal(w)}); err != nil {
		return err
	}
	if err := writeReports(runs, out, markdown); err != nil {
		return err
	}
	if output != "json" {
		fmt.Fprintf(w, "\nreport: %s (and %s)\n", out, markdown)
	}
	return nil
}

// defaultReportPath is DIR/report.html for one run; for several, a file in the current
// directory named after the runs.
func defaultReportPath(dirs []string) string {
	if len(dirs) == 1 {
		return filepath.Join(dirs[0], reportHTMLFile)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(filepath.Clean(d)))
	}
	name := strings.Join(names, "-vs-")
	if len(name) > 120 {
		name = name[:120]
	}
	return "report-" + name + ".html"
}

// writeReports renders the HTML and Markdown reports of runs to htmlPath and mdPath. Each file
// is complete or absent: it is written beside its target and renamed over it.
func writeReports(runs []report.Run, htmlPath, mdPath string) error {
	var h, md bytes.Buffer
	opt := report.HTMLOptions{Base: filepath.Dir(htmlPath), Generated: time.Now(), Version: version}
	if err := report.HTML(&h, runs, opt); err != nil {
		return err
	}
	if err := report.Markdown(&md, runs); err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{htmlPath, h.Bytes()}, {mdPath, md.Bytes()}} {
		if err := result.WriteFileAtomic(f.path, f.data); err != nil {
			return fmt.Errorf("report: %w (give --out FILE or --markdown FILE to write it elsewhere)", err)
		}
	}
	return nil
}

// writeRunReports writes DIR/report.html and DIR/report.md for a run that has just ended and
// prints where they are.
func writeRunReports(w io.Writer, dir string) error {
	runs, err := loadRuns([]string{dir})
	if err != nil {
		return err
	}
	htmlPath := filepath.Join(dir, reportHTMLFile)
	if err := writeReports(runs, htmlPath, filepath.Join(dir, reportFile)); err != nil {
		return err
	}
	fmt.Fprintf(w, "report: %s and %s\n", htmlPath, reportFile)
	return nil
}
