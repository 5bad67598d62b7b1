package result

import (
	"encoding/csv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/param"
)

// NetperfCSVColumns are the columns of k8s-netperf's result CSV, names and order exactly as
// k8s-netperf writes them (github.com/cloud-bulldozer/k8s-netperf, pkg/archive/archive.go:
// commonCsvHeaderFields followed by the four columns WriteCSVResult appends; commit
// fb9a2ec1091dae38ec476ec4bcf27e0bd412793a). Scripts written against k8s-netperf's
// result-*.csv read these columns of ours unchanged.
var NetperfCSVColumns = []string{
	"Driver",
	"Profile",
	"Same node",
	"Host Network",
	"VM mode",
	"Service",
	"External Server",
	"UDN Info",
	"Bridge Info",
	"SR-IOV Info",
	"Macvlan Info",
	"Localnet Info",
	"Duration",
	"Parallelism",
	"# of Samples",
	"Message Size",
	"Burst",
	"Confidence metric - low",
	"Confidence metric - high",
	"Avg Throughput",
	"Throughput Metric",
	"99%tile Observed Latency",
	"Latency Metric",
}

// CaseCSVColumns are the columns that follow k8s-netperf's in the csv export: the case labels
// (docs/design.md), the case's status and reason, and "metric", the cnibench metric behind "Avg
// Throughput", the confidence interval and "# of Samples" (the case's headline metric, except
// for HTTP, whose headline is a time to first byte: there it is the request rate); then labels
// added since, at the end so that earlier columns keep their places: the labels of the case
// parameters (internal/param) that are not among the columns before them, in parameter order
// ("external_traffic_policy", empty but for n2s, was the first). A new parameter is a new
// last column.
var CaseCSVColumns = []string{
	"case", "scenario", "backend", "dataplane", "attach", "overlay", "proxy", "policy",
	"placement", "protocol", "services", "policies", "pods", "replicas", "status", "reason",
	"metric", "external_traffic_policy",
}

// csvParams are the case parameters in CaseCSVColumns' place, in column order (nil: the
// column is not a parameter's), then the other parameters' columns.
func csvParams() ([]string, []*param.Param) {
	cols := slices.Clone(CaseCSVColumns)
	ps := make([]*param.Param, len(cols))
	for _, p := range param.All() {
		if i := slices.Index(cols, p.Label); i >= 0 {
			ps[i] = &p
			continue
		}
		cols = append(cols, p.Label)
		ps = append(ps, &p)
	}
	return cols, ps
}

// NetperfCSVHeader is the header of the csv export.
func NetperfCSVHeader() []string {
	cols, _ := csvParams()
	return append(append([]string{}, NetperfCSVColumns...), cols...)
}

// csvLabel is a parameter's column value: a word, or an integer ("0" when unset, as the first
// columns have always been written).
func csvLabel(c Case, p param.Param) string {
	if p.Kind == param.Word {
		return c.wordOf(p)
	}
	return strconv.Itoa(c.intOf(p))
}

// MsgSizeMetric is the metric under which a trial records the message size its tool used
// (bytes: the case's msg_size, or the tool's default for the protocol): k8s-netperf's
// "Message Size" of a case that does not set one.
const MsgSizeMetric = "msg_size_bytes"

// msgSize is a case's "Message Size": its msg_size label, else the size its trials recorded
// (MsgSizeMetric), else 0.
func msgSize(r CaseResult) int {
	if r.Case.MsgSize > 0 {
		return r.Case.MsgSize
	}
	if m, ok := r.Metrics[MsgSizeMetric]; ok && m.N > 0 {
		return int(math.Round(m.Median))
	}
	return 0
}

// netperfProfile is how a cnibench protocol reads in k8s-netperf's terms: its profile name, the
// metric that is its "Avg Throughput", and the unit k8s-netperf prints it in.
type netperfProfile struct {
	profile string
	metric  string
	unit    string  // "Throughput Metric"
	scale   float64 // cnibench value / scale = value in unit
}

// netperfProfiles: streams in Mb/s (k8s-netperf divides iperf3's bits/s by 1e6 and calls it
// Mb/s; netperf's own Mb/s is 10^6 bits/s too), transactions and requests in OP/s. k8s-netperf
// has no HTTP profile: "HTTP" is ours.
var netperfProfiles = map[string]netperfProfile{
	"tcp":  {"TCP_STREAM", "throughput_bps", "Mb/s", 1e6},
	"udp":  {"UDP_STREAM", "throughput_bps", "Mb/s", 1e6},
	"rr":   {"TCP_RR", "transactions_per_s", "OP/s", 1},
	"crr":  {"TCP_CRR", "transactions_per_s", "OP/s", 1},
	"http": {"HTTP", "requests_per_s", "OP/s", 1},
}

