package policy

import (
	"fmt"
	"strings"
)

// The iptables engine reproduces kube-router's network policy layout in the filter table:
//
//	FORWARD -> KUBE-ROUTER-FORWARD                      (hook, ensured once by ApplyIPTables)
//	KUBE-ROUTER-FORWARD: RELATED,ESTABLISHED accepted, then one rule per egress-isolated local
//	    pod (-s IP) and one per ingress-isolated local pod (-d IP) jumping to the pod's chain:
//	    a linear walk over the node's pods, which is what thousands of pods cost
//	<pod chain> (PodFirewall.Chain): per direction, set the direction bit, jump to each
//	    policy chain of that direction, DROP what no policy marked as admitted
//	<policy chain> (PolicyChain.Name): one rule per peer x port of each rule, matching
//	    ipsets with -m set, setting the admitted bit; then RETURN once admitted
//
// Direction. As in kube-router, one chain per pod and one per policy serve both directions,
// and a packet between two local pods is checked twice: as the source pod's egress and as the
// destination pod's ingress. Nothing is ACCEPTed after the first check (the pod chains only
// DROP or return), so both checks apply. The direction being checked is a mark bit
// (MarkEgress) that the pod chain sets before it jumps to policy chains, and every rule of a
// policy chain matches it, so an ingress rule never admits during an egress check, even when
// the pod is among its own policy's peers (kube-router instead matches the policy's target-pod
// set as destination or source). A rule that admits sets MarkAdmit; the pod chain drops the
// packet when no policy set it. KUBE-ROUTER-FORWARD clears both bits at its end. Denied
// packets are DROPped (as Calico does; kube-router REJECTs): a denied connection times out.
//
// Ownership. The engine owns the chains reachable from KUBE-ROUTER-FORWARD and from
// KUBE-ROUTER-IDLE (a chain nothing jumps to that lists, with one jump each, the policy chains
// no local pod uses, so that they exist as kube-router creates every policy's chain on every
// node), and the ipsets named by rules of those chains. ApplyIPTables finds the previous
// rendering that way (iptables-save) and removes what the new one no longer declares.
// Sets that no rule references are not rendered.
const (
	// IPTablesTopChain is the chain FORWARD jumps to.
	IPTablesTopChain = "KUBE-ROUTER-FORWARD"
	// IPTablesIdleChain lists policy chains no local pod uses (never jumped to).
	IPTablesIdleChain = "KUBE-ROUTER-IDLE"
	// MarkEgress is the bit set while the source pod's egress policies are checked.
	MarkEgress = 0x20000
)

// ipsetMaxElem is every set's maxelem: fixed, so that `create -exist` of a re-rendering always
// matches the set an earlier one created.
const ipsetMaxElem = 1 << 20

