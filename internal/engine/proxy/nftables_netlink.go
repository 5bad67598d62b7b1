package proxy

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
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
// { ... }" of a Service with two endpoints or more included (nlBatch.numgenMap; opt.ServiceCIDR's
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
// The transaction is sent as nft sends it (nlSendBatch: one sendmsg, acks only for errors
// and the last message), so its size has no limit but the memory it takes.
//
// The rules are the expressions nft itself generates for the same text (nft --debug=netlink),
// so `nft list` shows the table as if nft had written it: TestNFTNetlinkRulesAsNft holds each
// rule form against nft's on the running kernel, TestNFTablesPartialMatchesFull whole
// sequences of changes against full renderings, TestNFTNetlinkFullAsNft and
// TestNFTNetlinkFullObjectsAsNft full loads (every rule's expressions, every element, and the
// table's, chains' and sets' attributes) against nft's.
func applyNFTNetlink(nsPath string, input []byte) error {
	b := &nlBatch{t: &nftables.Table{Name: NFTable, Family: nftables.TableFamilyIPv4}}
	for line := range strings.SplitSeq(string(input), "\n") {
		b.line++
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if err := b.command(line); err != nil {
			return fmt.Errorf("%w: line %d: %s: %v", errNFTUntranslated, b.line, firstN(line, 120), err)
		}
	}
	msgs, err := b.messages()
	if err != nil {
		return fmt.Errorf("nftables netlink messages: %w", err)
	}
	return nlSendBatch(nsPath, msgs, b.src)
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// nlBatch is a translated input: the operations to queue on a connection, in order.
type nlBatch struct {
	t     *nftables.Table
	ops   []nlOp
	rules []*nftables.Rule        // the rules added, in order (tests look at them)
	elems [][]nftables.SetElement // the elements added or deleted, by command, in order
	anon  uint32                  // anonymous maps queued
	line  int                     // the input line being translated
	src   []int                   // by message (messages): its input line
}

// nlOp is one queued operation: a call on a github.com/google/nftables connection, or a
// message of our own (for what its API cannot say: the comment of a table or a chain).
type nlOp struct {
	f    func(*nftables.Conn) error
	raw  *netlink.Message
	line int // of the input (1 the first)
}

func (b *nlBatch) op(f func(*nftables.Conn) error) { b.ops = append(b.ops, nlOp{f: f, line: b.line}) }

func (b *nlBatch) raw(m netlink.Message) { b.ops = append(b.ops, nlOp{raw: &m, line: b.line}) }

// nlElemsMax bounds the bytes of elements one message carries: they are one attribute,
// whose length is 16 bits (github.com/google/nftables does not split them, and a list over
// 64 KB wraps the length: the kernel then reads garbage, ENOENT). nft splits them too.
const nlElemsMax = 32 << 10

// elemOps queues the addition (or deletion) of elems to set, in messages of at most
// nlElemsMax bytes of elements.
func (b *nlBatch) elemOps(set nlSetT, elems []nftables.SetElement, del bool) {
	for len(elems) > 0 {
		n, size := 0, 0
		for ; n < len(elems) && (n == 0 || size < nlElemsMax); n++ {
			e := elems[n]
			size += 64 + len(e.Key) + len(e.Comment)
			if e.VerdictData != nil {
				size += len(e.VerdictData.Chain)
			}
		}
		chunk := elems[:n]
		elems = elems[n:]
		if del {
			b.op(func(c *nftables.Conn) error { return c.SetDeleteElements(set.s, chunk) })
		} else {
			b.op(func(c *nftables.Conn) error { return c.SetAddElements(set.s, chunk) })
		}
	}
}

// command translates one line of the input.
func (b *nlBatch) command(line string) error {
	tok, err := nftTokens(line)
	if err != nil {
		return err
	}
	if len(tok) < 4 || tok[2] != "ip" || tok[3] != NFTable {
		return errors.New("not a command on table ip " + NFTable)
	}
	verb, obj := tok[0], tok[1]
	if len(tok) == 4 && verb == "delete" && obj == "table" {
		b.op(func(c *nftables.Conn) error { c.DelTable(b.t); return nil })
		return nil
	}
	if len(tok) >= 4 && verb == "add" && obj == "table" {
		return b.addTable(tok[4:])
	}
	if len(tok) < 5 {
		return errors.New("a command without a name")
	}
	name, rest := tok[4], tok[5:]
	chain := &nftables.Chain{Table: b.t, Name: name}
	switch {
	case verb == "add" && obj == "rule":
		return b.rule(chain, rest)
	case verb == "add" && obj == "element":
		set, err := nlSet(b.t, name)
		if err != nil {
			return err
		}
		elems, err := b.elements(set, rest)
		if err != nil {
			return err
		}
		b.elems = append(b.elems, elems)
		b.elemOps(set, elems, false)
	case verb == "add" && obj == "chain" && len(rest) > 0 && !slices.Contains(rest, ";"):
		return errors.New("a chain spec without ;")
	case verb == "add" && obj == "chain" && len(rest) > 2 && (rest[1] == "type" || rest[1] == "comment"):
		return b.addChainSpec(name, rest)
	case verb == "add" && (obj == "set" || obj == "map") && !slices.Contains(rest, "elements"):
		return b.addSetDecl(name, rest)
	case verb == "flush" && obj == "chain" && len(rest) == 0:
		b.op(func(c *nftables.Conn) error { c.FlushChain(chain); return nil })
	case verb == "delete" && obj == "chain" && len(rest) == 0:
		b.op(func(c *nftables.Conn) error { c.DelChain(chain); return nil })
	case verb == "add" && obj == "chain" && len(rest) == 0:
		return b.addChainSpec(name, nil)
	case verb == "add" && obj == "chain":
		body, err := braced(rest)
		if err != nil {
			return err
		}
		for _, r := range splitOn(body, ";") {
			if len(r) == 0 {
				continue
			}
			if err := b.rule(chain, r); err != nil {
				return fmt.Errorf("rule %q: %w", strings.Join(r, " "), err)
			}
		}
	case verb == "delete" && obj == "element":
		set, err := nlSet(b.t, name)
		if err != nil {
			return err
		}
		elems, err := b.elements(set, rest)
		if err != nil {
			return err
		}
		b.elems = append(b.elems, elems)
		b.elemOps(set, elems, true)
	case verb == "add" && (obj == "set" || obj == "map"):
		set, err := nlSet(b.t, name)
		if err != nil {
			return err
		}
		body, err := braced(rest)
		if err != nil {
			return err
		}
		i := slices.Index(body, "elements")
		if i < 0 || i+1 >= len(body) || body[i+1] != "=" {
			return errors.New("a declaration without elements")
		}
		if decl := strings.Join(body[:i], " "); decl != strings.Join(mustTokens(nftSetDecls[set.el].body), " ") {
			return fmt.Errorf("declaration %q is not the set's", decl)
		}
		tail := body[i+2:]
		if len(tail) > 0 && tail[len(tail)-1] == ";" {
			tail = tail[:len(tail)-1]
		}
		elems, err := b.elements(set, tail)
		if err != nil {
			return err
		}
		b.elems = append(b.elems, elems)
		b.elemOps(set, elems, false)
	default:
		return errors.New("unknown command")
	}
	return nil
}

// nlSetT is a named set or map of the table, as netlink needs it to write its elements.
type nlSetT struct {
	s      *nftables.Set
	el     int      // el* index
	fields []string // key types, in order
}

func nlSet(t *nftables.Table, name string) (nlSetT, error) {
	for i, n := range nftSets {
		if n != name {
			continue
		}
		d := nftSetDecls[i]
		typ, _, _ := strings.Cut(strings.TrimPrefix(d.body, "type "), " ;")
		typ, _, _ = strings.Cut(typ, " : ")
		return nlSetT{s: &nftables.Set{Table: t, Name: name, IsMap: d.kind == "map"}, el: i, fields: strings.Split(typ, " . ")}, nil
	}
	return nlSetT{}, fmt.Errorf("unknown set %q", name)
}

// elements translates "{ KEY [comment "C"] [: VERDICT], ... }" for set.
func (b *nlBatch) elements(set nlSetT, tok []string) ([]nftables.SetElement, error) {
	body, err := braced(tok)
	if err != nil {
		return nil, err
	}
	var out []nftables.SetElement
	for _, e := range splitOn(body, ",") {
		var el nftables.SetElement
		if i := slices.Index(e, ":"); i >= 0 {
			if !set.s.IsMap {
				return nil, errors.New("a value in a set")
			}
			v, err := verdict(e[i+1:])
			if err != nil {
				return nil, err
			}
			el.VerdictData, e = v, e[:i]
		}
		if i := slices.Index(e, "comment"); i >= 0 {
			if i+2 != len(e) {
				return nil, errors.New("text after an element's comment")
			}
			c, err := strconv.Unquote(e[i+1])
			if err != nil {
				return nil, fmt.Errorf("comment %s: %w", e[i+1], err)
			}
			el.Comment, e = c, e[:i]
		}
		key, err := concatKey(set.fields, e)
		if err != nil {
			return nil, err
		}
		el.Key = key
		out = append(out, el)
	}
	return out, nil
}

// concatKey encodes "V1 . V2 ..." of the given types as nft does: each field in network
// order, padded to 4 bytes when the key is a concatenation.
func concatKey(types, tok []string) ([]byte, error) {
	vals := splitOn(tok, ".")
	if len(vals) != len(types) {
		return nil, fmt.Errorf("key %q has %d fields, the set %d", strings.Join(tok, " "), len(vals), len(types))
	}
	var key []byte
	for i, v := range vals {
		if len(v) != 1 {
			return nil, fmt.Errorf("key field %q", strings.Join(v, " "))
		}
		var f []byte
		switch types[i] {
		case "ipv4_addr":
			ip := net.ParseIP(v[0]).To4()
			if ip == nil {
				return nil, fmt.Errorf("address %q", v[0])
			}
			f = ip
		case "inet_proto":
			p, ok := nlProtos[v[0]]
			if !ok {
				return nil, fmt.Errorf("protocol %q", v[0])
			}
			f = []byte{p}
		case "inet_service":
			p, err := strconv.ParseUint(v[0], 10, 16)
			if err != nil {
				return nil, fmt.Errorf("port %q", v[0])
			}
			f = binaryutil.BigEndian.PutUint16(uint16(p))
		default:
			return nil, fmt.Errorf("key type %q", types[i])
		}
		if len(vals) > 1 {
			f = append(f, make([]byte, (4-len(f)%4)%4)...)
		}
		key = append(key, f...)
	}
	return key, nil
}

var nlProtos = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// verdict translates "goto C", "jump C", "drop", "accept", "return".
func verdict(tok []string) (*expr.Verdict, error) {
	switch {
	case len(tok) == 2 && tok[0] == "goto":
		return &expr.Verdict{Kind: expr.VerdictGoto, Chain: tok[1]}, nil
	case len(tok) == 2 && tok[0] == "jump":
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: tok[1]}, nil
	case len(tok) == 1 && tok[0] == "drop":
		return &expr.Verdict{Kind: expr.VerdictDrop}, nil
	case len(tok) == 1 && tok[0] == "accept":
		return &expr.Verdict{Kind: expr.VerdictAccept}, nil
	case len(tok) == 1 && tok[0] == "return":
		return &expr.Verdict{Kind: expr.VerdictReturn}, nil
	}
	return nil, fmt.Errorf("verdict %q", strings.Join(tok, " "))
}

