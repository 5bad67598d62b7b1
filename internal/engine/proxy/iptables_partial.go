package proxy

import (
	"fmt"
	"slices"
	"strings"
)

// IPTState is what an iptables rendering left in a node's nat and filter tables, as
// RenderIPTablesPartial needs it to write the next change: per Service port, the Service as
// rendered with its chains and rules; whether KUBE-NODEPORTS exists and KUBE-EXTERNAL-SERVICES
// holds rules; and the options the rendering depends on. It plays the part of kube-proxy's
// record of the chains it last wrote (MinimizeIPTablesRestore). A state is only valid for the
// node it was applied to, and only if that Apply succeeded; it is never modified, so a failed
// Apply leaves the previous state usable.
type IPTState struct {
	svcs              []Service
	frags             []*iptFrag
	nodePorts, filter bool
	node, clusterCIDR string
}

// iptAlways are the nat chains a partial rendering always writes whole, as kube-proxy's
// partial syncs do: their rules depend on every Service (one per Service port or NodePort).
var iptAlways = []string{"KUBE-SERVICES", nodePortsChain}

// RenderIPTablesPartial renders svcs as a change from prev, what the last rendering applied
// to the node left there (see RenderIPTables for the layout), and returns the
// iptables-restore --noflush input, the state to pass next time and what the tables hold
// afterwards (Counts.Changed: the chains written plus those deleted).
//
// With prev nil it is RenderIPTables(svcs, opt), bytes and all, opt.Stale honoured: a full
// rendering. Otherwise it is what kube-proxy writes with MinimizeIPTablesRestore (its
// default): the chains whose rules depend on every Service (KUBE-SERVICES, KUBE-NODEPORTS and,
// in the filter table, KUBE-EXTERNAL-SERVICES while a Service has a NodePort or while it still
// holds rules to flush) are always written whole; a KUBE-SVC-, KUBE-SEP-, KUBE-EXT- or
// KUBE-SVL- chain only when it is new or its rules changed; the chains that went away are
// declared (which flushes them) and deleted with -X after the rules, once the rewritten
// KUBE-SERVICES and KUBE-NODEPORTS and the flushed chains no longer jump to them.
// iptables-restore commits each table at once, so the deletions cannot fail on a reference
// the same input removes. Opt.Stale is ignored then: prev knows the chains.
//
// Only the Services that differ from prev's are rendered again (all of them when
// opt.NodeName or ClusterCIDR changed). When the number of endpoints crosses kube-proxy's
// large cluster threshold, the Services rendered again follow the new mode and the others
// keep their rules as they are, comments or none, as kube-proxy's partial syncs do (its
// TestSyncProxyRulesLargeClusterMode); a full rendering writes them all one way. The input still holds one KUBE-SERVICES rule per
// Service, about a fifth of a full rendering of Services with one endpoint; and both
// backends still read and write the whole table (iptables-legacy-restore replaces the
// table as one blob, and ApplyIPTables makes iptables-nft-restore fetch the whole table,
// see wholeTableCache, since the jumps of KUBE-SERVICES name every Service chain). A partial
// iptables sync is therefore cheaper than a full one, but not independent of the number of
// Services, as kube-proxy's is not. (The "-Z" of wholeTableCache now also zeroes the packet
// counters of the chains the input leaves alone; nothing in the lab reads them.)
func RenderIPTablesPartial(prev *IPTState, svcs []Service, opt Options) ([]byte, *IPTState, Counts) {
	w := buildIPT(svcs, opt, prev)
	next := &IPTState{svcs: w.svcs, frags: w.frags, nodePorts: w.nodePorts, node: opt.NodeName, clusterCIDR: opt.ClusterCIDR}
	for _, f := range w.frags {
		next.filter = next.filter || len(f.filter) > 0
	}
	if prev == nil {
		filter := w.nodePorts || slices.Contains(opt.Stale, extServicesChain)
		return w.text(opt.Stale, filter), next, w.counts(filter)
	}
	var write []iptChain // the always written chains first, then those of the Services
	var gone []string
	for _, c := range iptAlways[:1+btoi(w.nodePorts)] {
		write = append(write, iptChain{c, w.rulesOf(c)})
	}
	if prev.nodePorts && !w.nodePorts {
		gone = append(gone, nodePortsChain)
	}
	j := 0 // prev's Services, in the same order: a merge of the two lists
	for i, f := range w.frags {
		for ; j < len(prev.svcs) && cmpServices(&prev.svcs[j], &w.svcs[i]) < 0; j++ {
			gone = append(gone, prev.frags[j].chains...)
		}
		old := &iptFrag{}
		if j < len(prev.svcs) && cmpServices(&prev.svcs[j], &w.svcs[i]) == 0 {
			old = prev.frags[j]
			j++
		}
		if old == f {
			continue // taken from prev as it was
		}
		for _, c := range f.chains {
			rules := f.rulesOf(c)
			if !slices.Contains(old.chains, c) || !slices.Equal(old.rulesOf(c), rules) {
				write = append(write, iptChain{c, rules})
			}
		}
		for _, c := range old.chains {
			if !slices.Contains(f.chains, c) {
				gone = append(gone, c)
			}
		}
	}
	for ; j < len(prev.svcs); j++ {
		gone = append(gone, prev.frags[j].chains...)
	}

	var b strings.Builder
	b.WriteString("*nat\n")
	for _, c := range write {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c.name)
	}
	for _, c := range gone {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, c := range write {
		for _, r := range c.rules {
			b.WriteString(r)
			b.WriteByte('\n')
		}
	}
	for _, c := range gone {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	// The filter chain stays when the NodePorts go (the hooks jump to it); it is written
	// while it matters: to fill it, or to empty it one last time.
	filter := w.nodePorts || prev.filter
	if filter {
		fmt.Fprintf(&b, "*filter\n:%s - [0:0]\n", extServicesChain)
		for _, f := range w.frags {
			for _, l := range f.filter {
				b.WriteString(l)
				b.WriteByte('\n')
			}
		}
		b.WriteString("COMMIT\n")
	}
	cnt := w.counts(filter)
	cnt.Changed = len(write) + len(gone) + btoi(filter)
	return []byte(b.String()), next, cnt
}

// iptChain is a nat chain and its rules.
type iptChain struct {
	name  string
	rules []string
}

// rulesOf are the rules of a chain every Service has rules in, in order: the base's before
// the Services, the Services', the base's after them.
func (w *iptWriter) rulesOf(chain string) []string {
	var rules []string
	for _, r := range w.head {
		if r.chain == chain {
			rules = append(rules, r.line)
		}
	}
	for _, f := range w.frags {
		rules = append(rules, f.rulesOf(chain)...)
	}
	for _, r := range w.tail {
		if r.chain == chain {
			rules = append(rules, r.line)
		}
	}
	return rules
}

// rulesOf are f's rules in chain, in order.
func (f *iptFrag) rulesOf(chain string) []string {
	var rules []string
	for _, r := range f.rules {
		if r.chain == chain {
			rules = append(rules, r.line)
		}
	}
	return rules
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