// RenderIPTables renders p as kube-router lays it out: ipset restore input creating (or
// refreshing: create -exist, flush, add) the sets the rules use, and the engine's part of the
// filter table as iptables-restore input (chain declarations, then rules; valid --noflush
// input on its own). ApplyIPTables merges it into the namespace's filter table, which it
// restores whole, dropping what an earlier rendering installed. The output follows the
// Program's order, so it is deterministic. No comments are rendered (kube-router has one per
// rule): they cost an xt match per rule and say nothing the chain names do not.
func RenderIPTables(p *Program) (ipset []byte, filter []byte, c Counts) {
	used := map[string]bool{}
	var decl, rules strings.Builder
	chain := func(name string) { fmt.Fprintf(&decl, ":%s - [0:0]\n", name) }
	rule := func(chain string, args ...string) {
		rules.WriteString("-A ")
		rules.WriteString(chain)
		for _, a := range args {
			if a != "" {
				rules.WriteByte(' ')
				rules.WriteString(a)
			}
		}
		rules.WriteByte('\n')
		c.Rules++
	}

	// The builders sized for the rendering (growing them copied 5 MB over and over at
	// 20,000 policies): about 100 bytes a rule, 40 a declaration.
	n := 3 + 2*len(p.Pods)
	for _, f := range p.Pods {
		n += 4 + len(f.EgressOf) + len(f.IngressOf)
	}
	for _, pol := range p.Policies {
		n++
		for _, r := range append(pol.Ingress[:len(pol.Ingress):len(pol.Ingress)], pol.Egress...) {
			n += 2 * len(r.Peers) * len(r.Ports)
		}
	}
	rules.Grow(100 * n)
	decl.Grow(40 * (2 + len(p.Pods) + len(p.Policies)))
	chain(IPTablesTopChain)
	chain(IPTablesIdleChain)
	rule(IPTablesTopChain, "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
	for _, f := range p.Pods {
		if len(f.EgressOf) > 0 {
			rule(IPTablesTopChain, "-s", f.IP+"/32", "-j", f.Chain)
		}
	}
	for _, f := range p.Pods {
		if len(f.IngressOf) > 0 {
			rule(IPTablesTopChain, "-d", f.IP+"/32", "-j", f.Chain)
		}
	}
	rule(IPTablesTopChain, fmt.Sprintf("-j MARK --set-xmark 0x0/%#x", MarkAdmit|MarkEgress))

	referenced := map[string]bool{}
	for _, f := range p.Pods {
		chain(f.Chain)
		c.PodChains++
		dirs := []struct {
			pols       []string
			addr, mode string
		}{
			{f.EgressOf, "-s " + f.IP + "/32", fmt.Sprintf("%#x/%#x", MarkEgress, MarkAdmit|MarkEgress)},
			{f.IngressOf, "-d " + f.IP + "/32", fmt.Sprintf("0x0/%#x", MarkAdmit|MarkEgress)},
		}
		for _, d := range dirs {
			if len(d.pols) == 0 {
				continue
			}
			rule(f.Chain, d.addr, "-j MARK --set-xmark", d.mode)
			for _, pol := range d.pols {
				referenced[pol] = true
				rule(f.Chain, d.addr, "-j", pol)
			}
			rule(f.Chain, d.addr, fmt.Sprintf("-m mark --mark 0x0/%#x -j DROP", MarkAdmit))
		}
	}

	admit := fmt.Sprintf("-j MARK --set-xmark %#x/%#x", MarkAdmit, MarkAdmit)
	admitted := fmt.Sprintf("-m mark --mark %#x/%#x -j RETURN", MarkAdmit, MarkAdmit)
	for _, pol := range p.Policies {
		chain(pol.Name)
		c.Policies++
		if !referenced[pol.Name] {
			rule(IPTablesIdleChain, "-j", pol.Name)
		}
		for _, dir := range []struct {
			rules       []Rule
			mark, other string // direction match; the peer's side of the packet
		}{
			{pol.Ingress, fmt.Sprintf("-m mark --mark 0x0/%#x", MarkEgress), "src"},
			{pol.Egress, fmt.Sprintf("-m mark --mark %#x/%#x", MarkEgress, MarkEgress), "dst"},
		} {
			for _, r := range dir.rules {
				for _, peer := range r.Peers {
					pm := ""
					if !peer.Any {
						used[peer.Set] = true
						pm = "-m set --match-set " + peer.Set + " " + dir.other
					}
					for _, port := range r.Ports {
						rule(pol.Name, dir.mark, pm, iptPortMatch(port, used), admit)
						rule(pol.Name, admitted)
					}
				}
			}
		}
	}

	var sets strings.Builder
	for _, s := range p.Sets {
		if !used[s.Name] {
			continue
		}
		c.Sets++
		c.SetMembers += len(s.Members)
		renderIPSet(&sets, s)
	}
	var b strings.Builder
	b.Grow(decl.Len() + rules.Len() + 16)
	b.WriteString("*filter\n")
	b.WriteString(decl.String())
	b.WriteString(rules.String())
	b.WriteString("COMMIT\n")
	return []byte(sets.String()), []byte(b.String()), c
}

// iptPortMatch is the match of one ports entry ("" for any port), noting the set it uses.
func iptPortMatch(pm PortMatch, used map[string]bool) string {
	switch {
	case pm.Any:
		return ""
	case pm.Set != "":
		used[pm.Set] = true
		m := "-m set --match-set " + pm.Set + " dst,dst"
		if pm.Protocol != "" {
			m = "-p " + iptProto(pm.Protocol) + " " + m
		}
		return m
	case pm.Port == 0:
		return "-p " + iptProto(pm.Protocol)
	default:
		p := iptProto(pm.Protocol)
		if pm.EndPort > pm.Port {
			return fmt.Sprintf("-p %s -m %s --dport %d:%d", p, p, pm.Port, pm.EndPort)
		}
		return fmt.Sprintf("-p %s -m %s --dport %d", p, p, pm.Port)
	}
}

// renderIPSet writes one set as ipset restore commands: created if missing, emptied, filled.
func renderIPSet(b *strings.Builder, s Set) {
	typ := "hash:ip"
	switch s.Kind {
	case SetNets:
		typ = "hash:net"
	case SetAddrPorts:
		typ = "hash:ip,port"
	}
	fmt.Fprintf(b, "create %s %s family inet maxelem %d -exist\n", s.Name, typ, ipsetMaxElem)
	fmt.Fprintf(b, "flush %s\n", s.Name)
	var excepted map[string]bool
	if s.Kind == SetNets {
		excepted = map[string]bool{}
		for _, m := range s.Members {
			if m.Except {
				excepted[m.Addr] = true
			}
		}
	}
	for _, m := range s.Members {
		switch s.Kind {
		case SetNets:
			if !m.Except && excepted[m.Addr] {
				continue // the exception wins; ipset would refuse the second entry
			}
			// hash:net cannot hold a /0: two /1 halves cover it, as kube-router does.
			nets := []string{m.Addr}
			if strings.HasSuffix(m.Addr, "/0") {
				nets = []string{"0.0.0.0/1", "128.0.0.0/1"}
			}
			for _, n := range nets {
				if m.Except {
					fmt.Fprintf(b, "add %s %s nomatch\n", s.Name, n)
				} else {
					fmt.Fprintf(b, "add %s %s\n", s.Name, n)
				}
			}
		case SetAddrPorts:
			fmt.Fprintf(b, "add %s %s,%s:%d\n", s.Name, m.Addr, iptProto(m.Protocol), m.Port)
		default:
			fmt.Fprintf(b, "add %s %s\n", s.Name, m.Addr)
		}
	}
}
