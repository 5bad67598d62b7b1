package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Partial syncs of the iptables engine. A node's first rendering is RenderIPTables's, applied
// whole by ApplyIPTables; after that RenderIPTablesPartial writes only what changed since the
// rendering that was last applied there, with iptables-restore --noflush, as Calico's Felix
// writes only the chains that changed (kube-router restores the whole table every time):
//
//   - a chain (pod or policy chain) that is new or whose rules changed is declared, which in
//     --noflush mode creates or flushes it, and its rules are appended;
//   - KUBE-ROUTER-FORWARD and KUBE-ROUTER-IDLE, whose rules depend on every local pod and
//     every policy, are edited in place: -D for the jumps that went away, -I at their final
//     position for the new ones (both chains hold one jump per pod and direction, or per
//     idle policy: the rules of a chain are distinct). When that edit would be longer than the
//     chain, the chain is rewritten whole instead. Either way the chain ends up with the
//     rules of the full rendering, in its order;
//   - a chain that went away is declared (flushed), and deleted with -X after every other
//     command: by then nothing jumps to it (the jumps to pod chains are in
//     KUBE-ROUTER-FORWARD, those to policy chains in the pod chains, rewritten when their
//     rules changed, and in KUBE-ROUTER-IDLE);
//   - a set is created and filled before the filter table changes when it is new (set names
//     are hashes of their content: a set whose members change is a new set, and a set of a
//     known name has the members it had), and destroyed after it when no rule uses it any
//     more.
//
// Nothing is read from the kernel: the state says what is there, so the engine's chains and
// sets must not be changed by anyone else between syncs (a full sync repairs them). The
// FORWARD hook stays as the full apply installed it.

// IPTState is what the last applied iptables rendering of a node holds: its chains with
// their rules and its sets. It is built from the rendering (RenderIPTablesPartial) and only
// valid for the node it was applied to, if that apply succeeded; it is never modified, so a
// failed apply leaves the previous state usable (or the caller forgets it, and the next
// rendering is a full one).
type IPTState struct {
	chains []string          // declared, in rendering order
	rules  map[string]string // chain -> its "-A" lines, each with its "\n" ("" for none)
	sets   []string          // in rendering order
	hasSet map[string]bool
}

// IPTPartial is a rendering of RenderIPTablesPartial.
//
// Full: it is RenderIPTables's, SetsBefore its ipset input and Filter its filter input, to be
// applied with ApplyIPTables (ApplyIPTablesPartial does), SetsAfter nil.
//
// Otherwise, a change, in the order ApplyIPTablesPartial runs it (each part nil when it has
// nothing to do): SetsBefore, an ipset restore input that creates and fills the new sets;
// Filter, an iptables-restore --noflush input of the filter table (the new, changed and gone
// chains, KUBE-ROUTER-FORWARD and KUBE-ROUTER-IDLE edited when they change); SetsAfter, an
// ipset restore input that destroys the sets no rule uses any more.
type IPTPartial struct {
	SetsBefore, Filter, SetsAfter []byte
	Full                          bool
}

