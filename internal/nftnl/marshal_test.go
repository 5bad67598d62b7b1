package nftnl

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// appendExpr writes every expression as expr.Marshal does, byte for byte: each kind it
// writes itself (with the values that change its layout: registers, a source register, a
// payload write, an empty and a long chain name, data of every padding), those it leaves
// to expr.Marshal, and every expression of the rules IPTRule and Rule translate in this
// package's tests.
func TestAppendExprAsMarshal(t *testing.T) {
	u := func(b ...byte) *xt.Unknown { x := xt.Unknown(b); return &x }
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 2, Data: []byte{10, 0, 0, 1}},
		&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{1, 2, 3, 4, 5}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4, CsumType: expr.CsumTypeInet, CsumOffset: 10, CsumFlags: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 0, 0}, Xor: make([]byte, 4)},
		&expr.Counter{},
		&expr.Counter{Bytes: 1 << 40, Packets: 7},
		&expr.Verdict{Kind: expr.VerdictAccept},
		&expr.Verdict{Kind: expr.VerdictDrop},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: "KUBE-SVC-NPX46M4PTMTKRN6Y"},
		&expr.Verdict{Kind: expr.VerdictGoto, Chain: "abc"},
		&expr.Match{Name: "comment", Info: u(append([]byte("x"), make([]byte, 255)...)...)},
		&expr.Match{Name: "conntrack", Rev: 3, Info: u(make([]byte, 168)...)},
		&expr.Target{Name: "MASQUERADE", Info: u(make([]byte, 24)...)},
		&expr.Target{Name: "DNAT", Rev: 2, Info: u(make([]byte, 48)...)},
		&expr.Match{Name: strings.Repeat("x", 40), Info: u(1, 2, 3)},                                     // a name xt cuts: expr.Marshal's
		&expr.Match{Name: "comment", Info: func() *xt.Comment { c := xt.Comment("typed"); return &c }()}, // typed info: expr.Marshal's
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{0, 80}, ToData: []byte{0, 90}},       // not written here
		&expr.Lookup{SourceRegister: 1, SetName: "S", SetID: 3},
	}
	// The expressions of translated rules.
	b := New("filter")
	b.IPSets = map[string]uint16{"S": 3}
	for _, r := range []string{
		"-m mark --mark 0x0/0x20000 -m set --match-set S src -p tcp -m tcp --dport 80:90 -j MARK --set-xmark 0x10000/0x10000",
		"! -d 127.0.0.0/8 -m tcp -p tcp --dport 80 -m comment --comment x -j KUBE-SVC-X",
		"-s 10.244.0.0/16 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"-m comment --comment ab -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-X",
		"-m addrtype --dst-type LOCAL -p udp -m udp -j DNAT --to-destination 10.0.0.1:53",
		"-p sctp -m sctp --dport 9 -j REJECT", "-j MASQUERADE --random-fully", "-g KUBE-X",
	} {
		if err := b.IPTRule("c", strings.Fields(r), false); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
	}
	if err := b.Rule("c", MustTokens("ip saddr @S tcp dport 80-90 meta mark set meta mark or 0x00010000 return")); err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Rules {
		exprs = append(exprs, r.Exprs...)
	}
	for i, e := range exprs {
		want, err := expr.Marshal(byte(nftables.TableFamilyIPv4), e)
		if err != nil {
			t.Fatalf("%d %T: %v", i, e, err)
		}
		want = appendAttr(nil, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, want)
		pre := []byte{1, 2, 3} // appended after what is there
		got, err := appendExpr(pre, e)
		if err != nil || !bytes.Equal(got[:3], pre) || !bytes.Equal(got[3:], want) {
			t.Errorf("%d %T %s: %v\n got  %x\n want %x", i, e, fmt.Sprint(e), err, got[3:], want)
		}
	}
}
