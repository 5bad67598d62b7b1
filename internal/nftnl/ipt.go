package nftnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
)

// The iptables-nft side: rules of iptables-restore input written as the nf_tables objects
// iptables-nft 1.8.9 (Debian's iptables) makes of them, so that iptables-nft-save lists them
// as if iptables-nft-restore had loaded them (the engines' tests compare the listings, the
// expressions and every attribute the kernel holds), and what the kernel holds of such a table
// read back (DumpIPT) for an engine to find its earlier rendering.
//
// Why: iptables-nft-restore takes about 1 s for a table of 90,000 rules and iptables-nft-save
// 0.6-0.9 s to read it back (20,000 policies, kube-router's layout; see the policy engine's
// BenchmarkIPTNetlinkVsRestore), most of it the tools' userspace.

// IPTRule queues an iptables-restore rule of chain, its arguments after "-A CHAIN" (insert:
// "-I CHAIN", the rule first in its chain), as iptables-nft 1.8.9 writes it: the native
// expressions of -p, -s and -d (in that order, whatever the arguments' order), then each
// match in the order loaded (the mark match and the tcp and udp matches' ports native, the
// others xt matches with the structures iptables fills), a counter, then the verdict or the
// xt target; and the rule's compat attribute (its protocol), which xt matches are checked
// against. Options go to the match (or target) they belong to, as iptables' parser sends
// them: "-m tcp -p tcp -d A --dport N" is one tcp match; --dport after -p tcp without -m
// loads the tcp match. The forms known ("!" where shown):
//
//	[!] -s|-d A[/P]                  -p tcp|udp|sctp                   -m tcp|udp [--dport N[:M]]
//	-m sctp --dport N[:M]            -m mark [!] --mark V[/M]          -m conntrack --ctstate S[,S]
//	-m set --match-set NAME DIRS     -m comment --comment C            -m statistic --mode random --probability P
//	-m addrtype [--src-type T] [--dst-type T]  (T: LOCAL, UNICAST, ...; each may be inverted)
//	-j ACCEPT|DROP|RETURN|REJECT|CHAIN  -g CHAIN                       -j MASQUERADE [--random-fully]
//	-j MARK --set-xmark V/M | --or-mark V | --xor-mark V               -j DNAT --to-destination A[:P]
//
// A set is named by its kernel index (b.IPSets, IPSetIndices). A chain is any target that is
// not all upper case letters (iptables' own targets are; a user chain named so is not known).
// Anything else is an error wrapping ErrUntranslated, and nothing of the rule is queued.
func (b *Batch) IPTRule(chain string, args []string, insert bool) error {
	r := &nftables.Rule{Table: b.Table, Chain: &nftables.Chain{Table: b.Table, Name: chain}}
	var key string
	if b.Repeated && !insert {
		key = "ipt " + strings.Join(args, "\x00")
		if done, err := b.replay(r, key); done {
			return err
		}
	}
	p, err := parseIPT(args)
	if err != nil {
		return err
	}
	exprs := make([]expr.Any, 0, 8)
	var raw [][]byte // with b.Repeated, the parts' marshalled expressions (else ruleMsg's work)
	if b.Repeated {
		raw = make([][]byte, 0, 8)
	}
	add := func(key func() string, build func() ([]expr.Any, error)) error {
		x, err := b.part(key, build)
		exprs, raw = append(exprs, x.exprs...), append(raw, x.raw...)
		return err
	}
	if p.proto != 0 {
		if err := add(func() string { return "p\x00" + string(p.proto) }, func() ([]expr.Any, error) {
			return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p.proto}}}, nil
		}); err != nil {
			return err
		}
	}
	for _, a := range []struct {
		iptOpt
		key    string // of the part: "s" or "d", "!" if inverted
		offset uint32 // in the IPv4 header
	}{{p.src, "s", 12}, {p.dst, "d", 16}} {
		if a.val == "" || (strings.HasSuffix(a.val, "/0") && !a.inv) {
			continue // iptables leaves out a match of any address
		}
		op := expr.CmpOpEq
		if a.inv {
			op, a.key = expr.CmpOpNeq, a.key+"!"
		}
		if err := add(func() string { return a.key + a.val }, func() ([]expr.Any, error) {
			ex, err := addrMatch(a.offset, op, a.val)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrUntranslated, err)
			}
			return ex, nil
		}); err != nil {
			return err
		}
	}
	for _, m := range p.matches {
		if err := add(func() string { return "m\x00" + string(p.proto) + m.key() }, func() ([]expr.Any, error) { return b.iptMatch(m, p.proto) }); err != nil {
			return err
		}
	}
	if err := add(func() string { return "c" }, func() ([]expr.Any, error) { return []expr.Any{&expr.Counter{}}, nil }); err != nil {
		return err
	}
	if p.target.name != "" {
		kind := "j\x00"
		if p.goTo {
			kind = "g\x00"
		}
		if err := add(func() string { return kind + p.target.key() }, func() ([]expr.Any, error) {
			ex, err := iptTarget(p.target, p.goTo)
			return []expr.Any{ex}, err
		}); err != nil {
			return err
		}
	}
	r.Exprs = exprs
	m, body, err := ruleMsg(b.Table.Name, chain, r, nil, compat(p.proto), raw)
	if err != nil {
		return err
	}
	if insert {
		m.Header.Flags &^= unix.NLM_F_APPEND
	} else if b.Repeated {
		if b.seen == nil {
			b.seen = map[string]seenRule{}
		}
		b.seen[key] = seenRule{r.Exprs, nil, body}
	}
	b.Rules = append(b.Rules, r)
	b.raw(m)
	return nil
}

