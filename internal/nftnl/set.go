package nftnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Set is a named set or map of the table, as a batch writes its declaration and elements.
type Set struct {
	S        *nftables.Set
	Fields   []string // key types, in order: ipv4_addr, inet_proto, inet_service
	Interval bool     // flags interval: elements are addresses or ranges A-B
	Comment  string
}

// keyTypes are the key types known, as nftables.SetDatatype.
var keyTypes = map[string]nftables.SetDatatype{"ipv4_addr": nftables.TypeIPAddr, "inet_proto": nftables.TypeInetProto, "inet_service": nftables.TypeInetService}

// ParseSet reads the declaration of set (map: a map) NAME: decl is the tokens between its
// braces up to its elements, "type K [. K ...] [: verdict] ; [flags interval ;] [comment "C" ;]"
// (a statement's ";" may be left out at the end of a line: pass the lines joined with ";").
func ParseSet(t *nftables.Table, name string, isMap bool, decl []string) (Set, error) {
	s := Set{S: &nftables.Set{Table: t, Name: name, IsMap: isMap}}
	for _, st := range SplitOn(decl, ";") {
		switch {
		case len(st) == 0:
		case st[0] == "type" && len(st) >= 2:
			typ := st[1:]
			if isMap {
				if len(typ) < 3 || typ[len(typ)-2] != ":" || typ[len(typ)-1] != "verdict" {
					return Set{}, fmt.Errorf("map %s: type %q is not K : verdict", name, strings.Join(typ, " "))
				}
				typ = typ[:len(typ)-2]
			}
			for _, f := range SplitOn(typ, ".") {
				if len(f) != 1 || keyTypes[f[0]].Bytes == 0 {
					return Set{}, fmt.Errorf("set %s: key type %q", name, strings.Join(f, " "))
				}
				s.Fields = append(s.Fields, f[0])
			}
		case len(st) == 2 && st[0] == "flags" && st[1] == "interval":
			s.Interval = true
		case len(st) == 2 && st[0] == "comment":
			c, err := strconv.Unquote(st[1])
			if err != nil {
				return Set{}, fmt.Errorf("set %s: comment %s: %w", name, st[1], err)
			}
			s.Comment = c
		default:
			return Set{}, fmt.Errorf("set %s: statement %q", name, strings.Join(st, " "))
		}
	}
	if len(s.Fields) == 0 {
		return Set{}, fmt.Errorf("set %s without a type", name)
	}
	if s.Interval && len(s.Fields) > 1 {
		return Set{}, fmt.Errorf("set %s: an interval concatenation is not translated", name)
	}
	s.S.Interval = s.Interval
	return s, nil
}

