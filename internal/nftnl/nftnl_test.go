package nftnl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func TestParseSet(t *testing.T) {
	tb := New("t").Table
	for _, c := range []struct {
		decl     string
		isMap    bool
		fields   string
		interval bool
		comment  string
		err      string
	}{
		{decl: "type ipv4_addr ;", fields: "ipv4_addr"},
		{decl: "type ipv4_addr ; flags interval ;", fields: "ipv4_addr", interval: true},
		{decl: `type ipv4_addr . inet_proto . inet_service ; comment "x y" ;`, fields: "ipv4_addr inet_proto inet_service", comment: "x y"},
		{decl: "type ipv4_addr : verdict ;", isMap: true, fields: "ipv4_addr"},
		{decl: "type ipv4_addr ;", isMap: true, err: "is not K : verdict"},
		{decl: "type ether_addr ;", err: "key type"},
		{decl: "flags interval ;", err: "without a type"},
		{decl: "type ipv4_addr . inet_service ; flags interval ;", err: "interval concatenation"},
		{decl: "type ipv4_addr ; size 10 ;", err: "statement"},
	} {
		s, err := ParseSet(tb, "s", c.isMap, MustTokens(c.decl))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one with %q", c.decl, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.decl, err)
			continue
		}
		if strings.Join(s.Fields, " ") != c.fields || s.Interval != c.interval || s.S.Interval != c.interval || s.Comment != c.comment || s.S.IsMap != c.isMap {
			t.Errorf("%q: %+v", c.decl, s)
		}
	}
}

