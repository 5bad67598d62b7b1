package nftnl

import (
	"encoding/binary"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// appendExpr appends e's NFTA_LIST_ELEM attribute of a rule's NFTA_RULE_EXPRESSIONS (the
// expression's name and its data) to buf, byte for byte what expr.Marshal gives, without
// its allocations: an attribute is written in place and its length filled in after. The
// expressions the iptables translation writes for nearly every rule (meta, cmp, payload,
// bitwise, counter, immediate verdicts, xt matches and targets with raw info) are written
// here; any other goes through expr.Marshal. TestAppendExprAsMarshal holds the two equal.
func appendExpr(buf []byte, e expr.Any) ([]byte, error) {
	name := inPlace(e)
	if name == "" {
		b, err := expr.Marshal(byte(nftables.TableFamilyIPv4), e)
		if err != nil {
			return buf, err
		}
		return appendAttr(buf, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, b), nil
	}
	elem := len(buf)
	buf = nestStart(buf, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM)
	buf = appendStrAttr(buf, unix.NFTA_EXPR_NAME, name)
	data := len(buf)
	buf = nestStart(buf, unix.NLA_F_NESTED|unix.NFTA_EXPR_DATA)
	switch x := e.(type) {
	case *expr.Meta:
		buf = appendU32Attr(buf, unix.NFTA_META_KEY, uint32(x.Key))
		reg := uint16(unix.NFTA_META_DREG)
		if x.SourceRegister {
			reg = unix.NFTA_META_SREG
		}
		buf = appendU32Attr(buf, reg, x.Register)
	case *expr.Cmp:
		buf = appendU32Attr(buf, unix.NFTA_CMP_SREG, x.Register)
		buf = appendU32Attr(buf, unix.NFTA_CMP_OP, uint32(x.Op))
		buf = appendValue(buf, unix.NFTA_CMP_DATA, x.Data)
	case *expr.Payload:
		if x.OperationType == expr.PayloadWrite {
			buf = appendU32Attr(buf, unix.NFTA_PAYLOAD_SREG, x.SourceRegister)
		} else {
			buf = appendU32Attr(buf, unix.NFTA_PAYLOAD_DREG, x.DestRegister)
		}
		buf = appendU32Attr(buf, unix.NFTA_PAYLOAD_BASE, uint32(x.Base))
		buf = appendU32Attr(buf, unix.NFTA_PAYLOAD_OFFSET, x.Offset)
		buf = appendU32Attr(buf, unix.NFTA_PAYLOAD_LEN, x.Len)
	case *expr.Bitwise:
		buf = appendU32Attr(buf, unix.NFTA_BITWISE_SREG, x.SourceRegister)
		buf = appendU32Attr(buf, unix.NFTA_BITWISE_DREG, x.DestRegister)
		buf = appendU32Attr(buf, unix.NFTA_BITWISE_LEN, x.Len)
		buf = appendValue(buf, unix.NFTA_BITWISE_MASK, x.Mask)
		buf = appendValue(buf, unix.NFTA_BITWISE_XOR, x.Xor)
	case *expr.Counter:
		buf = appendU64Attr(buf, unix.NFTA_COUNTER_BYTES, x.Bytes)
		buf = appendU64Attr(buf, unix.NFTA_COUNTER_PACKETS, x.Packets)
	case *expr.Verdict:
		buf = appendU32Attr(buf, unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_VERDICT)
		imm := len(buf)
		buf = nestStart(buf, unix.NLA_F_NESTED|unix.NFTA_IMMEDIATE_DATA)
		v := len(buf)
		buf = nestStart(buf, unix.NLA_F_NESTED|unix.NFTA_DATA_VERDICT)
		buf = appendU32Attr(buf, unix.NFTA_VERDICT_CODE, uint32(x.Kind))
		if x.Chain != "" {
			buf = appendStrAttr(buf, unix.NFTA_VERDICT_CHAIN, x.Chain)
		}
		nestEnd(buf, v)
		nestEnd(buf, imm)
	case *expr.Match:
		buf = appendXT(buf, unix.NFTA_MATCH_NAME, unix.NFTA_MATCH_REV, unix.NFTA_MATCH_INFO, x.Name, x.Rev, *x.Info.(*xt.Unknown))
	case *expr.Target:
		buf = appendXT(buf, unix.NFTA_TARGET_NAME, unix.NFTA_TARGET_REV, unix.NFTA_TARGET_INFO, x.Name, x.Rev, *x.Info.(*xt.Unknown))
	}
	nestEnd(buf, data)
	nestEnd(buf, elem)
	return buf, nil
}

// inPlace is the name of e's kind ("payload", ...) if appendExpr writes it itself, else "":
// a kind it does not know, a payload write with a checksum, an xt match or target whose info
// is a typed structure (xt.Marshal's business) or whose name xt would cut.
func inPlace(e expr.Any) string {
	rawXT := func(name string, info xt.InfoAny) bool {
		_, raw := info.(*xt.Unknown)
		return raw && len(name) < expr.XTablesExtensionNameMaxLen
	}
	switch x := e.(type) {
	case *expr.Meta:
		return "meta"
	case *expr.Cmp:
		return "cmp"
	case *expr.Payload:
		if x.CsumType == 0 {
			return "payload"
		}
	case *expr.Bitwise:
		return "bitwise"
	case *expr.Counter:
		return "counter"
	case *expr.Verdict:
		return "immediate"
	case *expr.Match:
		if rawXT(x.Name, x.Info) {
			return "match"
		}
	case *expr.Target:
		if rawXT(x.Name, x.Info) {
			return "target"
		}
	}
	return ""
}

// appendXT writes an xt match's or target's name, revision and info.
func appendXT(buf []byte, nameT, revT, infoT uint16, name string, rev uint32, info []byte) []byte {
	buf = appendStrAttr(buf, nameT, name)
	buf = appendU32Attr(buf, revT, rev)
	return appendAttr(buf, infoT, info)
}

// nestStart appends the header of a nested attribute of type typ, its length left for
// nestEnd.
func nestStart(buf []byte, typ uint16) []byte {
	return binary.NativeEndian.AppendUint16(append(buf, 0, 0), typ)
}

// nestEnd fills in the length of the nested attribute that starts at at.
func nestEnd(buf []byte, at int) {
	binary.NativeEndian.PutUint16(buf[at:], uint16(len(buf)-at))
}

// appendU32Attr appends an attribute holding v, big endian (as nf_tables' u32 attributes).
func appendU32Attr(buf []byte, typ uint16, v uint32) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, 8)
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	return binary.BigEndian.AppendUint32(buf, v)
}

// appendU64Attr appends an attribute holding v, big endian.
func appendU64Attr(buf []byte, typ uint16, v uint64) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, 12)
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	return binary.BigEndian.AppendUint64(buf, v)
}

// appendStrAttr appends a NUL-terminated string attribute.
func appendStrAttr(buf []byte, typ uint16, s string) []byte {
	n := len(s) + 1
	buf = binary.NativeEndian.AppendUint16(buf, uint16(4+n))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = append(append(buf, s...), 0)
	for range attrLen(n) - 4 - n {
		buf = append(buf, 0)
	}
	return buf
}

// appendValue appends a nested attribute of type typ holding data as NFTA_DATA_VALUE.
func appendValue(buf []byte, typ uint16, data []byte) []byte {
	at := len(buf)
	buf = nestStart(buf, unix.NLA_F_NESTED|typ)
	buf = appendAttr(buf, unix.NFTA_DATA_VALUE, data)
	nestEnd(buf, at)
	return buf
}