// iptOpt is one option's value(s), and whether a "!" came before it.
type iptOpt struct {
	name string
	val  string
	vals []string
	inv  bool
}

// iptExt is a match or target with the options given to it, in the order given (a few: a
// list is cheaper than a map here).
type iptExt struct {
	name string
	opts []iptOpt
}

// opt is the option called name, if given.
func (e *iptExt) opt(name string) (iptOpt, bool) {
	for _, o := range e.opts {
		if o.name == name {
			return o, true
		}
	}
	return iptOpt{}, false
}

// key is the extension with its options, as a map key: the same key, the same expressions.
func (e *iptExt) key() string {
	var k strings.Builder
	k.WriteString(e.name)
	opts := slices.SortedFunc(slices.Values(e.opts), func(a, b iptOpt) int { return strings.Compare(a.name, b.name) })
	for _, o := range opts {
		k.WriteString("\x00" + o.name)
		if o.inv {
			k.WriteString("\x00!")
		}
		for _, v := range o.vals {
			k.WriteString("\x00" + v)
		}
	}
	return k.String()
}

// xpart is one part of a rule (the protocol, an address, a match, the counter, the
// target): its expressions and, for the cache of b.Repeated, those marshalled.
type xpart struct {
	exprs []expr.Any
	raw   [][]byte
}

// part is the part of key, built, or with b.Repeated from the batch's cache (and kept
// there, marshalled): a part is marshalled once however many rules have it. Without,
// ruleMsg marshals the rule's expressions straight into its message.
func (b *Batch) part(key func() string, build func() ([]expr.Any, error)) (xpart, error) {
	var k string
	if b.Repeated {
		k = key()
		if x, ok := b.parts[k]; ok {
			return x, nil
		}
	}
	ex, err := build()
	if err != nil {
		return xpart{}, err
	}
	x := xpart{exprs: ex}
	if b.Repeated {
		x.raw = make([][]byte, len(ex))
		for i, e := range ex {
			if x.raw[i], err = expr.Marshal(byte(nftables.TableFamilyIPv4), e); err != nil {
				return xpart{}, err
			}
		}
		if b.parts == nil {
			b.parts = map[string]xpart{}
		}
		b.parts[k] = x
	}
	return x, nil
}

// iptParsed is a rule's arguments sorted out as iptables' parser sorts them.
type iptParsed struct {
	proto    byte
	src, dst iptOpt
	matches  []*iptExt
	target   iptExt
	goTo     bool
}

// iptOptions are the options each known match or target takes, with the number of values
// each.
var iptOptions = map[string]map[string]int{
	"tcp": {"--dport": 1}, "udp": {"--dport": 1}, "sctp": {"--dport": 1},
	"mark": {"--mark": 1}, "conntrack": {"--ctstate": 1}, "set": {"--match-set": 2},
	"comment": {"--comment": 1}, "statistic": {"--mode": 1, "--probability": 1},
	"addrtype": {"--src-type": 1, "--dst-type": 1},
	"MARK":     {"--set-xmark": 1, "--or-mark": 1, "--xor-mark": 1}, "DNAT": {"--to-destination": 1},
	"MASQUERADE": {"--random-fully": 0}, "REJECT": {},
}

// parseIPT sorts a rule's arguments out (see IPTRule).
func parseIPT(args []string) (iptParsed, error) {
	var p iptParsed
	inv := false
	untranslated := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUntranslated}, a...)...)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, error) {
			if i+1 >= len(args) {
				return "", untranslated("%s without a value", a)
			}
			i++
			return args[i], nil
		}
		if a == "!" {
			inv = true
			continue
		}
		switch {
		case a == "-s" || a == "-d" || a == "-p":
			v, err := val()
			if err != nil {
				return p, err
			}
			switch a {
			case "-s":
				p.src = iptOpt{val: v, inv: inv}
			case "-d":
				p.dst = iptOpt{val: v, inv: inv}
			default:
				pr, ok := protos[v]
				if !ok || inv {
					if inv {
						v = "! " + v
					}
					return p, untranslated("protocol %q", v)
				}
				p.proto = pr
			}
		case a == "-m":
			v, err := val()
			if err != nil {
				return p, err
			}
			if _, ok := iptOptions[v]; !ok || inv || strings.ToUpper(v) == v {
				return p, untranslated("match %q", v)
			}
			p.matches = append(p.matches, &iptExt{name: v})
		case a == "-j" || a == "-g":
			v, err := val()
			if err != nil {
				return p, err
			}
			if p.target.name != "" || inv {
				return p, untranslated("a second target %q", v)
			}
			p.target, p.goTo = iptExt{name: v}, a == "-g"
		case strings.HasPrefix(a, "--"):
			// The option's owner: the target, else the last match loaded that takes it,
			// else the protocol's match, loaded for it (iptables does so for --dport).
			var owner *iptExt
			if _, ok := iptOptions[p.target.name][a]; ok {
				owner = &p.target
			}
			for k := len(p.matches) - 1; owner == nil && k >= 0; k-- {
				if _, ok := iptOptions[p.matches[k].name][a]; ok {
					owner = p.matches[k]
				}
			}
			if pn := protoName(p.proto); owner == nil && pn != "" && iptOptions[pn][a] > 0 {
				owner = &iptExt{name: pn}
				p.matches = append(p.matches, owner)
			}
			if owner == nil {
				return p, untranslated("option %q", a)
			}
			if _, dup := owner.opt(a); dup {
				return p, untranslated("option %q twice", a)
			}
			n := iptOptions[owner.name][a]
			if i+n >= len(args) {
				return p, untranslated("%s wants %d values", a, n)
			}
			o := iptOpt{name: a, vals: args[i+1 : i+1+n], inv: inv}
			if n > 0 {
				o.val = o.vals[0]
			}
			owner.opts, i = append(owner.opts, o), i+n
		default:
			return p, untranslated("%q", a)
		}
		inv = false
	}
	if inv {
		return p, untranslated("a trailing !")
	}
	return p, nil
}

