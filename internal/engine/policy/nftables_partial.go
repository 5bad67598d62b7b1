package policy

import (
	"fmt"
	"slices"
	"strings"
)

// NFTState is what the last applied nftables rendering of a node holds (enough to diff
// against): every chain of table NFTablesTable but the forward base chain, with its rules as
// rendered; the sets, with their members; the elements of the pod-egress and pod-ingress
// maps. It plays the part of kube-proxy's record of what it programmed. A state is valid only
// for the node its rendering was applied to, and only once that apply succeeded (the lab
// forgets it otherwise); it is never modified, so a failed apply leaves the previous state
// usable.
type NFTState struct {
	chains map[string]string // name -> its rule lines, as the full rendering writes them
	sets   map[string]Set    // name -> the set (Members: the state's own copy)
	elems  [2]map[string]string
}

// The maps, by index into NFTState.elems.
var nftpMaps = [2]string{nftEgressMap, nftIngressMap}

// RenderNFTablesPartial renders p as a change from prev (nil: the full rendering, byte for
// byte RenderNFTables(p)'s input) in ONE nft transaction that keeps the table; next
// describes what the node holds once the input is applied. Counts are the whole program's (as
// RenderNFTables's) with Changed = the number of objects (chains, sets, map elements) the
// input adds, deletes or rewrites (a map element whose verdict changes counts once; 0 for a
// full rendering).
//
// Compile names chains after the policy or pod they belong to and sets after their content,
// so a change of a policy, a pod or a selection rewrites the chains concerned, adds the sets
// that are new and deletes those no rule uses any more. The input is, in this order (as
// kube-proxy's nftables proxier writes its partial syncs; internal/engine/proxy does the same
// for Services):
//
//  1. "delete element" from pod-egress / pod-ingress for the pods no longer isolated in that
//     direction and for the elements whose verdict changes (the kernel refuses to add an
//     element over one with another value);
//  2. "flush chain" for the chains whose rules changed and for those that go away;
//  3. "flush set" for a set whose members changed under the same name (Compile never does
//     that: its set names are hashes of the content; a hand-made Program may);
//  4. "add set NAME { <declaration> elements = { ... } }" for the new and refilled sets, and
//     "add set NAME { <declaration> }" again for every set that exists already and that a
//     rule of the input names (see below);
//  5. the new and rewritten policy chains, then the pod chains (which jump to policy chains),
//     each as one "add chain NAME { rules }": it creates the chain if it is new;
//  6. the new and changed map elements, as "add map NAME { <declaration> elements = { ... } }",
//     now that their chains exist;
//  7. "delete chain" for the chains that went away: nothing refers to them any more, as the
//     elements and rules that jumped to them were deleted or flushed above (on this kernel a
//     chain can be deleted in the transaction that deletes its last reference, as long as the
//     reference goes first; TestNFTablesPartialDeleteOrder checks both ways);
//  8. "delete set" for the sets no rule uses any more, after the flushes that dropped their
//     last references.
//
// The forward base chain and the maps' declarations are the full rendering's and never change.
// When nothing changed the input is empty: nft -f of an empty input succeeds and changes
// nothing, so ApplyNFTables may be called with it (the caller may as well skip it).
//
// Everything is written so that nft 1.0.6 needs no list of the table's chains (its cache):
// before it evaluates an "add rule", an "add element", a table block or any "delete", it
// fetches every chain of the table; with 40,000 chains (10,000 local pods, each with a policy
// each way) an input that only deletes an element takes 120-180 ms here instead of ~10. The
// "add chain NAME { rules }", "add set" and "add map" forms need only the table. A rule naming
// a set nft has not seen in the input then fails (ENOENT, although the set exists), which is
// why the sets the rules of the input name are declared again in step 4 (a no-op for the
// kernel: the same declaration, without NLM_F_EXCL). Deletions cannot avoid the fetch: an
// input that deletes an element, a chain or a set pays it. What remains is the kernel's: a
// transaction that adds any rule to the table makes it validate the table (every chain
// reachable from forward), ~45 ms for those 40,000 chains.
//
// Rendering looks at the whole Program (it lays out every chain again and compares it with
// prev's: 20-40 ms for 10,000 policies over 5,000 local pods), but the input names only what
// changed, so its size does not depend on the number of standing policies.
//
// A set whose type changes under the same name cannot be rewritten in place: then, as when
// prev is nil, the rendering is the full one.
func RenderNFTablesPartial(prev *NFTState, p *Program) (input []byte, next *NFTState, c Counts) {
	m := nftpBuild(p)
	if prev == nil || nftpKindChanged(prev, m) {
		full, cnt := RenderNFTables(p)
		return full, m.state(prev), cnt
	}
	var ch nftpChange
	for i := range nftpMaps {
		old, now := prev.elems[i], m.elems[i]
		for addr, chain := range old {
			if nc, ok := now[addr]; !ok || nc != chain {
				ch.delElems[i] = append(ch.delElems[i], addr)
			}
		}
		for addr, chain := range now {
			oc, ok := old[addr]
			if !ok || oc != chain {
				ch.addElems[i] = append(ch.addElems[i], addr+" : jump "+chain)
			}
			if ok && oc != chain {
				ch.changedElems++
			}
		}
		slices.Sort(ch.delElems[i])
		slices.Sort(ch.addElems[i])
	}

	inInput := map[string]bool{} // sets the input declares
	for _, s := range m.sets {
		switch old, ok := prev.sets[s.Name]; {
		case !ok:
			ch.newSets = append(ch.newSets, s)
			inInput[s.Name] = true
		case !slices.Equal(old.Members, s.Members):
			ch.refilledSets = append(ch.refilledSets, s)
			inInput[s.Name] = true
		}
	}
	used := make(map[string]bool, len(m.sets))
	for _, s := range m.sets {
		used[s.Name] = true
	}
	for name := range prev.sets {
		if !used[name] {
			ch.goneSets = append(ch.goneSets, name)
		}
	}
	slices.Sort(ch.goneSets)

	now := make(map[string]bool, len(m.chains))
	for _, c := range m.chains {
		now[c.name] = true
		switch old, ok := prev.chains[c.name]; {
		case !ok:
		case old != c.body:
			ch.rewritten = append(ch.rewritten, c.name)
		default:
			continue
		}
		ch.written = append(ch.written, c)
		for _, s := range c.sets {
			if old, ok := prev.sets[s]; ok && !inInput[s] {
				inInput[s] = true
				ch.redeclared = append(ch.redeclared, Set{Name: s, Kind: old.Kind})
			}
		}
	}
	for name := range prev.chains {
		if !now[name] {
			ch.gone = append(ch.gone, name)
		}
	}
	slices.Sort(ch.gone)

	c = m.cnt
	c.Changed = ch.changed()
	return ch.input(), m.state(prev), c
}

