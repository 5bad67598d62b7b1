package nftnl

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
	"golang.org/x/sys/unix"
)

// encodeKey encodes "V1 . V2 ..." of the given types as nft does: each field in network
// order, padded to 4 bytes when the key is a concatenation.
func encodeKey(types, tok []string) ([]byte, error) {
	vals := SplitOn(tok, ".")
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
			p, ok := protos[v[0]]
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

var protos = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

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

// Rule queues a rule appended to chain: tok, its statements, are translated into the
// expressions nft 1.0.6 generates for the same text (nft --debug=netlink shows them; the
// engines' tests compare). The forms known:
//
//	ip saddr|daddr [!=] A[/P]       ip saddr|daddr { A[/P] }     ip saddr|daddr @set
//	ip saddr|daddr vmap @map        ip daddr . meta l4proto . th dport @set | vmap @map
//	meta l4proto . th dport vmap @map                             meta l4proto P
//	tcp|udp|sctp dport N[-M]        ct state S[,S...]            fib saddr type local
//	[meta] mark set [meta] mark or|xor|and M                      [meta] mark and M == V
//	numgen random mod N vmap { ... }                             dnat to A:P
//	masquerade fully-random         reject                       comment "C"
//	accept | drop | return | jump C | goto C
//
// Anything else is an error, and nothing of the rule is queued.
func (b *Batch) Rule(chain string, tok []string) error {
	r := &nftables.Rule{Table: b.Table, Chain: &nftables.Chain{Table: b.Table, Name: chain}}
	// The same statements make the same expressions: with b.Repeated a rule seen before is
	// neither translated nor marshalled again.
	var key string
	if b.Repeated {
		key = strings.Join(tok, " ")
		if done, err := b.replay(r, key); done {
			return err
		}
	}
	anon := b.anon
	tok = meta(tok)
	for len(tok) > 0 {
		switch {
		case len(tok) >= 3 && tok[0] == "ip" && (tok[1] == "daddr" || tok[1] == "saddr") && tok[2] != "." && tok[2] != "{" && tok[2] != "vmap" && !strings.HasPrefix(tok[2], "@"):
			off := addrOff[tok[1]]
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
			p, ok := protos[tok[2]]
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
			off := addrOff[tok[1]]
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
				&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: anonMap, SetID: id})
			tok = tok[end+1:]
		case len(tok) >= 3 && tok[0] == "ct" && tok[1] == "state":
			// "ct state S[,S...]": the state's bits, any of them set
			var mask uint32
			n := 2
			for ; n < len(tok); n += 2 {
				bit, ok := ctStates[tok[n]]
				if !ok {
					return fmt.Errorf("ct state %q", tok[n])
				}
				mask |= bit
				if n+1 >= len(tok) || tok[n+1] != "," {
					break
				}
			}
			r.Exprs = append(r.Exprs, &expr.Ct{Register: 1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
			tok = tok[n+1:]
		case len(tok) >= 5 && tok[0] == "mark" && tok[1] == "set" && tok[2] == "mark" && (tok[3] == "or" || tok[3] == "xor" || tok[3] == "and"):
			m, err := strconv.ParseUint(tok[4], 0, 32)
			if err != nil {
				return fmt.Errorf("mark %q", tok[4])
			}
			mask, xor := ^uint32(m), uint32(m) // or: keep the other bits, set these
			switch tok[3] {
			case "xor":
				mask = ^uint32(0)
			case "and":
				mask, xor = uint32(m), 0
			}
			r.Exprs = append(r.Exprs, &expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(xor)},
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
		case len(tok) >= 3 && tok[0] == "ip" && (tok[1] == "daddr" || tok[1] == "saddr") && strings.HasPrefix(tok[2], "@"):
			// a set's lookup: "ip daddr @set"
			r.Exprs = append(r.Exprs, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff[tok[1]], Len: 4},
				&expr.Lookup{SourceRegister: 1, SetName: tok[2][1:]})
			tok = tok[3:]
		case len(tok) >= 4 && tok[0] == "ip" && (tok[1] == "daddr" || tok[1] == "saddr") && tok[2] == "vmap" && strings.HasPrefix(tok[3], "@"):
			// a verdict map's lookup: "ip saddr vmap @map"
			r.Exprs = append(r.Exprs, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff[tok[1]], Len: 4},
				&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: tok[3][1:]})
			tok = tok[4:]
		case len(tok) >= 3 && protos[tok[0]] != 0 && tok[1] == "dport":
			// "tcp dport N" or "tcp dport N-M": the protocol, then the port or its range
			p := protos[tok[0]]
			lo, hi, isRange := strings.Cut(tok[2], "-")
			a, err := strconv.ParseUint(lo, 10, 16)
			z := a
			if isRange {
				z, err = strconv.ParseUint(hi, 10, 16)
			}
			if err != nil || z < a {
				return fmt.Errorf("port %q", tok[2])
			}
			r.Exprs = append(r.Exprs, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			if isRange {
				r.Exprs = append(r.Exprs, &expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(a))},
					&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(z))})
			} else {
				r.Exprs = append(r.Exprs, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(a))})
			}
			tok = tok[3:]
		case len(tok) >= 7 && tok[0] == "ip" && tok[1] == "daddr" && tok[2] == "." && strings.Join(tok[3:7], " ") == "meta l4proto . th":
			// "ip daddr . meta l4proto . th dport vmap @map" or "... dport @set": the
			// concatenation in registers 1, 9 and 10 (the 4-byte registers after the first
			// field), looked up in the map (its verdict) or the set (a match).
			n := 8 // the set after "dport", or "vmap" and then the map
			vmap := len(tok) > n && tok[n] == "vmap"
			if vmap {
				n++
			}
			if len(tok) <= n || tok[7] != "dport" || !strings.HasPrefix(tok[n], "@") {
				return fmt.Errorf("unknown statement at %q", strings.Join(tok, " "))
			}
			r.Exprs = append(r.Exprs, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
				&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: vmap, SetName: tok[n][1:]})
			tok = tok[n+1:]
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
	m, body, err := ruleMsg(b.Table.Name, chain, r, nil, nil, nil)
	if err != nil {
		return err
	}
	if b.Repeated && b.anon == anon { // (a rule with an anonymous map of its own is never shared)
		if b.seen == nil {
			b.seen = map[string]seenRule{}
		}
		b.seen[key] = seenRule{r.Exprs, r.UserData, body}
	}
	b.Rules = append(b.Rules, r)
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

