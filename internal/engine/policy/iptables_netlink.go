package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/nftnl"
)

// applyIPTNetlink is ApplyIPTables for iptables-nft without its tools: the sets with one
// ipset restore as there, then the filter table's change as one nf_tables transaction written
// over netlink (internal/nftnl's IPTRule: the objects iptables-nft-restore would make, which
// iptables-nft-save then lists as its own), and the stale sets destroyed as there.
//
// The earlier rendering is found as ApplyIPTables finds it (engineChains: the chains
// reachable from the top and idle chains, and the sets their rules match), from a netlink
// dump of the table instead of iptables-nft-save. The transaction makes the table's base
// chains what the restore makes them (nftnl's AddIPTTable), flushes the engine's chains,
// removes the FORWARD hook, deletes the chains the new rendering no longer declares, adds
// the new ones, the hook first in FORWARD and the rules. Unlike a restore of the whole table
// it leaves every other chain and rule of the table (and its counters) untouched.
//
// Renderings with a form IPTRule does not know are left to the tools (errIPTUntranslated).
func applyIPTNetlink(nsPath string, ipset, filter []byte) error {
	decls, rules, err := splitFilter(filter)
	if err != nil {
		return err
	}
	if len(ipset) > 0 {
		if _, err := output(nsPath, "ipset", []string{"restore"}, ipset); err != nil {
			return err
		}
	}
	cur, err := nftnl.DumpIPT(nsPath, "filter", []string{"FORWARD", IPTablesTopChain, IPTablesIdleChain},
		func(ch string) bool { return ch != "FORWARD" })
	if err != nil {
		return err
	}
	jumps := map[string][]string{}
	for ch, rs := range cur.Rules {
		for _, r := range rs {
			if r.Jump != "" {
				jumps[ch] = append(jumps[ch], r.Jump)
			}
		}
	}
	owned, chains := engineChains(cur.Chains, jumps)
	var oldIdx []uint16
	for _, ch := range chains {
		for _, r := range cur.Rules[ch] {
			for _, s := range r.Sets {
				if !slices.Contains(oldIdx, s) {
					oldIdx = append(oldIdx, s)
				}
			}
		}
	}
	created := createdSets(ipset)
	names := make([]string, 0, len(created))
	for s := range created {
		names = append(names, s)
	}
	slices.Sort(names)
	byName, byIndex, err := nftnl.IPSetIndices(nsPath, names, oldIdx)
	if err != nil {
		return err
	}

	b := nftnl.New("filter")
	b.Repeated, b.IPSets = true, byName
	// As a restore of the whole table leaves them: the table, its three base chains with
	// counters from zero.
	base := map[string]bool{}
	for _, h := range []string{"input", "forward", "output"} {
		base[h] = cur.Base[strings.ToUpper(h)]
	}
	if err := b.AddIPTTable(!cur.Exists, base, true); err != nil {
		return err
	}
	for _, ch := range chains {
		b.FlushChain(ch)
	}
	for _, r := range cur.Rules["FORWARD"] {
		if r.Jump == IPTablesTopChain && r.Exprs == 2 && len(r.Sets) == 0 { // counter, jump: hookRule
			if err := b.DelRule("FORWARD", r.Handle); err != nil {
				return err
			}
		}
	}
	declared := map[string]bool{}
	for _, ch := range decls {
		declared[ch] = true
	}
	exists := map[string]bool{}
	for _, ch := range cur.Chains {
		exists[ch] = true
	}
	for _, ch := range chains {
		if !declared[ch] {
			b.DelChain(ch)
		}
	}
	for _, ch := range decls {
		switch {
		case !exists[ch]:
			if err := b.AddChain(ch, nil); err != nil {
				return err
			}
		case !owned[ch]:
			b.FlushChain(ch) // as a restore of the table would
		}
	}
	if filter != nil {
		if err := b.IPTRule("FORWARD", []string{"-j", IPTablesTopChain}, true); err != nil {
			return err
		}
	}
	for _, r := range rules {
		b.Line = r.Line
		if err := b.IPTRule(r.Chain, r.Args, false); err != nil {
			if errors.Is(err, nftnl.ErrUntranslated) {
				return fmt.Errorf("%w: line %d: %v", errIPTUntranslated, r.Line, err)
			}
			return fmt.Errorf("filter input line %d: %w", r.Line, err)
		}
	}
	if err := b.Apply(nsPath); err != nil {
		return err
	}
	var stale []string
	for _, idx := range oldIdx {
		if n, ok := byIndex[idx]; ok && !created[n] {
			stale = append(stale, n)
		}
	}
	return destroySets(nsPath, stale)
}

// errIPTUntranslated: a rendering has a form applyIPTNetlink does not write.
var errIPTUntranslated = errors.New("iptables rendering not translated to netlink")

// splitFilter reads a RenderIPTables filter input (nil: none): its chain declarations and
// rules (nftnl.ParseRestore).
func splitFilter(filter []byte) (decls []string, rules []nftnl.RestoreRule, err error) {
	if filter == nil {
		return nil, nil, nil
	}
	tables, err := nftnl.ParseRestore(filter)
	if errors.Is(err, nftnl.ErrUntranslated) {
		return nil, nil, fmt.Errorf("%w: %v", errIPTUntranslated, err)
	}
	if err != nil || len(tables) != 1 || tables[0].Name != "filter" || len(tables[0].Deletes) > 0 {
		return nil, nil, fmt.Errorf("filter input is not one *filter ... COMMIT block (%v)", err)
	}
	return tables[0].Decls, tables[0].Rules, nil
}
