package proxy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// NFTState is what an nftables rendering left in a node's table ip kube-proxy, as
// RenderNFTablesPartial needs it to write the next change: the rendering's model (the base
// chains, and per Service port the Service as rendered with its chains, rules and map
// elements, and how many have each ClusterIP), and the options that shape what is not
// diffed. It plays the part of kube-proxy's in-memory record of what it programmed. A state
// is only valid for the node it was applied to, and only if that Apply succeeded (the lab
// forgets it otherwise); it is never modified, so a failed Apply leaves the previous state
// usable.
type NFTState struct {
	m    nftModel
	node string // opt.NodeName
	base nftBase
}

// nftBase are the options that shape what a partial rendering does not diff: the base
// chains' rules (ClusterCIDR also every Service chain's first rule, ServiceCIDR the
// cluster-ips-check chain), the nodeport-ips set, and the form of every single-endpoint
// Service chain. When one changes, the next rendering is a full one.
type nftBase struct {
	clusterCIDR, serviceCIDR, nodeIPs string
	mod1Maps                          bool
}

func nftBaseOf(opt Options) nftBase {
	return nftBase{opt.ClusterCIDR, opt.ServiceCIDR, strings.Join(opt.NodeIPs, ","), opt.NFTMod1Maps}
}

// RenderNFTablesPartial renders svcs as a change from prev, what the last rendering applied
// to the node left there (see RenderNFTables for the layout), and returns the nft input, the
// state to pass next time and what the ruleset holds afterwards (Counts.Changed: the chains
// added, rewritten or deleted plus the elements added or deleted).
//
// With prev nil the rendering is a full one, the very bytes of RenderNFTables, which replace
// whatever the node's table holds; so is it when the base of the ruleset changed (the
// NodePort sets and maps appear or disappear, or opt.ClusterCIDR, ServiceCIDR, NodeIPs or
// NFTMod1Maps differ from prev's): that touches every chain anyway. Otherwise it is what
// kube-proxy's partial syncs write, one transaction that keeps the table, in this order:
//
//  1. "delete element" (by key) for the elements that are gone or whose value changed (an
//     element cannot be added over one with another value: the kernel refuses it, EEXIST);
//  2. "flush chain" for the chains whose rules changed and for those that went away (a
//     flush also frees the anonymous numgen vmaps of its rules, with their references to
//     endpoint chains);
//  3. "add chain" for the new chains, all before any rule can name them;
//  4. the rules of the new and changed chains, as "add chain NAME { rule ; rule ; }";
//  5. "delete chain" for the chains that went away: nothing refers to them any more, since
//     the elements and rules that did were deleted or flushed above;
//  6. the new and changed elements, whose chains exist now.
//
// kube-proxy deletes the chains of Services that went away a second after flushing them,
// because kernels before 6.2 still counted a reference from a map element deleted earlier in
// the same transaction and refused to delete the chain (EBUSY). The lab's kernel (6.18)
// releases it, so the chains go in the same transaction (TestNFTablesPartialMatchesFull
// checks it on the running kernel, TestNFTablesDeleteOrder that the order matters). Opt.Stale
// is ignored, as by RenderNFTables: prev knows what the table holds.
//
// Rules and elements are written so that nft needs no list of the table's chains: nft 1.0.6
// fetches every chain of the table before it evaluates an "add rule", "add element" or any
// "delete" command (its cache), which for 10,000 Services (20,000 chains) costs about 50 ms
// here, more than the change itself. "add chain NAME { rule ; rule ; }" adds rules and "add
// map NAME { <its declaration> elements = { ... } ; }" adds elements with only the table in
// nft's cache. Deletions cannot avoid the fetch in nft: a rendering that deletes an element
// or a chain (a Service or an endpoint that went away, a map element whose value changed)
// pays it there. ApplyNFTables therefore sends these inputs through netlink itself
// (applyNFTNetlink), which needs no cache at all (and translates every command the
// renderings write; nft runs only should it not). What remains is the kernel's: a transaction that adds a jump or
// goto (every new Service does) makes it check the whole table for loops, about 25 ms for
// 10,000 Services.
//
// The input names only what changed, so its size does not depend on the number of Services.
// Rendering it still looks at every Service, but renders again only those that differ from
// prev's (and all of them when opt.NodeName changed): a few ms for 10,000 (sorting them and
// comparing them with prev's).
func RenderNFTablesPartial(prev *NFTState, svcs []Service, opt Options) ([]byte, *NFTState, Counts) {
	base := nftBaseOf(opt)
	if prev == nil || hasNodePorts(svcs) != prev.m.nodePorts || base != prev.base {
		m := buildNFT(svcs, opt)
		return m.full(), &NFTState{m: m, node: opt.NodeName, base: base}, m.cnt
	}
	pm := &prev.m
	sorted := sortedServices(svcs)
	m := nftModel{base: pm.base, nodePorts: pm.nodePorts, svcs: sorted, frags: make([]*nftFrag, len(sorted))}
	m.cnt = Counts{Services: len(sorted), Names: make([]string, 0, len(pm.cnt.Names)+8)}
	m.cnt.add(m.base)
	var ch nftChange
	var ipsGone, ipsNew []string // the ClusterIPs of the Services removed and added (or changed)
	render := func(i int) *nftFrag {
		m.svcs[i].Endpoints = slices.Clone(sorted[i].Endpoints) // the caller's may change later
		m.frags[i] = nftService(sorted[i], opt)
		return m.frags[i]
	}
	j := 0 // prev's Services, in the same order: a merge of the two lists
	for i, s := range sorted {
		for ; j < len(pm.svcs) && cmpServices(&pm.svcs[j], &sorted[i]) < 0; j++ {
			ch.update(pm.frags[j], nil)
			ipsGone = append(ipsGone, pm.svcs[j].ClusterIP)
		}
		switch same := j < len(pm.svcs) && cmpServices(&pm.svcs[j], &sorted[i]) == 0; {
		case same && opt.NodeName == prev.node && sameService(pm.svcs[j], s):
			m.svcs[i], m.frags[i] = pm.svcs[j], pm.frags[j]
			j++
		case same:
			ch.update(pm.frags[j], render(i))
			if pm.svcs[j].ClusterIP != s.ClusterIP {
				ipsGone, ipsNew = append(ipsGone, pm.svcs[j].ClusterIP), append(ipsNew, s.ClusterIP)
			}
			j++
		default:
			ch.update(nil, render(i))
			ipsNew = append(ipsNew, s.ClusterIP)
		}
		m.cnt.add(m.frags[i])
	}
	for ; j < len(pm.svcs); j++ {
		ch.update(pm.frags[j], nil)
		ipsGone = append(ipsGone, pm.svcs[j].ClusterIP)
	}
	m.ipCount = pm.ipCount // a state is never modified: shared until a ClusterIP comes or goes
	if len(ipsGone)+len(ipsNew) > 0 {
		m.ipCount = maps.Clone(pm.ipCount)
		for _, ip := range ipsGone {
			if m.ipCount[ip]--; m.ipCount[ip] == 0 {
				delete(m.ipCount, ip)
			}
		}
		for _, ip := range ipsNew {
			m.ipCount[ip]++
		}
		ips := slices.Concat(ipsGone, ipsNew)
		slices.Sort(ips)
		for _, ip := range slices.Compact(ips) {
			switch had, has := pm.ipCount[ip] > 0, m.ipCount[ip] > 0; {
			case had && !has:
				ch.del[elClusterIPs] = append(ch.del[elClusterIPs], nftElem{key: ip})
			case has && !had:
				ch.add[elClusterIPs] = append(ch.add[elClusterIPs], nftElem{key: ip})
			}
		}
	}
	m.cnt.Elements += len(m.ipCount)
	cnt := m.cnt
	cnt.Changed = ch.changed()
	return ch.input(), &NFTState{m: m, node: opt.NodeName, base: base}, cnt
}

