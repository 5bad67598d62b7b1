package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
)

// iptTools are the commands of an iptables backend: "nft" (iptables-nft, Debian's default) or
// "legacy" (iptables-legacy, x_tables).
func iptTools(backend string) (save, restore string, err error) {
	switch backend {
	case "nft", "":
		return "iptables-nft-save", "iptables-nft-restore", nil
	case "legacy":
		return "iptables-legacy-save", "iptables-legacy-restore", nil
	}
	return "", "", fmt.Errorf("iptables backend %q: want \"nft\" or \"legacy\"", backend)
}

// hookRule is the FORWARD rule that sends traffic into the engine (iptables-save spelling).
const hookRule = "-A FORWARD -j " + IPTablesTopChain

// ApplyIPTables installs a RenderIPTables rendering in the network namespace at nsPath (ipsets
// are per namespace too) with the given iptables backend ("nft" or "legacy"), the way
// kube-router syncs: save the filter table, replace the engine's part, restore the table.
//
//  1. iptables-save -t filter: the table as it is, with the chains and sets of the earlier
//     rendering (see the ownership note in iptables.go);
//  2. one ipset restore: the sets created if missing, emptied and filled;
//  3. one iptables-restore of the whole filter table (atomic): every chain and rule that is
//     not the engine's kept as saved, the earlier rendering dropped, the new one added, and
//     the FORWARD hook first in FORWARD (present exactly once);
//  4. one ipset restore destroying the earlier rendering's sets that this one does not
//     create, now that no rule uses them (only when there are some).
//
// Why not iptables-restore --noflush with the rendering alone: iptables-nft 1.8.9 records,
// for every command of a --noflush input, the chains it names in a sorted linked list
// (cache_chain_list_insert in nft-cache.c), so a restore costs commands x chains string
// comparisons: 5,000 pods (90,000 rules, 25,000 chains) took 553 s, 3,000 pods 22 s, 1,000
// pods 2.3 s. Without --noflush the table is flushed, no cache is needed, and the same input
// takes 2-4 s. iptables-legacy-restore is fast either way. As with kube-router, the packet
// counters of the other rules of the table restart from zero, and a change someone else makes
// to the filter table between the save and the restore is lost.
//
// With iptables-nft the steps run without the tools where the rendering allows (nearly
// always): applyIPTNetlink does the same over netlink, the tools' way (applyIPTTools) is
// what is left for the rest and for iptables-legacy.
func ApplyIPTables(nsPath string, backend string, ipset, filter []byte) error {
	if _, _, err := iptTools(backend); err != nil {
		return err
	}
	if backend == "nft" || backend == "" {
		if err := applyIPTNetlink(nsPath, ipset, filter); !errors.Is(err, errIPTUntranslated) {
			return err
		}
	}
	return applyIPTTools(nsPath, backend, ipset, filter)
}

// applyIPTTools is ApplyIPTables with the backend's tools: steps 1-4 as listed there.
func applyIPTTools(nsPath string, backend string, ipset, filter []byte) error {
	saveTool, restoreTool, err := iptTools(backend)
	if err != nil {
		return err
	}
	save, err := output(nsPath, saveTool, []string{"-t", "filter"}, nil)
	if err != nil {
		return err
	}
	old := parseSave(save)
	if len(ipset) > 0 {
		if _, err := output(nsPath, "ipset", []string{"restore"}, ipset); err != nil {
			return err
		}
	}
	input, err := old.merge(filter)
	if err != nil {
		return err
	}
	if _, err := output(nsPath, restoreTool, []string{"-w"}, input); err != nil {
		return err
	}
	created := createdSets(ipset)
	var staleSets []string
	for _, s := range old.sets {
		if !created[s] {
			staleSets = append(staleSets, s)
		}
	}
	return destroySets(nsPath, staleSets)
}

// ApplyNFTables installs an nftables rendering in the network namespace at nsPath as one
// transaction: a full one (RenderNFTables, which replaces the engine's table whole) through
// netlink (applyNFTNetlink), a partial one (RenderNFTablesPartial) with nft -f.
//
// Where the time goes, 20,000 policies (BenchmarkApply's nftables/idle=10000: 5,000 local
// pods, 30,000 chains, 60,000 rules, 5.6 MB of nft input; measured on the project's 2-core
// machine while other work ran, load average 5): `nft -f` of the rendering takes 1.16-1.23 s
// into a fresh namespace and 1.30-1.37 s over the table it replaces (`/usr/bin/time nsenter
// --net=NS nft -f FILE`), user time 0.53-0.61 s, system 0.50-0.54 s. perf record of one
// fresh load: 52 % of the CPU is nft's userspace (libnftables 38 %, libc 12 %: parsing,
// evaluating, serializing), 11 % page faults (its memory), 34 % its one sendmsg, of which
// the kernel's processing of the batch (nfnetlink_rcv_batch) is 30 % (rules 20 %, the commit
// 4 %, chains 3 %, the loop check 1 %): about 0.35 s of kernel work against 0.7 s of nft. The
// rendering itself is 54 ms. Through netlink the same transaction leaves the kernel's part
// and the Go side's translation and marshalling: BenchmarkNFTNetlinkVsNft measures both
// ways, paired.
func ApplyNFTables(nsPath string, input []byte) error {
	if err := applyNFTNetlink(nsPath, input); !errors.Is(err, errNFTUntranslated) {
		return err
	}
	_, err := output(nsPath, "nft", []string{"-f", "-"}, input)
	return err
}

