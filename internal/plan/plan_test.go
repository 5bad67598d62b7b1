package plan

import (
	"github.com/cnibench/cnibench/internal/scenario"

	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var testProtocols = []string{"tcp", "udp", "rr", "crr", "udprr"}

func testCatalog() Catalog {
	return Catalog{
		Scenarios: map[string]scenario.Info{
			"baseline": {
				Dataplanes:       []string{"bare", "node2node"},
				Placements:       []string{"intra", "inter"},
				Protocols:        testProtocols,
				DefaultProtocols: []string{"tcp", "udp", "rr", "crr"},
				Valid:            func(dp, pl string) bool { return dp != "bare" || pl == "intra" },
			},
			"p2p": {
				Placements:       []string{"intra", "inter"},
				Protocols:        testProtocols,
				DefaultProtocols: []string{"tcp", "udp", "rr", "crr"},
				// The test catalog lets p2p take every scale key to exercise their checks.
				Params: []string{"services", "policies", "pods", "replicas", "proxy", "policy", "streams", "msg-size", "fragment"},
			},
		},
		Dataplanes: []string{"flannel", "calico", "flannel-hostgw", "calico-vxlan"},
		Tools: func(p string) string {
			if p == "tcp" || p == "udp" {
				return "iperf3"
			}
			return "netperf"
		},
		NumCPU: 2,
	}
}

const validKeys = "valid keys: scenario, dataplane, placement, protocol, services, policies, pods, replicas, proxy, policy, nf, chain-length, rules, external-traffic-policy, vnf, cpu-limit, cpu-isolation, frame-size, lb, search, change, sync, noisy, noisy-cpu-limit, streams, msg-size, fragment, repeat, duration, warmup, cpus, mtu, nodes, copies"

func mustParse(t *testing.T, text string) []Group {
	t.Helper()
	groups, err := Parse([]byte(text), "plans/x.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return groups
}

func mustFlags(t *testing.T, flags map[string]string) Group {
	t.Helper()
	g, err := FromFlags(flags)
	if err != nil {
		t.Fatalf("FromFlags: %v", err)
	}
	return g
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"unknown key", "- scenario: p2p\n  protcol: tcp\n", "plans/x.yaml: [0].protcol: unknown key (" + validKeys + ")"},
		{"unknown key second group", "- scenario: p2p\n- scenario: p2p\n  repeats: 3\n", "plans/x.yaml: [1].repeats: unknown key (" + validKeys + ")"},
		{"duplicate key", "- scenario: p2p\n  repeat: 3\n  repeat: 4\n", "plans/x.yaml: [0].repeat: duplicate key (first on line 2)"},
		{"empty file", "", "plans/x.yaml: empty plan (want a list of case groups, e.g. \"- scenario: p2p\")"},
		{"comments only", "# nothing\n", "plans/x.yaml: empty plan (want a list of case groups, e.g. \"- scenario: p2p\")"},
		{"empty list", "[]\n", "plans/x.yaml: empty plan (want a list of case groups, e.g. \"- scenario: p2p\")"},
		{"top level mapping", "scenario: p2p\n", "plans/x.yaml: line 1: the top level must be a list of case groups (start each group with \"- scenario: ...\")"},
		{"group not a mapping", "- p2p\n", "plans/x.yaml: [0]: line 1: want a case group (a mapping like \"scenario: p2p\")"},
		{"two documents", "- scenario: p2p\n---\n- scenario: baseline\n", "plans/x.yaml: line 2: more than one YAML document (put all case groups in one list)"},
		{"repeat not int", "- scenario: p2p\n  repeat: abc\n", `plans/x.yaml: [0].repeat: "abc" is not an integer`},
		{"repeat float", "- scenario: p2p\n  repeat: 2.5\n", `plans/x.yaml: [0].repeat: "2.5" is not an integer`},
		{"repeat list", "- scenario: p2p\n  repeat: [1, 2]\n", "plans/x.yaml: [0].repeat: want a single integer, not a list"},
		{"repeat null", "- scenario: p2p\n  repeat:\n", "plans/x.yaml: [0].repeat: no value (give a value or remove the key)"},
		{"scenario list", "- scenario: [p2p]\n", "plans/x.yaml: [0].scenario: want a single scenario name, not a list"},
		{"empty protocol list", "- scenario: p2p\n  protocol: []\n", "plans/x.yaml: [0].protocol: empty list (remove the key to use the default)"},
		{"nested list", "- scenario: p2p\n  protocol: [tcp, [udp]]\n", "plans/x.yaml: [0].protocol[1]: want a single value, not a nested list or mapping"},
		{"protocol mapping", "- scenario: p2p\n  protocol: {tcp: 1}\n", "plans/x.yaml: [0].protocol: want a list or a single value"},
		{"services not int", "- scenario: p2p\n  services: [1, x]\n", `plans/x.yaml: [0].services[1]: "x" is not an integer`},
		{"services scalar list not int", "- scenario: p2p\n  services: 1, 10, y\n", `plans/x.yaml: [0].services[2]: "y" is not an integer`},
		{"cpus three", "- scenario: p2p\n  cpus: [0, 1, 2]\n", "plans/x.yaml: [0].cpus: 3 values; want [CLIENT, SERVER] (e.g. [0, 1])"},
		{"cpus string one", "- scenario: p2p\n  cpus: \"3\"\n", `plans/x.yaml: [0].cpus: "3": want CLIENT,SERVER (two CPU numbers, e.g. 0,1)`},
		{"cpus not int", "- scenario: p2p\n  cpus: [0, a]\n", `plans/x.yaml: [0].cpus[1]: "a" is not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.text), "plans/x.yaml")
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %q\nwant %q", err.Error(), tt.want)
			}
		})
	}
}

func TestLoadSyntaxErrorKeepsLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	text := "- scenario: p2p\n  protocol: [tcp, udp\n  repeat: 3\n- scenario: baseline\n  dataplane: bare: x\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, path+": line ") || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line starting with %q", msg, path+": line ")
	}

	_, err = Parse([]byte("- scenario: p2p\n  repeat: 3\n  duration: 2: 3\n"), "x.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), "x.yaml: line 3: ") {
		t.Errorf("error %v: want it to start with \"x.yaml: line 3: \"", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("error %v: want it to name the file", err)
	}
}

func TestValidateErrors(t *testing.T) {
	const protos = "(valid: tcp, udp, rr, crr, udprr)"
	tests := []struct {
		name  string
		plan  string            // plan text, source plans/x.yaml
		flags map[string]string // flags; merged over the plan when both are given
		want  string
	}{
		{name: "unknown protocol", plan: "- scenario: baseline\n- scenario: p2p\n  protocol: [tcp, udp, tcpp]\n",
			want: `plans/x.yaml: [1].protocol[2]: unknown protocol "tcpp" for scenario p2p ` + protos},
		{name: "unknown protocol scalar", plan: "- scenario: p2p\n  protocol: tcpp\n",
			want: `plans/x.yaml: [0].protocol[0]: unknown protocol "tcpp" for scenario p2p ` + protos},
		{name: "empty protocol value", plan: "- scenario: p2p\n  protocol: [tcp, \"\"]\n",
			want: `plans/x.yaml: [0].protocol[1]: empty value`},
		{name: "missing scenario", plan: "- protocol: tcp\n",
			want: "plans/x.yaml: [0]: missing scenario (one of baseline, p2p)"},
		{name: "unknown scenario", plan: "- scenario: p2q\n",
			want: `plans/x.yaml: [0].scenario: unknown scenario "p2q" (valid: baseline, p2p)`},
		{name: "dataplane not in scenario", plan: "- scenario: baseline\n  dataplane: [bare, flannel]\n",
			want: `plans/x.yaml: [0].dataplane[1]: unknown dataplane "flannel" for scenario baseline (valid: bare, node2node)`},
		{name: "dataplane not a preset", plan: "- scenario: p2p\n  dataplane: bare\n",
			want: `plans/x.yaml: [0].dataplane[0]: unknown dataplane "bare" for scenario p2p (valid: flannel, calico, flannel-hostgw, calico-vxlan)`},
		{name: "unknown placement", plan: "- scenario: p2p\n  placement: [intra, cross]\n",
			want: `plans/x.yaml: [0].placement[1]: unknown placement "cross" for scenario p2p (valid: intra, inter)`},
		{name: "no valid combination", plan: "- scenario: baseline\n  dataplane: bare\n  placement: inter\n",
			want: "plans/x.yaml: [0].placement: no valid dataplane x placement combination for scenario baseline (valid placements for bare: intra)"},
		{name: "repeat 0", plan: "- scenario: p2p\n  repeat: 0\n", want: "plans/x.yaml: [0].repeat: 0 out of range (1..1000)"},
		{name: "repeat 1001", plan: "- scenario: p2p\n  repeat: 1001\n", want: "plans/x.yaml: [0].repeat: 1001 out of range (1..1000)"},
		{name: "duration 0", plan: "- scenario: p2p\n  duration: 0\n", want: "plans/x.yaml: [0].duration: 0 out of range (1..3600)"},
		{name: "duration 3601", plan: "- scenario: p2p\n  duration: 3601\n", want: "plans/x.yaml: [0].duration: 3601 out of range (1..3600)"},
		{name: "warmup -1", plan: "- scenario: p2p\n  warmup: -1\n", want: "plans/x.yaml: [0].warmup: -1 out of range (0..600)"},
		{name: "warmup 601", plan: "- scenario: p2p\n  warmup: 601\n", want: "plans/x.yaml: [0].warmup: 601 out of range (0..600)"},
		{name: "services -1", plan: "- scenario: p2p\n  services: [0, -1]\n", want: "plans/x.yaml: [0].services[1]: -1 out of range (0..100000)"},
		{name: "policies 100001", plan: "- scenario: p2p\n  policies: 100001\n", want: "plans/x.yaml: [0].policies[0]: 100001 out of range (0..100000)"},
		{name: "pods 100001", plan: "- scenario: p2p\n  pods: [2, 100001]\n", want: "plans/x.yaml: [0].pods[1]: 100001 out of range (0..100000)"},
		{name: "replicas 0", plan: "- scenario: p2p\n  replicas: 0\n", want: "plans/x.yaml: [0].replicas[0]: 0 out of range (1..1000)"},
		{name: "replicas 1001", plan: "- scenario: p2p\n  replicas: 1001\n", want: "plans/x.yaml: [0].replicas[0]: 1001 out of range (1..1000)"},
		{name: "mtu 575", plan: "- scenario: p2p\n  mtu: 575\n", want: "plans/x.yaml: [0].mtu: 575 out of range (576..9000)"},
		{name: "mtu 9001", plan: "- scenario: p2p\n  mtu: 9001\n", want: "plans/x.yaml: [0].mtu: 9001 out of range (576..9000)"},
		{name: "nodes 1", plan: "- scenario: p2p\n  nodes: 1\n", want: "plans/x.yaml: [0].nodes: 1 out of range (2..64)"},
		{name: "nodes 65", plan: "- scenario: p2p\n  nodes: 65\n", want: "plans/x.yaml: [0].nodes: 65 out of range (2..64)"},
		{name: "proxy empty", plan: "- scenario: p2p\n  proxy: [iptables, \"\"]\n", want: "plans/x.yaml: [0].proxy[1]: empty value"},
		{name: "cpu not present", plan: "- scenario: baseline\n- scenario: p2p\n- scenario: p2p\n  cpus: [0, 7]\n",
			want: "plans/x.yaml: [2].cpus: CPU 7 not present on this host (0..1)"},
		{name: "cpu negative", plan: "- scenario: p2p\n  cpus: \"-1,0\"\n",
			want: "plans/x.yaml: [0].cpus: CPU -1 not present on this host (0..1)"},

		{name: "flags unknown protocol", flags: map[string]string{"scenario": "p2p", "protocol": "tcp,x"},
			want: `--protocol: unknown protocol "x" for scenario p2p ` + protos},
		{name: "flags missing scenario", flags: map[string]string{"protocol": "tcp"},
			want: "--scenario: missing scenario (one of baseline, p2p)"},
		{name: "flags unknown scenario", flags: map[string]string{"scenario": "p2q"},
			want: `--scenario: unknown scenario "p2q" (valid: baseline, p2p)`},
		{name: "flags repeat", flags: map[string]string{"scenario": "p2p", "repeat": "0"},
			want: "--repeat: 0 out of range (1..1000)"},
		{name: "flags services", flags: map[string]string{"scenario": "p2p", "services": "1,-5"},
			want: "--services: -5 out of range (0..100000)"},
		{name: "flags cpus", flags: map[string]string{"scenario": "p2p", "cpus": "0,2"},
			want: "--cpus: CPU 2 not present on this host (0..1)"},
		{name: "flags no combination", flags: map[string]string{"scenario": "baseline", "dataplane": "bare", "placement": "inter"},
			want: "--placement: no valid dataplane x placement combination for scenario baseline (valid placements for bare: intra)"},

		{name: "merged flag error names the flag", plan: "- scenario: baseline\n- scenario: p2p\n",
			flags: map[string]string{"repeat": "0"}, want: "--repeat: 0 out of range (1..1000)"},
		{name: "merged flag value wrong for a plan scenario", plan: "- scenario: baseline\n- scenario: p2p\n",
			flags: map[string]string{"dataplane": "flannel"},
			want:  `--dataplane: unknown dataplane "flannel" for scenario baseline (valid: bare, node2node)`},
		{name: "merged plan error still names the file", plan: "- scenario: p2p\n  nodes: 70\n",
			flags: map[string]string{"repeat": "2"}, want: "plans/x.yaml: [0].nodes: 70 out of range (2..64)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var groups []Group
			source := "plans/x.yaml"
			if tt.plan != "" {
				groups = mustParse(t, tt.plan)
			}
			if tt.flags != nil {
				groups = Merge(groups, mustFlags(t, tt.flags))
				if tt.plan == "" {
					source = "flags"
				}
			}
			err := Validate(groups, testCatalog(), source)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Validate error\n got %q\nwant %q", err.Error(), tt.want)
			}
			// Expand reports the same error from the groups' own sources.
			if _, err := Expand(groups, testCatalog(), "lab", BuiltinDefaults()); err == nil || err.Error() != tt.want {
				t.Errorf("Expand error\n got %v\nwant %q", err, tt.want)
			}
		})
	}
}

func TestValidateUnusedParam(t *testing.T) {
	err := Validate(mustParse(t, "- scenario: baseline\n  services: [5]\n"), testCatalog(), "plans/x.yaml")
	want := "plans/x.yaml: [0].services: scenario baseline does not use services (of services, policies, pods, replicas, proxy, policy, nf, chain-length, rules, external-traffic-policy, vnf, cpu-limit, cpu-isolation, frame-size, lb, search, change, sync, noisy, noisy-cpu-limit, streams, msg-size, fragment it uses none of them): remove it"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestValidateEmpty(t *testing.T) {
	if err := Validate(nil, testCatalog(), "plans/x.yaml"); err == nil || err.Error() != "plans/x.yaml: empty plan (want at least one case group)" {
		t.Errorf("got %v", err)
	}
	if err := Validate(nil, testCatalog(), "flags"); err == nil || err.Error() != "--scenario: missing scenario (one of baseline, p2p)" {
		t.Errorf("got %v", err)
	}
}

func TestValidateOK(t *testing.T) {
	g := mustParse(t, `
- scenario: p2p
  dataplane: calico-vxlan
  protocol: tcp, udprr
  services: 1, 10, 100
  policies: [0, 100000]
  pods: [0, 100000]
  replicas: [1, 1000]
  proxy: iptables
  policy: [default-deny]
  repeat: 1000
  duration: 3600
  warmup: 0
  cpus: "1,1"
  mtu: 9000
  nodes: 64
`)
	if err := Validate(g, testCatalog(), "plans/x.yaml"); err != nil {
		t.Fatal(err)
	}
	// NumCPU 0 (unknown) only rejects negative CPUs.
	cat := testCatalog()
	cat.NumCPU = 0
	g[0].CPUs = &[2]int{100, 3}
	if err := Validate(g, cat, "plans/x.yaml"); err != nil {
		t.Fatal(err)
	}
	g[0].CPUs = &[2]int{-1, 3}
	if err := Validate(g, cat, "plans/x.yaml"); err == nil || err.Error() != "plans/x.yaml: [0].cpus: CPU -1 is not a CPU number (want >= 0)" {
		t.Errorf("got %v", err)
	}
}

func TestParseForms(t *testing.T) {
	g := mustParse(t, `
- scenario: p2p
  dataplane: flannel
  protocol: tcp, udp
  placement: [intra]
  services: 100
  policies: "1,10"
  pods: ["3"]
  cpus: [1, 0]
  warmup: 0
- scenario: baseline
  cpus: "0, 1"
  repeat: "5"
  mtu: 0x400
`)
	zero, five, mtu := 0, 5, 1024
	want := []Group{
		{Scenario: "p2p", Dataplane: []string{"flannel"}, Protocol: []string{"tcp", "udp"}, Placement: []string{"intra"},
			Ints: map[string][]int{"services": {100}, "policies": {1, 10}, "pods": {3}}, CPUs: &[2]int{1, 0}, Warmup: &zero, Source: "plans/x.yaml"},
		{Scenario: "baseline", CPUs: &[2]int{0, 1}, Repeat: &five, MTU: &mtu, Source: "plans/x.yaml"},
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("got  %+v\nwant %+v", g, want)
	}
}

func TestParseAliases(t *testing.T) {
	g := mustParse(t, `
- scenario: baseline
  protocol: &protos [tcp, rr]
- scenario: p2p
  protocol: *protos
`)
	if !reflect.DeepEqual(g[1].Protocol, []string{"tcp", "rr"}) {
		t.Errorf("alias: got %v", g[1].Protocol)
	}
}

func repoFile(name string) string { return filepath.Join("..", "..", "plans", name) }

func ids(specs []CaseSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Case.ID
	}
	return out
}

func TestExpandQuickPlan(t *testing.T) {
	groups, err := Load(repoFile("quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(groups, testCatalog(), ""); err != nil {
		t.Fatal(err)
	}
	specs, err := Expand(groups, testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	protos := []string{"tcp", "udp", "rr", "crr"}
	for _, p := range protos {
		want = append(want, "baseline/bare/intra/"+p)
	}
	for _, pl := range []string{"intra", "inter"} {
		for _, p := range protos {
			want = append(want, "baseline/node2node/"+pl+"/"+p)
		}
	}
	for _, dp := range []string{"flannel", "calico"} {
		for _, pl := range []string{"intra", "inter"} {
			for _, p := range protos {
				want = append(want, "p2p/"+dp+"/"+pl+"/"+p)
			}
		}
	}
	if len(want) != 28 {
		t.Fatalf("test bug: %d ids", len(want))
	}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
	count := map[string]int{}
	for _, s := range specs {
		count[s.Case.Scenario]++
		c := s.Case
		if c.ID != c.MakeID() || c.Backend != "lab" || c.Pods != 0 || c.Replicas != 1 || c.Services != 0 || c.Policies != 0 {
			t.Errorf("case %+v", c)
		}
		wantTool := "netperf"
		if c.Protocol == "tcp" || c.Protocol == "udp" {
			wantTool = "iperf3"
		}
		if c.Tool != wantTool {
			t.Errorf("%s: tool %q, want %q", c.ID, c.Tool, wantTool)
		}
		if s.Repeat != 3 || s.Duration != 1 || s.Warmup != 0 || s.CPUs != [2]int{0, 1} || c.MTU != 1500 || c.Nodes != 2 {
			t.Errorf("%s: params %+v", c.ID, s)
		}
	}
	if count["baseline"] != 12 || count["p2p"] != 16 {
		t.Errorf("counts %v, want baseline 12, p2p 16", count)
	}
	if Name(repoFile("quick.yaml")) != "quick" {
		t.Errorf("Name = %q", Name(repoFile("quick.yaml")))
	}
}

func TestP2PPlan(t *testing.T) {
	quick, err := Load(repoFile("quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	full, err := Load(repoFile("p2p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Different defaults must not matter: the plan spells its values out.
	d := BuiltinDefaults()
	d.Repeat, d.Duration, d.Warmup = 1, 1, 0
	qs, err := Expand(quick, testCatalog(), "lab", d)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Expand(full, testCatalog(), "lab", d)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids(qs), ids(fs)) {
		t.Errorf("p2p.yaml cases differ from quick.yaml:\n%v\n%v", ids(fs), ids(qs))
	}
	b := BuiltinDefaults()
	for _, s := range fs {
		if s.Repeat != b.Repeat || s.Duration != b.Duration || s.Warmup != b.Warmup {
			t.Errorf("%s: repeat %d duration %d warmup %d, want the built-in defaults", s.Case.ID, s.Repeat, s.Duration, s.Warmup)
		}
	}
	if Name(repoFile("p2p.yaml")) != "p2p" {
		t.Error("Name")
	}
}

func TestExpandDefaultsAndOrder(t *testing.T) {
	g := mustParse(t, `
- scenario: p2p
  dataplane: flannel
  placement: intra
  protocol: [rr, tcp]
  services: [0, 10]
  policies: [5]
  pods: [0, 4]
  replicas: [1, 3]
`)
	specs, err := Expand(g, testCatalog(), "kind", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range []string{"rr", "tcp"} {
		for _, svc := range []string{"", "/svc=10"} {
			for _, pods := range []string{"", "/pods=4"} {
				for _, rep := range []string{"", "/rep=3"} {
					want = append(want, "p2p/flannel/intra/"+p+svc+"/pol=5"+pods+rep)
				}
			}
		}
	}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
	s := specs[0]
	b := BuiltinDefaults()
	if s.Repeat != b.Repeat || s.Duration != b.Duration || s.Warmup != b.Warmup || s.CPUs != b.CPUs || s.Case.MTU != b.MTU || s.Case.Nodes != b.Nodes {
		t.Errorf("defaults not applied: %+v", s)
	}
	if s.Case.Backend != "kind" {
		t.Errorf("backend %q", s.Case.Backend)
	}

	// Scenario defaults: baseline without dataplane/placement/protocol sweeps everything valid.
	specs, err = Expand(mustParse(t, "- scenario: baseline\n"), testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 12 {
		t.Errorf("baseline defaults: %d cases, want 12: %v", len(specs), ids(specs))
	}
	// p2p default dataplanes are all presets: 4 x 2 x 4.
	specs, err = Expand(mustParse(t, "- scenario: p2p\n"), testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 32 {
		t.Errorf("p2p defaults: %d cases, want 32", len(specs))
	}
}

func TestExpandDedup(t *testing.T) {
	g := mustParse(t, `
- scenario: p2p
  dataplane: [flannel, calico]
  placement: intra
  protocol: [tcp, tcp, udp]
  repeat: 3
- scenario: p2p
  dataplane: [calico, flannel-hostgw]
  placement: intra
  protocol: tcp
  repeat: 3
`)
	specs, err := Expand(g, testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p2p/flannel/intra/tcp", "p2p/flannel/intra/udp",
		"p2p/calico/intra/tcp", "p2p/calico/intra/udp",
		"p2p/flannel-hostgw/intra/tcp",
	}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
}

// A case planned twice with different settings is an error naming both groups and the
// setting (it used to keep the first group's silently).
func TestExpandConflictingSettings(t *testing.T) {
	for key, vals := range map[string][2]string{"repeat": {"3", "5"}, "duration": {"1", "10"}, "warmup": {"0", "2"}, "cpus": {"0,1", "1,0"}} {
		g := mustParse(t, fmt.Sprintf(`
- scenario: p2p
  dataplane: calico
  placement: intra
  protocol: tcp
  %[1]s: %[2]s
- scenario: p2p
  dataplane: [flannel, calico]
  placement: intra
  protocol: tcp
  %[1]s: %[3]s
`, key, vals[0], vals[1]))
		_, err := Expand(g, testCatalog(), "lab", BuiltinDefaults())
		if err == nil || !strings.Contains(err.Error(), "p2p/calico/intra/tcp is already planned by group [0] with "+key) || !strings.Contains(err.Error(), "[1]") {
			t.Errorf("%s: err = %v", key, err)
		}
	}
}

// MTU and node count are case labels: a plan sweeps them into distinct cases (they used to be
// merged into one case, the first group's), the ids name values other than the defaults, and
// copies plan labelled copies of each case.
func TestExpandSweepsMTUNodesCopies(t *testing.T) {
	g := mustParse(t, `
- scenario: p2p
  dataplane: flannel
  placement: inter
  protocol: tcp
- scenario: p2p
  dataplane: flannel
  placement: inter
  protocol: tcp
  mtu: 9000
- scenario: p2p
  dataplane: flannel
  placement: inter
  protocol: tcp
  nodes: 3
- scenario: p2p
  dataplane: calico
  placement: inter
  protocol: crr
  copies: 2
`)
	specs, err := Expand(g, testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p2p/flannel/inter/tcp", "p2p/flannel/inter/tcp/mtu=9000", "p2p/flannel/inter/tcp/nodes=3",
		"p2p/calico/inter/crr", "p2p/calico/inter/crr/copy=2"}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Fatalf("ids\n got %v\nwant %v", got, want)
	}
	if c := specs[1].Case; c.MTU != 9000 || c.Nodes != 2 {
		t.Errorf("mtu case labels %+v", c)
	}
	if c := specs[2].Case; c.MTU != 1500 || c.Nodes != 3 {
		t.Errorf("nodes case labels %+v", c)
	}
	if specs[3].Case.Copy != 1 || specs[4].Case.Copy != 2 || specs[0].Case.Copy != 0 {
		t.Errorf("copies %d %d %d", specs[0].Case.Copy, specs[3].Case.Copy, specs[4].Case.Copy)
	}
	if specs[3].Case.CompareKey() == specs[4].Case.CompareKey() {
		t.Error("copies share a compare key")
	}
	if _, err := Expand(mustParse(t, "- scenario: p2p\n  copies: 11\n"), testCatalog(), "lab", BuiltinDefaults()); err == nil || !strings.Contains(err.Error(), "[0].copies: 11 out of range (1..10)") {
		t.Errorf("copies 11: %v", err)
	}
}

// Streams and message sizes sweep as scale dimensions: in the id only when not the default, so
// one stream planned explicitly is the case a plan without the key has.
func TestExpandStreamsMsgSize(t *testing.T) {
	g := mustParse(t, `
- scenario: p2p
  dataplane: flannel
  placement: inter
  protocol: [tcp, rr]
  streams: [1, 4]
  msg-size: [64, 8192]
- scenario: p2p
  dataplane: flannel
  placement: inter
  protocol: tcp
  msg-size: 64
`)
	specs, err := Expand(g, testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p2p/flannel/inter/tcp/msg=64", "p2p/flannel/inter/tcp/msg=8192",
		"p2p/flannel/inter/tcp/streams=4/msg=64", "p2p/flannel/inter/tcp/streams=4/msg=8192",
		"p2p/flannel/inter/rr/msg=64", "p2p/flannel/inter/rr/msg=8192",
		"p2p/flannel/inter/rr/streams=4/msg=64", "p2p/flannel/inter/rr/streams=4/msg=8192"}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Fatalf("ids\n got %v\nwant %v", got, want)
	}
	if c := specs[0].Case; c.Streams != 0 || c.MsgSize != 64 {
		t.Errorf("one stream is stored as the default (0): %+v", c)
	}
	if c := specs[2].Case; c.Streams != 4 || c.MsgSize != 64 {
		t.Errorf("labels %+v", c)
	}
	frag, err := Expand([]Group{mustFlags(t, map[string]string{"scenario": "p2p", "dataplane": "flannel", "placement": "inter",
		"protocol": "udp", "msg-size": "9000", "fragment": "allow"})}, testCatalog(), "lab", BuiltinDefaults())
	if err != nil || len(frag) != 1 || frag[0].Case.ID != "p2p/flannel/inter/udp/fragment=allow/msg=9000" {
		t.Errorf("fragment allow: %v, %v: want one case whose id says fragment=allow", frag, err)
	}
	for _, tc := range []struct {
		flags map[string]string
		want  string
	}{
		{map[string]string{"scenario": "p2p", "streams": "0"}, "--streams: 0 out of range (1..64)"},
		{map[string]string{"scenario": "p2p", "streams": "65"}, "--streams: 65 out of range (1..64)"},
		{map[string]string{"scenario": "p2p", "msg-size": "0"}, "--msg-size: 0 out of range (1..1048576)"},
		{map[string]string{"scenario": "baseline", "streams": "2"}, "--streams: scenario baseline does not use streams"},
		{map[string]string{"scenario": "p2p", "protocol": "udp", "msg-size": "9000", "fragment": "yes"}, `--fragment: unknown fragment "yes" (valid: allow)`},
	} {
		_, err := Expand([]Group{mustFlags(t, tc.flags)}, testCatalog(), "lab", BuiltinDefaults())
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.flags, err, tc.want)
		}
	}
}

// A plan that names proxies or policies sweeps them: the ids say which case ran on which, so
// nothing is mixed up; a case on the preset's own parts keeps the plain id.
func TestExpandProxyPolicyIDs(t *testing.T) {
	plan := "- scenario: p2p\n  dataplane: flannel\n  placement: intra\n  protocol: tcp\n  proxy: [iptables, ipvs]\n" +
		"- scenario: p2p\n  dataplane: flannel\n  placement: intra\n  protocol: tcp\n" +
		"- scenario: p2p\n  dataplane: flannel\n  placement: intra\n  protocol: tcp\n  policy: [deny]\n"
	specs, err := Expand(mustParse(t, plan), testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p2p/flannel/intra/tcp/proxy=iptables", "p2p/flannel/intra/tcp/proxy=ipvs", "p2p/flannel/intra/tcp", "p2p/flannel/intra/tcp/policy=deny"}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
	if v := specs[1].Case.Variant(); v != "flannel proxy=ipvs" {
		t.Errorf("variant %q", v)
	}
}

func TestExpandCPUDefaults(t *testing.T) {
	cat := testCatalog()
	cat.NumCPU = 1
	specs, err := Expand(mustParse(t, "- scenario: p2p\n  dataplane: flannel\n  placement: intra\n  protocol: tcp\n"), cat, "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if specs[0].CPUs != [2]int{0, 0} {
		t.Errorf("default CPUs on a 1-CPU host: %v, want [0 0]", specs[0].CPUs)
	}
	// An explicit CPU is checked strictly.
	_, err = Expand(mustParse(t, "- scenario: p2p\n  cpus: 0,1\n"), cat, "lab", BuiltinDefaults())
	if err == nil || err.Error() != "plans/x.yaml: [0].cpus: CPU 1 not present on this host (0..0)" {
		t.Errorf("got %v", err)
	}
}

func TestExpandBadDefaults(t *testing.T) {
	g := mustParse(t, "- scenario: p2p\n")
	if _, err := Expand(g, testCatalog(), "lab", Defaults{}); err == nil || err.Error() != "defaults: repeat: 0 out of range (1..1000)" {
		t.Errorf("got %v", err)
	}
	d := BuiltinDefaults()
	d.CPUs = [2]int{-1, 0}
	if _, err := Expand(g, testCatalog(), "lab", d); err == nil || err.Error() != "defaults: cpus: CPU -1 is not a CPU number (want >= 0)" {
		t.Errorf("got %v", err)
	}
}

func TestMerge(t *testing.T) {
	base, err := Load(repoFile("quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprintf("%+v", base)
	over := mustFlags(t, map[string]string{"repeat": "5", "--duration": "3", "protocol": "tcp,rr", "cpus": "1,1"})
	merged := Merge(base, over)
	if after := fmt.Sprintf("%+v", base); after != before {
		t.Errorf("Merge modified its base")
	}
	if len(merged) != 2 {
		t.Fatalf("%d groups", len(merged))
	}
	for i, g := range merged {
		if *g.Repeat != 5 || *g.Duration != 3 || *g.Warmup != 0 || *g.CPUs != [2]int{1, 1} {
			t.Errorf("[%d]: repeat %d duration %d warmup %d cpus %v", i, *g.Repeat, *g.Duration, *g.Warmup, *g.CPUs)
		}
		if !reflect.DeepEqual(g.Protocol, []string{"tcp", "rr"}) || g.Scenario != base[i].Scenario ||
			!reflect.DeepEqual(g.Dataplane, base[i].Dataplane) || g.Source != base[i].Source {
			t.Errorf("[%d]: %+v", i, g)
		}
	}
	// The merged groups own their values.
	*merged[0].Repeat = 7
	merged[0].Protocol[0] = "udp"
	if *merged[1].Repeat != 5 || *over.Repeat != 5 || merged[1].Protocol[0] != "tcp" || over.Protocol[0] != "tcp" {
		t.Error("merged groups share memory")
	}
	specs, err := Expand(Merge(base, over), testCatalog(), "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 14 { // baseline 3 x 2 + p2p 2 x 2 x 2
		t.Errorf("%d cases, want 14", len(specs))
	}
	for _, s := range specs {
		if s.Repeat != 5 || s.Duration != 3 || s.Warmup != 0 {
			t.Errorf("%s: %+v", s.Case.ID, s)
		}
	}

	// No plan: the flags alone.
	alone := Merge(nil, Group{Scenario: "p2p", Protocol: []string{"udp"}})
	if len(alone) != 1 || alone[0].Scenario != "p2p" || alone[0].Source != "flags" {
		t.Errorf("Merge(nil, flags) = %+v", alone)
	}
	// Nothing set: the plan unchanged.
	if got := Merge(base, Group{Source: "flags"}); !reflect.DeepEqual(got, base) {
		t.Errorf("Merge with no flags changed the plan")
	}
}

func TestFromFlags(t *testing.T) {
	g := mustFlags(t, map[string]string{
		"scenario": " p2p ", "dataplane": "flannel, calico", "services": "1,10", "repeat": "4",
		"cpus": "0,1", "proxy": "", "mtu": "1400",
	})
	four, mtu := 4, 1400
	want := Group{Scenario: "p2p", Dataplane: []string{"flannel", "calico"}, Ints: map[string][]int{"services": {1, 10}}, Repeat: &four,
		CPUs: &[2]int{0, 1}, MTU: &mtu, Source: "flags"}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("got  %+v\nwant %+v", g, want)
	}
	errs := []struct {
		flags map[string]string
		want  string
	}{
		{map[string]string{"protcol": "tcp"}, "--protcol: unknown key (" + validKeys + ")"},
		{map[string]string{"repeat": "x"}, `--repeat: "x" is not an integer`},
		{map[string]string{"pods": "2,x"}, `--pods: "x" is not an integer (want a comma-separated list like 1,10,100)`},
		{map[string]string{"cpus": "0"}, `--cpus: "0": want CLIENT,SERVER (two CPU numbers, e.g. 0,1)`},
	}
	for _, e := range errs {
		if _, err := FromFlags(e.flags); err == nil || err.Error() != e.want {
			t.Errorf("FromFlags(%v): got %v, want %q", e.flags, err, e.want)
		}
	}
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts("services", "1, 10,100")
	if err != nil || !reflect.DeepEqual(got, []int{1, 10, 100}) {
		t.Errorf("got %v, %v", got, err)
	}
	if got, err := ParseInts("services", ""); got != nil || err != nil {
		t.Errorf("empty: got %v, %v", got, err)
	}
	errs := []struct{ flag, in, want string }{
		{"services", "1,x", `--services: "x" is not an integer (want a comma-separated list like 1,10,100)`},
		{"--pods", "2.5", `--pods: "2.5" is not an integer (want a comma-separated list like 1,10,100)`},
		{"replicas", "99999999999999999999", `--replicas: "99999999999999999999" is not an integer (want a comma-separated list like 1,10,100)`},
	}
	for _, e := range errs {
		if _, err := ParseInts(e.flag, e.in); err == nil || err.Error() != e.want {
			t.Errorf("ParseInts(%q, %q): got %v, want %q", e.flag, e.in, err, e.want)
		}
	}
}

func TestParseCPUs(t *testing.T) {
	for in, want := range map[string][2]int{"0,1": {0, 1}, " 3 , 3 ": {3, 3}, "[1,0]": {1, 0}} {
		if got, err := ParseCPUs(in); err != nil || got != want {
			t.Errorf("ParseCPUs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	errs := map[string]string{
		"":      `--cpus: "": want CLIENT,SERVER (two CPU numbers, e.g. 0,1)`,
		"1":     `--cpus: "1": want CLIENT,SERVER (two CPU numbers, e.g. 0,1)`,
		"0,1,2": `--cpus: "0,1,2": want CLIENT,SERVER (two CPU numbers, e.g. 0,1)`,
		"0,a":   `--cpus: "a" is not a CPU number (want CLIENT,SERVER, e.g. 0,1)`,
	}
	for in, want := range errs {
		if _, err := ParseCPUs(in); err == nil || err.Error() != want {
			t.Errorf("ParseCPUs(%q): got %v, want %q", in, err, want)
		}
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"plans/quick.yaml": "quick", "p2p.yml": "p2p", "/abs/dir/scale": "scale", "": "", "my.plan.yaml": "my.plan",
	} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	groups, err := Load(repoFile("quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	groups[0].Warmup = &zero
	groups[1].CPUs = &[2]int{1, 0}
	data, err := yaml.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data, groups[0].Source)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(back, groups) {
		t.Errorf("round trip\n got %+v\nwant %+v\n%s", back, groups, data)
	}
}

// A chain's keys: nf kinds checked against the catalog, chain-length and rules ranges, the
// scenario's defaults when unset, the crossing order (nf > chain-length > rules) and the ids.
func TestExpandChainKeys(t *testing.T) {
	cat := testCatalog()
	cat.Words = map[string][]string{"nf": {"route-iptables", "xdp"}}
	cat.Scenarios["chain"] = scenario.Info{
		Dataplanes: []string{"bare"}, Placements: []string{"intra"}, Protocols: testProtocols, DefaultProtocols: []string{"tcp"},
		Params: []string{"nf", "chain-length", "rules"}, DefaultStrs: map[string][]string{"nf": {"route-iptables"}},
		DefaultInts: map[string][]int{"chain-length": {1}, "rules": {10}},
	}
	specs, err := Expand(mustParse(t, "- scenario: chain\n- scenario: chain\n  nf: [xdp, route-iptables]\n  chain-length: [1, 4]\n  rules: 10000\n"), cat, "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"chain/bare/intra/tcp/nf=route-iptables/len=1/rules=10",
		"chain/bare/intra/tcp/nf=xdp/len=1/rules=10000", "chain/bare/intra/tcp/nf=xdp/len=4/rules=10000",
		"chain/bare/intra/tcp/nf=route-iptables/len=1/rules=10000", "chain/bare/intra/tcp/nf=route-iptables/len=4/rules=10000",
	}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
	if c := specs[2].Case; c.NF != "xdp" || c.ChainLength != 4 || c.Rules != 10000 || c.Variant() != "bare nf=xdp" {
		t.Errorf("labels %+v variant %q", c, c.Variant())
	}
	for plan, msg := range map[string]string{
		"- scenario: chain\n  nf: [ebpf]\n":            `plans/x.yaml: [0].nf[0]: unknown nf "ebpf" (valid: route-iptables, xdp)`,
		"- scenario: chain\n  chain-length: [0]\n":     "plans/x.yaml: [0].chain-length[0]: 0 out of range (1..32)",
		"- scenario: chain\n  rules: [100001]\n":       "plans/x.yaml: [0].rules[0]: 100001 out of range (1..100000)",
		"- scenario: baseline\n  nf: route-iptables\n": "plans/x.yaml: [0].nf: scenario baseline does not use nf",
	} {
		_, err := Expand(mustParse(t, plan), cat, "lab", BuiltinDefaults())
		if err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%q: got %v, want %s", plan, err, msg)
		}
	}
}

// external-traffic-policy: values checked, the scenario's default (both) when unset, crossed
// after the scale keys, in the ids; from the flags too; other scenarios do not take it.
func TestExpandExternalTrafficPolicy(t *testing.T) {
	cat := testCatalog()
	cat.Scenarios["n2s"] = scenario.Info{
		Placements: []string{"intra", "inter"}, Protocols: testProtocols, DefaultProtocols: []string{"tcp"},
		DefaultDataplanes: []string{"calico"}, Params: []string{"proxy", "external-traffic-policy"},
		DefaultStrs: map[string][]string{"external-traffic-policy": {"cluster", "local"}},
	}
	specs, err := Expand(mustParse(t, "- scenario: n2s\n  placement: inter\n- scenario: n2s\n  placement: intra\n  external-traffic-policy: local\n  proxy: [iptables, nftables]\n"), cat, "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"n2s/calico/inter/tcp/etp=cluster", "n2s/calico/inter/tcp/etp=local",
		"n2s/calico/intra/tcp/etp=local/proxy=iptables", "n2s/calico/intra/tcp/etp=local/proxy=nftables",
	}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
	if c := specs[1].Case; c.ExternalTrafficPolicy != "local" || c.Variant() != "calico" {
		t.Errorf("labels %+v variant %q", c, c.Variant())
	}
	g, err := FromFlags(map[string]string{"scenario": "n2s", "external-traffic-policy": "cluster"})
	if err != nil {
		t.Fatal(err)
	}
	if specs, err := Expand(Merge(nil, g), cat, "lab", BuiltinDefaults()); err != nil || len(specs) != 2 || specs[0].Case.ExternalTrafficPolicy != "cluster" {
		t.Errorf("from flags: %v %v", ids(specs), err)
	}
	for plan, msg := range map[string]string{
		"- scenario: n2s\n  external-traffic-policy: [Local]\n": `plans/x.yaml: [0].external-traffic-policy[0]: unknown external-traffic-policy "Local" (valid: cluster, local)`,
		"- scenario: p2p\n  external-traffic-policy: local\n":   "plans/x.yaml: [0].external-traffic-policy: scenario p2p does not use external-traffic-policy",
	} {
		_, err := Expand(mustParse(t, plan), cat, "lab", BuiltinDefaults())
		if err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%q: got %v, want %s", plan, err, msg)
		}
	}
}

// The vnf keys: the scenario's defaults when unset, sweeps crossed in the documented order
// (vnf > cpu-limit > cpu-isolation > frame-size), in the ids (kind and isolation as words,
// limit and size as scale suffixes); values checked; from the flags too.
func TestExpandVNFKeys(t *testing.T) {
	cat := testCatalog() // the vnf scenario's parameters as it declares them (internal/scenario, vnf.go)
	cat.Scenarios["vnf"] = scenario.Info{
		Placements: []string{"intra", "inter", "split"}, Protocols: []string{"gtpu", "udp"}, DefaultProtocols: []string{"gtpu"},
		DefaultDataplanes: []string{"flannel"}, Params: []string{"replicas", "vnf", "cpu-limit", "cpu-isolation", "frame-size", "lb"},
		DefaultStrs: map[string][]string{"vnf": {"userspace"}, "cpu-isolation": {"shared"}},
		DefaultInts: map[string][]int{"frame-size": {256}},
	}
	specs, err := Expand(mustParse(t, "- scenario: vnf\n  placement: intra\n- scenario: vnf\n  placement: split\n  replicas: 2\n  vnf: [kernel]\n  cpu-limit: [200, 1000]\n  cpu-isolation: [shared, exclusive]\n  frame-size: 64\n"), cat, "lab", BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"vnf/flannel/intra/gtpu/vnf=userspace/iso=shared/size=256",
		"vnf/flannel/split/gtpu/vnf=kernel/iso=shared/rep=2/cpu=200/size=64",
		"vnf/flannel/split/gtpu/vnf=kernel/iso=exclusive/rep=2/cpu=200/size=64",
		"vnf/flannel/split/gtpu/vnf=kernel/iso=shared/rep=2/cpu=1000/size=64",
		"vnf/flannel/split/gtpu/vnf=kernel/iso=exclusive/rep=2/cpu=1000/size=64",
	}
	if got := ids(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("ids\n got %v\nwant %v", got, want)
	}
	if c := specs[2].Case; c.Word("vnf") != "kernel" || c.Int("cpu-limit") != 200 || c.Word("cpu-isolation") != "exclusive" || c.Int("frame-size") != 64 || c.Variant() != "flannel vnf=kernel" || c.Primary() != "ndr_pps" || c.BaselineID() != "" {
		t.Errorf("labels %+v variant %q", c, c.Variant())
	}
	if specs, err := Expand(mustParse(t, "- scenario: vnf\n  lb: [service, ingress]\n  placement: inter\n"), cat, "lab", BuiltinDefaults()); err != nil || len(specs) != 2 ||
		specs[1].Case.Word("lb") != "ingress" || specs[1].Case.ID != "vnf/flannel/inter/gtpu/vnf=userspace/iso=shared/lb=ingress/size=256" {
		t.Errorf("lb sweep: %v %v", ids(specs), err)
	}
	cat.Scenarios["vnf"] = func(i scenario.Info) scenario.Info {
		i.Params = append(i.Params, "search", "noisy", "noisy-cpu-limit")
		return i
	}(cat.Scenarios["vnf"])
	if specs, err := Expand(mustParse(t, "- scenario: vnf\n  placement: intra\n  search: [ramp]\n  noisy: [0, 4]\n  noisy-cpu-limit: [250]\n"), cat, "lab", BuiltinDefaults()); err != nil || len(specs) != 2 ||
		specs[1].Case.Int("noisy") != 4 || specs[1].Case.Int("noisy-cpu-limit") != 250 || specs[1].Case.Word("search") != "ramp" ||
		specs[1].Case.ID != "vnf/flannel/intra/gtpu/vnf=userspace/iso=shared/search=ramp/size=256/noisy=4/ncpu=250" {
		t.Errorf("search and noisy: %v %v", ids(specs), err)
	}
	g, err := FromFlags(map[string]string{"scenario": "vnf", "cpu-limit": "500", "cpu-isolation": "exclusive", "frame-size": "128,1518"})
	if err != nil {
		t.Fatal(err)
	}
	if specs, err := Expand(Merge(nil, g), cat, "lab", BuiltinDefaults()); err != nil || len(specs) != 6 || specs[0].Case.Int("cpu-limit") != 500 || specs[1].Case.Int("frame-size") != 1518 {
		t.Errorf("from flags: %v %v", ids(specs), err)
	}
	for plan, msg := range map[string]string{
		"- scenario: vnf\n  cpu-isolation: [guaranteed]\n": `plans/x.yaml: [0].cpu-isolation[0]: unknown cpu-isolation "guaranteed" (valid: shared, exclusive)`,
		"- scenario: vnf\n  lb: [metallb]\n":               `plans/x.yaml: [0].lb[0]: unknown lb "metallb" (valid: service, ingress, ingress-remote)`,
		"- scenario: vnf\n  vnf: [dpdk]\n":                 `plans/x.yaml: [0].vnf[0]: unknown vnf "dpdk" (valid: kernel, userspace, xdp)`,
		"- scenario: vnf\n  frame-size: [9000]\n":          "plans/x.yaml: [0].frame-size[0]: 9000 out of range (64..1518)",
		"- scenario: vnf\n  cpu-limit: [-1]\n":             "plans/x.yaml: [0].cpu-limit[0]: -1 out of range (0..64000)",
		"- scenario: p2p\n  frame-size: 64\n":              "plans/x.yaml: [0].frame-size: scenario p2p does not use frame-size",
		"- scenario: vnf\n  search: [golden]\n":            `plans/x.yaml: [0].search[0]: unknown search "golden" (valid: binary, mlr, ramp)`,
		"- scenario: vnf\n  noisy: [65]\n":                 "plans/x.yaml: [0].noisy[0]: 65 out of range (0..64)",
	} {
		_, err := Expand(mustParse(t, plan), cat, "lab", BuiltinDefaults())
		if err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%q: got %v, want %s", plan, err, msg)
		}
	}
}
