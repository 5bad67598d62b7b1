// Package nodedump writes down what a pod network programmed in a node's network namespace —
// links and their settings, addresses, routes, permanent neighbours, VXLAN forwarding entries,
// the iptables rules of the CNI and the sysctls it needs — one object per line, with every
// address named by its role (this node, the other node, this node's pod subnet, ...), so that
// a lab node and a real cluster's node compare line by line (the lab's emulation held against
// the real data plane).
package nodedump

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
)

// Roles name the addresses of a node by what they are: the node, the other node, their pod
// subnets and VXLAN endpoints' MACs, the cluster's pod CIDR.
type Roles struct {
	Node, Peer         net.IP
	Subnet, PeerSubnet *net.IPNet
	Cluster            *net.IPNet
	VTEPMAC, PeerMAC   string // VXLAN endpoint MACs ("" when there is none)
}

// Dump is a node's objects, one per line, sorted.
type Dump []string

// Options says which iptables rules belong to the pod network: those of the chains (and rules
// jumping to chains) whose names start with one of ChainPrefixes.
type Options struct {
	ChainPrefixes []string
	Sysctls       []string // e.g. net/ipv4/ip_forward
}

// Take dumps the network namespace ns.
func Take(ns string, r Roles, opt Options) (Dump, error) {
	var lines []string
	err := netns.WithNetlink(ns, func(h *netlink.Handle) error {
		links, err := h.LinkList()
		if err != nil {
			return err
		}
		names := map[int]string{}
		for _, l := range links {
			names[l.Attrs().Index] = l.Attrs().Name
		}
		for _, l := range links {
			a := l.Attrs()
			if a.Name == "lo" {
				continue
			}
			lines = append(lines, linkLine(h, l, names))
			addrs, err := h.AddrList(l, unix.AF_INET)
			if err != nil {
				return err
			}
			for _, ad := range addrs {
				lines = append(lines, fmt.Sprintf("addr %s %s", a.Name, ad.IPNet))
			}
			neighs, err := h.NeighList(a.Index, unix.AF_INET)
			if err != nil {
				return err
			}
			for _, n := range neighs {
				if n.State&netlink.NUD_PERMANENT != 0 {
					lines = append(lines, fmt.Sprintf("neigh %s dev %s lladdr %s permanent", n.IP, a.Name, n.HardwareAddr))
				}
			}
			if l.Type() == "vxlan" {
				fdb, err := h.NeighList(a.Index, unix.AF_BRIDGE)
				if err != nil {
					return err
				}
				for _, n := range fdb {
					if n.Flags&netlink.NTF_SELF != 0 && n.IP != nil {
						lines = append(lines, fmt.Sprintf("fdb %s dev %s dst %s%s", n.HardwareAddr, a.Name, n.IP, stateWord(n.State)))
					}
				}
			}
		}
		routes, err := h.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		for _, rt := range routes {
			lines = append(lines, routeLine(rt, names))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dump %s: %w", ns, err)
	}
	for _, s := range opt.Sysctls {
		v, err := netns.Sysctl(ns, s)
		if err != nil {
			v = "absent"
		}
		lines = append(lines, fmt.Sprintf("sysctl %s %s", strings.ReplaceAll(s, "/", "."), strings.TrimSpace(v)))
	}
	if len(opt.ChainPrefixes) > 0 {
		out, err := netns.Output(netns.Path(ns), "iptables-save", nil, nil)
		if err != nil {
			return nil, fmt.Errorf("dump %s: %w", ns, err)
		}
		lines = append(lines, IptablesLines(string(out), opt.ChainPrefixes)...)
	}
	d := make(Dump, 0, len(lines))
	for _, l := range lines {
		d = append(d, r.name(l))
	}
	sort.Strings(d)
	return slices.Compact(d), nil
}

func stateWord(s int) string {
	if s&netlink.NUD_PERMANENT != 0 {
		return " permanent"
	}
	return ""
}

// linkLine is a link with the settings a pod network chooses: kind, MTU, state, master; a
// VXLAN device's VNI, port, learning, local address and device, GBP and miss notifications;
// a bridge port's hairpin, learning and flooding.
func linkLine(h *netlink.Handle, l netlink.Link, names map[int]string) string {
	a := l.Attrs()
	up := "down"
	if a.Flags&net.FlagUp != 0 {
		up = "up"
	}
	s := fmt.Sprintf("link %s type %s mtu %d %s", a.Name, l.Type(), a.MTU, up)
	if a.MasterIndex != 0 {
		s += " master " + names[a.MasterIndex]
	}
	switch v := l.(type) {
	case *netlink.Vxlan:
		s += fmt.Sprintf(" vni %d port %d learning %v local %s dev %s gbp %v l2miss %v l3miss %v", v.VxlanId, v.Port, v.Learning, v.SrcAddr,
			names[v.VtepDevIndex], v.GBP, v.L2miss, v.L3miss)
		if a.HardwareAddr != nil {
			s += " address " + a.HardwareAddr.String()
		}
	case *netlink.Bridge:
		if v.VlanFiltering != nil {
			s += fmt.Sprintf(" vlan_filtering %v", *v.VlanFiltering)
		}
	}
	if a.MasterIndex != 0 {
		if pi, err := h.LinkGetProtinfo(l); err == nil {
			s += fmt.Sprintf(" hairpin %v learning %v flood %v", pi.Hairpin, pi.Learning, pi.Flood)
		}
	}
	return s
}

// routeLine is a route as ip-route(8) shows it, with its protocol and scope.
func routeLine(rt netlink.Route, names map[int]string) string {
	dst := "default"
	if rt.Dst != nil {
		dst = rt.Dst.String()
	}
	s := "route " + dst
	if rt.Type != unix.RTN_UNICAST {
		s += fmt.Sprintf(" type %d", rt.Type)
	}
	if rt.Gw != nil {
		s += " via " + rt.Gw.String()
	}
	if rt.LinkIndex != 0 {
		s += " dev " + names[rt.LinkIndex]
	}
	if rt.Flags&int(netlink.FLAG_ONLINK) != 0 {
		s += " onlink"
	}
	s += fmt.Sprintf(" proto %s scope %s", rt.Protocol, rt.Scope)
	if rt.Src != nil {
		s += " src " + rt.Src.String()
	}
	return s
}

// IptablesLines are the rules of iptables-save output that belong to chains starting with one
// of prefixes, or jump to one, as "iptables TABLE #N RULE", N its place among the chain's kept
// rules (the order decides: a RETURN before a MASQUERADE), and chain declarations as
// "iptables TABLE :CHAIN" (policies and counters dropped).
func IptablesLines(save string, prefixes []string) []string {
	ours := func(s string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.Contains(s, p) })
	}
	var out []string
	table := ""
	nth := map[string]int{}
	for _, l := range strings.Split(save, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":"):
			if chain, _, _ := strings.Cut(l[1:], " "); ours(chain) {
				out = append(out, fmt.Sprintf("iptables %s :%s", table, chain))
			}
		case strings.HasPrefix(l, "-A ") && ours(l):
			chain, _, _ := strings.Cut(l[3:], " ")
			nth[table+" "+chain]++
			out = append(out, fmt.Sprintf("iptables %s #%d %s", table, nth[table+" "+chain], l))
		}
	}
	return out
}

