// Package plan turns a YAML plan file and/or command-line flags into a validated, expanded
// list of benchmark cases.
//
// A plan file is a YAML list of case groups. Each group names a scenario and the dimensions
// to sweep; its keys are the same as the command-line flags:
//
//   - scenario: baseline
//     dataplane: [bare, node2node]
//     protocol: [tcp, udp, rr, crr]
//     repeat: 3
//     duration: 2
//   - scenario: p2p
//     dataplane: [flannel, calico]
//     placement: [intra, inter]
//
// List keys may also be written as a single scalar ("protocol: tcp") or a comma-separated
// scalar ("protocol: tcp, udp"), as on the command line. Load parses a file into Groups,
// FromFlags builds a Group from flag values, Merge lays flags over a plan, Validate checks
// groups against a Catalog and Expand turns them into the ordered list of CaseSpecs.
//
// Every error is one line naming the source, the field path and the fix, e.g.
//
//	plans/x.yaml: [1].protocol[2]: unknown protocol "tcpp" for scenario p2p (valid: tcp, udp, rr, crr, udprr)
//	--repeat: 0 out of range (1..1000)
package plan

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

// Keys are the keys of a case group, in the order they are documented and checked. They are
// also the names of the command-line flags (without "--").
var Keys = []string{
	"scenario", "dataplane", "placement", "protocol",
	"services", "policies", "pods", "replicas", "proxy", "policy", "nf", "chain-length", "rules",
	"external-traffic-policy", "vnf", "cpu-limit", "cpu-isolation", "frame-size", "lb",
	"search", "noisy", "noisy-cpu-limit", "change", "sync", "streams", "msg-size", "fragment",
	"repeat", "duration", "warmup", "cpus", "mtu", "nodes", "copies",
}

// Placements are the placements a scenario allows when its scenario.Info.Placements is nil.
var Placements = []string{"intra", "inter"}

// ExternalTrafficPolicies are the values of key external-traffic-policy: a NodePort Service's
// externalTrafficPolicy, Kubernetes' Cluster and Local in lower case.
var ExternalTrafficPolicies = []string{"cluster", "local"}

// CPUIsolations are the values of key cpu-isolation: a VNF pod's CPUs shared with the node's
// other pods (Kubernetes' Burstable) or exclusive to it (Guaranteed, static CPU manager).
var CPUIsolations = []string{"shared", "exclusive"}

// LoadBalancers are the values of key lb: what spreads a VNF's traffic over its replicas, a
// Service (the data plane's proxy) or an ingress (a user-space UDP load balancer pod).
// (on the generator's node; ingress-remote: on the other node, as seed 002's Ingress
// controller moved off the node traffic enters by).
var LoadBalancers = []string{"service", "ingress", "ingress-remote"}

// SyncModes are the values of key sync: how the lab's proxy programs a change, only what
// changed (as kube-proxy's partial syncs do) or every Service again (a full resync).
var SyncModes = []string{"partial", "full"}

// FragmentModes are the values of key fragment: "allow" sends UDP messages larger than one
// packet at the pod MTU fragmented.
var FragmentModes = []string{result.FragmentAllow}

// Catalog describes what this build and host can run.
type Catalog struct {
	Scenarios  map[string]scenario.Info     // the plan reads Dataplanes, Placements, Protocols, their defaults, Params, Valid and Check
	Dataplanes []string                     // lab presets
	Tools      func(protocol string) string // protocol -> tool name for Case.Tool; nil = ""
	NumCPU     int                          // CPUs of this host; 0 = unknown (only >= 0 is checked)
	// Proxies and Policies are the lab's Service implementations and policy engines, NFs the
	// network-function kinds of chains (nil = any value is accepted).
	Proxies, Policies, NFs []string
	// VNFs are the kinds of packet-forwarding VNF of the vnf scenario (nil = any).
	VNFs []string
	// Searches are the ways a VNF trial finds its rates (nil = any).
	Searches []string
	// Changes are the kinds of change the change scenario makes (nil = any).
	Changes []string
}