// protoName is the name of an -p protocol number ("" none).
func protoName(p byte) string {
	for n, v := range protos {
		if v == p {
			return n
		}
	}
	return ""
}

// iptMatch is the expressions of one match (see IPTRule), proto the rule's -p.
func (b *Batch) iptMatch(m *iptExt, proto byte) ([]expr.Any, error) {
	untranslated := func(format string, a ...any) error {
		return fmt.Errorf("%w: -m %s: "+format, append([]any{ErrUntranslated, m.name}, a...)...)
	}
	for _, o := range m.opts {
		if o.inv && !(m.name == "mark" || m.name == "addrtype") {
			return nil, untranslated("! %s", o.name)
		}
	}
	opt := m.opt
	switch m.name {
	case "tcp", "udp", "sctp":
		if proto != protos[m.name] {
			return nil, untranslated("without -p %s", m.name)
		}
		d, ok := opt("--dport")
		if !ok {
			if m.name == "sctp" {
				return nil, untranslated("without --dport")
			}
			// No port: the xt match, every port (struct xt_tcp: source and destination
			// port ranges, then option, flags, inversions; struct xt_udp alike), padded.
			info := make([]byte, 16)
			binary.NativeEndian.PutUint16(info[2:], 0xffff)
			binary.NativeEndian.PutUint16(info[6:], 0xffff)
			return []expr.Any{&expr.Match{Name: m.name, Rev: 0, Info: ptrUnknown(info)}}, nil
		}
		lo, hi, err := portRange(d.val)
		if err != nil {
			return nil, err
		}
		if m.name == "sctp" {
			// struct xt_sctp_info: destination and source port ranges (the source's left
			// zero, as iptables 1.8.9 leaves it), the chunk map (256 / sizeof(__u32) words:
			// 256 bytes), its match type, four flag infos (chunk type -1: none) and their
			// count, flags (XT_SCTP_DEST_PORTS: 2), inverted flags; 292 bytes padded to 8.
			info := make([]byte, 296)
			binary.NativeEndian.PutUint16(info[0:], lo)
			binary.NativeEndian.PutUint16(info[2:], hi)
			for k := range 4 {
				info[268+3*k] = 0xff
			}
			binary.NativeEndian.PutUint32(info[284:], 2)
			return []expr.Any{&expr.Match{Name: "sctp", Rev: 0, Info: ptrUnknown(info)}}, nil
		}
		ex := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}}
		if lo == hi {
			return append(ex, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(lo)}), nil
		}
		return append(ex, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: binaryutil.BigEndian.PutUint16(lo), ToData: binaryutil.BigEndian.PutUint16(hi)}), nil
	case "mark":
		o, ok := opt("--mark")
		if !ok {
			return nil, untranslated("without --mark")
		}
		v, mask, err := markMask(o.val)
		if err != nil {
			return nil, err
		}
		ex := []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}}
		if mask != 0xffffffff {
			ex = append(ex, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)})
		}
		op := expr.CmpOpEq
		if o.inv {
			op = expr.CmpOpNeq
		}
		return append(ex, &expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(v)}), nil
	case "conntrack":
		o, ok := opt("--ctstate")
		if !ok {
			return nil, untranslated("without --ctstate")
		}
		var mask uint16
		for _, s := range strings.Split(o.val, ",") {
			bit, ok := ctStates[strings.ToLower(s)]
			if !ok {
				return nil, untranslated("state %q", s)
			}
			mask |= uint16(bit)
		}
		// struct xt_conntrack_mtinfo3: eight addresses and masks (128 bytes), expiry
		// bounds, the protocol and four ports, then match_flags (XT_CONNTRACK_STATE: 1),
		// invert_flags, state_mask, ...; padded to 8 bytes.
		info := make([]byte, 168)
		binary.NativeEndian.PutUint16(info[146:], 1)
		binary.NativeEndian.PutUint16(info[150:], mask)
		return []expr.Any{&expr.Match{Name: "conntrack", Rev: 3, Info: ptrUnknown(info)}}, nil
	case "set":
		o, ok := opt("--match-set")
		if !ok {
			return nil, untranslated("without --match-set")
		}
		idx, ok := b.IPSets[o.vals[0]]
		if !ok {
			return nil, fmt.Errorf("ipset %q: its index is not known (IPSetIndices)", o.vals[0])
		}
		dirs := strings.Split(o.vals[1], ",")
		if len(dirs) > 6 {
			return nil, untranslated("directions %q", o.vals[1])
		}
		// struct xt_set_info_match_v4: the set (index, dimensions, a bit per source
		// dimension: 1 << dimension), the packet and byte counter matches, flags.
		info := make([]byte, 48)
		binary.NativeEndian.PutUint16(info, idx)
		info[2] = byte(len(dirs))
		for d, dir := range dirs {
			switch dir {
			case "src":
				info[3] |= 1 << (d + 1)
			case "dst":
			default:
				return nil, untranslated("direction %q", dir)
			}
		}
		return []expr.Any{&expr.Match{Name: "set", Rev: 4, Info: ptrUnknown(info)}}, nil
	case "comment":
		o, ok := opt("--comment")
		if !ok || len(o.val) > 255 {
			return nil, untranslated("a comment of 1-255 bytes")
		}
		info := make([]byte, 256) // struct xt_comment_info: the comment, NUL padded
		copy(info, o.val)
		return []expr.Any{&expr.Match{Name: "comment", Rev: 0, Info: ptrUnknown(info)}}, nil
	case "statistic":
		mode, ok1 := opt("--mode")
		prob, ok2 := opt("--probability")
		pr, err := strconv.ParseFloat(prob.val, 64)
		if !ok1 || !ok2 || mode.val != "random" || err != nil || pr < 0 || pr > 1 || len(m.opts) != 2 {
			return nil, untranslated("only --mode random --probability P")
		}
		// struct xt_statistic_info: mode (random: 0), flags, the union of the probability
		// (lround(0x80000000 * P), as libxt_statistic computes it) and nth's every, packet
		// and count (which libxt_statistic's check sets to every - packet: the
		// probability), then the kernel's pointer, aligned to 8.
		info := make([]byte, 24)
		prob32 := uint32(math.Round(0x80000000 * pr))
		binary.NativeEndian.PutUint32(info[4:], prob32)
		binary.NativeEndian.PutUint32(info[12:], prob32)
		return []expr.Any{&expr.Match{Name: "statistic", Rev: 0, Info: ptrUnknown(info)}}, nil
	case "addrtype":
		// struct xt_addrtype_info_v1: source and destination type bits, flags
		// (XT_ADDRTYPE_INVERT_SOURCE 1, _DEST 2).
		info := make([]byte, 8)
		for k, name := range []string{"--src-type", "--dst-type"} {
			o, ok := opt(name)
			if !ok {
				continue
			}
			var bits uint16
			for _, t := range strings.Split(o.val, ",") {
				bit, ok := addrTypes[t]
				if !ok {
					return nil, untranslated("address type %q", t)
				}
				bits |= bit
			}
			binary.NativeEndian.PutUint16(info[2*k:], bits)
			if o.inv {
				info[4] |= 1 << k
			}
		}
		return []expr.Any{&expr.Match{Name: "addrtype", Rev: 1, Info: ptrUnknown(info)}}, nil
	}
	return nil, untranslated("unknown")
}

