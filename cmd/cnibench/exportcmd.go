package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/result"
	"github.com/spf13/cobra"
)

func newExportCmd() *cobra.Command {
	var format, out string
	valid := strings.Join(result.ExportFormats, ", ")
	cmd := &cobra.Command{
		Use:   "export DIR --format csv|perfdash|prom",
		Short: "Write a run's results in a format other tools read: k8s-netperf CSV, perfdash JSON, OpenMetrics",
		Long: `Write a run's results in the format an existing tool reads, to stdout or to --out FILE.

  csv       k8s-netperf's result CSV: its columns in its order and units (Driver, Profile,
            Same node, Host Network, ..., Avg Throughput in Mb/s or OP/s, 99%tile Observed
            Latency in usec), then the case labels (case, scenario, backend, dataplane, attach,
            overlay, proxy, policy, placement, protocol, services, policies, pods, replicas),
            status, reason and the cnibench metric behind the figures. One row per case;
            skipped and failed cases have empty figures and their reason. Reads summary.json
            (and plan.json for the durations).
  perfdash  Kubernetes perf-tests' PerfData JSON ({"version":"v1","dataItems":[...]}), as
            clusterloader2 and cilium connectivity perf write it for perfdash: one data item
            per case and metric group, labelled with the case. Reads summary.json.
  prom      OpenMetrics 1.0.0 text: one gauge sample per measured trial and metric at the
            trial's start (cnibench_<metric> in Prometheus base units: bytes per second,
            seconds, ratios), labelled with the case. Backfill it into Prometheus with
            'promtool tsdb create-blocks-from openmetrics FILE DIR'. Reads results.jsonl.

Examples:
  cnibench export runs/20261122T071000Z-quick --format csv > result.csv
  cnibench export runs/20261122T071000Z-quick --format perfdash --out NetworkPerformance_benchmark_2026-11-22T07:10:00Z.json
  cnibench export runs/20261122T071000Z-quick --format prom --out run.om && promtool tsdb create-blocks-from openmetrics run.om data/`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s needs one run directory, got %d arguments (see 'cnibench %s --help')", cmd.CommandPath(), len(args), cmd.Name())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd, args[0], format, out)
		},
	}
	cmd.Flags().StringVar(&format, "format", result.FormatCSV, "what to write: "+valid)
	cmd.Flags().StringVar(&out, "out", "", "write to `FILE` (replaced whole) instead of stdout")
	return cmd
}

func runExport(cmd *cobra.Command, dir, format, out string) error {
	if !slices.Contains(result.ExportFormats, format) {
		return usagef("export: --format: unknown format %q (valid: %s)", format, strings.Join(result.ExportFormats, ", "))
	}
	r, err := result.LoadRun(dir)
	if errors.Is(err, result.ErrNotRun) {
		return usagef("export: %s is not a cnibench run directory (no %s, no %s)", dir, result.SummaryJSONFile, result.TrialsFile)
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var buf bytes.Buffer
	if err := result.Export(&buf, format, r); err != nil {
		if errors.Is(err, result.ErrNotRun) {
			return usagef("export: %v", strings.TrimSuffix(err.Error(), ": "+result.ErrNotRun.Error()))
		}
		return fmt.Errorf("export: %w", err)
	}
	if out == "" {
		_, err := cmd.OutOrStdout().Write(buf.Bytes())
		return err
	}
	if err := result.WriteFileAtomic(out, buf.Bytes()); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}