// Group is one case group of a plan (or the flags). A nil slice or pointer means the key is
// unset: the scenario's default or Defaults applies, and Merge leaves the base value alone.
// An empty Scenario is unset too.
type Group struct {
	Scenario  string   `yaml:"scenario,omitempty"`
	Dataplane []string `yaml:"dataplane,omitempty,flow"`
	Placement []string `yaml:"placement,omitempty,flow"`
	Protocol  []string `yaml:"protocol,omitempty,flow"`
	Services  []int    `yaml:"services,omitempty,flow"`
	Policies  []int    `yaml:"policies,omitempty,flow"`
	Pods      []int    `yaml:"pods,omitempty,flow"`
	Replicas  []int    `yaml:"replicas,omitempty,flow"`
	Proxy     []string `yaml:"proxy,omitempty,flow"`
	Policy    []string `yaml:"policy,omitempty,flow"`
	// NF, ChainLength and Rules sweep a service-function chain's network-function kinds, its
	// length and its NFs' firewall rule counts; VNF, CPULimit, CPUIsolation and FrameSize a
	// packet-forwarding VNF's kind, CPU limit (millicores, 0 = none) and isolation, the frame
	// size its traffic has, and its load balancer.
	NF           []string `yaml:"nf,omitempty,flow"`
	ChainLength  []int    `yaml:"chain-length,omitempty,flow"`
	Rules        []int    `yaml:"rules,omitempty,flow"`
	VNF          []string `yaml:"vnf,omitempty,flow"`
	CPULimit     []int    `yaml:"cpu-limit,omitempty,flow"`
	CPUIsolation []string `yaml:"cpu-isolation,omitempty,flow"`
	FrameSize    []int    `yaml:"frame-size,omitempty,flow"`
	LB           []string `yaml:"lb,omitempty,flow"`
	// Search sweeps how a VNF trial finds its rates (mlr, binary, ramp); Noisy the CPU-bound
	// pods beside the VNF and NoisyCPULimit their CPU limit (millicores, 0 = none).
	Search        []string `yaml:"search,omitempty,flow"`
	Noisy         []int    `yaml:"noisy,omitempty,flow"`
	NoisyCPULimit []int    `yaml:"noisy-cpu-limit,omitempty,flow"`
	// Change sweeps the kind of change the change scenario makes (service-add, ...); Sync how
	// the lab's proxy programs it (partial, full).
	Change []string `yaml:"change,omitempty,flow"`
	Sync   []string `yaml:"sync,omitempty,flow"`
	// Streams sweeps the parallel streams of a trial (iperf3 -P; for rr and crr concurrent
	// netperf instances), MsgSize its message size in bytes (iperf3 -l, netperf -r).
	Streams []int `yaml:"streams,omitempty,flow"`
	MsgSize []int `yaml:"msg-size,omitempty,flow"`
	// Fragment "allow" lets a UDP message larger than one packet at the pod MTU be sent
	// fragmented (unset: such a case is skipped).
	Fragment []string `yaml:"fragment,omitempty,flow"`
	Repeat   *int     `yaml:"repeat,omitempty"`   // trials per case
	Duration *int     `yaml:"duration,omitempty"` // seconds per trial
	Warmup   *int     `yaml:"warmup,omitempty"`   // seconds of the warm-up trial; 0 = none
	CPUs     *[2]int  `yaml:"cpus,omitempty,flow"`
	MTU      *int     `yaml:"mtu,omitempty"` // underlay MTU
	Nodes    *int     `yaml:"nodes,omitempty"`
	Copies   *int     `yaml:"copies,omitempty"` // identical copies of each case (an A/A test); default 1

	// ExternalTrafficPolicy sweeps the externalTrafficPolicy of a NodePort Service reached from
	// outside the cluster (n2s): cluster, local.
	ExternalTrafficPolicy []string `yaml:"external-traffic-policy,omitempty,flow"`

	// Source is where the group came from (the plan file path, or "flags"); Validate and
	// Expand name it in errors. Load and FromFlags set it.
	Source string `yaml:"-"`

	// flagKeys are the keys Merge took from the flags; errors about them name the flag.
	flagKeys map[string]bool
}

// Defaults are the values used for keys no group sets.
type Defaults struct {
	Repeat, Duration, Warmup int
	CPUs                     [2]int
	MTU, Nodes               int
}

// BuiltinDefaults returns the built-in defaults: 12 trials of 10 s after a 2 s warm-up trial,
// client on CPU 0 and server on CPU 1, underlay MTU 1500, 2 nodes (result.DefaultMTU and
// result.DefaultNodes: a case id names its MTU and node count only when they differ).
func BuiltinDefaults() Defaults {
	return Defaults{Repeat: 12, Duration: 10, Warmup: 2, CPUs: [2]int{0, 1}, MTU: result.DefaultMTU, Nodes: result.DefaultNodes}
}

// CaseSpec is one expanded case with its run parameters (defined in result, where runs
// record it).
type CaseSpec = result.CaseSpec

// Error is a plan error: Source (a file path; empty for flags), Path (e.g. "[1].protocol[2]"
// or "--protocol") and Msg. Error() joins the non-empty parts with ": ".
type Error struct {
	Source, Path, Msg string
}

