package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/nftnl"
)

// errNFTUntranslated says that an nft input holds a command or a rule the netlink writer
// does not translate; ApplyNFTables then runs nft with it.
var errNFTUntranslated = errors.New("not translated to netlink")

// applyNFTNetlink programs an nftables rendering, full (RenderNFTables) or partial (what
// RenderNFTablesPartial writes for a change: nftChange.input), in the network namespace at
// nsPath through netlink, as one transaction, without running nft. It understands exactly
// the commands those renderings write, in table ip kube-proxy:
//
//	add table ip kube-proxy [{ comment "C" ; }]
//	delete table ip kube-proxy
//	add set|map ip kube-proxy SET { <its declaration> [elements = { ELEMENT, ... } ;] }
//	add chain ip kube-proxy CHAIN [{ RULE ; ... ; }]
//	add chain ip kube-proxy CHAIN { type T hook H priority P ; } | { comment "C" ; }
//	add rule ip kube-proxy CHAIN RULE
//	add element ip kube-proxy SET { ELEMENT, ... }
//	delete element ip kube-proxy SET { KEY, ... }
//	flush chain ip kube-proxy CHAIN
//	delete chain ip kube-proxy CHAIN
//
// and the rules of every chain (nftFrag.base, nftService), the "numgen random mod N vmap
// { ... }" of a Service with two endpoints or more included (nftnl; opt.ServiceCIDR's
// "ip daddr { CIDR } drop" is a set of one element, which nft matches as a prefix, and so
// does this writer). Anything it does not translate returns errNFTUntranslated before
// anything is sent, and the caller falls back to nft (for the whole input: the transaction
// stays one).
//
// Why: nft 1.0.6 spends most of a large load in userspace. For 10,000 Services (7.4 MB of
// text, 14 MB of netlink messages) `nft -f` takes 0.8-0.9 s on this project's 2-core machine,
// 0.5 s of it user time (parsing, evaluating, serializing) and 0.3 s system time, of which
// the kernel's processing of the batch (nfnetlink_rcv_batch: rules, chains, elements, the
// commit and its loop check) is about 0.25 s (perf record of nft -f; `nft -c -f` is no
// userspace-only figure: it sends the batch too, and the kernel checks it and aborts).
// Through netlink the same load is 0.11 s of translation (expressions marshalled included),
// 0.015 s of assembling the messages and 0.24 s in sendmsg, 0.37 s in all against nft's 0.77 s
// (BenchmarkNFTFullNetlinkVsNft, paired). For small changes nft needs about 5 ms to start
// and parse, and it lists every chain of the table before any "delete" (its cache), 40-60 ms
// at 10,000 Services; through netlink a Service's removal is a few ms. What a Service's
// addition costs is the kernel's: any transaction that adds a jump or goto makes nf_tables
// check the whole table for loops (nf_tables_validate, about 30 ms for 10,000 Services
// here), and netlink changes nothing there.
//
// The transaction is sent as nft sends it (nftnl.Send: one sendmsg, acks only for errors
// and the last message), so its size has no limit but the memory it takes.
//
// The rules are the expressions nft itself generates for the same text (nft --debug=netlink),
// so `nft list` shows the table as if nft had written it: TestNFTNetlinkRulesAsNft holds each
// rule form against nft's on the running kernel, TestNFTablesPartialMatchesFull whole
// sequences of changes against full renderings, TestNFTNetlinkFullAsNft and
// TestNFTNetlinkFullObjectsAsNft full loads (every rule's expressions, every element, and the
// table's, chains' and sets' attributes) against nft's.
func applyNFTNetlink(nsPath string, input []byte) error {
	b := nftnl.New(NFTable)
	for line := range strings.SplitSeq(string(input), "\n") {
		b.Line++
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if err := command(b, line); err != nil {
			return fmt.Errorf("%w: line %d: %s: %v", errNFTUntranslated, b.Line, nftnl.FirstN(line, 120), err)
		}
	}
	return b.Apply(nsPath)
}