// rule translates one rule of a Service's chains into the expressions nft generates for it.
func (b *nlBatch) rule(chain *nftables.Chain, tok []string) error {
	r := &nftables.Rule{Table: b.t, Chain: chain}
	for len(tok) > 0 {
		switch {
		case len(tok) >= 3 && tok[0] == "ip" && (tok[1] == "daddr" || tok[1] == "saddr") && tok[2] != "." && tok[2] != "{" && !strings.HasPrefix(tok[2], "@"):
			off := uint32(12)
			if tok[1] == "daddr" {
				off = 16
			}
			op, val := expr.CmpOpEq, tok[2]
			n := 3
			if val == "!=" {
				if len(tok) < 4 {
					return errors.New("missing address")
				}
				op, val, n = expr.CmpOpNeq, tok[3], 4
			}
			ex, err := addrMatch(off, op, val)
			if err != nil {
				return err
			}
			r.Exprs, tok = append(r.Exprs, ex...), tok[n:]
		case len(tok) >= 3 && tok[0] == "meta" && tok[1] == "l4proto" && tok[2] != ".":
			p, ok := nlProtos[tok[2]]
			if !ok {
				return fmt.Errorf("protocol %q", tok[2])
			}
			r.Exprs = append(r.Exprs, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}})
			tok = tok[3:]
		case len(tok) >= 4 && tok[0] == "fib" && tok[1] == "saddr" && tok[2] == "type" && tok[3] == "local":
			r.Exprs = append(r.Exprs, &expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)})
			tok = tok[4:]
		case len(tok) >= 3 && tok[0] == "dnat" && tok[1] == "to":
			host, port, err := net.SplitHostPort(tok[2])
			ip := net.ParseIP(host).To4()
			p, perr := strconv.ParseUint(port, 10, 16)
			if err != nil || ip == nil || perr != nil {
				return fmt.Errorf("dnat target %q", tok[2])
			}
			r.Exprs = append(r.Exprs, &expr.Immediate{Register: 1, Data: ip}, &expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(uint16(p))},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true})
			tok = tok[3:]
		case len(tok) >= 2 && tok[0] == "comment":
			c, err := strconv.Unquote(tok[1])
			if err != nil {
				return fmt.Errorf("comment %s: %w", tok[1], err)
			}
			r.UserData = userdata.AppendString(nil, userdata.TypeComment, c)
			tok = tok[2:]
		case len(tok) >= 5 && tok[0] == "ip" && (tok[1] == "daddr" || tok[1] == "saddr") && tok[2] == "{" && tok[4] == "}":
			// An anonymous set of one address or prefix: nft matches it as the prefix itself
			// ("ip daddr { 10.96.0.0/16 }" is "ip daddr 10.96.0.0/16" in the kernel).
			off := uint32(12)
			if tok[1] == "daddr" {
				off = 16
			}
			ex, err := addrMatch(off, expr.CmpOpEq, tok[3])
			if err != nil {
				return err
			}
			r.Exprs, tok = append(r.Exprs, ex...), tok[5:]
		case len(tok) >= 6 && tok[0] == "numgen" && tok[1] == "random" && tok[2] == "mod" && tok[4] == "vmap" && tok[5] == "{":
			end := slices.Index(tok, "}")
			if end < 0 {
				return errors.New("numgen vmap without }")
			}
			mod, err := strconv.ParseUint(tok[3], 10, 32)
			if err != nil || mod == 0 {
				return fmt.Errorf("numgen modulus %q", tok[3])
			}
			id, err := b.numgenMap(uint32(mod), tok[5:end+1])
			if err != nil {
				return err
			}
			r.Exprs = append(r.Exprs, &expr.Numgen{Register: 1, Modulus: uint32(mod), Type: unix.NFT_NG_RANDOM},
				&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: nlAnonMap, SetID: id})
			tok = tok[end+1:]
		case len(tok) >= 3 && tok[0] == "ct" && tok[1] == "state" && tok[2] == "new":
			r.Exprs = append(r.Exprs, &expr.Ct{Register: 1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(8), Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
			tok = tok[3:]
		case len(tok) >= 5 && tok[0] == "mark" && tok[1] == "set" && tok[2] == "mark" && (tok[3] == "or" || tok[3] == "xor"):
			m, err := strconv.ParseUint(tok[4], 0, 32)
			if err != nil {
				return fmt.Errorf("mark %q", tok[4])
			}
			mask := ^uint32(m) // or: keep the other bits, set these
			if tok[3] == "xor" {
				mask = ^uint32(0)
			}
			r.Exprs = append(r.Exprs, &expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(uint32(m))},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1})
			tok = tok[5:]
		case len(tok) >= 5 && tok[0] == "mark" && tok[1] == "and" && tok[3] == "==":
			m, err := strconv.ParseUint(tok[2], 0, 32)
			v, verr := strconv.ParseUint(tok[4], 0, 32)
			if err != nil || verr != nil {
				return fmt.Errorf("mark %q == %q", tok[2], tok[4])
			}
			r.Exprs = append(r.Exprs, &expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(uint32(m)), Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uint32(v))})
			tok = tok[5:]
		case len(tok) >= 2 && tok[0] == "masquerade" && tok[1] == "fully-random":
			r.Exprs, tok = append(r.Exprs, &expr.Masq{FullyRandom: true}), tok[2:]
		case tok[0] == "reject":
			r.Exprs, tok = append(r.Exprs, &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3}), tok[1:] // ICMP port unreachable
		case len(tok) >= 3 && tok[0] == "ip" && tok[1] == "daddr" && strings.HasPrefix(tok[2], "@"):
			// a set's lookup: "ip daddr @set"
			r.Exprs = append(r.Exprs, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Lookup{SourceRegister: 1, SetName: tok[2][1:]})
			tok = tok[3:]
		case len(tok) >= 7 && tok[0] == "ip" && tok[1] == "daddr" && tok[2] == "." && strings.Join(tok[3:7], " ") == "meta l4proto . th":
			// "ip daddr . meta l4proto . th dport vmap @map": the concatenation in registers
			// 1, 9 and 10 (the 4-byte registers after the first field), looked up in the map.
			if len(tok) < 10 || tok[7] != "dport" || tok[8] != "vmap" || !strings.HasPrefix(tok[9], "@") {
				return fmt.Errorf("unknown statement at %q", strings.Join(tok, " "))
			}
			r.Exprs = append(r.Exprs, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
				&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: tok[9][1:]})
			tok = tok[10:]
		case len(tok) >= 7 && strings.Join(tok[:6], " ") == "meta l4proto . th dport vmap":
			// "meta l4proto . th dport vmap @map" (after "ip daddr @set")
			if !strings.HasPrefix(tok[6], "@") {
				return fmt.Errorf("unknown statement at %q", strings.Join(tok, " "))
			}
			r.Exprs = append(r.Exprs, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: tok[6][1:]})
			tok = tok[7:]
		default:
			n := 1
			if tok[0] == "goto" || tok[0] == "jump" {
				n = min(2, len(tok))
			}
			v, err := verdict(tok[:n])
			if err != nil {
				return fmt.Errorf("unknown statement at %q", strings.Join(tok, " "))
			}
			r.Exprs, tok = append(r.Exprs, v), tok[n:]
		}
	}
	b.rules = append(b.rules, r)
	m, err := nlRuleMsg(r)
	if err != nil {
		return err
	}
	b.raw(m)
	return nil
}

