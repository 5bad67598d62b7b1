package plan

import (
	"github.com/cnibench/cnibench/internal/scenario"

	"fmt"
	"slices"
	"sort"
	"strings"
)

// paramKeys are the keys a scenario uses only when its Info.Params name them.
var paramKeys = []string{"services", "policies", "pods", "replicas", "proxy", "policy", "nf", "chain-length", "rules", "external-traffic-policy",
	"vnf", "cpu-limit", "cpu-isolation", "frame-size", "lb", "search", "noisy", "noisy-cpu-limit", "change", "sync",
	"streams", "msg-size", "fragment"}

// bounds is the inclusive range of an integer key.
type bounds struct{ lo, hi int }

// ranges are the allowed values of the integer keys (cpus is checked against Catalog.NumCPU).
var ranges = map[string]bounds{
	"services":        {0, 100000},
	"policies":        {0, 100000},
	"pods":            {0, 100000},
	"replicas":        {1, 1000},
	"chain-length":    {1, 32},
	"rules":           {1, 100000},
	"cpu-limit":       {0, 64000},
	"frame-size":      {64, 1518},
	"noisy":           {0, 64},
	"noisy-cpu-limit": {0, 64000},
	"streams":         {1, 64},
	"msg-size":        {1, 1 << 20}, // iperf3's largest TCP block; a protocol's own limit is its driver's
	"repeat":          {1, 1000},
	"duration":        {1, 3600},
	"warmup":          {0, 600},
	"mtu":             {576, 9000}, // the pod MTU after overlay overhead is the lab's to check
	"nodes":           {2, 64},
	"copies":          {1, 10},
}

// Validate checks groups against the catalog and returns the first problem as a one-line
// *Error naming the source, the field path and the fix. source names the groups in errors;
// "" means each group's own Source. With source "flags" paths are flag names ("--protocol");
// otherwise they are plan paths ("[1].protocol[2]"). Keys Merge took from the flags are
// always named as flags.
func Validate(groups []Group, cat Catalog, source string) error {
	if len(groups) == 0 {
		if source == "flags" {
			return &Error{Path: "--scenario", Msg: fmt.Sprintf("missing scenario (one of %s)", oneOf(scenarioNames(cat)))}
		}
		return &Error{Source: source, Msg: "empty plan (want at least one case group)"}
	}
	for i := range groups {
		if err := validateGroup(checker{source: source, i: i, g: &groups[i]}, cat); err != nil {
			return err
		}
	}
	return nil
}

// checker builds the errors of one group.
type checker struct {
	source string
	i      int
	g      *Group
}

// fail returns the error for key (and list index idx, -1 for none); key "" is the group.
func (c checker) fail(key string, idx int, format string, args ...any) error {
	src := c.source
	if src == "" {
		src = c.g.Source
	}
	msg := fmt.Sprintf(format, args...)
	if src == "flags" || c.g.flagKeys[key] {
		if key == "" {
			key = "scenario"
		}
		return &Error{Path: "--" + key, Msg: msg}
	}
	path := fmt.Sprintf("[%d]", c.i)
	if key != "" {
		path += "." + key
	}
	if idx >= 0 {
		path += fmt.Sprintf("[%d]", idx)
	}
	return &Error{Source: src, Path: path, Msg: msg}
}