// nftpChain is a chain of the table (not forward) as the full rendering writes it.
type nftpChain struct {
	name string
	body string   // its rule lines: "\t\t<rule>\n" each
	sets []string // the sets its rules name, in order of first use
}

// nftpModel is a Program as the full rendering lays it out.
type nftpModel struct {
	chains []nftpChain // the policy chains, then the pod chains (they jump to policy chains)
	sets   []Set       // the sets some rule uses, in p.Sets order
	elems  [2]map[string]string
	cnt    Counts
}

// nftpBuild lays p out as RenderNFTables does (TestNFTablesPartialModel checks that the
// chains and counts are the same).
func nftpBuild(p *Program) nftpModel {
	var m nftpModel
	m.chains = make([]nftpChain, 0, 2*len(p.Policies)+2*len(p.Pods))
	used := map[string]bool{}
	mark := fmt.Sprintf("meta mark set meta mark or 0x%08x", MarkAdmit)
	clear := fmt.Sprintf("meta mark set meta mark and 0x%08x", ^uint32(MarkAdmit))
	drop := fmt.Sprintf("meta mark and 0x%08x == 0 drop", MarkAdmit)
	var b strings.Builder
	rule := func(parts ...string) {
		b.WriteString("\t\t")
		for _, s := range parts {
			b.WriteString(s)
		}
		b.WriteByte('\n')
		m.cnt.Rules++
	}

	hasRules := map[string]bool{}
	for _, pol := range p.Policies {
		m.cnt.Policies++
		for _, d := range []struct {
			suffix, side string
			rules        []Rule
		}{{"-ingress", "saddr", pol.Ingress}, {"-egress", "daddr", pol.Egress}} {
			if len(d.rules) == 0 {
				continue
			}
			name := pol.Name + d.suffix
			hasRules[name] = true
			b.Reset()
			var sets []string
			for _, r := range d.rules {
				for _, peer := range r.Peers {
					pm := ""
					if !peer.Any {
						used[peer.Set] = true
						sets = nftpAppendNew(sets, peer.Set)
						pm = "ip " + d.side + " @" + peer.Set + " "
					}
					for _, port := range r.Ports {
						if !port.Any && port.Set != "" {
							sets = nftpAppendNew(sets, port.Set)
						}
						rule(pm, nftPortMatch(port, used), mark, " return")
					}
				}
			}
			m.chains = append(m.chains, nftpChain{name: name, body: b.String(), sets: sets})
		}
	}

	for i := range m.elems {
		m.elems[i] = make(map[string]string, len(p.Pods))
	}
	for _, f := range p.Pods {
		m.cnt.PodChains++
		for _, d := range []struct {
			suffix string
			pols   []string
			elems  map[string]string
		}{{"-egress", f.EgressOf, m.elems[0]}, {"-ingress", f.IngressOf, m.elems[1]}} {
			if len(d.pols) == 0 {
				continue
			}
			name := f.Chain + d.suffix
			d.elems[f.IP] = name
			b.Reset()
			rule(clear)
			for _, pol := range d.pols {
				if hasRules[pol+d.suffix] {
					rule("jump ", pol, d.suffix)
				}
			}
			rule(drop)
			rule(clear)
			m.chains = append(m.chains, nftpChain{name: name, body: b.String()})
		}
	}

	for _, s := range p.Sets {
		if used[s.Name] {
			m.cnt.Sets++
			m.cnt.SetMembers += len(s.Members)
			m.sets = append(m.sets, s)
		}
	}
	m.cnt.Rules += 3 // the forward chain's
	return m
}

func nftpAppendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// nftpKindChanged: does a set of m have another type than the set of the same name in prev?
func nftpKindChanged(prev *NFTState, m nftpModel) bool {
	for _, s := range m.sets {
		if old, ok := prev.sets[s.Name]; ok && old.Kind != s.Kind {
			return true
		}
	}
	return false
}

// state is what the table holds once m is applied. The sets' members are copied (the
// caller's Program may change later), except those of the sets prev holds already.
func (m nftpModel) state(prev *NFTState) *NFTState {
	st := &NFTState{chains: make(map[string]string, len(m.chains)), sets: make(map[string]Set, len(m.sets)), elems: m.elems}
	for _, c := range m.chains {
		st.chains[c.name] = c.body
	}
	for _, s := range m.sets {
		if prev != nil {
			if old, ok := prev.sets[s.Name]; ok && old.Kind == s.Kind && slices.Equal(old.Members, s.Members) {
				st.sets[s.Name] = old
				continue
			}
		}
		st.sets[s.Name] = Set{Name: s.Name, Kind: s.Kind, Members: slices.Clone(s.Members)}
	}
	return st
}

// nftpChange is what a partial rendering writes.
type nftpChange struct {
	delElems, addElems    [2][]string // addresses; "address : jump chain"
	changedElems          int         // addresses in both (their verdict changed)
	newSets, refilledSets []Set
	redeclared            []Set // existing sets the input's rules name (Kind only)
	goneSets              []string
	written               []nftpChain // the new and rewritten chains, in model order
	rewritten, gone       []string    // chains
}

// changed counts the objects the change adds, deletes or rewrites.
func (c *nftpChange) changed() int {
	n := len(c.written) + len(c.gone) + len(c.newSets) + len(c.refilledSets) + len(c.goneSets)
	for i := range c.delElems {
		n += len(c.delElems[i]) + len(c.addElems[i])
	}
	return n - c.changedElems
}

// input writes the change as one nft transaction, in RenderNFTablesPartial's order.
func (c *nftpChange) input() []byte {
	var b strings.Builder
	t := "ip " + NFTablesTable
	for i, name := range nftpMaps {
		for elems := c.delElems[i]; len(elems) > 0; {
			n := min(1000, len(elems))
			fmt.Fprintf(&b, "delete element %s %s { %s }\n", t, name, strings.Join(elems[:n], ", "))
			elems = elems[n:]
		}
	}
	for _, names := range [][]string{c.rewritten, c.gone} {
		for _, name := range names {
			fmt.Fprintf(&b, "flush chain %s %s\n", t, name)
		}
	}
	for _, s := range c.refilledSets {
		fmt.Fprintf(&b, "flush set %s %s\n", t, s.Name)
	}
	for _, sets := range [][]Set{c.newSets, c.refilledSets, c.redeclared} {
		for _, s := range sets {
			nftpWriteSet(&b, s)
		}
	}
	for _, ch := range c.written { // policy chains before the pod chains that jump to them
		fmt.Fprintf(&b, "add chain %s %s {\n%s}\n", t, ch.name, ch.body)
	}
	for i, name := range nftpMaps {
		if len(c.addElems[i]) == 0 {
			continue
		}
		fmt.Fprintf(&b, "add map %s %s {\n\t\ttype ipv4_addr : verdict\n", t, name)
		writeElements(&b, c.addElems[i])
		b.WriteString("}\n")
	}
	for _, name := range c.gone {
		fmt.Fprintf(&b, "delete chain %s %s\n", t, name)
	}
	for _, name := range c.goneSets {
		fmt.Fprintf(&b, "delete set %s %s\n", t, name)
	}
	return []byte(b.String())
}

// nftpWriteSet writes "add set ip <table> NAME { <declaration> [elements = { ... }] }" with
// the declaration and elements of the full rendering (renderNFTSet's).
func nftpWriteSet(b *strings.Builder, s Set) {
	var sb strings.Builder
	renderNFTSet(&sb, s)
	body := sb.String()
	body = body[strings.IndexByte(body, '\n')+1:]    // after "\tset NAME {\n"
	body = strings.TrimSuffix(body, "\t}\n") + "}\n" // the command's closing brace
	fmt.Fprintf(b, "add set ip %s %s {\n%s", NFTablesTable, s.Name, body)
}