// command translates one line of the input.
func command(b *nftnl.Batch, line string) error {
	tok, err := nftnl.Tokens(line)
	if err != nil {
		return err
	}
	if len(tok) < 4 || tok[2] != "ip" || tok[3] != NFTable {
		return errors.New("not a command on table ip " + NFTable)
	}
	verb, obj := tok[0], tok[1]
	if len(tok) == 4 && verb == "delete" && obj == "table" {
		b.DelTable()
		return nil
	}
	if len(tok) >= 4 && verb == "add" && obj == "table" {
		return addTable(b, tok[4:])
	}
	if len(tok) < 5 {
		return errors.New("a command without a name")
	}
	name, rest := tok[4], tok[5:]
	switch {
	case verb == "add" && obj == "rule":
		return b.Rule(name, rest)
	case verb == "add" && obj == "element":
		set, err := nlSet(b, name)
		if err != nil {
			return err
		}
		elems, err := nftnl.ParseElements(set, rest)
		if err != nil {
			return err
		}
		b.AddElements(set, elems, false)
	case verb == "add" && obj == "chain" && len(rest) > 0 && !slices.Contains(rest, ";"):
		return errors.New("a chain spec without ;")
	case verb == "add" && obj == "chain" && len(rest) > 2 && (rest[1] == "type" || rest[1] == "comment"):
		return addChain(b, name, rest)
	case verb == "add" && (obj == "set" || obj == "map") && !slices.Contains(rest, "elements"):
		return addSetDecl(b, name, rest)
	case verb == "flush" && obj == "chain" && len(rest) == 0:
		b.FlushChain(name)
	case verb == "delete" && obj == "chain" && len(rest) == 0:
		b.DelChain(name)
	case verb == "add" && obj == "chain" && len(rest) == 0:
		return b.AddChain(name, nil)
	case verb == "add" && obj == "chain":
		body, err := nftnl.Braced(rest)
		if err != nil {
			return err
		}
		for _, r := range nftnl.SplitOn(body, ";") {
			if len(r) == 0 {
				continue
			}
			if err := b.Rule(name, r); err != nil {
				return fmt.Errorf("rule %q: %w", strings.Join(r, " "), err)
			}
		}
	case verb == "delete" && obj == "element":
		set, err := nlSet(b, name)
		if err != nil {
			return err
		}
		elems, err := nftnl.ParseElements(set, rest)
		if err != nil {
			return err
		}
		b.AddElements(set, elems, true)
	case verb == "add" && (obj == "set" || obj == "map"):
		set, err := nlSet(b, name)
		if err != nil {
			return err
		}
		body, err := nftnl.Braced(rest)
		if err != nil {
			return err
		}
		i := slices.Index(body, "elements")
		if i < 0 || i+1 >= len(body) || body[i+1] != "=" {
			return errors.New("a declaration without elements")
		}
		if err := sameDecl(name, body[:i]); err != nil {
			return err
		}
		tail := body[i+2:]
		if len(tail) > 0 && tail[len(tail)-1] == ";" {
			tail = tail[:len(tail)-1]
		}
		elems, err := nftnl.ParseElements(set, tail)
		if err != nil {
			return err
		}
		b.AddElements(set, elems, false)
	default:
		return errors.New("unknown command")
	}
	return nil
}

// nftSetDeclTokens are nftSetDecls' bodies as tokens (by el* index), read once.
var nftSetDeclTokens = func() (t [len(nftSets)][]string) {
	for i, d := range nftSetDecls {
		t[i] = nftnl.MustTokens(d.body)
	}
	return t
}()

// nlSet is one of the table's sets or maps (nftSets), as its declaration (nftSetDecls)
// makes it.
func nlSet(b *nftnl.Batch, name string) (nftnl.Set, error) {
	i := slices.Index(nftSets[:], name)
	if i < 0 {
		return nftnl.Set{}, fmt.Errorf("unknown set %q", name)
	}
	return nftnl.ParseSet(b.Table, name, nftSetDecls[i].kind == "map", nftSetDeclTokens[i])
}

// sameDecl checks that decl (tokens) is the declaration of set name in nftSetDecls.
func sameDecl(name string, decl []string) error {
	i := slices.Index(nftSets[:], name)
	if i < 0 || !slices.Equal(decl, nftSetDeclTokens[i]) {
		return fmt.Errorf("declaration %q is not the set's", strings.Join(decl, " "))
	}
	return nil
}

// addSetDecl translates the declaration of one of the table's sets or maps without elements
// (what a full rendering writes: `add set|map ip kube-proxy NAME { <nftSetDecls body> }`).
func addSetDecl(b *nftnl.Batch, name string, rest []string) error {
	set, err := nlSet(b, name)
	if err != nil {
		return err
	}
	body, err := nftnl.Braced(rest)
	if err != nil {
		return err
	}
	if err := sameDecl(name, body); err != nil {
		return err
	}
	return b.AddSet(set)
}

// addTable translates `add table ip kube-proxy [{ comment "C" ; }]`.
func addTable(b *nftnl.Batch, rest []string) error {
	comment := ""
	if len(rest) > 0 {
		body, err := nftnl.Braced(rest)
		if err != nil {
			return err
		}
		if len(body) != 3 || body[0] != "comment" || body[2] != ";" {
			return fmt.Errorf("table spec %q", strings.Join(body, " "))
		}
		if comment, err = strconv.Unquote(body[1]); err != nil {
			return err
		}
	}
	return b.AddTable(comment)
}

// addChain translates `add chain ip kube-proxy NAME { SPEC }`.
func addChain(b *nftnl.Batch, name string, rest []string) error {
	body, err := nftnl.Braced(rest)
	if err != nil {
		return err
	}
	return b.AddChain(name, body)
}