// addrTypes are the address type bits of the addrtype match (XT_ADDRTYPE_*: 1 << RTN_*).
var addrTypes = map[string]uint16{"UNSPEC": 1, "UNICAST": 2, "LOCAL": 4, "BROADCAST": 8, "ANYCAST": 16,
	"MULTICAST": 32, "BLACKHOLE": 64, "UNREACHABLE": 128, "PROHIBIT": 256, "THROW": 512, "NAT": 1024, "XRESOLVE": 2048}

// iptTarget is the expression of a rule's -j or -g (see IPTRule).
func iptTarget(t iptExt, goTo bool) (expr.Any, error) {
	untranslated := func(format string, a ...any) error {
		return fmt.Errorf("%w: target %s: "+format, append([]any{ErrUntranslated, t.name}, a...)...)
	}
	for _, o := range t.opts {
		if o.inv {
			return nil, untranslated("! %s", o.name)
		}
	}
	if goTo && strings.ToUpper(t.name) == t.name && !strings.ContainsAny(t.name, "-_0123456789") {
		return nil, untranslated("-g to a built-in target")
	}
	switch t.name {
	case "ACCEPT", "DROP", "RETURN":
		return verdict([]string{strings.ToLower(t.name)})
	case "MARK":
		// struct xt_mark_tginfo2: mark, mask (--or-mark V: V/V, --xor-mark V: V/0).
		var v, mask uint32
		var err error
		o, _ := t.opt("--set-xmark")
		x, _ := t.opt("--xor-mark")
		or, _ := t.opt("--or-mark")
		switch {
		case len(t.opts) != 1:
			return nil, untranslated("one of --set-xmark, --or-mark, --xor-mark")
		case o.val != "":
			v, mask, err = markMask(o.val)
		case or.val != "":
			v, _, err = markMask(or.val)
			mask = v
		default:
			v, _, err = markMask(x.val)
		}
		if err != nil {
			return nil, err
		}
		info := binaryutil.NativeEndian.PutUint32(v)
		return &expr.Target{Name: "MARK", Rev: 2, Info: ptrUnknown(append(info, binaryutil.NativeEndian.PutUint32(mask)...))}, nil
	case "DNAT":
		o, ok := t.opt("--to-destination")
		if !ok {
			return nil, untranslated("without --to-destination")
		}
		addr, port, hasPort := strings.Cut(o.val, ":")
		ip := net.ParseIP(addr).To4()
		if ip == nil || strings.ContainsAny(port, "-:") {
			return nil, untranslated("destination %q", o.val)
		}
		// struct nf_nat_range2: flags (NF_NAT_RANGE_MAP_IPS 1, _PROTO_SPECIFIED 2), the
		// address range (16 bytes each), the port range, the base port; padded to 8.
		info := make([]byte, 48)
		flags := uint32(1)
		copy(info[4:], ip)
		copy(info[20:], ip)
		if hasPort {
			pt, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				return nil, untranslated("port %q", port)
			}
			flags |= 2
			binary.BigEndian.PutUint16(info[36:], uint16(pt))
			binary.BigEndian.PutUint16(info[38:], uint16(pt))
		}
		binary.NativeEndian.PutUint32(info, flags)
		return &expr.Target{Name: "DNAT", Rev: 2, Info: ptrUnknown(info)}, nil
	case "MASQUERADE":
		// struct nf_nat_ipv4_multi_range_compat: one range (flags: random-fully 16).
		info := make([]byte, 24)
		binary.NativeEndian.PutUint32(info, 1)
		if _, ok := t.opt("--random-fully"); ok {
			binary.NativeEndian.PutUint32(info[4:], 16)
		}
		return &expr.Target{Name: "MASQUERADE", Rev: 0, Info: ptrUnknown(info)}, nil
	case "REJECT":
		// struct ipt_reject_info: with icmp-port-unreachable (3), padded to 8.
		info := make([]byte, 8)
		binary.NativeEndian.PutUint32(info, 3)
		return &expr.Target{Name: "REJECT", Rev: 0, Info: ptrUnknown(info)}, nil
	}
	if len(t.opts) > 0 || (strings.ToUpper(t.name) == t.name && !strings.ContainsAny(t.name, "-_0123456789")) {
		return nil, untranslated("unknown")
	}
	kind := expr.VerdictJump
	if goTo {
		kind = expr.VerdictGoto
	}
	return &expr.Verdict{Kind: kind, Chain: t.name}, nil
}

