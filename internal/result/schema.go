// Package result holds the result schema (the contract between runner, reports and exports),
// the append-only JSONL trial store and the summary writers.
package result

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/param"
)

// Case is one point of the benchmark matrix. Its fields are the case labels (docs/design.md);
// new scenarios add fields, they never rename existing ones.
type Case struct {
	ID        string `json:"id"`
	Scenario  string `json:"scenario"`
	Backend   string `json:"backend"`
	Dataplane string `json:"dataplane"`
	Attach    string `json:"attach,omitempty"`
	Overlay   string `json:"overlay,omitempty"`
	Proxy     string `json:"proxy,omitempty"`
	Policy    string `json:"policy,omitempty"`
	Placement string `json:"placement"`
	Protocol  string `json:"protocol"`
	Tool      string `json:"tool"`
	Services  int    `json:"services"`
	Policies  int    `json:"policies"`
	Pods      int    `json:"pods"`
	Replicas  int    `json:"replicas"`
	// NF, ChainLength and Rules are a service-function chain's labels: the network-function
	// kind, how many NFs stand between client and server, and each NF's firewall rule count.
	NF          string `json:"nf,omitempty"`
	ChainLength int    `json:"chain_length,omitempty"`
	Rules       int    `json:"rules,omitempty"`
	// ExternalTrafficPolicy is a NodePort Service's externalTrafficPolicy ("cluster" or
	// "local") in scenarios that reach one from outside the cluster (n2s); "" elsewhere.
	ExternalTrafficPolicy string `json:"external_traffic_policy,omitempty"`
	// Change is the kind of change the change scenario makes and times (service-add,
	// service-remove, ...); Sync how the lab's proxy programs it: "partial" (only what changed,
	// as kube-proxy's partial syncs) or "full" (every Service again).
	Change string `json:"change,omitempty"`
	Sync   string `json:"sync,omitempty"`
	// MTU and Nodes are the lab's underlay MTU and node count (0 where the backend does not set
	// them: a real cluster has its own); they are in the id only when a plan sweeps them.
	MTU   int `json:"mtu,omitempty"`
	Nodes int `json:"nodes,omitempty"`
	// Streams is how many parallel streams (iperf3 -P) or concurrent netperf instances a
	// trial runs (0 and 1: one; only more than one is in the id, "/streams=4"); MsgSize the
	// message size in bytes (iperf3 -l, netperf -r; 0: the tool's default for the protocol).
	Streams int `json:"streams,omitempty"`
	MsgSize int `json:"msg_size,omitempty"`
	// Fragment "allow": UDP messages larger than one packet at the pod MTU are sent fragmented
	// ("": such a case is skipped).
	Fragment string `json:"fragment,omitempty"`
	// Copy numbers identical copies of a case (plan key copies: an A/A test measures the
	// noise between two copies); 0 and 1 are the first copy, later ones have "/copy=N" in the id.
	Copy int `json:"copy,omitempty"`

	// extra holds the labels of declared parameters without a field (params.go): those a
	// scenario declares (the vnf scenario's vnf, cpu_limit, cpu_isolation, frame_size, lb,
	// search, noisy, noisy_cpu_limit).
	extra string
}

// FragmentAllow is the value of label fragment that lets UDP messages larger than one packet at
// the pod MTU be sent fragmented.
const FragmentAllow = param.FragmentAllow

// DefaultMTU and DefaultNodes are the lab's underlay MTU and node count when a plan sets none;
// a case id names others ("/mtu=9000", "/nodes=3").
const (
	DefaultMTU   = 1500
	DefaultNodes = 2
)

// The baselines: cases of scenario BaselineScenario measure what a pod case is held against,
// the bare veth pair (dataplane Bare: two namespaces on one node) or the underlay between two
// nodes (Node2Node, the host network); BaselineID names a case's.
const (
	BaselineScenario = "baseline"
	Bare             = "bare"
	Node2Node        = "node2node"
)

// IsBaseline tells whether the case is a baseline (of scenario BaselineScenario).
func (c Case) IsBaseline() bool { return c.Scenario == BaselineScenario }

// HostNetwork tells whether the case measures the host network: the node-to-node baseline.
func (c Case) HostNetwork() bool { return c.IsBaseline() && c.Dataplane == Node2Node }

