package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cnibench/cnibench/internal/report"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/spf13/cobra"
)

// reportFile is the Markdown report written into a run directory by default.
const reportFile = "report.md"

func newReportCmd() *cobra.Command {
	var markdown string
	cmd := &cobra.Command{
		Use:   "report DIR [DIR..]",
		Short: "Show one run per data plane, or several runs side by side (with ratios to the first)",
		Long: `Show run directories side by side: one column per run and data plane, one row per case
without its data plane (p2p/flannel/inter/tcp on the lab and p2p/cluster/inter/tcp on a cluster
share the row p2p/inter/tcp), each cell the primary metric's trimmed mean with the half-width of
its 95 % CI, and each column's ratio to the first column. A run's baselines are shown in each of
its columns. Under the table, the environment of each column (kernel, Kubernetes version, CNI,
kube-proxy mode, pod MTU).

The comparison is also written as Markdown: with one DIR to DIR/report.md, with several only to
--markdown FILE.

Examples:
  cnibench report runs/20261122T071000Z-quick
  cnibench report runs/20261122T071000Z-quick runs/20261123T101500Z-quick
  cnibench report runs/lab-run runs/kube-run --markdown lab-vs-kube.md`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s needs at least one run directory (see 'cnibench %s --help')", cmd.CommandPath(), cmd.Name())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, args, markdown)
		},
	}
	cmd.Flags().StringVar(&markdown, "markdown", "", "write the comparison as Markdown to `FILE` (default with one DIR: DIR/"+reportFile+")")
	return cmd
}

func runReport(cmd *cobra.Command, dirs []string, markdown string) error {
	var runs []report.Run
	for _, dir := range dirs {
		s, err := result.ReadSummary(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return usagef("report: %s has no %s (is it a cnibench run directory? an interrupted run writes it on --resume)", dir, result.SummaryJSONFile)
		}
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		runs = append(runs, report.Run{Dir: dir, Summary: s})
	}
	w := cmd.OutOrStdout()
	if err := report.Compare(w, runs); err != nil {
		return err
	}
	if markdown == "" && len(dirs) == 1 {
		markdown = filepath.Join(dirs[0], reportFile)
	}
	if markdown == "" {
		return nil
	}
	var md bytes.Buffer
	if err := report.CompareMarkdown(&md, runs); err != nil {
		return err
	}
	if err := os.WriteFile(markdown, md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w (give --markdown FILE to write it elsewhere)", err)
	}
	fmt.Fprintf(w, "\nmarkdown: %s\n", markdown)
	return nil
}
