package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// nlMaxInput and nlMaxMessages bound what applyNFTNetlink takes; larger inputs go to nft.
// github.com/google/nftables sends a transaction in one sendmsg, which the socket refuses
// beyond its buffer (EMSGSIZE; 9,999 Services added at once are 5 MB), and reads the kernel's
// replies only once all is sent: an ack for every message, carrying the message, and for every
// rule its echo, which overflowed the receive buffer (ENOBUFS) when 99 Services were added in
// one change. nft spreads a large transaction over many sendmsg calls and reads as it goes.
// One Service with two ports is 14 messages to add and 10 to remove.
const (
	nlMaxInput    = 128 << 10
	nlMaxMessages = 64
)

// errNFTUntranslated says that an nft input holds a command or a rule the netlink writer
// does not translate; ApplyNFTables then runs nft with it.
var errNFTUntranslated = errors.New("not translated to netlink")

// applyNFTNetlink programs a partial nftables rendering (what RenderNFTablesPartial writes
// for a change: nftChange.input) in the network namespace at nsPath through netlink, as one
// transaction, without running nft. It understands exactly the commands that rendering
// writes, in table ip kube-proxy:
//
//	delete element ip kube-proxy SET { KEY, ... }
//	flush chain ip kube-proxy CHAIN
//	add chain ip kube-proxy CHAIN [{ RULE ; ... ; }]
//	delete chain ip kube-proxy CHAIN
//	add set|map ip kube-proxy SET { <its declaration> elements = { ELEMENT, ... } ; }
//
// and the rules of Service, endpoint, external and local chains (nftService) but one: the
// "numgen random mod N vmap { ... }" of a Service with two endpoints or more. Its anonymous
// map must carry, in its user data, that its keys are in host byte order, or nft lists
// "1 : goto ..." as "16777216 : goto ..."; github.com/google/nftables (v0.3.0) marks every
// anonymous set big endian, and has no way to say otherwise. Anything it does not translate
// returns errNFTUntranslated before anything is sent, and the caller falls back to nft.
//
// Why: nft 1.0.6 needs about 5 ms to start and parse, and it lists every chain of the table
// before any "delete" (its cache), 40-60 ms at 10,000 Services; through netlink a Service's
// removal is a few ms. What a Service's addition costs is the kernel's: any transaction that
// adds a jump or goto makes nf_tables check the whole table for loops (nf_tables_validate,
// about 30 ms for 10,000 Services here), and netlink changes nothing there.
//
// The rules are the expressions nft itself generates for the same text (nft --debug=netlink),
// so `nft list` shows the table as if nft had written it: TestNFTNetlinkRulesAsNft holds each
// rule form against nft's on the running kernel, TestNFTablesPartialMatchesFull whole
// sequences of changes against full renderings.
func applyNFTNetlink(nsPath string, input []byte) error {
	if len(input) > nlMaxInput {
		return fmt.Errorf("%w: %d bytes, more than one netlink message takes", errNFTUntranslated, len(input))
	}
	b := &nlBatch{t: &nftables.Table{Name: NFTable, Family: nftables.TableFamilyIPv4}}
	for line := range strings.SplitSeq(strings.TrimSpace(string(input)), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if err := b.command(line); err != nil {
			return fmt.Errorf("%w: %s: %v", errNFTUntranslated, firstN(line, 120), err)
		}
	}
	if len(b.ops) == 0 {
		return nil
	}
	if len(b.ops) > nlMaxMessages {
		return fmt.Errorf("%w: %d messages, more than the %d the replies have room for", errNFTUntranslated, len(b.ops), nlMaxMessages)
	}
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("nftables netlink in %s: %w", nsPath, err)
	}
	for _, op := range b.ops {
		if err := op(c); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables netlink transaction in %s: %w", nsPath, err)
	}
	return nil
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
	ops   []func(*nftables.Conn) error
	rules []*nftables.Rule        // the rules added, in order (tests look at them)
	elems [][]nftables.SetElement // the elements added or deleted, by command, in order
}

func (b *nlBatch) op(f func(*nftables.Conn) error) { b.ops = append(b.ops, f) }

// command translates one line of the input.
func (b *nlBatch) command(line string) error {
	tok, err := nftTokens(line)
	if err != nil {
		return err
	}
	if len(tok) < 5 || tok[2] != "ip" || tok[3] != NFTable {
		return errors.New("not a command on table ip " + NFTable)
	}
	verb, obj, name, rest := tok[0], tok[1], tok[4], tok[5:]
	chain := &nftables.Chain{Table: b.t, Name: name}
	switch {
	case verb == "flush" && obj == "chain" && len(rest) == 0:
		b.op(func(c *nftables.Conn) error { c.FlushChain(chain); return nil })
	case verb == "delete" && obj == "chain" && len(rest) == 0:
		b.op(func(c *nftables.Conn) error { c.DelChain(chain); return nil })
	case verb == "add" && obj == "chain" && len(rest) == 0:
		b.op(func(c *nftables.Conn) error { c.AddChain(chain); return nil })
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
		b.op(func(c *nftables.Conn) error { return c.SetDeleteElements(set.s, elems) })
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
		b.op(func(c *nftables.Conn) error { return c.SetAddElements(set.s, elems) })
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
		case len(tok) >= 3 && tok[0] == "ip" && (tok[1] == "daddr" || tok[1] == "saddr"):
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
		case len(tok) >= 3 && tok[0] == "meta" && tok[1] == "l4proto":
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
	b.op(func(c *nftables.Conn) error { c.AddRule(r); return nil })
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
	var out []string
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
