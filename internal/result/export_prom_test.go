package result_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/result"
)

// The export's text: OpenMetrics framing, one sample per measured trial and metric, nothing
// from warm-ups or disturbed trials, timestamps the trials' starts.
func TestExportPromText(t *testing.T) {
	f := newFixture(t)
	out := string(export(t, f.dir, result.FormatProm))
	if !strings.HasSuffix(out, "\n# EOF\n") || strings.Count(out, "# EOF") != 1 {
		t.Fatalf("does not end in one # EOF line:\n%s", out)
	}
	samples := map[string]int{} // name{labels} timestamp -> count
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		n++
		fields := strings.Fields(line[strings.LastIndexByte(line, '}')+1:])
		if len(fields) != 2 {
			t.Fatalf("sample without value and timestamp: %s", line)
		}
		samples[line[:strings.LastIndexByte(line, '}')+1]+" "+fields[1]]++
		if v, _ := strconv.ParseFloat(fields[0], 64); v >= 1e6 && !strings.HasPrefix(line, "cnibench_throughput_bytes_per_second") && !strings.HasPrefix(line, "cnibench_transfer_bytes_per_second") {
			t.Errorf("a warm-up figure leaked: %s", line)
		}
	}
	want := 0
	for ci := range f.cases {
		for _, tr := range f.measured(ci) {
			want += len(tr.Metrics)
			start, _ := time.Parse(time.RFC3339, tr.Start)
			for metric := range tr.Metrics {
				name, _ := result.PromName(metric)
				ts := strconv.FormatInt(start.Unix(), 10)
				found := false
				for k := range samples {
					if strings.HasPrefix(k, name+"{") && strings.Contains(k, `case="`+tr.Case.ID+`"`) && strings.HasSuffix(k, " "+ts) {
						found = true
					}
				}
				if !found {
					t.Errorf("no sample of %s (%s) of %s at %s", metric, name, tr.Case.ID, ts)
				}
			}
		}
	}
	if n != want {
		t.Errorf("%d samples, want %d (one per measured trial and metric)", n, want)
	}
	if strings.Contains(out, "throughput_bytes_per_second") && strings.Contains(out, " 0.125 ") {
		t.Errorf("the disturbed trial's figure (1 bit/s) was exported")
	}
	for _, bad := range []string{"_us{", "_ms{", "_pct{", "_bps{", "_total{", "_per_s{"} {
		if strings.Contains(out, bad) {
			t.Errorf("a name keeps a unit Prometheus does not want (%s)", bad)
		}
	}
}

func TestExportPromNames(t *testing.T) {
	for metric, want := range map[string]struct {
		name string
		div  float64
	}{
		"throughput_bps":     {"cnibench_throughput_bytes_per_second", 8},
		"latency_p99_us":     {"cnibench_latency_p99_seconds", 1e6},
		"ttfb_seed_ms":       {"cnibench_ttfb_seed_seconds", 1e3},
		"cpu_client_pct":     {"cnibench_cpu_client_ratio", 100},
		"transactions_per_s": {"cnibench_transactions_per_second", 1},
		"rx_pps":             {"cnibench_rx_packets_per_second", 1},
		"policies_total":     {"cnibench_policies", 1},
		"retransmits":        {"cnibench_retransmits", 1},
		"setup_s":            {"cnibench_setup_seconds", 1},
	} {
		if name, div := result.PromName(metric); name != want.name || div != want.div {
			t.Errorf("PromName(%s) = %s, %v; want %s, %v", metric, name, div, want.name, want.div)
		}
	}
}