// An interval set's element is its start and its end plus one, flagged; a range to the top of
// the address space has no end element (nft marks its start open: elemsMsg).
func TestParseElementsInterval(t *testing.T) {
	s, err := ParseSet(New("t").Table, "n", false, MustTokens("type ipv4_addr ; flags interval ;"))
	if err != nil {
		t.Fatal(err)
	}
	el, err := ParseElements(s, MustTokens("{ 0.0.0.0-9.255.255.255, 10.1.0.7, 192.168.8.0-255.255.255.255 }"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range el {
		got = append(got, fmt.Sprintf("%x/%v", e.Key, e.IntervalEnd))
	}
	want := "00000000/false 0a000000/true 0a010007/false 0a010008/true c0a80800/false"
	if strings.Join(got, " ") != want {
		t.Errorf("elements %v, want %s", got, want)
	}
	for _, bad := range []string{"{ 10.0.0.9-10.0.0.1 }", "{ 10.0.0.0/8 }", "{ 10.0.0.1 : drop }"} {
		if _, err := ParseElements(s, MustTokens(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	// The open range's start carries libnftnl's element flag in its user data, the others none.
	m := elemsMsg(s, el, false)
	attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
	if err != nil {
		t.Fatal(err)
	}
	var list []netlink.Attribute
	for _, a := range attrs {
		if a.Type&^unix.NLA_F_NESTED == unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			list, _ = netlink.UnmarshalAttributes(a.Data)
		}
	}
	if len(list) != len(el) {
		t.Fatalf("%d elements in the message, want %d", len(list), len(el))
	}
	for i, a := range list {
		ea, _ := netlink.UnmarshalAttributes(a.Data)
		var ud []byte
		var flags uint32
		for _, x := range ea {
			switch x.Type &^ unix.NLA_F_NESTED {
			case unix.NFTA_SET_ELEM_USERDATA:
				ud = x.Data
			case unix.NFTA_SET_ELEM_FLAGS:
				flags = binary.BigEndian.Uint32(x.Data)
			}
		}
		open := i == len(list)-1
		if (ud != nil) != open || (open && !bytes.Equal(ud, []byte{1, 4, 1, 0, 0, 0})) {
			t.Errorf("element %d: user data %x (open: %v)", i, ud, open)
		}
		if (flags == unix.NFT_SET_ELEM_INTERVAL_END) != el[i].IntervalEnd {
			t.Errorf("element %d: flags %d", i, flags)
		}
	}
}

// Element lists are split into messages of about elemsMax bytes, never between an interval's
// start and its end.
func TestAddElementsSplits(t *testing.T) {
	b := New("t")
	s, _ := ParseSet(b.Table, "n", false, MustTokens("type ipv4_addr ; flags interval ;"))
	var ranges []string
	for i := range 3000 {
		ranges = append(ranges, fmt.Sprintf("10.%d.%d.0-10.%d.%d.127", i/256, i%256, i/256, i%256))
	}
	el, err := ParseElements(s, MustTokens("{ "+strings.Join(ranges, ", ")+" }"))
	if err != nil {
		t.Fatal(err)
	}
	b.AddElements(s, el, false)
	msgs, err := b.Messages()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 2 {
		t.Fatalf("%d messages for %d elements", len(msgs), len(el))
	}
	n := 0
	for i, m := range msgs {
		if len(m.Data) > 0xffff {
			t.Errorf("message %d: %d bytes", i, len(m.Data))
		}
		c := bytes.Count(m.Data, []byte{8, 0, unix.NFTA_SET_ELEM_FLAGS, 0, 0, 0, 0, 1}) // an interval's end
		attrs, _ := netlink.UnmarshalAttributes(m.Data[4:])
		for _, a := range attrs {
			if a.Type&^unix.NLA_F_NESTED == unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				list, _ := netlink.UnmarshalAttributes(a.Data)
				if 2*c != len(list) {
					t.Errorf("message %d: %d elements, %d of them ends", i, len(list), c)
				}
				n += len(list)
			}
		}
	}
	if n != len(el) {
		t.Errorf("%d elements sent, want %d", n, len(el))
	}
}

// With Repeated the same statements are translated once: a repeated rule shares its
// expressions, in messages that differ only by chain; without it each is translated anew,
// into the same messages.
func TestRuleRepeated(t *testing.T) {
	b := New("t")
	b.Repeated = true
	r := MustTokens("ip saddr @S tcp dport 80-90 meta mark set meta mark or 0x00010000 return")
	for _, chain := range []string{"a", "b"} {
		if err := b.Rule(chain, r); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.Rules) != 2 || &b.Rules[0].Exprs[0] != &b.Rules[1].Exprs[0] || b.Rules[1].Chain.Name != "b" {
		t.Fatalf("rules %+v", b.Rules)
	}
	if _, ok := b.Rules[0].Exprs[len(b.Rules[0].Exprs)-1].(*expr.Verdict); !ok {
		t.Errorf("last expression %T, want the verdict", b.Rules[0].Exprs[len(b.Rules[0].Exprs)-1])
	}
	msgs, err := b.Messages()
	if err != nil {
		t.Fatal(err)
	}
	a, c := msgs[0].Data, msgs[1].Data
	if !bytes.Equal(bytes.Replace(a, []byte("a\x00"), []byte("b\x00"), 1), c) {
		t.Errorf("the two messages differ by more than the chain")
	}
	plain := New("t")
	for _, chain := range []string{"a", "b"} {
		if err := plain.Rule(chain, r); err != nil {
			t.Fatal(err)
		}
	}
	pm, err := plain.Messages()
	if err != nil {
		t.Fatal(err)
	}
	if &plain.Rules[0].Exprs[0] == &plain.Rules[1].Exprs[0] || !bytes.Equal(pm[0].Data, a) || !bytes.Equal(pm[1].Data, c) {
		t.Errorf("without Repeated: shared expressions or other messages")
	}
	// Nothing of a rule with an unknown statement is queued.
	if err := b.Rule("a", MustTokens("ip saddr @S limit rate 10/second accept")); err == nil || len(b.Rules) != 2 {
		t.Errorf("unknown statement: %v, %d rules", err, len(b.Rules))
	}
}

func TestTokens(t *testing.T) {
	got, err := Tokens(`add chain ip t c { ip saddr 10.0.0.1 comment "a \"q\" ;{}" ; }`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"add", "chain", "ip", "t", "c", "{", "ip", "saddr", "10.0.0.1", "comment", `"a \"q\" ;{}"`, ";", "}"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("tokens %q", got)
	}
	if _, err := Tokens(`comment "open`); err == nil {
		t.Error("an unterminated string is no error")
	}
}