// ErrUntranslated is what IPTRule wraps for a form it does not know: the engine then leaves
// the input to iptables-nft-restore.
var ErrUntranslated = errors.New("not translated")

func ptrUnknown(b []byte) *xt.Unknown { u := xt.Unknown(b); return &u }

// compat is a rule's NFTA_RULE_COMPAT (its protocol, no inversion), as iptables-nft gives
// every rule.
func compat(proto byte) []byte {
	c := appendAttr(nil, unix.NFTA_RULE_COMPAT_PROTO, binaryutil.BigEndian.PutUint32(uint32(proto)))
	c = appendAttr(c, unix.NFTA_RULE_COMPAT_FLAGS, make([]byte, 4))
	return appendAttr(nil, unix.NLA_F_NESTED|unix.NFTA_RULE_COMPAT, c)
}

// portRange parses N or N:M.
func portRange(s string) (lo, hi uint16, err error) {
	a, z, isRange := strings.Cut(s, ":")
	l, err1 := strconv.ParseUint(a, 10, 16)
	h := l
	var err2 error
	if isRange {
		h, err2 = strconv.ParseUint(z, 10, 16)
	}
	if err1 != nil || err2 != nil || h < l {
		return 0, 0, fmt.Errorf("%w: port %q", ErrUntranslated, s)
	}
	return uint16(l), uint16(h), nil
}

// markMask parses V[/M] (hexadecimal with 0x, or decimal); M defaults to all ones.
func markMask(s string) (v, m uint32, err error) {
	a, z, masked := strings.Cut(s, "/")
	x, err1 := strconv.ParseUint(a, 0, 32)
	y := uint64(0xffffffff)
	var err2 error
	if masked {
		y, err2 = strconv.ParseUint(z, 0, 32)
	}
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%w: mark %q", ErrUntranslated, s)
	}
	return uint32(x), uint32(y), nil
}

// iptBuiltin are iptables-nft's base chains by table and hook: their type and priority.
var iptBuiltin = map[string]map[string]struct {
	typ  string
	prio int32
}{
	"filter": {"input": {"filter", 0}, "forward": {"filter", 0}, "output": {"filter", 0}},
	"nat":    {"prerouting": {"nat", -100}, "input": {"nat", 100}, "output": {"nat", -100}, "postrouting": {"nat", 100}},
}

// IPTBuiltin says whether chain is a base chain of iptables-nft's table, and its hook.
func IPTBuiltin(table, chain string) (hook string, ok bool) {
	hook = strings.ToLower(chain)
	_, ok = iptBuiltin[table][hook]
	return hook, ok && chain == strings.ToUpper(chain)
}

