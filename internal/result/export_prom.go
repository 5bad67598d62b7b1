package result

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PromMetricPrefix starts the name of every metric of the prom export.
const PromMetricPrefix = "cnibench_"

// promUnits turn a cnibench metric's unit suffix into Prometheus' base units (seconds, bytes,
// ratios; "per_second" spelled out), which promtool's linter asks for: the suffix replacing
// it, the OpenMetrics UNIT (empty: none) and the divisor from the cnibench value. A gauge
// must not end in _total (that is for counters), so a count drops it.
var promUnits = []struct {
	suffix, replace, unit string
	div                   float64
	help                  string
}{
	{"_bps", "_bytes_per_second", "bytes_per_second", 8, "bytes per second (the trial's bit/s / 8)"},
	{"_pps", "_packets_per_second", "", 1, "packets per second"},
	{"_per_s", "_per_second", "", 1, "per second"},
	{"_s", "_seconds", "seconds", 1, "seconds"},
	{"_us", "_seconds", "seconds", 1e6, "seconds (the trial's microseconds / 1e6)"},
	{"_ms", "_seconds", "seconds", 1e3, "seconds (the trial's milliseconds / 1e3)"},
	{"_pct", "_ratio", "ratio", 100, "ratio, 0..1 (the trial's percent / 100)"},
	{"_total", "", "", 1, ""},
}

// promMetric is how a cnibench metric is exported: its Prometheus name, OpenMetrics unit,
// divisor and help text.
type promMetric struct {
	name, unit, help string
	div              float64
}

// PromName returns the name under which the prom export writes a cnibench metric
// ("throughput_bps" -> "cnibench_throughput_bytes_per_second") and the divisor that turns the
// cnibench value into the exported one (8).
func PromName(metric string) (string, float64) {
	p := promMetricOf(metric)
	return p.name, p.div
}

func promMetricOf(metric string) promMetric {
	base, unit, div, what := metric, "", 1.0, ""
	for _, u := range promUnits {
		if strings.HasSuffix(metric, u.suffix) {
			base, unit, div, what = strings.TrimSuffix(metric, u.suffix)+u.replace, u.unit, u.div, u.help
			break
		}
	}
	name := PromMetricPrefix + sanitizeName(base)
	help := "cnibench metric " + metric + " of each measured trial, at the trial's start"
	if what != "" {
		help += "; unit: " + what
	}
	return promMetric{name: name, unit: unit, div: div, help: help}
}

// sanitizeName keeps [a-zA-Z0-9_] and turns anything else into '_'.
func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

type promSample struct {
	ms    int64 // timestamp, Unix milliseconds
	value float64
}

type promSeries struct {
	labels  string // rendered {..}
	samples []promSample
}

type promFamily struct {
	promMetric
	sources []string // cnibench metrics exported under this name
	series  []*promSeries
	byKey   map[string]*promSeries
}