// savedTable is iptables-save output of the filter table, with what an earlier rendering
// installed picked out.
type savedTable struct {
	decls  []string // chain declaration lines, in save order
	rules  []string // rule lines, in save order
	chains []string // the engine's: reachable from the top and idle chains, in save order
	sets   []string // named by rules of those chains
	hooks  int      // FORWARD rules jumping to the top chain
	owned  map[string]bool
}

// parseSave reads iptables-save output of the filter table.
func parseSave(save []byte) savedTable {
	var t savedTable
	var order []string
	jumps := map[string][]string{}
	sets := map[string][]string{}
	for _, line := range strings.Split(string(save), "\n") {
		if strings.HasPrefix(line, ":") {
			f := strings.Fields(line[1:])
			if len(f) == 0 {
				continue
			}
			order = append(order, f[0])
			t.decls = append(t.decls, line)
			continue
		}
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		t.rules = append(t.rules, line)
		if line == hookRule {
			t.hooks++
		}
		f := strings.Fields(line)
		ch := f[1]
		for i := 2; i+1 < len(f); i++ {
			switch f[i] {
			case "-j", "-g":
				jumps[ch] = append(jumps[ch], f[i+1])
			case "--match-set":
				sets[ch] = append(sets[ch], f[i+1])
			}
		}
	}
	t.owned, t.chains = engineChains(order, jumps)
	seen := map[string]bool{}
	for _, ch := range t.chains {
		for _, s := range sets[ch] {
			if !seen[s] {
				seen[s] = true
				t.sets = append(t.sets, s)
			}
		}
	}
	return t
}

// engineChains are the engine's chains of a table whose chains are order (all of them) and
// whose rules jump (or go) from one to another as jumps says: those reachable from the top
// and idle chains (see the ownership note in iptables.go); chains lists them in order.
func engineChains(order []string, jumps map[string][]string) (owned map[string]bool, chains []string) {
	declared := map[string]bool{}
	for _, ch := range order {
		declared[ch] = true
	}
	owned = map[string]bool{}
	var walk func(string)
	walk = func(ch string) {
		if owned[ch] || !declared[ch] {
			return
		}
		owned[ch] = true
		for _, to := range jumps[ch] {
			walk(to)
		}
	}
	walk(IPTablesTopChain)
	walk(IPTablesIdleChain)
	for _, ch := range order {
		if owned[ch] {
			chains = append(chains, ch)
		}
	}
	return owned, chains
}

// merge returns the whole filter table for iptables-restore (without --noflush): the saved
// table without the engine's chains and hook, plus filter (a RenderIPTables rendering) and
// the hook first in FORWARD; filter nil = the engine removed.
func (t savedTable) merge(filter []byte) ([]byte, error) {
	var decl, rules string
	if filter != nil {
		s := string(filter)
		if !strings.HasPrefix(s, "*filter\n") || !strings.HasSuffix(s, "COMMIT\n") {
			return nil, fmt.Errorf("filter input is not one *filter ... COMMIT block")
		}
		body := s[len("*filter\n") : len(s)-len("COMMIT\n")]
		i := strings.Index(body, "\n-A ")
		if i < 0 {
			decl = body
		} else {
			decl, rules = body[:i+1], body[i+1:]
		}
	}
	var b strings.Builder
	b.Grow(len(filter) + 64*len(t.rules))
	b.WriteString("*filter\n")
	for _, l := range t.decls {
		if !t.owned[strings.Fields(l[1:])[0]] {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	b.WriteString(decl)
	if filter != nil {
		b.WriteString(hookRule + "\n")
	}
	for _, l := range t.rules {
		if l == hookRule || t.owned[strings.Fields(l)[1]] {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString(rules)
	b.WriteString("COMMIT\n")
	return []byte(b.String()), nil
}

// createdSets are the sets an ipset input creates.
func createdSets(ipset []byte) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(string(ipset), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "create" {
			out[f[1]] = true
		}
	}
	return out
}

// destroySets destroys ipsets, retrying for a while those still in use: with iptables-nft the
// kernel drops a deleted rule's reference to its set after the transaction, asynchronously.
func destroySets(nsPath string, sets []string) error {
	if len(sets) == 0 {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		present, err := output(nsPath, "ipset", []string{"list", "-n"}, nil)
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for _, n := range strings.Fields(string(present)) {
			have[n] = true
		}
		var b strings.Builder
		var left []string
		for _, s := range sets {
			if have[s] {
				fmt.Fprintf(&b, "destroy %s\n", s)
				left = append(left, s)
			}
		}
		if len(left) == 0 {
			return nil
		}
		_, err = output(nsPath, "ipset", []string{"restore"}, []byte(b.String()))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "in use") {
			sort.Strings(left)
			return fmt.Errorf("destroy stale ipsets %v: %w", left, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// output runs tool inside the namespace at nsPath (netns.Output).
func output(nsPath, tool string, args []string, stdin []byte) ([]byte, error) {
	return netns.Output(nsPath, tool, args, stdin)
}
