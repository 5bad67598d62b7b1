package plan

import (
	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/param"

	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads and parses a plan file. Unknown keys and values of the wrong shape are errors;
// YAML syntax errors keep their line number ("plans/x.yaml: line 3: ..."). Load does not
// check values against a catalog: that is Validate's job.
func Load(path string) ([]Group, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse parses plan text; source names it in errors and in each Group's Source.
func Parse(data []byte, source string) ([]Group, error) {
	fail := func(path, format string, args ...any) error {
		return &Error{Source: source, Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail("", "empty plan (want a list of case groups, e.g. \"- scenario: p2p\")")
		}
		return nil, fail("", "%s", yamlMsg(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fail("", "line %d: more than one YAML document (put all case groups in one list)", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, fail("", "%s", yamlMsg(err))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, fail("", "empty plan (want a list of case groups, e.g. \"- scenario: p2p\")")
		}
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil, fail("", "empty plan (want a list of case groups, e.g. \"- scenario: p2p\")")
	}
	if root.Kind != yaml.SequenceNode {
		return nil, fail("", "line %d: the top level must be a list of case groups (start each group with \"- scenario: ...\")", root.Line)
	}
	if len(root.Content) == 0 {
		return nil, fail("", "empty plan (want a list of case groups, e.g. \"- scenario: p2p\")")
	}
	groups := make([]Group, 0, len(root.Content))
	for i, item := range root.Content {
		item = resolve(item)
		gp := fmt.Sprintf("[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fail(gp, "line %d: want a case group (a mapping like \"scenario: p2p\")", item.Line)
		}
		g := Group{Source: source}
		firstLine := map[string]int{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			kn, vn := resolve(item.Content[j]), resolve(item.Content[j+1])
			key := kn.Value
			path := gp + "." + key
			if kn.Kind != yaml.ScalarNode || !isKey(key) {
				if kn.Kind != yaml.ScalarNode {
					path = gp
				}
				return nil, fail(path, "unknown key (valid keys: %s)", strings.Join(Keys(), ", "))
			}
			if l, dup := firstLine[key]; dup {
				return nil, fail(path, "duplicate key (first on line %d)", l)
			}
			firstLine[key] = kn.Line
			if p, msg := g.setNode(key, vn); msg != "" {
				return nil, fail(path+p, "%s", msg)
			}
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// yamlMsg is a yaml.v3 error without its "yaml: " prefix, on one line.
func yamlMsg(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, "\n", "; ")
	return s
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isKey(k string) bool { return slices.Contains(Keys(), k) }

const noValue = "no value (give a value or remove the key)"

// setNode sets key from a YAML value. On error it returns the path suffix (e.g. "[2]") and
// the message.
func (g *Group) setNode(key string, n *yaml.Node) (string, string) {
	if isNull(n) {
		return "", noValue
	}
	switch {
	case key == "scenario":
		if n.Kind != yaml.ScalarNode {
			return "", "want a single scenario name, not a list"
		}
		if strings.TrimSpace(n.Value) == "" {
			return "", noValue
		}
		g.Scenario = strings.TrimSpace(n.Value)
	case key == "cpus":
		var c [2]int
		switch n.Kind {
		case yaml.ScalarNode:
			var msg string
			if c, msg = parseCPUs(n.Value); msg != "" {
				return "", msg
			}
		case yaml.SequenceNode:
			if len(n.Content) != 2 {
				return "", fmt.Sprintf("%d values; want [CLIENT, SERVER] (e.g. [0, 1])", len(n.Content))
			}
			for k, e := range n.Content {
				v, msg := nodeInt(resolve(e))
				if msg != "" {
					return fmt.Sprintf("[%d]", k), msg
				}
				c[k] = v
			}
		default:
			return "", "want \"CLIENT,SERVER\" or [CLIENT, SERVER] (e.g. [0, 1])"
		}
		g.CPUs = &c
	case g.intPtr(key) != nil:
		if n.Kind != yaml.ScalarNode {
			return "", "want a single integer, not a list"
		}
		v, msg := nodeInt(n)
		if msg != "" {
			return "", msg
		}
		*g.intPtr(key) = &v
	default:
		items, p, msg := nodeList(n)
		if msg != "" {
			return p, msg
		}
		if pp, ok := param.Lookup(key); ok && pp.Kind == param.Int {
			list := make([]int, len(items))
			for k, e := range items {
				v, msg := nodeInt(e)
				if msg != "" {
					return fmt.Sprintf("[%d]", k), msg
				}
				list[k] = v
			}
			g.setInts(key, list)
			return "", ""
		}
		list := make([]string, len(items))
		for k, e := range items {
			list[k] = strings.TrimSpace(e.Value)
		}
		g.setList(key, list)
	}
	return "", ""
}

// setList sets a list key of words: dataplane, placement, protocol or a Word parameter.
func (g *Group) setList(key string, list []string) {
	if l := g.strList(key); l != nil {
		*l = list
		return
	}
	g.setWords(key, list)
}

// nodeList returns the scalar items of a list value: a YAML sequence of scalars, or one
// scalar split at commas ("tcp, udp").
func nodeList(n *yaml.Node) ([]*yaml.Node, string, string) {
	switch n.Kind {
	case yaml.ScalarNode:
		parts := cluster.ParseList(n.Value)
		if len(parts) == 0 {
			return nil, "", "empty value (give a value or remove the key)"
		}
		if len(parts) == 1 && parts[0] == strings.TrimSpace(n.Value) {
			return []*yaml.Node{n}, "", "" // keep the tag: "services: 100" is an !!int
		}
		items := make([]*yaml.Node, len(parts))
		for k, p := range parts {
			items[k] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p, Line: n.Line}
		}
		return items, "", ""
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			return nil, "", "empty list (remove the key to use the default)"
		}
		items := make([]*yaml.Node, len(n.Content))
		for k, e := range n.Content {
			e = resolve(e)
			if isNull(e) {
				return nil, fmt.Sprintf("[%d]", k), "empty value"
			}
			if e.Kind != yaml.ScalarNode {
				return nil, fmt.Sprintf("[%d]", k), "want a single value, not a nested list or mapping"
			}
			items[k] = e
		}
		return items, "", ""
	}
	return nil, "", "want a list or a single value"
}

// nodeInt reads an integer scalar; quoted numbers ("100") are accepted.
func nodeInt(n *yaml.Node) (int, string) {
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		return 0, "want an integer"
	}
	switch n.ShortTag() {
	case "!!int":
		var v int
		if err := n.Decode(&v); err == nil {
			return v, ""
		}
	case "!!str":
		if v, err := strconv.Atoi(strings.TrimSpace(n.Value)); err == nil {
			return v, ""
		}
	}
	return 0, fmt.Sprintf("%q is not an integer", n.Value)
}

// FromFlags builds a Group from command-line flag values: flag name (with or without "--")
// -> the flag's text as typed. Only flags the user set should be passed. List flags take
// comma-separated values ("tcp,udp"); an empty list value leaves the key unset. The group's
// Source is "flags", so Validate names the flags in errors.
func FromFlags(values map[string]string) (Group, error) {
	g := Group{Source: "flags"}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		s := values[name]
		key := strings.TrimLeft(name, "-")
		flag := "--" + key
		fail := func(format string, args ...any) error {
			return &Error{Path: flag, Msg: fmt.Sprintf(format, args...)}
		}
		switch {
		case !isKey(key):
			return Group{}, fail("unknown key (valid keys: %s)", strings.Join(Keys(), ", "))
		case key == "scenario":
			g.Scenario = strings.TrimSpace(s)
		case key == "cpus":
			c, err := ParseCPUs(s)
			if err != nil {
				return Group{}, err
			}
			g.CPUs = &c
		case g.intPtr(key) != nil:
			v, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return Group{}, fail("%q is not an integer", s)
			}
			*g.intPtr(key) = &v
		case isInt(key):
			list, err := ParseInts(flag, s)
			if err != nil {
				return Group{}, err
			}
			if list != nil {
				g.setInts(key, list)
			}
		default:
			if list := cluster.ParseList(s); list != nil {
				g.setList(key, list)
			}
		}
	}
	return g, nil
}

// isInt tells whether key is an Int parameter's.
func isInt(key string) bool {
	p, ok := param.Lookup(key)
	return ok && p.Kind == param.Int
}

// ParseInts parses a comma-separated list of integers ("1,10,100"); "" -> nil. flag names
// the flag in errors ("services" or "--services"). Ranges are Validate's job.
func ParseInts(flag, s string) ([]int, error) {
	parts := cluster.ParseList(s)
	if parts == nil {
		return nil, nil
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, &Error{Path: flagName(flag), Msg: fmt.Sprintf("%q is not an integer (want a comma-separated list like 1,10,100)", p)}
		}
		out[i] = v
	}
	return out, nil
}

// ParseCPUs parses the --cpus value "CLIENT,SERVER" (e.g. "0,1"): the CPUs the client and
// the server are pinned to. Whether they exist on this host is Validate's job.
func ParseCPUs(s string) ([2]int, error) {
	c, msg := parseCPUs(s)
	if msg != "" {
		return c, &Error{Path: "--cpus", Msg: msg}
	}
	return c, nil
}

func parseCPUs(s string) ([2]int, string) {
	var c [2]int
	parts := cluster.ParseList(s)
	if len(parts) != 2 {
		return c, fmt.Sprintf("%q: want CLIENT,SERVER (two CPU numbers, e.g. 0,1)", s)
	}
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return c, fmt.Sprintf("%q is not a CPU number (want CLIENT,SERVER, e.g. 0,1)", p)
		}
		c[i] = v
	}
	return c, ""
}

func flagName(flag string) string {
	if flag == "" || strings.HasPrefix(flag, "-") {
		return flag
	}
	return "--" + flag
}