func scenarioNames(cat Catalog) []string {
	names := make([]string, 0, len(cat.Scenarios))
	for n := range cat.Scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func oneOf(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

func allowedDataplanes(info scenario.Info, cat Catalog) []string {
	if info.Dataplanes != nil {
		return info.Dataplanes
	}
	return cat.Dataplanes
}

func allowedPlacements(info scenario.Info) []string {
	if info.Placements != nil {
		return info.Placements
	}
	return Placements
}

// resolved are a group's dimensions with the defaults filled in.
type resolved struct {
	dataplanes, placements, protocols, proxies, policyNames, nfs []string
	services, policies, pods, replicas, lengths, rules           []int
	etps                                                         []string // externalTrafficPolicy
	vnfs, isolations, lbs, searches, changes, syncs, fragments   []string
	cpuLimits, frameSizes, noisy, noisyLimits, streams, msgSizes []int
}

func orStr(v, def []string) []string {
	if v != nil {
		return v
	}
	return def
}

func orInt(v, def []int) []int {
	if v != nil {
		return v
	}
	return def
}

func resolveGroup(g *Group, info scenario.Info, cat Catalog) resolved {
	dps := info.DefaultDataplanes
	if len(dps) == 0 {
		dps = allowedDataplanes(info, cat)
	}
	protos := info.DefaultProtocols
	if len(protos) == 0 {
		protos = info.Protocols
	}
	return resolved{
		dataplanes:  orStr(g.Dataplane, dps),
		placements:  orStr(g.Placement, allowedPlacements(info)),
		protocols:   orStr(g.Protocol, protos),
		proxies:     orStr(g.Proxy, []string{""}),
		policyNames: orStr(g.Policy, []string{""}),
		services:    orInt(g.Services, orInt(info.DefaultInts["services"], []int{0})),
		policies:    orInt(g.Policies, orInt(info.DefaultInts["policies"], []int{0})),
		pods:        orInt(g.Pods, orInt(info.DefaultInts["pods"], []int{0})),
		replicas:    orInt(g.Replicas, orInt(info.DefaultInts["replicas"], []int{1})),
		nfs:         orStr(g.NF, orStr(info.DefaultNFs, []string{""})),
		lengths:     orInt(g.ChainLength, orInt(info.DefaultInts["chain-length"], []int{0})),
		rules:       orInt(g.Rules, orInt(info.DefaultInts["rules"], []int{0})),
		etps:        orStr(g.ExternalTrafficPolicy, orStr(info.DefaultStrs["external-traffic-policy"], []string{""})),
		vnfs:        orStr(g.VNF, orStr(info.DefaultStrs["vnf"], []string{""})),
		cpuLimits:   orInt(g.CPULimit, orInt(info.DefaultInts["cpu-limit"], []int{0})),
		isolations:  orStr(g.CPUIsolation, orStr(info.DefaultStrs["cpu-isolation"], []string{""})),
		frameSizes:  orInt(g.FrameSize, orInt(info.DefaultInts["frame-size"], []int{0})),
		lbs:         orStr(g.LB, orStr(info.DefaultStrs["lb"], []string{""})),
		searches:    orStr(g.Search, orStr(info.DefaultStrs["search"], []string{""})),
		changes:     orStr(g.Change, orStr(info.DefaultStrs["change"], []string{""})),
		syncs:       orStr(g.Sync, orStr(info.DefaultStrs["sync"], []string{""})),
		noisy:       orInt(g.Noisy, orInt(info.DefaultInts["noisy"], []int{0})),
		noisyLimits: orInt(g.NoisyCPULimit, orInt(info.DefaultInts["noisy-cpu-limit"], []int{0})),
		streams:     orInt(g.Streams, []int{0}),
		msgSizes:    orInt(g.MsgSize, []int{0}),
		fragments:   orStr(g.Fragment, []string{""}),
	}
}

func validateGroup(c checker, cat Catalog) error {
	g := c.g
	if g.Scenario == "" {
		return c.fail("", -1, "missing scenario (one of %s)", oneOf(scenarioNames(cat)))
	}
	info, ok := cat.Scenarios[g.Scenario]
	if !ok {
		return c.fail("scenario", -1, "unknown scenario %q (valid: %s)", g.Scenario, oneOf(scenarioNames(cat)))
	}

	// Keys the scenario does not use.
	for _, key := range paramKeys {
		if g.isSet(key) && !slices.Contains(info.Params, key) {
			uses := "none of them"
			if len(info.Params) > 0 {
				uses = strings.Join(info.Params, ", ")
			}
			return c.fail(key, -1, "scenario %s does not use %s (of %s it uses %s): remove it", g.Scenario, key, strings.Join(paramKeys, ", "), uses)
		}
	}

	// Enumerated string lists.
	enums := []struct {
		key     string
		vals    []string
		allowed []string // nil = any
	}{
		{"dataplane", g.Dataplane, allowedDataplanes(info, cat)},
		{"placement", g.Placement, allowedPlacements(info)},
		{"protocol", g.Protocol, info.Protocols},
	}
	for _, e := range enums {
		if e.vals != nil && len(e.vals) == 0 {
			return c.fail(e.key, -1, "empty list (remove the key to use the default)")
		}
		for i, v := range e.vals {
			if v == "" {
				return c.fail(e.key, i, "empty value")
			}
			if (e.allowed != nil || e.key != "protocol") && !slices.Contains(e.allowed, v) {
				return c.fail(e.key, i, "unknown %s %q for scenario %s (valid: %s)", e.key, v, g.Scenario, oneOf(e.allowed))
			}
		}
	}

	// Integer lists.
	for _, key := range []string{"services", "policies", "pods", "replicas", "chain-length", "rules", "cpu-limit", "frame-size", "noisy", "noisy-cpu-limit", "streams", "msg-size"} {
		vals := *g.intList(key)
		if vals != nil && len(vals) == 0 {
			return c.fail(key, -1, "empty list (remove the key to use the default)")
		}
		r := ranges[key]
		for i, v := range vals {
			if v < r.lo || v > r.hi {
				return c.fail(key, i, "%d out of range (%d..%d)", v, r.lo, r.hi)
			}
		}
	}

	// Free-form string lists.
	for _, key := range []string{"proxy", "policy", "nf", "external-traffic-policy", "vnf", "cpu-isolation", "lb", "search", "change", "sync", "fragment"} {
		vals := *g.strList(key)
		if vals != nil && len(vals) == 0 {
			return c.fail(key, -1, "empty list (remove the key to use the default)")
		}
		allowed := map[string][]string{"proxy": cat.Proxies, "policy": cat.Policies, "nf": cat.NFs, "external-traffic-policy": ExternalTrafficPolicies,
			"vnf": cat.VNFs, "cpu-isolation": CPUIsolations, "lb": LoadBalancers, "search": cat.Searches,
			"change": cat.Changes, "sync": SyncModes, "fragment": FragmentModes}[key]
		for i, v := range vals {
			if v == "" {
				return c.fail(key, i, "empty value")
			}
			if allowed != nil && !slices.Contains(allowed, v) {
				return c.fail(key, i, "unknown %s %q (valid: %s)", key, v, oneOf(allowed))
			}
		}
	}

	// Scalars.
	for _, key := range []string{"repeat", "duration", "warmup", "cpus", "mtu", "nodes", "copies"} {
		if key == "cpus" {
			if g.CPUs != nil {
				if msg := checkCPUs(*g.CPUs, cat.NumCPU); msg != "" {
					return c.fail("cpus", -1, "%s", msg)
				}
			}
			continue
		}
		if p := *g.intPtr(key); p != nil {
			if r := ranges[key]; *p < r.lo || *p > r.hi {
				return c.fail(key, -1, "%d out of range (%d..%d)", *p, r.lo, r.hi)
			}
		}
	}

	// What the group expands to.
	res := resolveGroup(g, info, cat)
	if len(res.dataplanes) == 0 {
		return c.fail("dataplane", -1, "no dataplane given and scenario %s has no default (give one of %s)", g.Scenario, oneOf(allowedDataplanes(info, cat)))
	}
	if len(res.protocols) == 0 {
		return c.fail("protocol", -1, "no protocol given and scenario %s has no default", g.Scenario)
	}
	if len(res.placements) == 0 {
		return c.fail("placement", -1, "no placement given and scenario %s allows none", g.Scenario)
	}
	if info.Valid != nil {
		found := false
		var hints []string
		for _, dp := range res.dataplanes {
			var ok []string
			for _, pl := range allowedPlacements(info) {
				if info.Valid(dp, pl) {
					ok = append(ok, pl)
				}
			}
			for _, pl := range res.placements {
				if info.Valid(dp, pl) {
					found = true
				}
			}
			hints = append(hints, dp+": "+oneOf(ok))
		}
		if !found {
			return c.fail("placement", -1, "no valid dataplane x placement combination for scenario %s (valid placements for %s)", g.Scenario, strings.Join(hints, "; "))
		}
	}
	return nil
}

// checkCPUs checks a CLIENT,SERVER pair; client and server may be the same CPU.
func checkCPUs(cpus [2]int, numCPU int) string {
	for _, cpu := range cpus {
		if numCPU > 0 && (cpu < 0 || cpu >= numCPU) {
			return fmt.Sprintf("CPU %d not present on this host (0..%d)", cpu, numCPU-1)
		}
		if cpu < 0 {
			return fmt.Sprintf("CPU %d is not a CPU number (want >= 0)", cpu)
		}
	}
	return ""
}
