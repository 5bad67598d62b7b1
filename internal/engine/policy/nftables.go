package policy

import (
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strings"
)

// The nftables engine keeps everything in one table, NFTablesTable (family ip):
//
//	chain forward (hook forward, priority filter, policy accept):
//	    ct state established,related accept
//	    ip saddr vmap @pod-egress       one lookup, whatever the number of pods
//	    ip daddr vmap @pod-ingress
//	map pod-egress / pod-ingress: local pod address : jump <pod chain>-egress / -ingress
//	chain <pod chain>-<dir>: clear the admitted bit, jump to each policy chain of the
//	    direction, drop unless a policy set the bit, clear it
//	chain <policy>-<dir>: one rule per peer x port, setting the admitted bit and returning
//	sets: ipv4_addr (SetAddrs); ipv4_addr with flags interval (SetNets: the members with
//	    their exceptions resolved, longest prefix winning, into disjoint ranges);
//	    ipv4_addr . inet_proto . inet_service (SetAddrPorts, matched with
//	    ip daddr . meta l4proto . th dport)
//
// Both the source pod's egress and the destination pod's ingress apply to a packet between
// two local pods: the vmaps jump (not goto) and the pod chains never accept, so the base chain
// goes on to the second lookup. Denied packets are dropped. A policy direction without rules
// gets no chain (it admits nothing: the pod chain does not jump to it). The transaction
// creates, deletes and re-creates the table, so a re-rendering replaces the earlier one
// atomically and leaves nothing stale.
const (
	// NFTablesTable is the engine's table (family ip).
	NFTablesTable = "cnibench-policy"
	nftIngressMap = "pod-ingress"
	nftEgressMap  = "pod-egress"
)

// RenderNFTables renders p as one nft -f transaction (see NFTablesTable) and what it holds.
// Sets that no rule references are not rendered.
func RenderNFTables(p *Program) ([]byte, Counts) {
	var c Counts
	var chains strings.Builder
	used := map[string]bool{}
	rule := func(s string) {
		chains.WriteString("\t\t")
		chains.WriteString(s)
		chains.WriteByte('\n')
		c.Rules++
	}
	mark := fmt.Sprintf("meta mark set meta mark or 0x%08x", MarkAdmit)
	clear := fmt.Sprintf("meta mark set meta mark and 0x%08x", ^uint32(MarkAdmit))

	hasRules := map[string]bool{} // policy name + "-ingress" / "-egress"
	for _, pol := range p.Policies {
		c.Policies++
		for _, d := range []struct {
			suffix, side string
			rules        []Rule
		}{{"-ingress", "saddr", pol.Ingress}, {"-egress", "daddr", pol.Egress}} {
			if len(d.rules) == 0 {
				continue
			}
			hasRules[pol.Name+d.suffix] = true
			fmt.Fprintf(&chains, "\tchain %s {\n", pol.Name+d.suffix)
			for _, r := range d.rules {
				for _, peer := range r.Peers {
					pm := ""
					if !peer.Any {
						used[peer.Set] = true
						pm = "ip " + d.side + " @" + peer.Set + " "
					}
					for _, port := range r.Ports {
						rule(pm + nftPortMatch(port, used) + mark + " return")
					}
				}
			}
			chains.WriteString("\t}\n")
		}
	}

	var ingressMap, egressMap []string
	for _, f := range p.Pods {
		c.PodChains++
		for _, d := range []struct {
			suffix string
			pols   []string
			m      *[]string
		}{{"-egress", f.EgressOf, &egressMap}, {"-ingress", f.IngressOf, &ingressMap}} {
			if len(d.pols) == 0 {
				continue
			}
			name := f.Chain + d.suffix
			*d.m = append(*d.m, f.IP+" : jump "+name)
			fmt.Fprintf(&chains, "\tchain %s {\n", name)
			rule(clear)
			for _, pol := range d.pols {
				if hasRules[pol+d.suffix] {
					rule("jump " + pol + d.suffix)
				}
			}
			rule(fmt.Sprintf("meta mark and 0x%08x == 0 drop", MarkAdmit))
			rule(clear)
			chains.WriteString("\t}\n")
		}
	}

	var b strings.Builder
	b.Grow(chains.Len() + 4096)
	fmt.Fprintf(&b, "table ip %s\ndelete table ip %s\ntable ip %s {\n", NFTablesTable, NFTablesTable, NFTablesTable)
	for _, s := range p.Sets {
		if !used[s.Name] {
			continue
		}
		c.Sets++
		c.SetMembers += len(s.Members)
		renderNFTSet(&b, s)
	}
	for _, m := range []struct {
		name  string
		elems []string
	}{{nftEgressMap, egressMap}, {nftIngressMap, ingressMap}} {
		fmt.Fprintf(&b, "\tmap %s {\n\t\ttype ipv4_addr : verdict\n", m.name)
		writeElements(&b, m.elems)
		b.WriteString("\t}\n")
	}
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	b.WriteString("\t\tct state established,related accept\n")
	fmt.Fprintf(&b, "\t\tip saddr vmap @%s\n\t\tip daddr vmap @%s\n\t}\n", nftEgressMap, nftIngressMap)
	c.Rules += 3
	b.WriteString(chains.String())
	b.WriteString("}\n")
	return []byte(b.String()), c
}

