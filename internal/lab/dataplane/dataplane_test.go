package dataplane

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/doctor"
)

func TestResolveParts(t *testing.T) {
	for _, tc := range []struct {
		dataplane, proxy, policy string
		want                     [4]string // attach, overlay, proxy, policy
	}{
		{"flannel", "", "", [4]string{"bridge", "vxlan", "iptables", "none"}},
		{"flannel-hostgw", "", "", [4]string{"bridge", "none", "iptables", "none"}},
		{"calico", "", "", [4]string{"routed", "none", "iptables", "iptables"}},
		{"calico-vxlan", "nftables", "nftables", [4]string{"routed", "vxlan", "nftables", "nftables"}},
		{"kube-router", "", "", [4]string{"bridge", "none", "nftables", "iptables"}},
		{"flannel", "iptables-legacy", "", [4]string{"bridge", "vxlan", "iptables-legacy", "none"}},
		{"flannel", "ipvs", "iptables", [4]string{"bridge", "vxlan", "ipvs", "iptables"}},
		// Baselines have no pod network: overrides do not apply to them.
		{"bare", "nftables", "nftables", [4]string{"veth", "none", "none", "none"}},
		{"node2node", "", "", [4]string{"none", "none", "none", "none"}},
	} {
		p, err := Resolve(tc.dataplane, tc.proxy, tc.policy)
		if err != nil {
			t.Errorf("Resolve(%s, %q, %q): %v", tc.dataplane, tc.proxy, tc.policy, err)
			continue
		}
		a, o, x, y := p.Labels()
		if got := [4]string{a, o, x, y}; got != tc.want {
			t.Errorf("Resolve(%s, %q, %q) = %v, want %v", tc.dataplane, tc.proxy, tc.policy, got, tc.want)
		}
	}
}

// A preset's node agent is resolved with its parts (none when it names none); an agent
// nobody built makes the preset unbuilt; the agent's needs are the preset's.
func TestResolveAgent(t *testing.T) {
	for dp, want := range map[string]string{"flannel": "flanneld", "flannel-hostgw": "flanneld", "calico": None, "bare": None} {
		p, err := Resolve(dp, "", "")
		if err != nil || p.Agent == nil || p.Agent.Name() != want {
			t.Errorf("%s: agent %v (%v), want %s", dp, p.Agent, err, want)
		}
	}
	if m := (Preset{Name: "x", Attach: "bridge", Overlay: None, Agent: "weaver"}).Missing(); m != "node agent weaver is not built yet" {
		t.Errorf("missing agent: %q", m)
	}
	p, _ := Resolve("flannel-hostgw", "none", "")
	if who, need, _ := p.Lacks(func(n string) (bool, string) { return n != "iptables-nft", "absent" }); who != "agent flanneld" || need != "iptables-nft" {
		t.Errorf("lacks %q %q, want the agent's iptables-nft", who, need)
	}
}

// A preset of a part nobody built, for the "not built yet" path (every shipped preset is).
func init() {
	RegisterPreset(Preset{Name: "test-unbuilt", Attach: "sriov", Overlay: None, Proxy: None, Policy: None, Emulates: "a test preset"})
}

func TestResolveErrors(t *testing.T) {
	// A preset whose attach kind is not built yet is unsupported (skipped, not bad input);
	// so are parts that do not combine.
	for _, tc := range []struct{ dataplane, proxy, want string }{
		{"test-unbuilt", "", "attach sriov is not built yet"},
		{"antrea", "ebpf", "not with attach ovs-userspace"},
	} {
		_, err := Resolve(tc.dataplane, tc.proxy, "")
		if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%s, %q) = %v, want unsupported: %s", tc.dataplane, tc.proxy, err, tc.want)
		}
	}
	for _, tc := range []struct{ dataplane, proxy, policy, want string }{
		{"weave", "", "", `unknown dataplane "weave"`},
		{"flannel", "bpf", "", `unknown proxy "bpf" (valid: ebpf, ebpf-sock, iptables, iptables-legacy, ipvs, nftables, polycube, none)`},
		{"calico", "", "bpf", `unknown policy engine "bpf" (valid: ebpf, iptables, nftables, polycube, none)`},
	} {
		_, err := Resolve(tc.dataplane, tc.proxy, tc.policy)
		if err == nil || errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%s, %q, %q) = %v, want an error containing %s", tc.dataplane, tc.proxy, tc.policy, err, tc.want)
		}
	}
}

