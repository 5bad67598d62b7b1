// Package result holds the result schema (the contract between runner, reports and exports),
// the append-only JSONL trial store and the summary writers.
package result

import (
	"fmt"
	"strings"
)

// Case is one point of the benchmark matrix. Its fields are the case labels of DESIGN.md;
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
}

// MakeID builds the case id "scenario/dataplane/placement/protocol", with scale suffixes
// (e.g. "/svc=100") only when a scale dimension is set, so ids stay stable across backends.
func (c Case) MakeID() string {
	return c.joinID(c.Scenario, c.Dataplane, c.Placement, c.Protocol)
}

// CompareKey is the case id without its dataplane ("p2p/inter/tcp"): the same measurement on
// different data planes or backends (p2p/flannel/inter/tcp on the lab, p2p/cluster/inter/tcp
// on a cluster) has the same key. A baseline's dataplane is the measurement itself (the bare
// veth pair, node to node), so a baseline's key is its id.
func (c Case) CompareKey() string {
	if c.Scenario == "baseline" {
		return c.MakeID()
	}
	return c.joinID(c.Scenario, c.Placement, c.Protocol)
}

// joinID joins the leading parts of an id and the scale suffixes of the case's set scale
// dimensions with "/".
func (c Case) joinID(parts ...string) string {
	if c.Services > 0 {
		parts = append(parts, fmt.Sprintf("svc=%d", c.Services))
	}
	if c.Policies > 0 {
		parts = append(parts, fmt.Sprintf("pol=%d", c.Policies))
	}
	if c.Pods > 0 {
		parts = append(parts, fmt.Sprintf("pods=%d", c.Pods))
	}
	if c.Replicas > 1 {
		parts = append(parts, fmt.Sprintf("rep=%d", c.Replicas))
	}
	return strings.Join(parts, "/")
}

// WithParts returns the id with the case's proxy and policy appended ("/proxy=nftables"): a
// plan that names them (to compare implementations on one data plane) gets ids that tell the
// cases apart; a case on the preset's own parts keeps the plain id.
func (c Case) WithParts(proxy, policy bool) string {
	id := c.MakeID()
	if proxy && c.Proxy != "" {
		id += "/proxy=" + c.Proxy
	}
	if policy && c.Policy != "" {
		id += "/policy=" + c.Policy
	}
	return id
}

// Variant is what a case ran on: its dataplane, plus the proxy and policy when its id names
// them ("flannel proxy=nftables"). Reports give each variant a column of its own.
func (c Case) Variant() string {
	v := c.Dataplane
	for _, part := range strings.Split(c.ID, "/") {
		if strings.HasPrefix(part, "proxy=") || strings.HasPrefix(part, "policy=") {
			v += " " + part
		}
	}
	return v
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
	// holds the reason) and "failed" when the tool failed.
	Status string `json:"status,omitempty"`
}

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
}

// Summary is summary.json.
type Summary struct {
	Run         string         `json:"run"`
	Environment map[string]any `json:"environment"`
	Results     []CaseResult   `json:"results"`
}

// CaseSpec is a case with the conditions it runs under: what a plan expands into and what a
// run records in plan.json so that --resume can finish it.
type CaseSpec struct {
	Case     Case   `json:"case"`
	Repeat   int    `json:"repeat"`
	Duration int    `json:"duration"`
	Warmup   int    `json:"warmup"`
	CPUs     [2]int `json:"cpus"`
	MTU      int    `json:"mtu"`
	Nodes    int    `json:"nodes"`
}
