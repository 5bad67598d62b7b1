package dataplane

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Preset is a named combination of data-plane parts. It says "emulates the data path of X",
// never "is X". Parts not registered yet are its target: an attach kind or overlay that is
// missing makes the preset unavailable (Missing); a missing proxy or policy engine makes its
// cases run with none.
type Preset struct {
	Name                           string
	Attach, Overlay, Proxy, Policy string
	Emulates                       string
	VXLAN                          VXLAN // when Overlay is vxlan
	// Agent is the node agent's own rules ("" = none): not a label of the cases, part of
	// what the preset emulates.
	Agent string
	// Baseline marks the pseudo-dataplanes without a CNI (bare, node2node): a scenario names
	// them itself; they are not offered as presets.
	Baseline bool
}

var (
	presetsMu sync.Mutex
	presets   = map[string]Preset{}
)

// RegisterPreset makes a preset known; a name registered twice panics.
func RegisterPreset(p Preset) {
	presetsMu.Lock()
	defer presetsMu.Unlock()
	if _, dup := presets[p.Name]; dup {
		panic("dataplane: preset " + p.Name + " registered twice")
	}
	presets[p.Name] = p
}

func init() {
	for _, p := range []Preset{
		{Name: "flannel", Attach: "bridge", Overlay: "vxlan", Proxy: "iptables", Policy: None, Agent: "flanneld",
			Emulates: "Flannel (vxlan backend) + kube-proxy", VXLAN: VXLAN{Dev: "flannel.1", VNI: 1, Port: 8472}},
		{Name: "flannel-hostgw", Attach: "bridge", Overlay: None, Proxy: "iptables", Policy: None, Agent: "flanneld",
			Emulates: "Flannel host-gw backend + kube-proxy"},
		{Name: "calico", Attach: "routed", Overlay: None, Proxy: "iptables", Policy: "iptables",
			Emulates: "Calico BGP mode (routed /32 veths, proxy ARP)"},
		{Name: "calico-vxlan", Attach: "routed", Overlay: "vxlan", Proxy: "iptables", Policy: "iptables",
			Emulates: "Calico VXLAN mode", VXLAN: VXLAN{Dev: "vxlan.calico", VNI: 4096, Port: 4789}},
		{Name: "cilium", Attach: "ebpf", Overlay: "vxlan", Proxy: "ebpf-sock", Policy: "ebpf",
			Emulates: "Cilium with kube-proxy replacement and BPF host routing", VXLAN: VXLAN{Dev: "cilium_vxlan", VNI: 2, Port: 8472}},
		{Name: "kube-router", Attach: "bridge", Overlay: None, Proxy: "nftables", Policy: "iptables",
			Emulates: "kube-router (bridge, kube-proxy nftables Services, iptables + ipset policies)"},
		{Name: "antrea", Attach: "ovs-userspace", Overlay: "vxlan", Proxy: "iptables", Policy: "iptables",
			Emulates: "Antrea's node layout on OVS's user-space datapath (br-int, antrea-gw0; kernel VXLAN between nodes, kube-proxy and iptables policies in the node's stack)",
			VXLAN:    VXLAN{Dev: "vxlan_sys_4789", VNI: 0, Port: 4789}},
		{Name: "ovs-dpdk", Attach: "ovs-dpdk", Overlay: "vxlan", Proxy: "iptables", Policy: "iptables",
			Emulates: "the IETF draft's user-space vSwitch with DPDK: the antrea layout on OVS-DPDK (pods' veths as DPDK AF_PACKET ports, no hugepages, one busy-polling PMD thread per node)",
			VXLAN:    VXLAN{Dev: "vxlan_sys_4789", VNI: 0, Port: 4789}},
		{Name: "polycube", Attach: "ebpf-chain", Overlay: "vxlan", Proxy: "polycube", Policy: "polycube",
			Emulates: "seed 003's disaggregated eBPF provider (Polycube cubes chained by tail calls)", VXLAN: VXLAN{Dev: "pcn_vxlan", VNI: 1, Port: 4789}},
		{Name: "polycube-mono", Attach: "ebpf-mono", Overlay: "vxlan", Proxy: "polycube", Policy: "polycube",
			Emulates: "seed 003's eBPF provider built as one monolithic program per hook (same functions, no tail calls)", VXLAN: VXLAN{Dev: "pcn_vxlan", VNI: 1, Port: 4789}},
		{Name: "bare", Attach: "veth", Overlay: None, Proxy: None, Policy: None, Baseline: true,
			Emulates: "two namespaces joined by one veth pair"},
		{Name: "node2node", Attach: None, Overlay: None, Proxy: None, Policy: None, Baseline: true,
			Emulates: "node to node over the underlay (host network)"},
	} {
		RegisterPreset(p)
	}
}

// Lookup returns a preset or baseline by name.
func Lookup(name string) (Preset, error) {
	presetsMu.Lock()
	p, ok := presets[name]
	presetsMu.Unlock()
	if !ok {
		return Preset{}, fmt.Errorf("unknown dataplane %q (valid: %v)", name, append(PresetNames(), BaselineNames()...))
	}
	return p, nil
}

