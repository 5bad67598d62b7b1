package result_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/cnibench/cnibench/internal/result"
)

// perftypeDataItem and perftypePerfData are copied field for field (names, types, JSON tags)
// from Kubernetes perf-tests, clusterloader2/pkg/measurement/util/perftype.go (commit
// 4b3415444f4c62406d508539732abee3eadd3aa8): the schema perfdash decodes
// (perfdash/parser.go, parsePerfData) and cilium connectivity perf writes
// (cilium-cli connectivity/perf/common/metrics.go). They are written out here, not taken from
// the package under test, so that the export is checked against the consumer's types.
type perftypeDataItem struct {
	// Data is a map from bucket to real data point (e.g. "Perc90" -> 23.5). Notice
	// that all data items with the same label combination should have the same buckets.
	Data map[string]float64 `json:"data"`
	// Unit is the data unit. Notice that all data items with the same label combination
	// should have the same unit.
	Unit string `json:"unit"`
	// Labels is the labels of the data item.
	Labels map[string]string `json:"labels,omitempty"`
}

type perftypePerfData struct {
	// Version is the version of the metrics. The metrics consumer could use the version
	// to detect metrics version change and decide what version to support.
	Version   string             `json:"version"`
	DataItems []perftypeDataItem `json:"dataItems"`
	// Labels is the labels of the dataset.
	Labels map[string]string `json:"labels,omitempty"`
}

func decodePerfdash(t *testing.T, b []byte) perftypePerfData {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var pd perftypePerfData
	if err := dec.Decode(&pd); err != nil {
		t.Fatalf("perfdash export does not decode into perftype.PerfData: %v\n%s", err, b)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("data after the PerfData object: %v", err)
	}
	return pd
}

func TestExportPerfdash(t *testing.T) {
	f := newFixture(t)
	pd := decodePerfdash(t, export(t, f.dir, result.FormatPerfdash))
	if pd.Version != "v1" {
		t.Errorf("version %q, want v1", pd.Version)
	}
	if pd.Labels["run"] != fixtureRun || pd.Labels["source"] != "cnibench" || pd.Labels["cnibench_version"] != "test" {
		t.Errorf("dataset labels %v", pd.Labels)
	}
	// item finds the data item of a case and metric label.
	items := map[[2]string]perftypeDataItem{}
	buckets := map[string][]string{} // label combination without case -> buckets: the same for every item
	for i, it := range pd.DataItems {
		if len(it.Data) == 0 || it.Unit == "" || len(it.Labels) == 0 {
			t.Errorf("item %d: every field must be set: %+v", i, it)
		}
		for _, k := range []string{"metric", "case", "scenario", "backend", "dataplane", "placement", "protocol", "tool", "node", "test_type", "services", "policies", "pods", "replicas"} {
			if it.Labels[k] == "" {
				t.Errorf("item %d: no label %q: %v", i, k, it.Labels)
			}
		}
		key := [2]string{it.Labels["case"], it.Labels["metric"]}
		if _, dup := items[key]; dup {
			t.Errorf("two items for %v", key)
		}
		items[key] = it
		b := slices.Sorted(maps.Keys(it.Data))
		if prev, ok := buckets[it.Labels["metric"]]; ok && !slices.Equal(prev, b) {
			t.Errorf("metric %s: buckets %v and %v (perfdash wants the same buckets)", it.Labels["metric"], prev, b)
		}
		buckets[it.Labels["metric"]] = b
	}

	// One item per ok case and metric group; none for the skipped and failed cases.
	wantItems := 0
	for _, r := range f.summary.Results {
		if r.Status != "ok" {
			for key := range items {
				if key[0] == r.Case.ID {
					t.Errorf("%s case %s has item %s", r.Status, r.Case.ID, key[1])
				}
			}
			continue
		}
		groups := map[string]bool{}
		for name := range r.Metrics {
			switch name {
			case "latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us":
				groups["latency_us"] = true
			case "ttfb_p50_ms", "ttfb_p99_ms":
				groups["ttfb_ms"] = true
			default:
				groups[name] = true
			}
		}
		wantItems += len(groups)
		for g := range groups {
			if _, ok := items[[2]string{r.Case.ID, g}]; !ok {
				t.Errorf("%s: no item for %s", r.Case.ID, g)
			}
		}
	}
	if len(pd.DataItems) != wantItems {
		t.Errorf("%d items, want %d", len(pd.DataItems), wantItems)
	}

	// Figures: a throughput in Mb/s as cilium writes it, a rate, the latency percentiles.
	tp := f.result(fxP2S).Metrics["throughput_bps"]
	it := items[[2]string{f.cases[fxP2S].ID, "throughput_bps"}]
	if it.Unit != "Mb/s" || it.Data["Average"] != tp.Mean/1e6 || it.Data["TrimmedMean"] != tp.TrimmedMean/1e6 ||
		it.Data["Perc50"] != tp.Median/1e6 || it.Data["CI95Low"] != tp.CI95Low/1e6 || it.Data["CI95High"] != tp.CI95High/1e6 ||
		it.Data["Min"] != tp.Min/1e6 || it.Data["Max"] != tp.Max/1e6 {
		t.Errorf("p2s throughput item %+v, summary %+v", it, tp)
	}
	if it.Labels["services"] != "100" || it.Labels["node"] != "other-node" || it.Labels["dataplane"] != "calico" || it.Labels["proxy"] != "iptables" {
		t.Errorf("p2s labels %v", it.Labels)
	}
	rr := f.result(fxRR).Metrics
	it = items[[2]string{f.cases[fxRR].ID, "transactions_per_s"}]
	if it.Unit != "ops/s" || it.Data["TrimmedMean"] != rr["transactions_per_s"].TrimmedMean {
		t.Errorf("rr rate item %+v", it)
	}
	lat := items[[2]string{f.cases[fxRR].ID, "latency_us"}]
	want := map[string]float64{
		"Average": rr["latency_mean_us"].TrimmedMean, "Perc50": rr["latency_p50_us"].TrimmedMean,
		"Perc90": rr["latency_p90_us"].TrimmedMean, "Perc99": rr["latency_p99_us"].TrimmedMean,
	}
	if lat.Unit != "us" || !maps.Equal(lat.Data, want) || lat.Labels["node"] != "same-node" {
		t.Errorf("latency item %+v, want data %v in us on the same node", lat, want)
	}
}