// AddIPTTable queues iptables-nft's table (flags 0, no user data) if it is missing, and its
// base chains of base's hooks: a missing one (base[hook] false) created as iptables-nft
// creates it (its type and priority, policy accept), an existing one left with its hook and
// policy. With counters each gets packet counters from zero, as a restore of a whole table
// leaves them: iptables-nft-save lists the three base chains of table filter whether they
// exist or not, so restoring what it saved makes them all, with counters (which cost every
// packet through the hook a per-CPU count). Without, an existing chain is left alone.
func (b *Batch) AddIPTTable(missing bool, base map[string]bool, counters bool) error {
	builtin, ok := iptBuiltin[b.Table.Name]
	if !ok {
		return fmt.Errorf("%w: table %q", ErrUntranslated, b.Table.Name)
	}
	if missing {
		if err := b.create(unix.NFT_MSG_NEWTABLE, []netlink.Attribute{
			{Type: unix.NFTA_TABLE_NAME, Data: []byte(b.Table.Name + "\x00")},
			{Type: unix.NFTA_TABLE_FLAGS, Data: make([]byte, 4)},
		}); err != nil {
			return err
		}
	}
	zero, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_COUNTER_BYTES, Data: make([]byte, 8)},
		{Type: unix.NFTA_COUNTER_PACKETS, Data: make([]byte, 8)},
	})
	if err != nil {
		return err
	}
	for _, h := range []string{"prerouting", "input", "forward", "output", "postrouting"} {
		exists, want := base[h]
		spec, known := builtin[h]
		switch {
		case !want || (exists && !counters):
			continue
		case !known:
			return fmt.Errorf("%w: table %s has no hook %s", ErrUntranslated, b.Table.Name, h)
		}
		attrs := []netlink.Attribute{
			{Type: unix.NFTA_CHAIN_TABLE, Data: []byte(b.Table.Name + "\x00")},
			{Type: unix.NFTA_CHAIN_NAME, Data: []byte(strings.ToUpper(h) + "\x00")},
		}
		if !exists {
			hook, err := netlink.MarshalAttributes([]netlink.Attribute{
				{Type: unix.NFTA_HOOK_HOOKNUM, Data: binaryutil.BigEndian.PutUint32(hooks[h])},
				{Type: unix.NFTA_HOOK_PRIORITY, Data: binaryutil.BigEndian.PutUint32(uint32(spec.prio))},
			})
			if err != nil {
				return err
			}
			attrs = append(attrs,
				netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_CHAIN_HOOK, Data: hook},
				netlink.Attribute{Type: unix.NFTA_CHAIN_POLICY, Data: binaryutil.BigEndian.PutUint32(1)}, // NF_ACCEPT
				netlink.Attribute{Type: unix.NFTA_CHAIN_TYPE, Data: []byte(spec.typ + "\x00")})
		}
		if counters {
			attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_CHAIN_COUNTERS, Data: zero})
		}
		if err := b.create(unix.NFT_MSG_NEWCHAIN, attrs); err != nil {
			return err
		}
	}
	return nil
}

// DelRule queues the deletion of the rule with handle h of chain.
func (b *Batch) DelRule(chain string, h uint64) error {
	data, err := msgData([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(b.Table.Name + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(chain + "\x00")},
		{Type: unix.NFTA_RULE_HANDLE, Data: binaryutil.BigEndian.PutUint64(h)},
	})
	if err != nil {
		return err
	}
	b.raw(netlink.Message{Header: netlink.Header{Type: Msg(unix.NFT_MSG_DELRULE), Flags: netlink.Request}, Data: data})
	return nil
}

// IPTTable is what the kernel holds of an iptables-nft table (DumpIPT): enough for an
// engine to find its earlier rendering.
type IPTTable struct {
	Exists bool
	Chains []string              // in the kernel's order
	Base   map[string]bool       // the base chains
	Rules  map[string][]IPTState // by chain, in order
}

// IPTState is one rule as DumpIPT reads it.
type IPTState struct {
	Handle uint64
	Jump   string   // the chain it jumps or goes to ("" none)
	Sets   []uint16 // the ipsets its set matches name (their indices)
	Exprs  int      // its expressions
}