var (
	ipRE   = regexp.MustCompile(`\b(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(/\d{1,2})?\b`)
	macRE  = regexp.MustCompile(`\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)
	vethRE = regexp.MustCompile(`\bveth[0-9a-f]{8}\b`)
)

// name replaces the addresses in a line by their roles: NODE and PEER (the nodes), SUBNET and
// PEER_SUBNET (their pod subnets; an address in one is SUBNET+N for its N-th address, pods
// beyond the gateway SUBNET+pod), CLUSTER (the pod CIDR), VTEP_MAC and PEER_VTEP_MAC, any other
// MAC as MAC; the bridge plugin's random veth names as veth*.
func (r Roles) name(line string) string {
	line = vethRE.ReplaceAllString(line, "veth*")
	line = macRE.ReplaceAllStringFunc(line, func(m string) string {
		switch {
		case r.VTEPMAC != "" && m == r.VTEPMAC:
			return "VTEP_MAC"
		case r.PeerMAC != "" && m == r.PeerMAC:
			return "PEER_VTEP_MAC"
		}
		return "MAC"
	})
	return ipRE.ReplaceAllStringFunc(line, func(m string) string {
		addr, bits, _ := strings.Cut(m, "/")
		ip := net.ParseIP(addr).To4()
		if ip == nil {
			return m
		}
		if bits != "" {
			bits = "/" + bits
		}
		nets := []struct {
			name string
			net  *net.IPNet
		}{{"SUBNET", r.Subnet}, {"PEER_SUBNET", r.PeerSubnet}, {"CLUSTER", r.Cluster}}
		for _, n := range nets { // a network itself
			if n.net != nil && ip.Equal(n.net.IP) && bits == fmt.Sprintf("/%d", ones(n.net)) {
				return n.name + bits
			}
		}
		for _, n := range nets { // an address in one
			if n.net == nil || !n.net.Contains(ip) {
				continue
			}
			off := ipOffset(n.net.IP, ip)
			if n.name != "CLUSTER" && off > 1 {
				return n.name + "+pod" + bits
			}
			return fmt.Sprintf("%s+%d%s", n.name, off, bits)
		}
		switch {
		case r.Node != nil && ip.Equal(r.Node):
			return "NODE" + bits
		case r.Peer != nil && ip.Equal(r.Peer):
			return "PEER" + bits
		}
		return m
	})
}

func ones(n *net.IPNet) int {
	o, _ := n.Mask.Size()
	return o
}

// ipOffset is how far ip is from base (IPv4).
func ipOffset(base, ip net.IP) uint32 {
	b, i := base.To4(), ip.To4()
	return (uint32(i[0])<<24 | uint32(i[1])<<16 | uint32(i[2])<<8 | uint32(i[3])) -
		(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
}

// Diff lists the lines only in a and only in b.
func Diff(a, b Dump) (onlyA, onlyB []string) {
	for _, l := range a {
		if !slices.Contains(b, l) {
			onlyA = append(onlyA, l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			onlyB = append(onlyB, l)
		}
	}
	return onlyA, onlyB
}

// String is the dump as text, one line each.
func (d Dump) String() string { return strings.Join(d, "\n") + "\n" }

// Parse reads a dump written by String.
func Parse(s string) Dump {
	var d Dump
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			d = append(d, l)
		}
	}
	sort.Strings(d)
	return d
}

// Flannel is what Flannel programs besides links, addresses, routes and neighbours: flanneld's
// iptables chains (FLANNEL-POSTRTG for masquerading, FLANNEL-FWD accepting the pod network in
// FORWARD), those the bridge plugin would add (CNI-), and the sysctls the data path needs.
var Flannel = Options{
	ChainPrefixes: []string{"FLANNEL", "CNI-"},
	Sysctls:       []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"},
}