// MakeID builds the case id "scenario/dataplane/placement/protocol", then the case's variant
// parts ("/nf=KIND", the parameters of place param.Variant) and its modes ("/etp=local", see
// Modes), with the scale suffixes (e.g. "/svc=100") of the Int parameters that are set, so ids
// stay stable across backends; then "/mtu=N" and "/nodes=N" when they are set and not the
// defaults, and "/copy=N" for the second and later copies of a case.
func (c Case) MakeID() string {
	parts := []string{c.Scenario, c.Dataplane, c.Placement, c.Protocol}
	parts = append(parts, c.words(param.Variant)...)
	return c.joinID(append(parts, c.Modes()...)...)
}

// words are the case's set Word parameters of place pl, as "ID=value", in order.
func (c Case) words(pl param.Place) []string {
	var out []string
	for _, p := range param.All() {
		if p.Kind == param.Word && p.ID != "" && p.Place == pl {
			if v := c.wordOf(p); v != "" {
				out = append(out, p.ID+"="+v)
			}
		}
	}
	return out
}

// Modes are the case's labels that are words, not numbers, and say what is measured rather
// than what it runs on (a variant: dataplane, proxy, policy, nf, vnf): the Word parameters of
// place param.Mode, such as the externalTrafficPolicy of a NodePort Service ("etp=local"), a
// VNF's CPU isolation ("iso=exclusive"), load balancer ("lb=ingress") and search
// ("search=ramp"). They are in the id, in CompareKey and, in reports, beside the scale
// dimensions. Empty for most cases.
func (c Case) Modes() []string { return c.words(param.Mode) }

// Key is the case's id, or the id it would have (a case written without one).
func (c Case) Key() string {
	if c.ID != "" {
		return c.ID
	}
	return c.MakeID()
}

// CompareKey is the case id without its dataplane ("p2p/inter/tcp"): the same measurement on
// different data planes or backends (p2p/flannel/inter/tcp on the lab, p2p/cluster/inter/tcp
// on a cluster) has the same key. A baseline's dataplane is the measurement itself (the bare
// veth pair, node to node), so a baseline's key is its id.
func (c Case) CompareKey() string {
	if c.IsBaseline() {
		return c.MakeID()
	}
	return c.joinID(append([]string{c.Scenario, c.Placement, c.Protocol}, c.Modes()...)...)
}

// joinID joins the leading parts of an id and the scale suffixes of the case's set scale
// dimensions with "/".
func (c Case) joinID(parts ...string) string {
	for _, d := range c.Dims() {
		if d.Set {
			parts = append(parts, fmt.Sprintf("%s=%d", d.Key, d.Value))
		}
	}
	return strings.Join(parts, "/")
}

// Dim is one scale dimension of a case: its key in case ids ("svc"), the label it is known by
// ("services"), its value, whether it is set (only set dimensions are in the id) and whether
// it is a sweep a reader plots results against (an A/A copy number is not).
type Dim struct {
	Key   string
	Name  string
	Value int
	Set   bool
	Sweep bool
}

// Dims lists the case's scale dimensions in id order: the Int parameters with an id key
// (internal/param), then the lab's MTU and node count and the copy number. Ids, report sweeps
// and pivot tables all follow it.
func (c Case) Dims() []Dim {
	var out []Dim
	for _, p := range param.All() {
		if p.Kind == param.Int && p.ID != "" {
			v := c.intOf(p)
			out = append(out, Dim{Key: p.ID, Name: p.Label, Value: p.Shown(v), Set: p.InID(v), Sweep: p.Sweep})
		}
	}
	return append(out,
		Dim{Key: "mtu", Name: "mtu", Value: c.MTU, Set: c.MTU != 0 && c.MTU != DefaultMTU, Sweep: true},
		Dim{Key: "nodes", Name: "nodes", Value: c.Nodes, Set: c.Nodes != 0 && c.Nodes != DefaultNodes, Sweep: true},
		Dim{Key: "copy", Name: "copy", Value: c.Copy, Set: c.Copy > 1})
}

// Load is how many objects the case loads its cluster with beyond the measuring pods, as its
// parameters say (param.Param.Load): Services, NetworkPolicies, silent pods, server replicas
// past the first, network functions past the first of a chain and their firewall rules, noisy
// neighbours. Cases with no load can share a data plane without changing what each measures.
func (c Case) Load() int {
	n := 0
	for _, p := range param.All() {
		if p.Kind == param.Int {
			n += p.LoadOf(c.intOf(p))
		}
	}
	return n
}