// DumpIPT reads table ip TABLE of the network namespace at nsPath: its chains, and the
// rules of the chains in roots and, where follow(chain) holds for a chain read (follow may
// be nil), of the chains its rules jump or go to, each read once: per rule its handle, the
// chain it jumps to and the ipsets it matches. Chains are read one by one (a dump filtered
// by chain, as iptables-nft-save reads them): the kernel resumes a dump of a whole table
// from its first rule for every buffer it fills, which made a table of 90,000 rules take 7 s
// to read, and one chain at a time takes a fraction of a second for all of them.
func DumpIPT(nsPath, table string, roots []string, follow func(chain string) bool) (IPTTable, error) {
	t := IPTTable{Base: map[string]bool{}, Rules: map[string][]IPTState{}}
	f, err := os.Open(nsPath)
	if err != nil {
		return t, err
	}
	defer f.Close()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return t, fmt.Errorf("nftables netlink in %s: %w", nsPath, err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return t, err
	}
	buf := make([]byte, 1<<16)
	seq := uint32(time.Now().UnixNano())
	// dump sends one dump request and calls fn with each reply's attributes.
	dump := func(msg int, attrs []byte, fn func(attrs []byte)) error {
		seq++
		req := binary.NativeEndian.AppendUint32(nil, uint32(16+4+len(attrs)))
		req = binary.NativeEndian.AppendUint16(req, uint16(Msg(msg)))
		req = binary.NativeEndian.AppendUint16(req, uint16(netlink.Request|netlink.Dump))
		req = binary.NativeEndian.AppendUint32(req, seq)
		req = binary.NativeEndian.AppendUint32(req, 0)
		req = append(req, unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0)
		req = append(req, attrs...)
		var serr error
		if err := rc.Write(func(fd uintptr) bool {
			serr = unix.Sendto(int(fd), req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
			return !errors.Is(serr, unix.EAGAIN)
		}); err != nil || serr != nil {
			return fmt.Errorf("nftables netlink dump in %s: %v %v", nsPath, err, serr)
		}
		for {
			var n int
			if err := rc.Read(func(fd uintptr) bool {
				n, _, serr = unix.Recvfrom(int(fd), buf, 0)
				return !errors.Is(serr, unix.EAGAIN)
			}); err != nil || serr != nil {
				return fmt.Errorf("nftables netlink dump in %s: %v %v", nsPath, err, serr)
			}
			for b := buf[:n]; len(b) >= 16; {
				l := int(binary.NativeEndian.Uint32(b))
				if l < 16 || l > len(b) {
					break
				}
				typ, s := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
				switch {
				case s != seq:
				case typ == unix.NLMSG_DONE:
					return nil
				case typ == unix.NLMSG_ERROR:
					if l >= 20 {
						if errno := -int32(binary.NativeEndian.Uint32(b[16:])); errno != 0 && errno != int32(unix.ENOENT) {
							return fmt.Errorf("nftables netlink dump in %s: %w", nsPath, syscall.Errno(errno))
						}
					}
					return nil
				case l >= 20:
					fn(b[20:l])
				}
				b = b[min(align(l), len(b)):]
			}
		}
	}
	if err := dump(unix.NFT_MSG_GETCHAIN, nil, func(attrs []byte) {
		var tbl, name string
		var base bool
		walkAttrs(attrs, func(typ uint16, d []byte) {
			switch typ {
			case unix.NFTA_CHAIN_TABLE:
				tbl = cstr(d)
			case unix.NFTA_CHAIN_NAME:
				name = cstr(d)
			case unix.NFTA_CHAIN_HOOK:
				base = true
			}
		})
		if tbl == table {
			t.Exists = true
			t.Chains = append(t.Chains, name)
			t.Base[name] = base
		}
	}); err != nil || !t.Exists {
		return t, err
	}
	read := map[string]bool{}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		ch := queue[0]
		queue = queue[1:]
		if _, exists := t.Base[ch]; !exists || read[ch] {
			continue
		}
		read[ch] = true
		attrs := appendAttr(nil, unix.NFTA_RULE_TABLE, []byte(table+"\x00"))
		attrs = appendAttr(attrs, unix.NFTA_RULE_CHAIN, []byte(ch+"\x00"))
		rules := []IPTState{}
		if err := dump(unix.NFT_MSG_GETRULE, attrs, func(attrs []byte) {
			var st IPTState
			walkAttrs(attrs, func(typ uint16, d []byte) {
				switch typ {
				case unix.NFTA_RULE_HANDLE:
					if len(d) == 8 {
						st.Handle = binary.BigEndian.Uint64(d)
					}
				case unix.NFTA_RULE_EXPRESSIONS:
					walkAttrs(d, func(_ uint16, e []byte) { st.Exprs++; readExpr(e, &st) })
				}
			})
			rules = append(rules, st)
			if st.Jump != "" && follow != nil && follow(ch) {
				queue = append(queue, st.Jump)
			}
		}); err != nil {
			return t, err
		}
		t.Rules[ch] = rules
	}
	return t, nil
}

// readExpr notes what st needs of one expression: an immediate's jump or goto, a set match's
// set.
func readExpr(e []byte, st *IPTState) {
	name, data := attrPair(e, unix.NFTA_EXPR_NAME, unix.NFTA_EXPR_DATA)
	switch cstr(name) {
	case "immediate":
		walkAttrs(data, func(typ uint16, d []byte) {
			if typ != unix.NFTA_IMMEDIATE_DATA {
				return
			}
			walkAttrs(d, func(typ uint16, d []byte) {
				if typ != unix.NFTA_DATA_VERDICT {
					return
				}
				var code int32
				var chain string
				walkAttrs(d, func(typ uint16, d []byte) {
					switch {
					case typ == unix.NFTA_VERDICT_CODE && len(d) == 4:
						code = int32(binary.BigEndian.Uint32(d))
					case typ == unix.NFTA_VERDICT_CHAIN:
						chain = cstr(d)
					}
				})
				if code == unix.NFT_JUMP || code == unix.NFT_GOTO {
					st.Jump = chain
				}
			})
		})
	case "match":
		mname, info := attrPair(data, unix.NFTA_MATCH_NAME, unix.NFTA_MATCH_INFO)
		if cstr(mname) == "set" && len(info) >= 2 {
			st.Sets = append(st.Sets, binary.NativeEndian.Uint16(info))
		}
	}
}

// attrPair is the data of attributes t1 and t2 in b (nil if absent).
func attrPair(b []byte, t1, t2 uint16) (d1, d2 []byte) {
	walkAttrs(b, func(typ uint16, d []byte) {
		switch typ {
		case t1:
			d1 = d
		case t2:
			d2 = d
		}
	})
	return d1, d2
}

// walkAttrs calls fn for each netlink attribute in b (type without the nested and byte order
// flags).
func walkAttrs(b []byte, fn func(typ uint16, data []byte)) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[4:l])
		b = b[min(align(l), len(b)):]
	}
}