// AddSet queues the declaration of s, without elements, as nft 1.0.6 writes it: the key's
// type and length (a concatenation's fields padded to 4 bytes each), flags (interval, map),
// for a map the data's type (verdict), and the user data of libnftnl (NFTNL_UDATA_SET_*): the
// key's byte order (big endian for an address, none for a concatenation), for a map the
// data's byte order, for a concatenation a record nft 1.0.6 writes for every one (KEY_TYPEOF,
// the same bytes whatever the fields), for a map that its data is no interval; then the
// comment. github.com/google/nftables writes other flags and data for these (a concatenation
// flag and field lengths); the engines' tests compare every attribute with nft's.
func (b *Batch) AddSet(s Set) error {
	var types []nftables.SetDatatype
	for _, f := range s.Fields {
		types = append(types, keyTypes[f])
	}
	key := types[0]
	if len(types) > 1 {
		var err error
		if key, err = nftables.ConcatSetType(types...); err != nil {
			return err
		}
	}
	var ud []byte
	flags := uint32(0)
	if len(types) == 1 {
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 2)
	} else {
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, 0)
	}
	b.sets++
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: []byte(b.Table.Name + "\x00")},
		{Type: unix.NFTA_SET_NAME, Data: []byte(s.S.Name + "\x00")},
		{Type: unix.NFTA_SET_KEY_TYPE, Data: binaryutil.BigEndian.PutUint32(key.GetNFTMagic())},
		{Type: unix.NFTA_SET_KEY_LEN, Data: binaryutil.BigEndian.PutUint32(key.Bytes)},
		{Type: unix.NFTA_SET_ID, Data: binaryutil.BigEndian.PutUint32(b.sets)},
	}
	if s.Interval {
		flags |= unix.NFT_SET_INTERVAL
	}
	if s.S.IsMap {
		flags |= unix.NFT_SET_MAP
		attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_SET_DATA_TYPE, Data: binaryutil.BigEndian.PutUint32(unix.NFT_DATA_VERDICT)},
			netlink.Attribute{Type: unix.NFTA_SET_DATA_LEN, Data: binaryutil.BigEndian.PutUint32(16)})
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATABYTEORDER, 0)
	}
	if len(types) > 1 {
		ud = userdata.Append(ud, userdata.NFTNL_UDATA_SET_KEY_TYPEOF, []byte{0, 4, 13, 0, 0, 0, 1, 0})
	}
	if s.S.IsMap {
		ud = userdata.AppendUint32(ud, userdata.NFTNL_UDATA_SET_DATA_INTERVAL, 0)
	}
	if s.Comment != "" {
		ud = userdata.AppendString(ud, userdata.NFTNL_UDATA_SET_COMMENT, s.Comment)
	}
	attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_SET_FLAGS, Data: binaryutil.BigEndian.PutUint32(flags)},
		netlink.Attribute{Type: unix.NFTA_SET_USERDATA, Data: ud})
	return b.create(unix.NFT_MSG_NEWSET, attrs)
}

// ParseElements translates "{ KEY [comment "C"] [: VERDICT], ... }" for s; in an interval
// set a KEY is an address or a range A-B, written as nft writes it: its start, then its end
// plus one flagged as an interval's end (none when the range ends at 255.255.255.255).
func ParseElements(s Set, tok []string) ([]nftables.SetElement, error) {
	body, err := Braced(tok)
	if err != nil {
		return nil, err
	}
	var out []nftables.SetElement
	for _, e := range SplitOn(body, ",") {
		var el nftables.SetElement
		if i := slices.Index(e, ":"); i >= 0 {
			if !s.S.IsMap {
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
		if s.Interval {
			if len(e) != 1 || el.VerdictData != nil || el.Comment != "" {
				return nil, fmt.Errorf("interval element %q", strings.Join(e, " "))
			}
			lo, hi, err := addrRange(e[0])
			if err != nil {
				return nil, err
			}
			out = append(out, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, lo)})
			if hi < 0xffffffff {
				out = append(out, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, hi+1), IntervalEnd: true})
			}
			continue
		}
		k, err := encodeKey(s.Fields, e)
		if err != nil {
			return nil, err
		}
		el.Key = k
		out = append(out, el)
	}
	return out, nil
}

// addrRange reads "A" or "A-B" (IPv4 addresses, A <= B).
func addrRange(s string) (lo, hi uint32, err error) {
	a, z, isRange := strings.Cut(s, "-")
	if !isRange {
		z = a
	}
	pa, pz := net.ParseIP(a).To4(), net.ParseIP(z).To4()
	if pa == nil || pz == nil {
		return 0, 0, fmt.Errorf("address range %q", s)
	}
	lo, hi = binary.BigEndian.Uint32(pa), binary.BigEndian.Uint32(pz)
	if hi < lo {
		return 0, 0, fmt.Errorf("address range %q ends before it starts", s)
	}
	return lo, hi, nil
}

// elemsMax bounds the bytes of elements one message carries: they are one attribute,
// whose length is 16 bits (github.com/google/nftables does not split them, and a list over
// 64 KB wraps the length: the kernel then reads garbage, ENOENT). nft splits them too.
const elemsMax = 32 << 10