// nftChange is what a partial rendering writes: chains to add, rewrite (flush and refill)
// and delete, and elements to delete and add, by el* index.
type nftChange struct {
	added, rewritten, gone []nftChain
	del, add               [len(nftSets)][]nftElem
}

// update records the change from a Service's fragment in prev (nil: the Service is new) to
// its fragment now (nil: it went away).
func (c *nftChange) update(old, now *nftFrag) {
	if old == nil {
		old = &nftFrag{}
	}
	if now == nil {
		now = &nftFrag{}
	}
	for _, nc := range now.chains {
		switch oc := old.find(nc.name); {
		case oc == nil:
			c.added = append(c.added, nc)
		case !slices.Equal(oc.rules, nc.rules):
			c.rewritten = append(c.rewritten, nc)
		}
	}
	for _, oc := range old.chains {
		if now.find(oc.name) == nil {
			c.gone = append(c.gone, oc)
		}
	}
	for i := range nftSets {
		for _, e := range old.elems[i] {
			if !slices.Contains(now.elems[i], e) {
				c.del[i] = append(c.del[i], e)
			}
		}
		for _, e := range now.elems[i] {
			if !slices.Contains(old.elems[i], e) {
				c.add[i] = append(c.add[i], e)
			}
		}
	}
}

// find is f's chain called name, nil if none.
func (f *nftFrag) find(name string) *nftChain {
	for i := range f.chains {
		if f.chains[i].name == name {
			return &f.chains[i]
		}
	}
	return nil
}