// profileOf returns a case's k8s-netperf profile; an unknown protocol is named in capitals
// and reports its headline metric in its own unit.
func profileOf(c Case) netperfProfile {
	if p, ok := netperfProfiles[c.Protocol]; ok {
		return p
	}
	m := c.Primary()
	p := netperfProfile{profile: strings.ToUpper(c.Protocol), metric: m, unit: "", scale: 1}
	if strings.HasSuffix(m, "_bps") {
		p.unit, p.scale = "Mb/s", 1e6
	} else if strings.HasSuffix(m, "_per_s") {
		p.unit = "OP/s"
	} else if i := strings.LastIndexByte(m, '_'); i >= 0 {
		p.unit = m[i+1:]
	}
	return p
}

// p99Latency returns a case's 99th-percentile latency in microseconds ("usec", as
// k8s-netperf's "99%tile Observed Latency"): the trimmed mean of the trials' p99 of the
// request/response latency, or of HTTP's time to first byte.
func p99Latency(r CaseResult) (float64, bool) {
	if m, ok := r.Metrics["latency_p99_us"]; ok && m.N > 0 {
		return m.TrimmedMean, true
	}
	if m, ok := r.Metrics["ttfb_p99_ms"]; ok && m.N > 0 {
		return m.TrimmedMean * 1000, true
	}
	return 0, false
}

// WriteNetperfCSV writes the csv export: k8s-netperf's result columns, then the case labels
// (CaseCSVColumns), one row per case of summary.json. Skipped and failed cases have a row
// with their reason; their figures are empty. Figures are the summary's in k8s-netperf's
// units: "Avg Throughput" is the trimmed mean (k8s-netperf: the mean) of the profile's metric,
// the confidence interval is the summary's 95 % CI (0 with one sample, as k8s-netperf writes
// it), "# of Samples" its n. "Duration" is the plan's per-case duration, or the trials'
// (empty when the run has neither).
func WriteNetperfCSV(w io.Writer, r Run) error {
	if err := r.needSummary(FormatCSV); err != nil {
		return err
	}
	all := map[string][]Trial{} // every trial but warm-ups: skipped ones record a duration too
	for _, t := range r.Trials {
		if !t.Warmup {
			all[t.Case.Key()] = append(all[t.Case.Key()], t)
		}
	}
	cw := csv.NewWriter(w)
	_, params := csvParams()
	if err := cw.Write(NetperfCSVHeader()); err != nil {
		return err
	}
	for _, res := range r.Summary.Results {
		c := res.Case
		id := c.Key()
		p := profileOf(c)
		row := []string{
			c.Tool,
			p.profile,
			strconv.FormatBool(c.Placement == "intra"),
			strconv.FormatBool(c.HostNetwork()),
			"false", // VM mode
			strconv.FormatBool(c.ThroughService()),
			"false",        // External Server
			"", "", "", "", // UDN, Bridge, SR-IOV, Macvlan Info
			"", // Localnet Info
			r.duration(id, all[id]),
			strconv.Itoa(max(c.Streams, 1)),
		}
		m, ok := res.Metrics[p.metric]
		figures := make([]string, 6) // samples, message size, burst, ci low, ci high, avg
		figures[1] = strconv.Itoa(msgSize(res))
		figures[2] = "0" // Burst
		if ok && m.N > 0 {
			var lo, hi float64
			if m.N > 1 {
				lo, hi = m.CI95Low/p.scale, m.CI95High/p.scale
			}
			figures[0] = strconv.Itoa(m.N)
			figures[3], figures[4] = fnum(lo), fnum(hi)
			figures[5] = fnum(m.TrimmedMean / p.scale)
		}
		row = append(row, figures[0], figures[1], figures[2], figures[3], figures[4], figures[5], p.unit)
		if lat, ok := p99Latency(res); ok {
			row = append(row, fnum(lat), "usec")
		} else {
			row = append(row, "", "")
		}
		fixed := map[string]string{"case": id, "scenario": c.Scenario, "backend": c.Backend, "dataplane": c.Dataplane,
			"attach": c.Attach, "overlay": c.Overlay, "placement": c.Placement, "protocol": c.Protocol,
			"status": res.Status, "reason": res.Reason, "metric": p.metric}
		for i, col := range CaseCSVColumns {
			if params[i] != nil {
				row = append(row, csvLabel(c, *params[i]))
			} else {
				row = append(row, fixed[col])
			}
		}
		for _, q := range params[len(CaseCSVColumns):] {
			row = append(row, csvLabel(c, *q))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// fnum formats a figure without an exponent (as k8s-netperf's confidence columns), exactly.
func fnum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// duration is a case's trial length in whole seconds: the plan's, else the one most of its
// trials (warm-ups left out) recorded; empty when neither is known.
func (r Run) duration(id string, trials []Trial) string {
	if cs, ok := r.Plan[id]; ok && cs.Duration > 0 {
		return strconv.Itoa(cs.Duration)
	}
	if len(trials) == 0 {
		return ""
	}
	count := map[int]int{}
	best, bestN := 0, 0
	for _, t := range trials {
		d := int(math.Round(t.DurationS))
		count[d]++
		if count[d] > bestN || (count[d] == bestN && d > best) {
			best, bestN = d, count[d]
		}
	}
	return strconv.Itoa(best)
}
