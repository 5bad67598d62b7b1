package result

import (
	"encoding/json"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// PerfData and DataItem are Kubernetes perf-tests' perfdash schema, field for field
// (github.com/kubernetes/perf-tests, clusterloader2/pkg/measurement/util/perftype.go; the
// same types k8s.io/kubernetes/test/e2e/perftype that perfdash/parser.go decodes, and that
// cilium connectivity perf copies in connectivity/perf/common/metrics.go).
type PerfData struct {
	// Version is the version of the metrics: "v1".
	Version   string     `json:"version"`
	DataItems []DataItem `json:"dataItems"`
	// Labels is the labels of the dataset.
	Labels map[string]string `json:"labels,omitempty"`
}

// DataItem is one data point: buckets ("Perc90" -> 23.5) of one unit, with labels. All items
// with the same labels have the same buckets.
type DataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels,omitempty"`
}

// PerfdataVersion is the PerfData version perfdash reads.
const PerfdataVersion = "v1"

// perfUnit is how a metric's unit suffix reads in perfdash: its unit and the divisor from the
// cnibench value. Bit rates are in Mb/s (10^6 bit/s), as cilium connectivity perf and
// k8s-netperf write them; everything else keeps its unit.
var perfUnits = []struct {
	suffix string
	unit   string
	scale  float64
}{
	{"_bps", "Mb/s", 1e6},
	{"_pps", "packets/s", 1},
	{"_per_s", "ops/s", 1},
	{"_us", "us", 1},
	{"_ms", "ms", 1},
	{"_pct", "%", 1},
}

func perfUnit(metric string) (unit string, scale float64) {
	for _, u := range perfUnits {
		if strings.HasSuffix(metric, u.suffix) {
			return u.unit, u.scale
		}
	}
	return "count", 1 // retransmits, policies_total: plain counts
}

// perfdashNames are ClusterLoader2's measurement names for cnibench's metric groups that
// measure the same thing, by scenario and group ("change", "add_ms" -> "NetworkProgrammingLatency"):
// a scenario registers its own (RegisterPerfdashName), and the export labels those items
// measurement=<name>, so a perfdash configured for ClusterLoader2's measurements finds them.
var perfdashNames = map[[2]string]string{}

// RegisterPerfdashName names a scenario's metric group (a distribution's base and unit, as
// the export groups it: "add_ms" for add_p50_ms, add_p99_ms, ...) after the ClusterLoader2
// measurement that measures the same thing. Call it from an init function.
func RegisterPerfdashName(scenario, group, measurement string) {
	perfdashNames[[2]string{scenario, group}] = measurement
}

// statMetric matches a metric that is one statistic of a distribution measured within each
// trial ("latency_p99_us": the trial's 99th percentile): such metrics of one base and unit
// become one data item with perfdash's buckets, as clusterloader2's latency items have.
var statMetric = regexp.MustCompile(`^(.+)_(mean|min|max|p50|p90|p99)(_[a-z]+)$`)

var statBucket = map[string]string{
	"mean": "Average", "min": "Min", "max": "Max", "p50": "Perc50", "p90": "Perc90", "p99": "Perc99",
}

// WritePerfdash writes the perfdash export: one PerfData (version v1) with, per ok case of
// summary.json, one data item per metric group:
//   - a distribution measured within each trial (latency_{mean,p50,p90,p99}_us, the TTFB's
//     percentiles) is one item, labels metric=<base>_<unit> ("latency_us"), buckets Average,
//     Min, Max, Perc50, Perc90, Perc99 (those measured), each the trimmed mean over the
//     trials;
//   - every other metric is one item, labels metric=<name>, buckets Average (mean),
//     TrimmedMean (the run's headline statistic), Perc50 (median), Min, Max, Stdev, CI95Low,
//     CI95High over the trials.
//
// Labels carry the case labels (case, scenario, backend, dataplane, attach, overlay, proxy,
// policy, placement, protocol, tool, services, policies, pods, replicas) plus cilium's "node"
// (same-node, other-node) and "test_type" (the tool). The dataset's labels name the run.
// Items of a group a scenario named after a ClusterLoader2 measurement (RegisterPerfdashName)
// also carry measurement=<its name> (NetworkProgrammingLatency, NetworkPolicyEnforcementLatency).
// Skipped and failed cases have no figures and no items.
func WritePerfdash(w io.Writer, r Run) error {
	if err := r.needSummary(FormatPerfdash); err != nil {
		return err
	}
	pd := PerfData{Version: PerfdataVersion, DataItems: []DataItem{}, Labels: map[string]string{"source": "cnibench"}}
	if r.Summary.Run != "" {
		pd.Labels["run"] = r.Summary.Run
	}
	if v, ok := r.Summary.Environment["cnibench_version"].(string); ok && v != "" {
		pd.Labels["cnibench_version"] = v
	}
	for _, res := range r.Summary.Results {
		if res.Status != "ok" {
			continue
		}
		pd.DataItems = append(pd.DataItems, perfItems(res)...)
	}
	b, err := json.MarshalIndent(pd, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// perfItems are a case's data items, in metric name order (a group where its first member
// is).
func perfItems(res CaseResult) []DataItem {
	labels := map[string]string{}
	for _, l := range caseLabels(res.Case) {
		if l[1] != "" {
			labels[l[0]] = l[1]
		}
	}
	labels["node"] = "other-node"
	if res.Case.Placement == "intra" {
		labels["node"] = "same-node"
	}
	if res.Case.Tool != "" {
		labels["test_type"] = res.Case.Tool
	}
	withMetric := func(name string) map[string]string {
		l := make(map[string]string, len(labels)+1)
		for k, v := range labels {
			l[k] = v
		}
		l["metric"] = name
		return l
	}

	var items []DataItem
	groups := map[string]int{} // group name -> index in items
	for _, name := range slices.Sorted(maps.Keys(res.Metrics)) {
		m := res.Metrics[name]
		if m.N == 0 {
			continue
		}
		unit, scale := perfUnit(name)
		if sm := statMetric.FindStringSubmatch(name); sm != nil {
			group := sm[1] + sm[3]
			i, ok := groups[group]
			if !ok {
				i = len(items)
				groups[group] = i
				l := withMetric(group)
				if cl2, ok := perfdashNames[[2]string{res.Case.Scenario, group}]; ok {
					l["measurement"] = cl2
				}
				items = append(items, DataItem{Data: map[string]float64{}, Unit: unit, Labels: l})
			}
			items[i].Data[statBucket[sm[2]]] = m.TrimmedMean / scale
			continue
		}
		items = append(items, DataItem{
			Data: map[string]float64{
				"Average":     m.Mean / scale,
				"TrimmedMean": m.TrimmedMean / scale,
				"Perc50":      m.Median / scale,
				"Min":         m.Min / scale,
				"Max":         m.Max / scale,
				"Stdev":       m.Stdev / scale,
				"CI95Low":     m.CI95Low / scale,
				"CI95High":    m.CI95High / scale,
			},
			Unit:   unit,
			Labels: withMetric(name),
		})
	}
	return items
}
