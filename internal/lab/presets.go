package lab

import (
	"fmt"
	"slices"
	"sort"
)

// Preset is a named combination of data-plane parts. It says "emulates the data path of X",
// never "is X".
type Preset struct {
	Name     string
	Attach   string // bridge | routed | none (host network only) | veth (bare pair)
	Overlay  string // vxlan | none
	Proxy    string
	Policy   string
	Emulates string
	// VXLAN parameters when Overlay is vxlan.
	VXLANDev  string
	VNI       int
	VXLANPort int
	// Missing names the part that is not built yet (the preset is listed as unavailable).
	Missing string
}

// builtProxies and builtPolicies are the Service proxies and policy engines the lab programs
// today; a preset's other parts are its target, not what a case runs with.
var (
	builtProxies  = map[string]bool{"none": true, "iptables": true, "iptables-legacy": true, "nftables": true, "ipvs": true}
	builtPolicies = map[string]bool{"none": true, "iptables": true, "nftables": true}
)

// Effective returns the proxy and policy a case on this preset really runs with.
func (p Preset) Effective() (proxy, policy string) {
	proxy, policy = p.Proxy, p.Policy
	if !builtProxies[proxy] {
		proxy = "none"
	}
	if !builtPolicies[policy] {
		policy = "none"
	}
	return proxy, policy
}

// Overhead is the bytes the overlay adds to every packet (VXLAN over IPv4: 50).
func (p Preset) Overhead() int {
	if p.Overlay == "vxlan" {
		return 50
	}
	return 0
}

var presets = map[string]Preset{
	"flannel": {Name: "flannel", Attach: "bridge", Overlay: "vxlan", Proxy: "iptables", Policy: "none",
		Emulates: "Flannel (vxlan backend) + kube-proxy", VXLANDev: "flannel.1", VNI: 1, VXLANPort: 8472},
	"flannel-hostgw": {Name: "flannel-hostgw", Attach: "bridge", Overlay: "none", Proxy: "iptables", Policy: "none",
		Emulates: "Flannel host-gw backend + kube-proxy"},
	"calico": {Name: "calico", Attach: "routed", Overlay: "none", Proxy: "iptables", Policy: "iptables",
		Emulates: "Calico BGP mode (routed /32 veths, proxy ARP)"},
	"calico-vxlan": {Name: "calico-vxlan", Attach: "routed", Overlay: "vxlan", Proxy: "iptables", Policy: "iptables",
		Emulates: "Calico VXLAN mode", VXLANDev: "vxlan.calico", VNI: 4096, VXLANPort: 4789},
	"cilium": {Name: "cilium", Attach: "ebpf", Overlay: "vxlan", Proxy: "ebpf", Policy: "ebpf",
		Emulates: "Cilium with kube-proxy replacement", Missing: "eBPF attach (tc redirect_peer) is not built yet (roadmap item 5)"},
	"kube-router": {Name: "kube-router", Attach: "bridge", Overlay: "none", Proxy: "nftables", Policy: "iptables",
		Emulates: "kube-router (bridge, kube-proxy nftables Services, iptables + ipset policies)"},
	"antrea": {Name: "antrea", Attach: "ovs-userspace", Overlay: "vxlan", Proxy: "iptables", Policy: "iptables",
		Emulates: "Antrea-like OVS (userspace datapath)", Missing: "OVS attachment is not built yet"},
	"polycube": {Name: "polycube", Attach: "ebpf-chain", Overlay: "vxlan", Proxy: "ebpf", Policy: "ebpf",
		Emulates: "the disaggregated eBPF provider of seed 003", Missing: "eBPF chain is not built yet (roadmap item 5)"},
}

// Baseline pseudo-dataplanes: no CNI at all.
var baselines = map[string]Preset{
	"bare":      {Name: "bare", Attach: "veth", Overlay: "none", Proxy: "none", Policy: "none", Emulates: "two namespaces joined by one veth pair"},
	"node2node": {Name: "node2node", Attach: "none", Overlay: "none", Proxy: "none", Policy: "none", Emulates: "node to node over the underlay (host network)"},
}

// Lookup returns a preset or baseline by name.
func Lookup(name string) (Preset, error) {
	if p, ok := presets[name]; ok {
		return p, nil
	}
	if p, ok := baselines[name]; ok {
		return p, nil
	}
	return Preset{}, fmt.Errorf("unknown dataplane %q (valid: %v)", name, append(PresetNames(), BaselineNames()...))
}

// PresetNames lists the data-plane presets, available or not, sorted.
func PresetNames() []string { return keys(presets) }

// BaselineNames lists the baseline pseudo-dataplanes.
func BaselineNames() []string { return keys(baselines) }

// Presets returns every preset sorted by name.
func Presets() []Preset {
	var out []Preset
	for _, n := range PresetNames() {
		out = append(out, presets[n])
	}
	return out
}

func keys(m map[string]Preset) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Needs lists the host capabilities (doctor check names) a preset uses.
func (p Preset) Needs() []string {
	n := []string{"root", "ip", "veth"}
	switch p.Attach {
	case "bridge":
		n = append(n, "bridge", "cni bridge", "cni host-local")
	case "routed":
		n = append(n, "cni ptp", "cni host-local")
	}
	if p.Overlay == "vxlan" {
		n = append(n, "vxlan")
	}
	proxy, policy := p.Effective()
	for _, part := range []string{proxy, policy} {
		switch part {
		case "iptables":
			n = append(n, "iptables-nft")
		case "iptables-legacy":
			n = append(n, "iptables-legacy")
		case "nftables":
			n = append(n, "nftables")
		}
	}
	if policy == "iptables" {
		n = append(n, "ipset")
	}
	if p.Attach == "bridge" && (proxy != "none" || policy != "none") {
		n = append(n, "br_netfilter")
	}
	return slices.Compact(n)
}