func presetNames(baseline bool) []string {
	presetsMu.Lock()
	defer presetsMu.Unlock()
	var out []string
	for n, p := range presets {
		if p.Baseline == baseline {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// PresetNames lists the data-plane presets, available or not, sorted.
func PresetNames() []string { return presetNames(false) }

// BaselineNames lists the baseline pseudo-dataplanes, sorted.
func BaselineNames() []string { return presetNames(true) }

// Presets returns every preset sorted by name, then the baselines.
func Presets() []Preset {
	var out []Preset
	for _, n := range append(PresetNames(), BaselineNames()...) {
		p, _ := Lookup(n)
		out = append(out, p)
	}
	return out
}

// Missing names the part of the preset that is not built yet ("" when it can be built).
func (p Preset) Missing() string {
	if _, ok := attaches.get(p.Attach); !ok {
		return fmt.Sprintf("attach %s is not built yet", p.Attach)
	}
	if _, ok := overlays.get(p.Overlay); !ok {
		return fmt.Sprintf("overlay %s is not built yet", p.Overlay)
	}
	if _, ok := agents.get(p.agent()); !ok {
		return fmt.Sprintf("node agent %s is not built yet", p.agent())
	}
	return ""
}

// agent is the preset's node agent, None when it has none.
func (p Preset) agent() string {
	if p.Agent == "" {
		return None
	}
	return p.Agent
}

// Effective returns the proxy and policy engine the preset's cases run with when no override
// is given: its own where registered, else none.
func (p Preset) Effective() (proxy, policy string) {
	proxy, policy = None, None
	if _, ok := proxies.get(p.Proxy); ok {
		proxy = p.Proxy
	}
	if _, ok := policies.get(p.Policy); ok {
		policy = p.Policy
	}
	return proxy, policy
}

// Parts are the engines a lab of one preset runs with.
type Parts struct {
	Preset  Preset
	Attach  Attach
	Overlay Overlay
	Proxy   Proxy
	Policy  Policy
	Agent   Agent
}

// Resolve returns the parts of a preset with the given proxy and policy overrides ("" = the
// preset's; overrides apply only where pods have a network of their own). An unknown preset or
// override is an error naming the valid ones; a preset whose attach kind or overlay is not
// built yet is an error wrapping cluster.ErrUnsupported.
func Resolve(dataplane, proxyName, policyName string) (Parts, error) {
	p, err := Lookup(dataplane)
	if err != nil {
		return Parts{}, err
	}
	if m := p.Missing(); m != "" {
		return Parts{}, cluster.Unsupported("dataplane %s: %s", p.Name, m)
	}
	parts := Parts{Preset: p}
	parts.Attach, _ = attaches.get(p.Attach)
	parts.Overlay, _ = overlays.get(p.Overlay)
	parts.Agent, _ = agents.get(p.agent())
	proxyEff, policyEff := p.Effective()
	if proxyName == "" || !parts.Attach.PodNetwork() {
		proxyName = proxyEff
	}
	if policyName == "" || !parts.Attach.PodNetwork() {
		policyName = policyEff
	}
	if parts.Proxy, err = proxies.lookup(proxyName); err != nil {
		return Parts{}, err
	}
	if parts.Policy, err = policies.lookup(policyName); err != nil {
		return Parts{}, err
	}
	for _, e := range []Part{parts.Attach, parts.Overlay, parts.Proxy, parts.Policy} {
		if c, ok := e.(Combining); ok {
			if err := c.Combines(parts); err != nil {
				return Parts{}, cluster.Unsupported("dataplane %s (%s): %v", p.Name, parts, err)
			}
		}
	}
	return parts, nil
}

// hostNeeds are what every lab needs whatever its parts (doctor check names).
var hostNeeds = []string{"root", "ip", "veth"}

// Lacks names the first host capability a lab of these parts needs that has denies: which
// part needs it ("lab", "attach bridge", "proxy nftables", ...), the capability and why it is
// missing.
func (p Parts) Lacks(has func(need string) (bool, string)) (who, need, why string) {
	type req struct {
		who   string
		needs []string
	}
	reqs := []req{{"lab", hostNeeds}, {"attach " + p.Attach.Name(), p.Attach.Needs()}, {"overlay " + p.Overlay.Name(), p.Overlay.Needs()},
		{"proxy " + p.Proxy.Name(), p.Proxy.Needs()}, {"policy " + p.Policy.Name(), p.Policy.Needs()}, {"agent " + p.Agent.Name(), p.Agent.Needs()}}
	if p.StackFiltered() {
		reqs = append(reqs, req{"attach " + p.Attach.Name() + " with Services or policies", p.Attach.FilterNeeds()})
	}
	for _, r := range reqs {
		for _, n := range r.needs {
			if ok, why := has(n); !ok {
				return r.who, n, why
			}
		}
	}
	return "", "", ""
}

// StackFiltered says whether the Services or policies of these parts filter pod traffic in
// the node's IP stack (netfilter), which the attach kind must then let them see (Filtered):
// an engine that is not none and does not program each pod's host side itself (PodHook).
func (p Parts) StackFiltered() bool {
	for _, e := range []Part{p.Proxy, p.Policy} {
		if _, hooked := e.(PodHook); e.Name() != None && !hooked {
			return true
		}
	}
	return false
}

// Labels are the effective parts' names, as the case labels carry them.
func (p Parts) Labels() (attach, overlay, proxy, policy string) {
	return p.Attach.Name(), p.Overlay.Name(), p.Proxy.Name(), p.Policy.Name()
}

// String names the parts ("bridge+vxlan, proxy iptables, policy none").
func (p Parts) String() string {
	return strings.Join([]string{p.Attach.Name() + "+" + p.Overlay.Name(), "proxy " + p.Proxy.Name(), "policy " + p.Policy.Name()}, ", ")
}