// RenderIPTablesPartial renders p as a change from prev, the state the last rendering applied
// to the node returned, and returns the rendering, the state to pass next time and the counts
// of the whole program, as RenderIPTables's (Changed: the chains the change writes, edits or
// deletes plus the sets it creates or destroys).
//
// With prev nil it is a full rendering: RenderIPTables(p), bytes and all (Full set, Changed
// 0), which replaces whatever the engine left in the node before.
//
// The rendering of the whole program is still built (to compare it with prev's, and for the
// counts), but what a change applies grows with the change only: adding a policy that isolates
// one pod writes its policy chain, the pod's chain, one or two jumps of KUBE-ROUTER-FORWARD and
// the policy's sets when they are new, however many policies stand.
func RenderIPTablesPartial(prev *IPTState, p *Program) (IPTPartial, *IPTState, Counts) {
	ipset, filter, c := RenderIPTables(p)
	next, setText := parseIPTRendering(ipset, filter)
	if prev == nil {
		return IPTPartial{SetsBefore: ipset, Filter: filter, Full: true}, next, c
	}

	var before, after strings.Builder
	for _, s := range next.sets {
		if !prev.hasSet[s] {
			before.WriteString(setText[s])
			c.Changed++
		}
	}
	for _, s := range prev.sets {
		if !next.hasSet[s] {
			fmt.Fprintf(&after, "destroy %s\n", s)
			c.Changed++
		}
	}

	var write, gone, edits []string // chains to write whole and to delete; -D and -I lines
	for _, ch := range next.chains {
		rules := next.rules[ch]
		old, had := prev.rules[ch]
		if had && old == rules {
			continue
		}
		c.Changed++
		if had && (ch == IPTablesTopChain || ch == IPTablesIdleChain) {
			if e, ok := iptRuleEdits(ch, old, rules); ok {
				edits = append(edits, e...)
				continue
			}
		}
		write = append(write, ch)
	}
	for _, ch := range prev.chains {
		if _, ok := next.rules[ch]; !ok {
			gone = append(gone, ch)
			c.Changed++
		}
	}

	out := IPTPartial{}
	if before.Len() > 0 {
		out.SetsBefore = []byte(before.String())
	}
	if after.Len() > 0 {
		out.SetsAfter = []byte(after.String())
	}
	if len(write)+len(gone)+len(edits) > 0 {
		var b strings.Builder
		b.WriteString("*filter\n")
		for _, ch := range write {
			fmt.Fprintf(&b, ":%s - [0:0]\n", ch)
		}
		for _, ch := range gone {
			fmt.Fprintf(&b, ":%s - [0:0]\n", ch)
		}
		for _, l := range edits {
			b.WriteString(l)
		}
		for _, ch := range write {
			b.WriteString(next.rules[ch])
		}
		for _, ch := range gone {
			fmt.Fprintf(&b, "-X %s\n", ch)
		}
		b.WriteString("COMMIT\n")
		out.Filter = []byte(b.String())
	}
	return out, next, c
}

// parseIPTRendering reads a RenderIPTables rendering back into a state, plus each set's
// ipset lines. The rules of a chain are contiguous in the rendering, except those of
// KUBE-ROUTER-IDLE (interleaved with the policy chains): a chain's rules are a substring of
// filter when they are contiguous, a copy otherwise.
func parseIPTRendering(ipset, filter []byte) (*IPTState, map[string]string) {
	st := &IPTState{rules: map[string]string{}, hasSet: map[string]bool{}}
	text := string(filter)
	type span struct{ from, to int }
	runs := map[string][]span{}
	for i := 0; i < len(text); {
		end := strings.IndexByte(text[i:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += i + 1
		}
		line := text[i:end]
		switch {
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])[0]
			st.chains = append(st.chains, name)
			st.rules[name] = ""
		case strings.HasPrefix(line, "-A "):
			name := line[3:]
			name = name[:strings.IndexAny(name, " \n")]
			r := runs[name]
			if n := len(r); n > 0 && r[n-1].to == i {
				r[n-1].to = end
			} else {
				runs[name] = append(r, span{i, end})
			}
		}
		i = end
	}
	for name, r := range runs {
		if len(r) == 1 {
			st.rules[name] = text[r[0].from:r[0].to]
			continue
		}
		var b strings.Builder
		for _, s := range r {
			b.WriteString(text[s.from:s.to])
		}
		st.rules[name] = b.String()
	}

	setText := map[string]string{}
	sets := string(ipset)
	cur, from := "", 0
	flush := func(to int) {
		if cur != "" {
			setText[cur] = sets[from:to]
		}
	}
	for i := 0; i < len(sets); {
		end := strings.IndexByte(sets[i:], '\n')
		if end < 0 {
			end = len(sets)
		} else {
			end += i + 1
		}
		if rest, ok := strings.CutPrefix(sets[i:end], "create "); ok {
			flush(i)
			cur, from = strings.Fields(rest)[0], i
			st.sets = append(st.sets, cur)
			st.hasSet[cur] = true
		}
		i = end
	}
	flush(len(sets))
	return st, setText
}