// named are the id prefixes ("proxy=") of the Word parameters that name a part of the case's
// variant: param.Named ones, or with variants too.
func named(variants bool) []string {
	var out []string
	for _, p := range param.All() {
		if p.Kind == param.Word && p.ID != "" && (p.Place == param.Named || variants && p.Place == param.Variant) {
			out = append(out, p.ID+"=")
		}
	}
	return out
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// NamesParts tells whether the case's id names a lab part (WithParts: a proxy or policy
// engine chosen in place of its preset's).
func (c Case) NamesParts() bool {
	pre := named(false)
	for _, part := range strings.Split(c.ID, "/") {
		if hasPrefix(part, pre) {
			return true
		}
	}
	return false
}

// WithParts returns the id with the case's named parts appended ("/proxy=nftables"), those
// of the parameters (of place param.Named) whose keys its plan names: a plan that names
// them (to compare implementations on one data plane) gets ids that tell the cases apart; a
// case on the preset's own parts keeps the plain id.
func (c Case) WithParts(names ...string) string {
	id := c.MakeID()
	for _, p := range param.All() {
		if p.Kind == param.Word && p.ID != "" && p.Place == param.Named && slices.Contains(names, p.Key) {
			if v := c.wordOf(p); v != "" {
				id += "/" + p.ID + "=" + v
			}
		}
	}
	return id
}

// Variant is what a case ran on: its dataplane, plus the named parts and variant parts its id
// has ("flannel proxy=nftables", a chain's "bare nf=xdp", a VNF's "flannel vnf=userspace").
// Reports give each variant a column of its own.
func (c Case) Variant() string {
	v := c.Dataplane
	pre := named(true)
	for _, part := range strings.Split(c.ID, "/") {
		if hasPrefix(part, pre) {
			v += " " + part
		}
	}
	return v
}

// Primary is the metric a case is judged by: received throughput for streams, the
// transaction rate for request/response and connect/request/response, for HTTP the seed's
// time to first byte (mean of the central 4 of 6 fetches; lower is better); a scenario that
// measures something else names its own (RegisterScenario: the reaction scenario's time until
// traffic reaches a new endpoint, a VNF's no-drop rate).
func (c Case) Primary() string {
	if j, ok := judges[c.Scenario]; ok && j.Primary != nil {
		return j.Primary(c)
	}
	switch c.Protocol {
	case "tcp", "udp":
		return "throughput_bps"
	case "http":
		return "ttfb_seed_ms"
	}
	return "transactions_per_s"
}

// Judge is what a scenario tells this package about its cases (RegisterScenario), so that
// ids, comparisons and reports need no switch on scenario names.
type Judge struct {
	// Primary is the metric a case is judged by (nil: the protocol's, as Primary says).
	Primary func(Case) string
	// NoBaseline: no baseline case measures what the scenario does (BaselineID is "").
	NoBaseline bool
	// Charted are metrics besides the primary one that reports chart in sweeps (nil: none).
	Charted func(Case) []string
	// Service says whether a case's client reaches its server through a Service (nil: only a
	// case with Services does).
	Service func(Case) bool
}

// ThroughService tells whether the case's client reaches its server through a Service, as its
// scenario says (any case that stands Services does).
func (c Case) ThroughService() bool {
	if j, ok := judges[c.Scenario]; ok && j.Service != nil && j.Service(c) {
		return true
	}
	return c.Services > 0
}

// Charted are the metrics besides Primary that reports chart against a swept dimension (a
// VNF's PDR beside its NDR), as the case's scenario says.
func (c Case) Charted() []string {
	if j, ok := judges[c.Scenario]; ok && j.Charted != nil {
		return j.Charted(c)
	}
	return nil
}

var judges = map[string]Judge{}

// RegisterScenario records what scenario name's cases are judged by; internal/scenario's
// Register calls it for every scenario.
func RegisterScenario(name string, j Judge) { judges[name] = j }

// BaselineID names the baseline case a pod result is compared with: the bare veth pair for
// intra-node cases, node to node over the underlay for inter-node cases, same protocol,
// workload (streams, message size) and lab shape (MTU, nodes). "" for baselines and scenarios no baseline measures the same
// (Judge.NoBaseline: reaction times, VNF rates).
func (c Case) BaselineID() string {
	if c.IsBaseline() || judges[c.Scenario].NoBaseline {
		return ""
	}
	b := Case{Scenario: BaselineScenario, Dataplane: Bare, Placement: "intra", Protocol: c.Protocol, MTU: c.MTU, Nodes: c.Nodes}
	for _, p := range param.All() {
		if p.Workload && p.Kind == param.Int {
			b.SetInt(p.Key, c.intOf(p))
		} else if p.Workload {
			b.SetWord(p.Key, c.wordOf(p))
		}
	}
	if c.Placement == "inter" {
		b.Dataplane, b.Placement = Node2Node, "inter"
	}
	return b.MakeID()
}

// IsDuration tells whether a metric is a duration by its unit (_s, _ms, _us; a rate _per_s is
// not one, nor a clock offset, which has a sign): a duration is never negative.
func IsDuration(metric string) bool {
	if strings.HasSuffix(metric, "_per_s") || strings.Contains(metric, "_offset_") {
		return false
	}
	return strings.HasSuffix(metric, "_s") || strings.HasSuffix(metric, "_ms") || strings.HasSuffix(metric, "_us")
}

// Slug is the case id made safe for a file or directory name.
func (c Case) Slug() string {
	r := strings.NewReplacer("/", "-", "=", "", " ", "_")
	return r.Replace(c.ID)
}

// Trial is one line of results.jsonl.
type Trial struct {
	Run       string             `json:"run"`
	Case      Case               `json:"case"`
	Trial     int                `json:"trial"`
	Warmup    bool               `json:"warmup,omitempty"`
	Start     string             `json:"start"`
	DurationS float64            `json:"duration_s"`
	Metrics   map[string]float64 `json:"metrics"`
	Raw       string             `json:"raw,omitempty"`
	Error     string             `json:"error,omitempty"`
	// Conditions the trial ran under that are not case labels (pinned CPUs, underlay MTU, nodes).
	Conditions map[string]any `json:"conditions,omitempty"`
	// Status is "ok" for a measured trial, "skipped" when the case cannot run here (Error
	// holds the reason), "failed" when the tool failed and "disturbed" when the hypervisor took
	// more CPU (steal) than the run allows: a disturbed trial keeps its metrics, is left out of
	// the statistics and is run again.
	Status string `json:"status,omitempty"`
	// Notes say what was done to the tool's figures (a value out of range left out, ...).
	Notes []string `json:"notes,omitempty"`
	// Accounting is where the trial's CPU time and packets went: per CPU, per role, per hop
	// (nil where the backend does not account or the run turned it off).
	Accounting *account.Trial `json:"accounting,omitempty"`
}

// Condition keys under which a trial records the command lines it ran (Trial.Conditions), as
// one string each: the server's (started at set-up) and the measuring client's.
const (
	ServerCommandKey = "server_command"
	ClientCommandKey = "client_command"
)

// EffectiveStatus normalizes a trial's status to "ok", "skipped", "disturbed" or "failed": an
// empty Status (a trial recorded before statuses) is "ok" unless Error is set, and any unknown
// status is "failed".
func (t Trial) EffectiveStatus() string {
	switch t.Status {
	case "ok", "skipped", "disturbed":
		return t.Status
	case "":
		if t.Error != "" {
			return "failed"
		}
		return "ok"
	default:
		return "failed"
	}
}

// Measured tells whether a trial counts in the statistics: not a warm-up, and ok.
func (t Trial) Measured() bool { return !t.Warmup && t.EffectiveStatus() == "ok" }

// MetricSummary is the aggregate of one metric over a case's trials.
type MetricSummary struct {
	N           int     `json:"n"`
	Mean        float64 `json:"mean"`
	TrimmedMean float64 `json:"trimmed_mean"`
	Median      float64 `json:"median"`
	Stdev       float64 `json:"stdev"`
	CI95Low     float64 `json:"ci95_low"`
	CI95High    float64 `json:"ci95_high"`
	CV          float64 `json:"cv"`
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
}

// CaseResult is a case's trials aggregated.
type CaseResult struct {
	Case    Case                     `json:"case"`
	Status  string                   `json:"status"` // ok | skipped | failed
	Reason  string                   `json:"reason,omitempty"`
	Metrics map[string]MetricSummary `json:"metrics,omitempty"`
	// Disturbed counts the trials left out because the hypervisor took too much CPU; Lost is
	// how many of them were not made good by a re-run (the re-run bound was reached).
	Disturbed int `json:"disturbed,omitempty"`
	Lost      int `json:"lost,omitempty"`
	// Convergence is set when the run had a CI target (--ci-target).
	Convergence *Convergence `json:"convergence,omitempty"`
	// Notes are the distinct notes of the case's trials.
	Notes []string `json:"notes,omitempty"`
	// Accounting is the mean accounting of the case's measured trials, and Verdict what it
	// says limited the case (nil when no trial was accounted).
	Accounting *account.Trial   `json:"accounting,omitempty"`
	Verdict    *account.Verdict `json:"verdict,omitempty"`
}

// Convergence says whether a case's headline CI reached the run's target.
type Convergence struct {
	TargetPct    float64 `json:"target_pct"`     // wanted: 95 % CI half-width within this % of the headline value
	HalfWidthPct float64 `json:"half_width_pct"` // reached
	Converged    bool    `json:"converged"`
	Trials       int     `json:"trials"`           // measured trials in the statistics
	Reason       string  `json:"reason,omitempty"` // why it stopped without converging
}

// RatioSummary is a paired comparison of one metric between two cases: the ratio
// case/reference over the rounds in which both were measured, from the log ratios of each
// round (its geometric mean, trimmed as the headline statistic), with a 95 % interval.
type RatioSummary struct {
	N        int     `json:"n"` // rounds paired
	Ratio    float64 `json:"ratio"`
	CI95Low  float64 `json:"ci95_low"`
	CI95High float64 `json:"ci95_high"`
}

// OfVariants tells whether a comparison sets two variants of one measurement against each other
// (another backend, dataplane, proxy, policy engine or network-function kind).
func (c Comparison) OfVariants() bool {
	switch c.Kind {
	case "backend", "dataplane", "proxy", "policy", "nf":
		return true
	}
	return false
}

// Differs tells whether the interval excludes 1.0: only then do the two cases differ.
func (r RatioSummary) Differs() bool { return r.N >= 2 && (r.CI95Low > 1 || r.CI95High < 1) }

// KindBaseline is the Kind of a comparison of a pod result against its baseline
// (Case.BaselineID).
const KindBaseline = "baseline"

// Comparison is one paired comparison inside a run.
type Comparison struct {
	Case      string `json:"case"`      // case id
	Reference string `json:"reference"` // case id of what it is compared with
	// Kind says what differs: "baseline" (a pod result against its baseline; "baseline-p99"
	// for the P99 latency of request/response cases), "dataplane", "nf",
	// "proxy", "policy", "scale" (services, policies, pods, replicas, chain length or rules against the smallest),
	// "sync" (the lab's full programming of a change against its partial one, or the other way),
	// "copy" (an A/A copy against the first).
	Kind   string `json:"kind"`
	Metric string `json:"metric"`
	RatioSummary
}

// NoiseFloorKey is where a run's environment carries the host's last noise floor.
const NoiseFloorKey = "noise_floor"

// NoiseFloor is what `cnibench doctor --noise` measured: one case as two identical copies in
// rounds (an A/A test). Every later run records it in its environment (NoiseFloorKey).
type NoiseFloor struct {
	Measured  string  `json:"measured"` // RFC 3339
	Case      string  `json:"case"`
	Trials    int     `json:"trials"`     // rounds paired
	DurationS int     `json:"duration_s"` // per trial
	Ratio     float64 `json:"ratio"`      // A/A: copy 2 / copy 1
	CI95Low   float64 `json:"ci95_low"`
	CI95High  float64 `json:"ci95_high"`
	// ResolvablePct is the smallest difference between two cases this host tells apart with
	// this many trials: the half-width of the A/A ratio's interval (on the log scale), in %.
	ResolvablePct float64 `json:"resolvable_pct"`
	Disturbed     int     `json:"disturbed_trials"`
	Run           string  `json:"run"`
}

// NoiseFloorOf is the noise floor an environment (as decoded from summary.json) carries.
func NoiseFloorOf(env map[string]any) (NoiseFloor, bool) {
	v, ok := env[NoiseFloorKey]
	if !ok {
		return NoiseFloor{}, false
	}
	b, err := json.Marshal(v)
	var nf NoiseFloor
	if err != nil || json.Unmarshal(b, &nf) != nil || nf.Trials == 0 {
		return NoiseFloor{}, false
	}
	return nf, true
}

// Summary is summary.json.
type Summary struct {
	Run         string         `json:"run"`
	Environment map[string]any `json:"environment"`
	Results     []CaseResult   `json:"results"`
	Comparisons []Comparison   `json:"comparisons,omitempty"`
}

// CaseSpec is a case with the conditions it runs under: what a plan expands into and what a
// run records in plan.json so that --resume can finish it.
type CaseSpec struct {
	Case     Case   `json:"case"`
	Repeat   int    `json:"repeat"`
	Duration int    `json:"duration"`
	Warmup   int    `json:"warmup"`
	CPUs     [2]int `json:"cpus"`
}