// meta drops the optional "meta" of "meta mark" (nft writes the same either way).
func meta(tok []string) []string {
	if !slices.Contains(tok, "mark") {
		return tok
	}
	out := tok[:0:0]
	for i, t := range tok {
		if t == "meta" && i+1 < len(tok) && tok[i+1] == "mark" {
			continue
		}
		out = append(out, t)
	}
	return out
}

// addrOff is the offset of an IPv4 header's source or destination address.
var addrOff = map[string]uint32{"saddr": 12, "daddr": 16}

// ctStates are the bits of conntrack states (linux/netfilter/nf_conntrack_common.h).
var ctStates = map[string]uint32{"invalid": 1, "established": 2, "related": 4, "new": 8, "untracked": 64}

// replay queues r as the rule seen before under key, if there is one (done), with its
// expressions, user data and message body.
func (b *Batch) replay(r *nftables.Rule, key string) (done bool, err error) {
	s, ok := b.seen[key]
	if !ok {
		return false, nil
	}
	r.Exprs, r.UserData = s.exprs, s.ud
	m, _, err := ruleMsg(b.Table.Name, r.Chain.Name, r, s.body, nil, nil)
	if err != nil {
		return true, err
	}
	b.Rules = append(b.Rules, r)
	b.raw(m)
	return true, nil
}

// seenRule is a rule translated before: its expressions, user data and message body.
type seenRule struct {
	exprs []expr.Any
	ud    []byte
	body  []byte
}