// addrMatch is "ip saddr|daddr [!=] A[/P]" at header offset off, as nft writes it: a
// prefix on a byte boundary loads only its bytes, any other is masked.
func addrMatch(off uint32, op expr.CmpOp, val string) ([]expr.Any, error) {
	bits := 32
	if a, p, ok := strings.Cut(val, "/"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 32 {
			return nil, fmt.Errorf("prefix %q", val)
		}
		val, bits = a, n
	}
	ip := net.ParseIP(val).To4()
	if ip == nil {
		return nil, fmt.Errorf("address %q", val)
	}
	mask := net.CIDRMask(bits, 32)
	ip = ip.Mask(mask)
	if bits%8 == 0 {
		n := uint32(bits / 8)
		return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: op, Register: 1, Data: ip[:n]}}, nil
	}
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: ip}}, nil
}

// nftTokens splits an nft command at blanks, keeping a quoted string (with its quotes) as
// one token and the punctuation { } ; , : as tokens of their own.
func nftTokens(s string) ([]string, error) {
	out := make([]string, 0, strings.Count(s, " ")+2)
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, errors.New("unterminated string")
			}
			out = append(out, s[i:j+1])
			i = j + 1
		case strings.IndexByte("{};,", c) >= 0:
			out = append(out, s[i:i+1])
			i++
		default:
			j := i
			for j < len(s) && strings.IndexByte(" \t\"{};,", s[j]) < 0 {
				j++
			}
			out = append(out, s[i:j]) // "10.0.0.1:80" stays whole; the renderings write " : "
			i = j
		}
	}
	return out, nil
}

func mustTokens(s string) []string {
	t, err := nftTokens(s)
	if err != nil {
		panic(err)
	}
	return t
}

// braced returns what is between tok's first token "{" and its last "}".
func braced(tok []string) ([]string, error) {
	if len(tok) < 2 || tok[0] != "{" || tok[len(tok)-1] != "}" {
		return nil, fmt.Errorf("expected { ... }, got %q", strings.Join(tok, " "))
	}
	return tok[1 : len(tok)-1], nil
}

// splitOn splits tok at the top-level (outside braces) separators sep.
func splitOn(tok []string, sep string) [][]string {
	var out [][]string
	depth, start := 0, 0
	for i, t := range tok {
		switch t {
		case "{":
			depth++
		case "}":
			depth--
		case sep:
			if depth == 0 {
				out = append(out, tok[start:i])
				start = i + 1
			}
		}
	}
	return append(out, tok[start:])
}
