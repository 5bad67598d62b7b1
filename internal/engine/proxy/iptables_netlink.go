package proxy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cnibench/cnibench/internal/nftnl"
	"github.com/mdlayher/netlink"
)

// applyIPTNetlink is ApplyIPTables for iptables-nft without its tools: what
// iptables-restore --noflush of the hooks and the input does, as one nf_tables transaction
// written over netlink (internal/nftnl's IPTRule: the objects iptables-nft-restore would
// make, which iptables-nft-save then lists as its own). Per table of the input:
//
//   - the table and the base chains the missing hooks go into, as iptables-nft creates them;
//   - each hook (Hooks) whose base chain has no rule jumping to its chain: the chain
//     declared (created, or flushed as the tools' hook section does) and the rule appended
//     (iptables -C compares the whole rule; a jump to the hook's chain is what counts here);
//   - each chain the input declares created, or flushed if it exists; the rules appended;
//     the chains of "-X" lines deleted.
//
// An input with a line or form nftnl does not know is left to the tools (errIPTUntranslated).
func applyIPTNetlink(nsPath string, input []byte) error {
	tables, err := nftnl.ParseRestore(input)
	if errors.Is(err, nftnl.ErrUntranslated) {
		return fmt.Errorf("%w: %v", errIPTUntranslated, err)
	}
	if err != nil {
		return err
	}
	var msgs []netlink.Message
	var src []int
	for _, t := range tables {
		var hooks [][]string // of this table: "-A CHAIN ARGS..."
		var baseChains []string
		for _, h := range Hooks() {
			if h[1] == t.Name {
				hooks = append(hooks, h[2:])
				baseChains = append(baseChains, h[3])
			}
		}
		cur, err := nftnl.DumpIPT(nsPath, t.Name, baseChains, nil)
		if err != nil {
			return err
		}
		exists := map[string]bool{}
		for _, ch := range cur.Chains {
			exists[ch] = true
		}
		b := nftnl.New(t.Name) // (not Repeated: kube-proxy's rules are nearly all different)
		base := map[string]bool{}
		var missing [][]string
		for _, h := range hooks {
			chain, to := h[1], h[len(h)-1]
			if slices.ContainsFunc(cur.Rules[chain], func(r nftnl.IPTState) bool { return r.Jump == to }) {
				continue
			}
			missing = append(missing, h)
			hook, _ := nftnl.IPTBuiltin(t.Name, chain)
			base[hook] = exists[chain]
		}
		for _, r := range t.Rules {
			if hook, ok := nftnl.IPTBuiltin(t.Name, r.Chain); ok {
				base[hook] = exists[r.Chain]
			}
		}
		if err := b.AddIPTTable(!cur.Exists, base, false); err != nil {
			return fmt.Errorf("%w: %v", errIPTUntranslated, err)
		}
		declare := func(ch string) error {
			if exists[ch] {
				b.FlushChain(ch)
				return nil
			}
			exists[ch] = true
			return b.AddChain(ch, nil)
		}
		for _, h := range missing {
			if err := declare(h[len(h)-1]); err != nil {
				return err
			}
			if err := b.IPTRule(h[1], h[2:], false); err != nil {
				return fmt.Errorf("%w: hook %q: %v", errIPTUntranslated, h, err)
			}
		}
		for _, ch := range t.Decls {
			if err := declare(ch); err != nil {
				return err
			}
		}
		for _, r := range t.Rules {
			b.Line = r.Line
			if err := b.IPTRule(r.Chain, r.Args, false); err != nil {
				if errors.Is(err, nftnl.ErrUntranslated) {
					return fmt.Errorf("%w: line %d: %v", errIPTUntranslated, r.Line, err)
				}
				return fmt.Errorf("iptables input line %d: %w", r.Line, err)
			}
		}
		for _, ch := range t.Deletes {
			b.DelChain(ch)
		}
		m, err := b.Messages()
		if err != nil {
			return fmt.Errorf("nftables netlink messages: %w", err)
		}
		msgs = append(msgs, m...)
		src = append(src, b.Src()...)
	}
	return nftnl.Send(nsPath, msgs, src)
}

// errIPTUntranslated: an input has a line or form applyIPTNetlink does not write.
var errIPTUntranslated = errors.New("iptables input not translated to netlink")