// WriteOpenMetrics writes the prom export: OpenMetrics 1.0.0 text ending in "# EOF", one gauge
// family per metric (PromName: cnibench_<metric> in base units), one series per case
// (labels: run and the case labels), one sample per measured trial (status ok, warm-ups left
// out) at the trial's start: seconds since the epoch, with milliseconds when the start has
// them (the runner records whole seconds, which Prometheus' text parser — promtool check
// metrics — reads too). Two trials of a case starting in the same millisecond (never from
// the runner) are kept apart by a millisecond. Feed it to
// `promtool tsdb create-blocks-from openmetrics FILE DIR`.
//
// Summary figures are not exported: they have no time of their own, and backfilling needs one.
func WriteOpenMetrics(w io.Writer, r Run) error {
	if !r.HasTrials {
		return fmt.Errorf("%s has no %s (the %s export reads the trials): %w", r.Dir, TrialsFile, FormatProm, ErrNotRun)
	}
	families := map[string]*promFamily{}
	for _, t := range r.Trials {
		if !t.Measured() || len(t.Metrics) == 0 {
			continue
		}
		start, err := time.Parse(time.RFC3339Nano, t.Start)
		if err != nil {
			return fmt.Errorf("%s: trial %d of %s: start %q: %w", TrialsFile, t.Trial, t.Case.Key(), t.Start, err)
		}
		run := t.Run
		if run == "" {
			run = r.Summary.Run
		}
		key := t.Case.Key()
		for metric, v := range t.Metrics {
			pm := promMetricOf(metric)
			f := families[pm.name]
			if f == nil {
				f = &promFamily{promMetric: pm, byKey: map[string]*promSeries{}}
				families[pm.name] = f
			}
			if !slices.Contains(f.sources, metric) {
				f.sources = append(f.sources, metric)
			}
			sk := key + "\x00" + run + "\x00" + metric
			s := f.byKey[sk]
			if s == nil {
				s = &promSeries{labels: promLabels(run, t.Case, metric)}
				f.byKey[sk] = s
				f.series = append(f.series, s)
			}
			s.samples = append(s.samples, promSample{ms: start.UnixMilli(), value: v / pm.div})
		}
	}

	bw := bufio.NewWriter(w)
	for _, name := range slices.Sorted(maps.Keys(families)) {
		f := families[name]
		help := f.help
		if len(f.sources) > 1 {
			// Several cnibench metrics share the name (latency_x_us and latency_x_ms): the
			// series tell them apart by a cnibench_metric label.
			slices.Sort(f.sources)
			help = "cnibench metrics " + strings.Join(f.sources, ", ") + " of each measured trial, at the trial's start, in base units (label cnibench_metric names the source)"
		}
		fmt.Fprintf(bw, "# TYPE %s gauge\n", name)
		if f.unit != "" {
			fmt.Fprintf(bw, "# UNIT %s %s\n", name, f.unit)
		}
		fmt.Fprintf(bw, "# HELP %s %s\n", name, escapeHelp(help))
		for _, s := range f.series {
			labels := s.labels
			if len(f.sources) == 1 {
				labels = dropMetricLabel(labels)
			}
			slices.SortStableFunc(s.samples, func(a, b promSample) int { return cmp.Compare(a.ms, b.ms) })
			last := int64(-1 << 62)
			for _, smp := range s.samples {
				ms := smp.ms
				if ms <= last {
					ms = last + 1
				}
				last = ms
				fmt.Fprintf(bw, "%s%s %s %s\n", name, labels, strconv.FormatFloat(smp.value, 'g', -1, 64), omTimestamp(ms))
			}
		}
	}
	bw.WriteString("# EOF\n")
	return bw.Flush()
}

// omTimestamp renders Unix milliseconds as OpenMetrics seconds: whole seconds without a
// fraction, else with three decimals.
func omTimestamp(ms int64) string {
	if ms%1000 == 0 {
		return strconv.FormatInt(ms/1000, 10)
	}
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

// metricLabel is the label that names the cnibench metric of a series in a family several
// metrics share; it is rendered last so that it can be dropped.
const metricLabel = "cnibench_metric"

// promLabels renders a series' labels: the run, the case labels with a value, then
// cnibench_metric.
func promLabels(run string, c Case, metric string) string {
	var b strings.Builder
	b.WriteByte('{')
	write := func(k, v string) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(escapeLabel(v))
		b.WriteByte('"')
	}
	if run != "" {
		write("run", run)
	}
	for _, l := range caseLabels(c) {
		if l[1] != "" {
			write(l[0], l[1])
		}
	}
	write(metricLabel, metric)
	b.WriteByte('}')
	return b.String()
}

// dropMetricLabel removes the trailing cnibench_metric label promLabels wrote.
func dropMetricLabel(labels string) string {
	i := strings.LastIndex(labels, metricLabel+`="`)
	if i <= 0 {
		return labels
	}
	head := strings.TrimSuffix(labels[:i], ",")
	if head == "{" {
		return ""
	}
	return head + "}"
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }

func escapeHelp(s string) string { return helpEscaper.Replace(s) }