// iptRuleEdits turns the rules of chain from old into new ("-A chain ..." lines) with -D lines
// for the rules that go and "-I chain N" lines for those that come, N their position in new:
// run in order (every -D first), they leave exactly new. The rules kept are those of new
// found in old in the same order (a greedy common subsequence). ok is false when a list
// holds a rule twice (-D would delete either) or when the edits would outnumber new's rules
// (rewriting the chain is shorter).
func iptRuleEdits(chain, old, new string) (edits []string, ok bool) {
	oldLines, newLines := iptSplitLines(old), iptSplitLines(new)
	at := make(map[string]int, len(oldLines))
	for i, l := range oldLines {
		if _, dup := at[l]; dup {
			return nil, false
		}
		at[l] = i
	}
	keep := make(map[string]bool, len(newLines))
	seen := make(map[string]bool, len(newLines))
	last := -1
	for _, l := range newLines {
		if seen[l] {
			return nil, false
		}
		seen[l] = true
		if i, ok := at[l]; ok && i > last {
			keep[l], last = true, i
		}
	}
	n := len(oldLines) + len(newLines) - 2*len(keep)
	if n > len(newLines) {
		return nil, false
	}
	head := "-A " + chain + " "
	for _, l := range oldLines {
		if !keep[l] {
			edits = append(edits, "-D "+l[len("-A "):])
		}
	}
	for i, l := range newLines {
		if !keep[l] {
			edits = append(edits, "-I "+chain+" "+strconv.Itoa(i+1)+" "+l[len(head):])
		}
	}
	return edits, true
}

// iptSplitLines splits "-A" lines, each ending with "\n", keeping the "\n".
func iptSplitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n') + 1
		if i == 0 {
			i = len(s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// iptWholeTableCache is the number of commands of a --noflush input above which
// ApplyIPTablesPartial makes iptables-nft-restore fetch the whole table (see there); a
// variable for the tests.
var iptWholeTableCache = 10000

// ApplyIPTablesPartial applies a RenderIPTablesPartial rendering in the network namespace at
// nsPath with the iptables backend "nft" or "legacy": a full one with ApplyIPTables, a change
// with up to three runs, each skipped when its part is nil:
//
//  1. ipset restore of SetsBefore: the new sets, created and filled;
//  2. iptables-restore -w --noflush of Filter: one transaction of the filter table, which
//     leaves every chain and rule it does not name as they were;
//  3. the sets of SetsAfter destroyed, retrying while iptables-nft's kernel side still holds
//     references to them (as ApplyIPTables does).
//
// iptables-nft-restore 1.8.9 records the chains a --noflush input names in a sorted linked
// list (see ApplyIPTables) and fetches just those from the kernel: a change of a few chains
// costs little whatever the table holds, but the list costs commands x chains. Above
// iptWholeTableCache commands a "-Z" (zero the table's packet counters, which a full apply
// resets anyway) is put first: a command that names no chain makes iptables-nft-restore fetch
// the whole table instead of recording names. Measured on a table of 60,000 rules and 15,000
// chains (2 cores): fetching it costs about 0.6 s; without it 450 commands took 0.04 s, 4,500
// 0.26 s, 30,000 2.2 s (0.9 s with it). iptables-legacy-restore reads and writes the whole
// table either way.
func ApplyIPTablesPartial(nsPath, backend string, r IPTPartial) error {
	if r.Full {
		return ApplyIPTables(nsPath, backend, r.SetsBefore, r.Filter)
	}
	_, restoreTool, err := iptTools(backend)
	if err != nil {
		return err
	}
	if len(r.SetsBefore) > 0 {
		if _, err := output(nsPath, "ipset", []string{"restore"}, r.SetsBefore); err != nil {
			return err
		}
	}
	if len(r.Filter) > 0 {
		input := r.Filter
		if backend != "legacy" && strings.Count(string(input), "\n") > iptWholeTableCache {
			input = append([]byte("*filter\n-Z\n"), input[len("*filter\n"):]...)
		}
		if _, err := output(nsPath, restoreTool, []string{"-w", "--noflush"}, input); err != nil {
			return err
		}
	}
	if len(r.SetsAfter) > 0 {
		var stale []string
		for _, l := range strings.Split(string(r.SetsAfter), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "destroy" {
				stale = append(stale, f[1])
			}
		}
		return destroySets(nsPath, stale)
	}
	return nil
}
