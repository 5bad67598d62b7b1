package plan

import (
	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/scenario"

	"fmt"
	"slices"
	"sort"
	"strings"
)

// bounds is the inclusive range of an integer key.
type bounds struct{ lo, hi int }

// ranges are the allowed values of the integer settings (cpus is checked against
// Catalog.NumCPU; a case parameter's are its declaration's).
var ranges = map[string]bounds{
	"repeat":   {1, 1000},
	"duration": {1, 3600},
	"warmup":   {0, 600},
	"mtu":      {576, 9000}, // the pod MTU after overlay overhead is the lab's to check
	"nodes":    {2, 64},
	"copies":   {1, 10},
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

// resolved are a group's dimensions with the defaults filled in: a case parameter's values
// are the group's, else the scenario's default, else the parameter's own.
type resolved struct {
	dataplanes, placements, protocols []string
	ints                              map[string][]int
	words                             map[string][]string
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
	res := resolved{
		dataplanes: orStr(g.Dataplane, dps),
		placements: orStr(g.Placement, allowedPlacements(info)),
		protocols:  orStr(g.Protocol, protos),
		ints:       map[string][]int{},
		words:      map[string][]string{},
	}
	for _, p := range param.All() {
		if p.Kind == param.Int {
			res.ints[p.Key] = orInt(g.Ints[p.Key], orInt(info.DefaultInts[p.Key], []int{p.Default}))
		} else {
			res.words[p.Key] = orStr(g.Words[p.Key], orStr(info.DefaultStrs[p.Key], []string{""}))
		}
	}
	return res
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

	// Parameters the scenario does not use.
	uses := scenario.Uses(info)
	for _, p := range param.All() {
		if g.isSet(p.Key) && !slices.Contains(uses, p.Key) {
			list := "none of them"
			if len(uses) > 0 {
				list = strings.Join(uses, ", ")
			}
			return c.fail(p.Key, -1, "scenario %s does not use %s (of %s it uses %s): remove it", g.Scenario, p.Key, strings.Join(param.Keys(), ", "), list)
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

	// The case parameters' lists.
	for _, p := range param.All() {
		if err := checkParam(c, cat, p); err != nil {
			return err
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

// checkParam checks a group's values of parameter p: a range for an Int, allowed words for a
// Word (its own, else the catalog's).
func checkParam(c checker, cat Catalog, p param.Param) error {
	if p.Kind == param.Int {
		vals, set := c.g.Ints[p.Key]
		if set && len(vals) == 0 {
			return c.fail(p.Key, -1, "empty list (remove the key to use the default)")
		}
		for i, v := range vals {
			if v < p.Min || v > p.Max {
				return c.fail(p.Key, i, "%d out of range (%d..%d)", v, p.Min, p.Max)
			}
		}
		return nil
	}
	vals, set := c.g.Words[p.Key]
	if set && len(vals) == 0 {
		return c.fail(p.Key, -1, "empty list (remove the key to use the default)")
	}
	allowed := p.Allowed(cat.Words[p.Key])
	for i, v := range vals {
		if v == "" {
			return c.fail(p.Key, i, "empty value")
		}
		if allowed != nil && !slices.Contains(allowed, v) {
			return c.fail(p.Key, i, "unknown %s %q (valid: %s)", p.Key, v, oneOf(allowed))
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