// Sub-second starts keep their milliseconds; two trials of a case in the same millisecond stay
// two samples.
func TestExportPromTimestamps(t *testing.T) {
	dir := t.TempDir()
	store, err := result.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := fixtureCase("p2p", "flannel", "inter", "tcp", "iperf3", 0, 1)
	for i, start := range []string{"2026-11-22T07:10:42.25Z", "2026-11-22T07:10:42.25Z", "2026-11-22T07:10:43Z"} {
		if err := store.Append(result.Trial{Run: "r", Case: c, Trial: i + 1, Start: start, Metrics: map[string]float64{"throughput_bps": 8}}); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	out := string(export(t, dir, result.FormatProm))
	for _, ts := range []string{" 1 1795331442.250\n", " 1 1795331442.251\n", " 1 1795331443\n"} {
		if !strings.Contains(out, ts) {
			t.Errorf("no sample ending %q in\n%s", ts, out)
		}
	}
}

// Two cnibench metrics with one Prometheus name are one family, told apart by cnibench_metric.
func TestExportPromSharedName(t *testing.T) {
	dir := t.TempDir()
	store, err := result.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := fixtureCase("p2p", "flannel", "inter", "rr", "netperf", 0, 1)
	if err := store.Append(result.Trial{Run: "r", Case: c, Trial: 1, Start: "2026-11-22T07:10:42Z",
		Metrics: map[string]float64{"rtt_us": 50, "rtt_ms": 0.05, "loss_pct": 1}}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	out := string(export(t, dir, result.FormatProm))
	if strings.Count(out, "# TYPE cnibench_rtt_seconds gauge\n") != 1 {
		t.Errorf("want one cnibench_rtt_seconds family:\n%s", out)
	}
	for _, s := range []string{`,cnibench_metric="rtt_us"} 5e-05 1795331442`, `,cnibench_metric="rtt_ms"} 5e-05 1795331442`, `replicas="1"} 0.01 1795331442`} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
	if strings.Contains(out, `cnibench_loss_ratio{run="r",case="p2p/flannel/inter/rr",scenario="p2p",backend="lab",dataplane="flannel",attach="bridge",overlay="vxlan",proxy="iptables",policy="iptables",placement="inter",protocol="rr",tool="netperf",services="0",policies="0",pods="0",replicas="1",cnibench_metric`) {
		t.Errorf("a family of one metric carries cnibench_metric:\n%s", out)
	}
}

// The real consumers: promtool's linter, promtool's backfill, and Prometheus answering a query
// with the trial's figure at the trial's time.
func TestExportPromPrometheus(t *testing.T) {
	promtool := requireTool(t, "promtool")
	prometheus := requireTool(t, "prometheus")
	f := newFixture(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, "run.om")
	if err := os.WriteFile(file, export(t, f.dir, result.FormatProm), 0o644); err != nil {
		t.Fatal(err)
	}

	// promtool check metrics: no problem at all (it prints one line per problem).
	check := exec.Command(promtool, "check", "metrics")
	in, _ := os.Open(file)
	defer in.Close()
	check.Stdin = in
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}

	tsdb := filepath.Join(tmp, "tsdb")
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", file, tsdb).CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
	} else {
		t.Logf("promtool tsdb create-blocks-from openmetrics:\n%s", out)
	}

	base := startPrometheus(t, prometheus, tsdb, tmp)

	// The throughput of one case: every measured trial at its own start, in bytes/s.
	ci := fxP2S
	trials := f.measured(ci)
	last, _ := time.Parse(time.RFC3339, trials[len(trials)-1].Start)
	q := fmt.Sprintf(`cnibench_throughput_bytes_per_second{case=%q,dataplane="calico",services="100"}[1h]`, f.cases[ci].ID)
	series := queryProm(t, base, q, last.Add(time.Second))
	if len(series) != 1 {
		t.Fatalf("%s: %d series, want 1: %+v", q, len(series), series)
	}
	if got := series[0].Values; len(got) != len(trials) {
		t.Fatalf("%s: %d samples, want %d (one per measured trial): %v", q, len(got), len(trials), got)
	}
	for i, tr := range trials {
		start, _ := time.Parse(time.RFC3339, tr.Start)
		ts, v := series[0].Values[i].at, series[0].Values[i].value
		if ts != float64(start.Unix()) {
			t.Errorf("sample %d at %v, want the trial's start %d (%s)", i, ts, start.Unix(), tr.Start)
		}
		if want := tr.Metrics["throughput_bps"] / 8; v != want {
			t.Errorf("sample %d = %v, want the trial's throughput_bps/8 = %v", i, v, want)
		}
	}

	// An instant query at one trial's start gives that trial's p99 latency, in seconds.
	tr := f.measured(fxRR)[1]
	at, _ := time.Parse(time.RFC3339, tr.Start)
	inst := queryProm(t, base, fmt.Sprintf(`cnibench_latency_p99_seconds{case=%q}`, tr.Case.ID), at)
	if len(inst) != 1 || len(inst[0].Values) != 1 {
		t.Fatalf("instant query: %+v", inst)
	}
	if got, want := inst[0].Values[0].value, tr.Metrics["latency_p99_us"]/1e6; got != want {
		t.Errorf("latency at %s = %v, want the trial's latency_p99_us/1e6 = %v", tr.Start, got, want)
	}
}

// startPrometheus runs Prometheus on a free loopback port over the backfilled TSDB, waits for
// it to be ready and returns its base URL; t.Cleanup stops it (by its PID) even if the test
// fails.
func startPrometheus(t *testing.T, bin, tsdb, tmp string) string {
	t.Helper()
	cfg := filepath.Join(tmp, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("# no targets: the data is backfilled\nscrape_configs: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(tmp, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+tsdb,
		"--storage.tsdb.retention.time=3650d", // the trials are hours old; keep them
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		defer logf.Close()
		p, err := os.FindProcess(pid)
		if err != nil {
			return
		}
		_ = p.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = p.Kill()
			<-exited
		}
	})
	log := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }

	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("prometheus exited before it was ready: %v\n%s", err, log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus on %s not ready after 60 s (last: %v)\n%s", addr, err, log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type promPoint struct{ at, value float64 }

type promSeriesResult struct {
	Metric map[string]string
	Values []promPoint
}

// queryProm runs an instant query (a range selector gives a matrix with every sample) and
// returns its series.
func queryProm(t *testing.T, base, query string, at time.Time) []promSeriesResult {
	t.Helper()
	u := base + "/api/v1/query?" + url.Values{"query": {query}, "time": {strconv.FormatInt(at.Unix(), 10)}}.Encode()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	if body.Status != "success" {
		t.Fatalf("%s: %s %s", query, body.Status, body.Error)
	}
	point := func(p []any) promPoint {
		if len(p) != 2 {
			t.Fatalf("%s: point %v", query, p)
		}
		at, ok := p[0].(float64)
		s, ok2 := p[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s: point %v (%v)", query, p, err)
		}
		return promPoint{at, v}
	}
	var out []promSeriesResult
	for _, r := range body.Data.Result {
		s := promSeriesResult{Metric: r.Metric}
		if r.Value != nil {
			s.Values = append(s.Values, point(r.Value))
		}
		for _, p := range r.Values {
			s.Values = append(s.Values, point(p))
		}
		out = append(out, s)
	}
	return out
}
