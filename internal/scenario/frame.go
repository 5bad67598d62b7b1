package scenario

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

// trialFrame is what every trial measures around its tool, whatever the scenario: the client
// node's CPU before and after the run, the setup figures, and errors that carry the tool's
// stderr.
type trialFrame struct {
	cl        cluster.Cluster
	client    cluster.Pod
	clientCPU int
	// setup are figures of the case's setup (time to program Services and policies, rule and
	// set counts from cl.Programmed), added to every trial's metrics: they are conditions of
	// each trial, and the summary then shows them beside the measurements.
	setup map[string]float64
	// serverCmd is the server's command line, started at set-up.
	serverCmd []string
}

// pin prefixes argv with taskset so placement on this small machine is never left to chance.
func pin(cpu int, argv []string) []string {
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// measure runs the tool's argv in the client pod, pinned to the client CPU, within timeout,
// and makes the trial's measurement of it:
//   - an Exec error fails the trial, named after the tool;
//   - read parses stdout; its error means the output is unreadable: the trial fails with an
//     excerpt of stderr and keeps stdout and stderr as raw output;
//   - a non-zero exit code fails the trial with an excerpt of stderr;
//   - judge turns what was read into metrics; metrics with an error keep the figures beside
//     the failure, nil metrics fail the trial without figures.
//
// The client node's busy, softirq and steal shares over the run and the setup figures are
// added to the metrics.
func measure[T any](ctx context.Context, fr *trialFrame, tool string, argv []string, timeout time.Duration,
	read func(stdout []byte) (T, error), judge func(T) (map[string]float64, error)) (Measurement, error) {
	argv = pin(fr.clientCPU, argv)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cnt0 := readCounters(fr.cl)
	before, cpuErr := fr.cl.NodeCPU(ctx, fr.client.Node)
	res, err := fr.cl.Exec(tctx, fr.client.Name, argv)
	after, cpuErr2 := fr.cl.NodeCPU(ctx, fr.client.Node)
	cnt1 := readCounters(fr.cl)
	if err != nil {
		return Measurement{Raw: res.Stdout}, fmt.Errorf("%s: %w", tool, err)
	}
	stderr := excerptLines(strings.TrimSpace(string(res.Stderr)), 5)
	out, err := read(res.Stdout)
	if err != nil {
		if stderr != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, stderr)
		}
		return Measurement{Raw: append(res.Stdout, res.Stderr...)}, err
	}
	if res.ExitCode != 0 {
		return Measurement{Raw: res.Stdout}, fmt.Errorf("%s exited %d: %s", tool, res.ExitCode, stderr)
	}
	m, err := judge(out)
	if m == nil {
		return Measurement{Raw: res.Stdout}, err
	}
	if cpuErr == nil && cpuErr2 == nil {
		busy, sirq := cluster.Busy(before, after)
		m["cpu_node_busy_pct"], m["cpu_node_softirq_pct"] = busy, sirq
		m["cpu_node_steal_pct"] = cluster.StealPct(before, after)
	}
	for k, v := range fr.setup {
		m[k] = v
	}
	for k, v := range counted(cnt0, cnt1) {
		m[k] = v
	}
	return Measurement{Metrics: m, Raw: res.Stdout, Server: fr.serverCmd, Client: argv}, err
}

// readCounters reads the data plane's packet counters where the cluster keeps any (nil
// otherwise, or when they cannot be read: a trial is not failed for its counters).
func readCounters(cl cluster.Cluster) map[string]map[string]uint64 {
	r, ok := cl.(cluster.CounterReader)
	if !ok {
		return nil
	}
	c, err := r.DataplaneCounters()
	if err != nil {
		return nil
	}
	return c
}

// counted turns two readings of the data plane's counters into a trial's metrics: what each
// counted in between, "dp_<node>_<counter>_count" (e.g. dp_node0_ilb_packets_count).
func counted(before, after map[string]map[string]uint64) map[string]float64 {
	out := map[string]float64{}
	for node, cs := range after {
		for name, v := range cs {
			if b, ok := before[node][name]; ok && v >= b {
				out["dp_"+node+"_"+name+"_count"] = float64(v - b)
			}
		}
	}
	return out
}

// excerptLines keeps the first n lines of s (curl prints one error line per failed request).
func excerptLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return fmt.Sprintf("%s (and %d more lines)", strings.Join(lines[:n], "; "), len(lines)-n)
}