// nftPortMatch is the match of one ports entry (ending in a space; "" for any port), noting
// the set it uses.
func nftPortMatch(pm PortMatch, used map[string]bool) string {
	switch {
	case pm.Any:
		return ""
	case pm.Set != "":
		used[pm.Set] = true
		return "ip daddr . meta l4proto . th dport @" + pm.Set + " "
	case pm.Port == 0:
		return "meta l4proto " + iptProto(pm.Protocol) + " "
	case pm.EndPort > pm.Port:
		return fmt.Sprintf("%s dport %d-%d ", iptProto(pm.Protocol), pm.Port, pm.EndPort)
	default:
		return fmt.Sprintf("%s dport %d ", iptProto(pm.Protocol), pm.Port)
	}
}

// writeElements writes an elements statement, several elements a line (none: nothing).
func writeElements(b *strings.Builder, elems []string) {
	if len(elems) == 0 {
		return
	}
	b.WriteString("\t\telements = {")
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		if i%8 == 0 {
			b.WriteString("\n\t\t\t")
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(e)
	}
	b.WriteString("\n\t\t}\n")
}

func renderNFTSet(b *strings.Builder, s Set) {
	fmt.Fprintf(b, "\tset %s {\n", s.Name)
	var elems []string
	switch s.Kind {
	case SetNets:
		b.WriteString("\t\ttype ipv4_addr\n\t\tflags interval\n")
		for _, r := range netRanges(s.Members) {
			elems = append(elems, r.String())
		}
	case SetAddrPorts:
		b.WriteString("\t\ttype ipv4_addr . inet_proto . inet_service\n")
		for _, m := range s.Members {
			elems = append(elems, fmt.Sprintf("%s . %s . %d", m.Addr, iptProto(m.Protocol), m.Port))
		}
	default:
		b.WriteString("\t\ttype ipv4_addr\n")
		for _, m := range s.Members {
			elems = append(elems, m.Addr)
		}
	}
	writeElements(b, elems)
	b.WriteString("\t}\n")
}

// ipRange is an inclusive range of IPv4 addresses; uint64 so that the end of the address
// space plus one does not wrap.
type ipRange struct{ lo, hi uint64 }

func v4String(a uint64) string {
	var ip [4]byte
	binary.BigEndian.PutUint32(ip[:], uint32(a))
	return net.IP(ip[:]).String()
}

func (r ipRange) String() string {
	if r.lo == r.hi {
		return v4String(r.lo)
	}
	return v4String(r.lo) + "-" + v4String(r.hi)
}

// cidrRange parses an IPv4 address or CIDR into its range.
func cidrRange(s string) (ipRange, bool) {
	if !strings.Contains(s, "/") {
		s += "/32"
	}
	_, n, err := net.ParseCIDR(s)
	if err != nil || n.IP.To4() == nil {
		return ipRange{}, false
	}
	ones, _ := n.Mask.Size()
	lo := uint64(binary.BigEndian.Uint32(n.IP.To4()))
	return ipRange{lo, lo + (1 << (32 - ones)) - 1}, true
}

// netRanges resolves a SetNets set into the disjoint, merged ranges of addresses it matches:
// an address belongs to the set when the most specific member containing it is not an
// exception (ipset hash:net with nomatch entries decides the same way). CIDRs either nest or
// are disjoint, so within each elementary interval between member boundaries one member is
// the most specific. Of a prefix given both as a member and as an exception, the exception
// wins (RenderIPTables adds only its nomatch entry).
func netRanges(members []Member) []ipRange {
	type cidr struct {
		r      ipRange
		except bool
	}
	var nets []cidr
	var bounds []uint64
	for _, m := range members {
		r, ok := cidrRange(m.Addr)
		if !ok {
			continue
		}
		nets = append(nets, cidr{r, m.Except})
		bounds = append(bounds, r.lo, r.hi+1)
	}
	// Most specific first; of two equal prefixes the exception wins.
	sort.SliceStable(nets, func(i, j int) bool {
		si, sj := nets[i].r.hi-nets[i].r.lo, nets[j].r.hi-nets[j].r.lo
		if si != sj {
			return si < sj
		}
		return nets[i].except && !nets[j].except
	})
	sort.Slice(bounds, func(i, j int) bool { return bounds[i] < bounds[j] })
	var out []ipRange
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]-1
		if bounds[i] == bounds[i+1] {
			continue
		}
		in := false
		for _, n := range nets {
			if n.r.lo <= lo && hi <= n.r.hi {
				in = !n.except
				break
			}
		}
		if !in {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].hi+1 == lo {
			out[k].hi = hi
		} else {
			out = append(out, ipRange{lo, hi})
		}
	}
	return out
}