func TestEffectivePartsOfUnbuiltPresets(t *testing.T) {
	// A preset's proxy or policy engine that is not registered yet: its cases run with none.
	p := Preset{Name: "future", Attach: "bridge", Overlay: None, Proxy: "not-yet", Policy: "iptables"}
	if proxy, policy := p.Effective(); proxy != None || policy != "iptables" {
		t.Errorf("future's effective parts = %s, %s, want none, iptables", proxy, policy)
	}
	if !slices.Contains(PresetNames(), "cilium") || slices.Contains(PresetNames(), "bare") {
		t.Errorf("PresetNames = %v: want presets (cilium included), no baselines", PresetNames())
	}
	if got := BaselineNames(); !slices.Equal(got, []string{"bare", "node2node"}) {
		t.Errorf("BaselineNames = %v", got)
	}
}

func TestLacksNamesThePartAndTheNeed(t *testing.T) {
	missing := map[string]string{}
	has := func(need string) (bool, string) {
		if why, ok := missing[need]; ok {
			return false, why
		}
		return true, ""
	}
	flannel, _ := Resolve("flannel", "", "")
	if who, need, _ := flannel.Lacks(has); need != "" {
		t.Fatalf("with everything present Lacks = %s %s", who, need)
	}
	for _, tc := range []struct {
		dataplane, proxy, policy, missing, who string
	}{
		{"flannel", "", "", "vxlan", "overlay vxlan"},
		{"flannel", "", "", "br_netfilter", "attach bridge with Services or policies"},
		{"flannel", "nftables", "", "nftables", "proxy nftables"},
		{"calico", "", "", "ipset", "policy iptables"},
		{"calico", "", "", "cni ptp", "attach routed"},
		{"calico", "", "", "root", "lab"},
	} {
		missing = map[string]string{tc.missing: "not here"}
		p, err := Resolve(tc.dataplane, tc.proxy, tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		who, need, why := p.Lacks(has)
		if who != tc.who || need != tc.missing || why != "not here" {
			t.Errorf("%s proxy %q policy %q without %s: Lacks = %q, %q, %q, want %q", tc.dataplane, tc.proxy, tc.policy, tc.missing, who, need, why, tc.who)
		}
	}
	// br_netfilter matters only when something filters: node2node never asks for it.
	missing = map[string]string{"br_netfilter": "not here", "vxlan": "not here"}
	n2n, _ := Resolve("node2node", "", "")
	if who, need, _ := n2n.Lacks(has); need != "" {
		t.Errorf("node2node Lacks = %s %s, want nothing", who, need)
	}
}

func TestRegisteringANameTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering proxy iptables a second time did not panic")
		}
	}()
	RegisterProxy(iptablesProxy{"iptables", "nft", "iptables-nft"})
}

func TestEveryPartHasANameSummaryAndKnownNeeds(t *testing.T) {
	// Needs are doctor check names; a typo would make preflight refuse a case for a
	// capability nobody checks.
	var parts []Part
	for _, n := range hostNeeds {
		if !doctor.Known(n) {
			t.Errorf("every lab needs %q, which is no doctor check name", n)
		}
	}
	for _, a := range AttachKinds() {
		parts = append(parts, a, filterPart{a})
	}
	for _, o := range OverlayKinds() {
		parts = append(parts, o)
	}
	for _, p := range ProxyEngines() {
		parts = append(parts, p)
	}
	for _, p := range PolicyEngineList() {
		parts = append(parts, p)
	}
	for _, p := range parts {
		if p.Name() == "" || p.Summary() == "" {
			t.Errorf("%T has no name or summary", p)
		}
		for _, n := range p.Needs() {
			if !doctor.Known(n) {
				t.Errorf("%s needs %q, which is no doctor check name", p.Name(), n)
			}
		}
	}
}

// filterPart presents an attach kind's filtering needs as a part's needs.
type filterPart struct{ Attach }

func (f filterPart) Needs() []string { return f.FilterNeeds() }