// A metric group a scenario named after a ClusterLoader2 measurement carries its name as
// label measurement; the other groups and other scenarios' groups of the same name do not.
func TestExportPerfdashCL2Names(t *testing.T) {
	result.RegisterPerfdashName("cl2-test", "add_ms", "NetworkProgrammingLatency")
	ms := func(v float64) result.MetricSummary {
		return result.MetricSummary{N: 1, Mean: v, TrimmedMean: v, Median: v, Min: v, Max: v}
	}
	res := func(scenario string) result.CaseResult {
		return result.CaseResult{Case: result.Case{ID: scenario + "/x", Scenario: scenario, Placement: "inter"}, Status: "ok",
			Metrics: map[string]result.MetricSummary{"add_p50_ms": ms(30), "add_p99_ms": ms(80), "remove_p50_ms": ms(20)}}
	}
	r := result.Run{HasSummary: true, Summary: result.Summary{Run: "r", Results: []result.CaseResult{res("cl2-test"), res("other")}}}
	var b bytes.Buffer
	if err := result.WritePerfdash(&b, r); err != nil {
		t.Fatal(err)
	}
	pd := decodePerfdash(t, b.Bytes())
	found := 0
	for _, it := range pd.DataItems {
		named := it.Labels["measurement"] == "NetworkProgrammingLatency"
		want := it.Labels["scenario"] == "cl2-test" && it.Labels["metric"] == "add_ms"
		if named != want {
			t.Errorf("item %v: measurement label %v, want %v", it.Labels, named, want)
		}
		if want {
			found++
			if it.Data["Perc50"] != 30 || it.Data["Perc99"] != 80 || it.Unit != "ms" {
				t.Errorf("item %+v: want Perc50 30, Perc99 80 ms", it)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d NetworkProgrammingLatency items, want 1", found)
	}
}
