package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cnibench/cnibench/internal/nftnl"
)

// errNFTUntranslated says that an nft input is not a full rendering the netlink writer
// translates; ApplyNFTables then runs nft with it.
var errNFTUntranslated = errors.New("not translated to netlink")

// applyNFTNetlink programs a full rendering (RenderNFTables) in the network namespace at
// nsPath through netlink, as one transaction, without running nft (internal/nftnl writes
// what nft would: the same table, chains, sets, elements and rule expressions). Anything
// else (a partial rendering: its commands are few and small) returns errNFTUntranslated
// before anything is sent.
func applyNFTNetlink(nsPath string, input []byte) error {
	b, err := translateNFT(input)
	if err != nil {
		return fmt.Errorf("%w: %v", errNFTUntranslated, err)
	}
	return b.Apply(nsPath)
}

// nftObj is a set, map or chain of a full rendering, with the input lines it came from.
type nftObj struct {
	kind, name string
	line       int        // its opening line (1 the first)
	decl       [][]string // a set's or map's declaration statements, a chain's spec
	elems      []string   // a set's or map's element lines
	elemsLine  int
	rules      [][]string // a chain's rules
	ruleLines  []int
}

// translateNFT reads a full rendering, which RenderNFTables writes as
//
//	table ip T
//	delete table ip T
//	table ip T {
//		set|map NAME {
//			<declaration statements, one a line>
//			[elements = {
//				ELEMENT, ELEMENT, ...
//			}]
//		}
//		chain NAME {
//			[type filter hook H priority P; policy accept;]
//			RULE
//			...
//		}
//	}
//
// and queues it the way nft orders such a block: the table, every chain, every set with its
// elements (a map's elements jump to chains), then the rules.
func translateNFT(input []byte) (*nftnl.Batch, error) {
	b := nftnl.New(NFTablesTable)
	b.Repeated = true // every policy chain's rules, every pod chain's mark rules
	lines := strings.Split(string(input), "\n")
	head := []string{"table ip " + NFTablesTable, "delete table ip " + NFTablesTable, "table ip " + NFTablesTable + " {"}
	for i, h := range head {
		if i >= len(lines) || strings.TrimSpace(lines[i]) != h {
			return nil, errors.New("not a full rendering (it does not start with the table's replacement)")
		}
	}
	var objs []*nftObj
	var cur *nftObj
	inElems, closed := false, false
	for i := len(head); i < len(lines); i++ {
		n, l := i+1, strings.TrimSpace(lines[i])
		switch {
		case l == "":
		case closed:
			return nil, fmt.Errorf("line %d: text after the table", n)
		case cur == nil && l == "}":
			closed = true
		case cur == nil:
			f := strings.Fields(l)
			if len(f) != 3 || f[2] != "{" || (f[0] != "set" && f[0] != "map" && f[0] != "chain") {
				return nil, fmt.Errorf("line %d: %q", n, nftnl.FirstN(l, 80))
			}
			cur = &nftObj{kind: f[0], name: f[1], line: n}
			objs = append(objs, cur)
		case inElems && l == "}":
			inElems = false
		case inElems:
			cur.elems = append(cur.elems, l)
		case l == "}":
			cur = nil
		default:
			tok, err := nftnl.Tokens(l)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			switch {
			case cur.kind != "chain" && len(tok) == 3 && tok[0] == "elements" && tok[1] == "=" && tok[2] == "{":
				inElems, cur.elemsLine = true, n
			case cur.kind != "chain":
				cur.decl = append(cur.decl, tok)
			case tok[0] == "type" && len(cur.rules) == 0 && cur.decl == nil:
				cur.decl = append(cur.decl, tok)
			default:
				cur.rules, cur.ruleLines = append(cur.rules, tok), append(cur.ruleLines, n)
			}
		}
	}
	if !closed {
		return nil, errors.New("the table's block is not closed")
	}

	b.Line = 1
	if err := b.AddTable(""); err != nil {
		return nil, err
	}
	b.Line = 2
	b.DelTable()
	b.Line = 3
	if err := b.AddTable(""); err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.kind != "chain" {
			continue
		}
		b.Line = o.line
		var spec []string
		if o.decl != nil {
			spec = o.decl[0]
		}
		if err := b.AddChain(o.name, spec); err != nil {
			return nil, fmt.Errorf("line %d: %v", o.line, err)
		}
	}
	for _, o := range objs {
		if o.kind == "chain" {
			continue
		}
		b.Line = o.line
		var decl []string
		for _, st := range o.decl {
			decl = append(append(decl, st...), ";")
		}
		s, err := nftnl.ParseSet(b.Table, o.name, o.kind == "map", decl)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", o.line, err)
		}
		if err := b.AddSet(s); err != nil {
			return nil, fmt.Errorf("line %d: %v", o.line, err)
		}
		if len(o.elems) == 0 {
			continue
		}
		b.Line = o.elemsLine
		tok, err := nftnl.Tokens("{ " + strings.Join(o.elems, " ") + " }")
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", o.elemsLine, err)
		}
		elems, err := nftnl.ParseElements(s, tok)
		if err != nil {
			return nil, fmt.Errorf("line %d: elements of %s: %v", o.elemsLine, o.name, err)
		}
		b.AddElements(s, elems, false)
	}
	for _, o := range objs {
		for i, r := range o.rules {
			b.Line = o.ruleLines[i]
			if err := b.Rule(o.name, r); err != nil {
				return nil, fmt.Errorf("line %d: %v", b.Line, err)
			}
		}
	}
	return b, nil
}
