package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
	// serverName is the pod the client measures to ("" when there is none, or several): with
	// the client it orders the hops of the trial's accounting.
	serverName string
	// account is what the fixture asks of each trial's accounting (Options).
	account accountAsk
	// setup are figures of the case's setup (time to program Services and policies, rule and
	// set counts from cl.Programmed), added to every trial's metrics: they are conditions of
	// each trial, and the summary then shows them beside the measurements.
	setup map[string]float64
	// serverCmd is the server's command line, started at set-up.
	serverCmd []string
}

// newFrame is the frame of a fixture whose trials run on client (zero: set later).
func newFrame(cl cluster.Cluster, opt Options, client cluster.Pod) trialFrame {
	return trialFrame{cl: cl, client: client, clientCPU: opt.CPUs[0], account: askOf(opt)}
}

// open opens the window of a trial run from the frame's client.
func (fr *trialFrame) open(ctx context.Context) *window {
	return openWindow(ctx, fr.cl, fr.client.Node, fr.account, fr.client.Name, fr.serverName)
}

// pin pins argv to cpu (cluster.Pin).
func pin(cpu int, argv []string) []string { return cluster.Pin(cpu, argv) }

// measure runs the tool's argvs in the client pod, all at once (the instances of one trial:
// usually one), each pinned to the client CPU, within timeout, and makes the trial's
// measurement of them:
//   - an Exec error fails the trial, named after the tool (and the instance, of several);
//   - read parses the stdouts, in argvs' order; its error means the output is unreadable: the
//     trial fails with an excerpt of stderr and keeps stdout and stderr as raw output;
//   - a non-zero exit code fails the trial with an excerpt of stderr;
//   - judge turns what was read into metrics; metrics with an error keep the figures beside
//     the failure, nil metrics fail the trial without figures.
//
// The client node's busy, softirq and steal shares over the run and the setup figures are
// added to the metrics; the backend's accounting of the run (per CPU, role and hop) comes
// with the measurement. The trial's client command is the argvs joined by "&" (they ran
// side by side); its raw output the stdouts one after the other.
func measure[T any](ctx context.Context, fr *trialFrame, tool string, argvs [][]string, timeout time.Duration,
	read func(stdouts [][]byte) (T, error), judge func(T) (map[string]float64, error)) (Measurement, error) {
	pinned := make([][]string, len(argvs))
	var client []string
	for i, argv := range argvs {
		pinned[i] = pin(fr.clientCPU, argv)
		if i > 0 {
			client = append(client, "&")
		}
		client = append(client, pinned[i]...)
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cnt0 := readCounters(fr.cl)
	win := fr.open(ctx)
	defer win.abandon(context.WithoutCancel(ctx))
	res, errs := execAll(tctx, fr.cl, fr.client.Name, pinned)
	cpu := map[string]float64{}
	acct := win.close(ctx, cpu)
	cnt1 := readCounters(fr.cl)
	name := func(i int) string {
		if len(argvs) == 1 {
			return tool
		}
		return fmt.Sprintf("%s (instance %d of %d)", tool, i+1, len(argvs))
	}
	stdouts := make([][]byte, len(res))
	var raw, rawErr []byte
	var stderr []string
	for i, r := range res {
		stdouts[i] = r.Stdout
		if len(res) > 1 {
			raw = fmt.Appendf(raw, "=== %s\n", name(i))
			rawErr = fmt.Appendf(rawErr, "=== %s\n", name(i))
		}
		raw = append(raw, r.Stdout...)
		rawErr = append(append(rawErr, r.Stdout...), r.Stderr...)
		if e := excerptLines(strings.TrimSpace(string(r.Stderr)), 5); e != "" {
			stderr = append(stderr, e)
		}
	}
	for i, err := range errs {
		if err != nil {
			return Measurement{Raw: raw}, fmt.Errorf("%s: %w", name(i), err)
		}
	}
	out, err := read(stdouts)
	if err != nil {
		if len(stderr) > 0 {
			err = fmt.Errorf("%w (stderr: %s)", err, strings.Join(stderr, "; "))
		}
		return Measurement{Raw: rawErr}, err
	}
	for i, r := range res {
		if r.ExitCode != 0 {
			return Measurement{Raw: raw}, fmt.Errorf("%s exited %d: %s", name(i), r.ExitCode, excerptLines(strings.TrimSpace(string(r.Stderr)), 5))
		}
	}
	m, err := judge(out)
	if m == nil {
		return Measurement{Raw: raw}, err
	}
	for _, add := range []map[string]float64{cpu, fr.setup, counted(cnt0, cnt1)} {
		for k, v := range add {
			m[k] = v
		}
	}
	return Measurement{Metrics: m, Raw: raw, Server: fr.serverCmd, Client: client, Accounting: acct}, err
}

// execAll runs argvs in pod at the same time and returns each one's result and error, in
// argvs' order (one argv runs on the caller's goroutine).
func execAll(ctx context.Context, cl cluster.Cluster, pod string, argvs [][]string) ([]cluster.ExecResult, []error) {
	res := make([]cluster.ExecResult, len(argvs))
	errs := make([]error, len(argvs))
	if len(argvs) == 1 {
		res[0], errs[0] = cl.Exec(ctx, pod, argvs[0])
		return res, errs
	}
	var wg sync.WaitGroup
	for i, argv := range argvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = cl.Exec(ctx, pod, argv)
		}()
	}
	wg.Wait()
	return res, errs
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

// phases splits a reaction of total milliseconds, of which the control plane took control
// (from the same start), into the data plane's part after the control plane's ended and the
// overlap: how long before the control plane's part ended the data plane had followed (a
// kernel that uses a ruleset as soon as its transaction commits, before the call that sent it
// returns). data - overlap = total - control; neither is negative.
func phases(total, control float64) (data, overlap float64) {
	return max(total-control, 0), max(control-total, 0)
}