// changed counts what the change touches.
func (c *nftChange) changed() int {
	n := len(c.added) + len(c.rewritten) + len(c.gone)
	for i := range nftSets {
		n += len(c.del[i]) + len(c.add[i])
	}
	return n
}

// input writes the change as one nft transaction, in the order RenderNFTablesPartial gives.
func (c *nftChange) input() []byte {
	var b strings.Builder
	for i, set := range nftSets {
		keys := make([]nftElem, len(c.del[i]))
		for j, e := range c.del[i] {
			keys[j] = nftElem{key: e.key}
		}
		writeElemsVerb(&b, "delete", set, keys)
	}
	for _, cs := range [][]nftChain{c.rewritten, c.gone} {
		for _, ch := range cs {
			fmt.Fprintf(&b, "flush chain %s %s\n", nftT, ch.name)
		}
	}
	for _, ch := range c.added {
		writeChain(&b, ch)
	}
	for _, cs := range [][]nftChain{c.added, c.rewritten} {
		for _, ch := range cs {
			if len(ch.rules) > 0 {
				fmt.Fprintf(&b, "add chain %s %s { %s ; }\n", nftT, ch.name, strings.Join(ch.rules, " ; "))
			}
		}
	}
	for _, ch := range c.gone {
		fmt.Fprintf(&b, "delete chain %s %s\n", nftT, ch.name)
	}
	for i, set := range nftSets {
		writeElemsDecl(&b, i, set, c.add[i])
	}
	return []byte(b.String())
}

// writeElemsDecl adds elements to a set or map (an el* index) by declaring it again with
// them, 1,000 each: "add map ip kube-proxy NAME { <declaration> elements = { ... } ; }". The
// declaration must be the one the set has (nftSetDecls), or the kernel refuses it.
func writeElemsDecl(b *strings.Builder, set int, name string, elems []nftElem) {
	const batch = 1000
	d := nftSetDecls[set]
	for len(elems) > 0 {
		n := min(batch, len(elems))
		fmt.Fprintf(b, "add %s %s %s { %s elements = { ", d.kind, nftT, name, d.body)
		for i, e := range elems[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.String())
		}
		b.WriteString(" } ; }\n")
		elems = elems[n:]
	}
}