func (e *Error) Error() string {
	parts := make([]string, 0, 3)
	for _, s := range []string{e.Source, e.Path, e.Msg} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// Name is the plan name of a plan file: plans/quick.yaml -> "quick".
func Name(path string) string {
	if path == "" {
		return ""
	}
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// Merge lays the keys set in over (usually the flags) on every group of base: a set key of
// over replaces the same key in each group (scenario included). Errors about those keys then
// name the flag ("--repeat") instead of the plan file. With no base groups the result is over
// alone. base is not modified.
func Merge(base []Group, over Group) []Group {
	if len(base) == 0 {
		g := over.clone()
		if g.Source == "" {
			g.Source = "flags"
		}
		return []Group{g}
	}
	out := make([]Group, len(base))
	for i, b := range base {
		g := b.clone()
		for _, k := range Keys {
			if !over.isSet(k) {
				continue
			}
			g.copyKey(k, &over)
			if g.flagKeys == nil {
				g.flagKeys = map[string]bool{}
			}
			g.flagKeys[k] = true
		}
		out[i] = g
	}
	return out
}

func ptrClone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func (g Group) clone() Group {
	c := g
	c.Dataplane = slices.Clone(g.Dataplane)
	c.Placement = slices.Clone(g.Placement)
	c.Protocol = slices.Clone(g.Protocol)
	c.Services = slices.Clone(g.Services)
	c.Policies = slices.Clone(g.Policies)
	c.Pods = slices.Clone(g.Pods)
	c.Replicas = slices.Clone(g.Replicas)
	c.Proxy = slices.Clone(g.Proxy)
	c.Policy = slices.Clone(g.Policy)
	c.NF = slices.Clone(g.NF)
	c.ChainLength = slices.Clone(g.ChainLength)
	c.Rules = slices.Clone(g.Rules)
	c.VNF = slices.Clone(g.VNF)
	c.CPULimit = slices.Clone(g.CPULimit)
	c.CPUIsolation = slices.Clone(g.CPUIsolation)
	c.FrameSize = slices.Clone(g.FrameSize)
	c.LB = slices.Clone(g.LB)
	c.Search = slices.Clone(g.Search)
	c.Change = slices.Clone(g.Change)
	c.Sync = slices.Clone(g.Sync)
	c.Noisy = slices.Clone(g.Noisy)
	c.NoisyCPULimit = slices.Clone(g.NoisyCPULimit)
	c.Streams = slices.Clone(g.Streams)
	c.MsgSize = slices.Clone(g.MsgSize)
	c.Fragment = slices.Clone(g.Fragment)
	c.ExternalTrafficPolicy = slices.Clone(g.ExternalTrafficPolicy)
	c.Repeat = ptrClone(g.Repeat)
	c.Duration = ptrClone(g.Duration)
	c.Warmup = ptrClone(g.Warmup)
	c.CPUs = ptrClone(g.CPUs)
	c.MTU = ptrClone(g.MTU)
	c.Nodes = ptrClone(g.Nodes)
	c.Copies = ptrClone(g.Copies)
	if g.flagKeys != nil {
		c.flagKeys = make(map[string]bool, len(g.flagKeys))
		for k, v := range g.flagKeys {
			c.flagKeys[k] = v
		}
	}
	return c
}

// strList and intList return the list field of key k (nil for scalar keys).
func (g *Group) strList(k string) *[]string {
	switch k {
	case "dataplane":
		return &g.Dataplane
	case "placement":
		return &g.Placement
	case "protocol":
		return &g.Protocol
	case "proxy":
		return &g.Proxy
	case "policy":
		return &g.Policy
	case "nf":
		return &g.NF
	case "external-traffic-policy":
		return &g.ExternalTrafficPolicy
	case "vnf":
		return &g.VNF
	case "cpu-isolation":
		return &g.CPUIsolation
	case "lb":
		return &g.LB
	case "search":
		return &g.Search
	case "change":
		return &g.Change
	case "sync":
		return &g.Sync
	case "fragment":
		return &g.Fragment
	}
	return nil
}

func (g *Group) intList(k string) *[]int {
	switch k {
	case "services":
		return &g.Services
	case "policies":
		return &g.Policies
	case "pods":
		return &g.Pods
	case "replicas":
		return &g.Replicas
	case "chain-length":
		return &g.ChainLength
	case "rules":
		return &g.Rules
	case "cpu-limit":
		return &g.CPULimit
	case "frame-size":
		return &g.FrameSize
	case "noisy":
		return &g.Noisy
	case "noisy-cpu-limit":
		return &g.NoisyCPULimit
	case "streams":
		return &g.Streams
	case "msg-size":
		return &g.MsgSize
	}
	return nil
}

func (g *Group) intPtr(k string) **int {
	switch k {
	case "repeat":
		return &g.Repeat
	case "duration":
		return &g.Duration
	case "warmup":
		return &g.Warmup
	case "mtu":
		return &g.MTU
	case "nodes":
		return &g.Nodes
	case "copies":
		return &g.Copies
	}
	return nil
}

func (g *Group) isSet(k string) bool {
	switch {
	case k == "scenario":
		return g.Scenario != ""
	case k == "cpus":
		return g.CPUs != nil
	case g.strList(k) != nil:
		return *g.strList(k) != nil
	case g.intList(k) != nil:
		return *g.intList(k) != nil
	case g.intPtr(k) != nil:
		return *g.intPtr(k) != nil
	}
	return false
}

func (g *Group) copyKey(k string, from *Group) {
	switch {
	case k == "scenario":
		g.Scenario = from.Scenario
	case k == "cpus":
		g.CPUs = ptrClone(from.CPUs)
	case g.strList(k) != nil:
		*g.strList(k) = slices.Clone(*from.strList(k))
	case g.intList(k) != nil:
		*g.intList(k) = slices.Clone(*from.intList(k))
	case g.intPtr(k) != nil:
		*g.intPtr(k) = ptrClone(*from.intPtr(k))
	}
}