// AddElements queues the addition (or deletion) of elems to s, in messages of at most
// elemsMax bytes of elements (an interval's start and end stay in one message).
func (b *Batch) AddElements(s Set, elems []nftables.SetElement, del bool) {
	b.Elems = append(b.Elems, elems)
	for len(elems) > 0 {
		n, size := 0, 0
		for ; n < len(elems) && (n == 0 || size < elemsMax || elems[n].IntervalEnd); n++ {
			e := elems[n]
			size += 64 + len(e.Key) + len(e.Comment)
			if e.VerdictData != nil {
				size += len(e.VerdictData.Chain)
			}
		}
		b.raw(elemsMsg(s, elems[:n], del))
		elems = elems[n:]
	}
}

// The attributes of set elements (linux/netfilter/nf_tables.h) and libnftnl's element user
// data, which golang.org/x/sys/unix and github.com/google/nftables lack or do not write.
const (
	udataElemComment     = 0 // NFTNL_UDATA_SET_ELEM_COMMENT
	udataElemFlags       = 1 // NFTNL_UDATA_SET_ELEM_FLAGS
	elemFlagIntervalOpen = 1 // NFTNL_SET_ELEM_F_INTERVAL_OPEN: a range to the top of the key space
)

// elemsMsg is the message that adds (or deletes) elems to s, written as nft writes it: the
// table, the set, and each element's key, flags (an interval's end), verdict, and user data
// (its comment; in an interval set, that a range is open: its start has no end after it).
// (*nftables.Conn).SetAddElements has no element user data but the comment.
func elemsMsg(s Set, elems []nftables.SetElement, del bool) netlink.Message {
	var list []byte
	for i, e := range elems {
		var el []byte
		el = appendAttr(el, unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_KEY, appendAttr(nil, unix.NFTA_DATA_VALUE, e.Key))
		if e.IntervalEnd {
			el = appendAttr(el, unix.NFTA_SET_ELEM_FLAGS, binaryutil.BigEndian.PutUint32(unix.NFT_SET_ELEM_INTERVAL_END))
		}
		if v := e.VerdictData; v != nil {
			vd := appendAttr(nil, unix.NFTA_VERDICT_CODE, binaryutil.BigEndian.PutUint32(uint32(v.Kind)))
			if v.Chain != "" {
				vd = appendAttr(vd, unix.NFTA_VERDICT_CHAIN, []byte(v.Chain+"\x00"))
			}
			el = appendAttr(el, unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_DATA, appendAttr(nil, unix.NLA_F_NESTED|unix.NFTA_DATA_VERDICT, vd))
		}
		var ud []byte
		if e.Comment != "" {
			ud = userdata.AppendString(ud, udataElemComment, e.Comment)
		}
		if s.Interval && !e.IntervalEnd && (i+1 == len(elems) || !elems[i+1].IntervalEnd) {
			ud = userdata.AppendUint32(ud, udataElemFlags, elemFlagIntervalOpen)
		}
		if ud != nil {
			el = appendAttr(el, unix.NFTA_SET_ELEM_USERDATA, ud)
		}
		list = appendAttr(list, unix.NLA_F_NESTED|uint16(i+1), el)
	}
	data := []byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}
	data = appendAttr(data, unix.NFTA_SET_ELEM_LIST_TABLE, []byte(s.S.Table.Name+"\x00"))
	data = appendAttr(data, unix.NFTA_SET_ELEM_LIST_SET, []byte(s.S.Name+"\x00"))
	data = appendAttr(data, unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_LIST_ELEMENTS, list)
	typ, flags := unix.NFT_MSG_NEWSETELEM, netlink.Request|netlink.Create
	if del {
		typ, flags = unix.NFT_MSG_DELSETELEM, netlink.Request
	}
	return netlink.Message{Header: netlink.Header{Type: Msg(typ), Flags: flags}, Data: data}
}