func cstr(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// The ipset getsockopt interface (linux/netfilter/ipset/ip_set.h), which iptables' set
// match uses to name sets by index.
const (
	soIPSet           = 83 // SO_IP_SET
	ipsetProtocol     = 7
	ipsetOpGetByName  = 0x06
	ipsetOpGetByIndex = 0x07
	ipsetInvalidID    = 0xffff
	ipsetMaxNameLen   = 32
)

// ipsetReq is struct ip_set_req_get_set: op, version, and a name or an index.
type ipsetReq struct {
	op, version uint32
	set         [ipsetMaxNameLen]byte
}

// IPSetIndices looks up, in the network namespace at nsPath, the kernel index of each set
// in names and the name of each index in indices (as iptables' set match does, through
// getsockopt SO_IP_SET). A name that no set has is an error.
func IPSetIndices(nsPath string, names []string, indices []uint16) (byName map[string]uint16, byIndex map[uint16]string, err error) {
	byName, byIndex = map[string]uint16{}, map[uint16]string{}
	if len(names) == 0 && len(indices) == 0 {
		return byName, byIndex, nil
	}
	err = netns.DoPath(nsPath, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return fmt.Errorf("ipset socket: %w", err)
		}
		defer unix.Close(fd)
		get := func(r *ipsetReq) error {
			n := uint32(unsafe.Sizeof(*r))
			if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, soIPSet, uintptr(unsafe.Pointer(r)), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
				return syscall.Errno(e)
			}
			return nil
		}
		for _, name := range names {
			r := ipsetReq{op: ipsetOpGetByName, version: ipsetProtocol}
			if len(name) >= ipsetMaxNameLen {
				return fmt.Errorf("ipset name %q: over %d characters", name, ipsetMaxNameLen-1)
			}
			copy(r.set[:], name)
			if err := get(&r); err != nil {
				return fmt.Errorf("ipset %q: index: %w", name, err)
			}
			idx := binary.NativeEndian.Uint16(r.set[:])
			if idx == ipsetInvalidID {
				return fmt.Errorf("ipset %q: no such set", name)
			}
			byName[name] = idx
		}
		for _, idx := range indices {
			r := ipsetReq{op: ipsetOpGetByIndex, version: ipsetProtocol}
			binary.NativeEndian.PutUint16(r.set[:], idx)
			if err := get(&r); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("ipset index %d: name: %w", idx, err)
			}
			if n := cstr(r.set[:]); n != "" {
				byIndex[idx] = n
			}
		}
		return nil
	})
	return byName, byIndex, err
}

// RestoreTable is one "*table ... COMMIT" section of iptables-restore input, as
// ParseRestore reads it.
type RestoreTable struct {
	Name    string
	Decls   []string      // user chains declared (":NAME - [0:0]"), in order
	Rules   []RestoreRule // "-A CHAIN ARGS", in order
	Deletes []string      // "-X CHAIN", in order
}

// RestoreRule is one "-A CHAIN ARGS" line.
type RestoreRule struct {
	Line  int // in the input, 1 the first
	Chain string
	Args  []string
}

// ParseRestore reads iptables-restore input made of the lines the engines write: table
// sections, user chain declarations, appended rules and chain deletions; arguments split as
// iptables-restore splits them (double quotes group, a backslash in them escapes the next
// character). Any other line (a built-in chain's policy, -I, -D, -F, -Z, comments) is
// ErrUntranslated.
func ParseRestore(input []byte) ([]RestoreTable, error) {
	var out []RestoreTable
	var cur *RestoreTable
	for i, l := range strings.Split(string(input), "\n") {
		n := i + 1
		bad := func() error { return fmt.Errorf("%w: line %d: %q", ErrUntranslated, n, FirstN(l, 80)) }
		switch {
		case l == "":
		case strings.HasPrefix(l, "*"):
			if cur != nil {
				return nil, bad()
			}
			out = append(out, RestoreTable{Name: l[1:]})
			cur = &out[len(out)-1]
		case cur == nil:
			return nil, bad()
		case l == "COMMIT":
			cur = nil
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l[1:])
			if len(f) != 3 || f[1] != "-" {
				return nil, bad()
			}
			cur.Decls = append(cur.Decls, f[0])
		case strings.HasPrefix(l, "-A "), strings.HasPrefix(l, "-X "):
			f, err := restoreFields(l)
			if err != nil || len(f) < 2 {
				return nil, bad()
			}
			if f[0] == "-X" {
				if len(f) != 2 {
					return nil, bad()
				}
				cur.Deletes = append(cur.Deletes, f[1])
			} else {
				cur.Rules = append(cur.Rules, RestoreRule{Line: n, Chain: f[1], Args: f[2:]})
			}
		default:
			return nil, bad()
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("table %s: no COMMIT", cur.Name)
	}
	return out, nil
}

// restoreFields splits a line as iptables-restore does: at blanks, double quotes grouping,
// a backslash in quotes escaping the next character.
func restoreFields(l string) ([]string, error) {
	if !strings.ContainsRune(l, '"') {
		return strings.Fields(l), nil
	}
	var out []string
	for i := 0; i < len(l); {
		for i < len(l) && (l[i] == ' ' || l[i] == '\t') {
			i++
		}
		if i == len(l) {
			break
		}
		// One field: unquoted runs and quoted parts up to the next blank outside quotes.
		var f []byte
		plain := true
		start := i
		for i < len(l) && l[i] != ' ' && l[i] != '\t' {
			if l[i] != '"' {
				i++
				continue
			}
			if plain {
				f, plain = append(f, l[start:i]...), false
			} else {
				f = append(f, l[start:i]...)
			}
			i++ // the opening quote
			for i < len(l) && l[i] != '"' {
				if l[i] == '\\' && i+1 < len(l) {
					i++
				}
				f = append(f, l[i])
				i++
			}
			if i == len(l) {
				return nil, errors.New("unterminated quote")
			}
			i++ // the closing quote
			start = i
		}
		if plain {
			out = append(out, l[start:i])
		} else {
			out = append(out, string(append(f, l[start:i]...)))
		}
	}
	return out, nil
}
