package nftnl

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// IPTRule: the forms it knows give their expressions in iptables-nft's order (ip header
// matches, the matches in order, a counter, the action), whatever order -p comes in; a
// repeated rule is translated once and an inserted one goes first (no append flag); a form
// it does not know is ErrUntranslated and queues nothing; a set without a known index is
// another error.
func TestIPTRule(t *testing.T) {
	b := New("filter")
	b.Repeated, b.IPSets = true, map[string]uint16{"S": 3}
	args := strings.Fields("-m mark --mark 0x0/0x20000 -m set --match-set S src -p tcp -m tcp --dport 80:90 -j MARK --set-xmark 0x10000/0x10000")
	for _, ch := range []string{"a", "b"} {
		if err := b.IPTRule(ch, args, false); err != nil {
			t.Fatal(err)
		}
	}
	var kinds []string
	for _, e := range b.Rules[0].Exprs {
		kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", e), "*expr."))
	}
	if got, want := strings.Join(kinds, " "), "Meta Cmp Meta Bitwise Cmp Match Payload Range Counter Target"; got != want {
		t.Errorf("expressions %s, want %s", got, want)
	}
	if m := b.Rules[0].Exprs[5].(*expr.Match); m.Name != "set" || m.Rev != 4 {
		t.Errorf("set match %+v", m)
	}
	if &b.Rules[0].Exprs[0] != &b.Rules[1].Exprs[0] {
		t.Error("the repeated rule was translated again")
	}
	if err := b.IPTRule("FORWARD", []string{"-j", "KUBE-ROUTER-FORWARD"}, true); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.Messages()
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].Header.Flags&unix.NLM_F_APPEND == 0 || msgs[2].Header.Flags&unix.NLM_F_APPEND != 0 {
		t.Errorf("flags %v %v: appended, then inserted", msgs[0].Header.Flags, msgs[2].Header.Flags)
	}
	// -p first, then -s and -d, whatever the order given; an option goes to its match.
	if err := b.IPTRule("a", strings.Fields("! -d 127.0.0.0/8 -m tcp -p tcp --dport 80 -m comment --comment x -j KUBE-SVC-X"), false); err != nil {
		t.Fatal(err)
	}
	kinds = nil
	for _, e := range b.Rules[len(b.Rules)-1].Exprs {
		kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", e), "*expr."))
	}
	if got, want := strings.Join(kinds, " "), "Meta Cmp Payload Cmp Payload Cmp Match Counter Verdict"; got != want {
		t.Errorf("expressions %s, want %s", got, want)
	}
	for _, bad := range []string{"! -p tcp -j ACCEPT", "-m tcp -p tcp ! --dport 80 -j ACCEPT", "-j MARK --set-mark 1", "-m limit --limit 1/s -j ACCEPT", "-j LOG", "-m tcp --dport 80 -j ACCEPT", "-p icmp -j ACCEPT", "-m mark --mark x -j DROP"} {
		if err := b.IPTRule("a", strings.Fields(bad), false); !errors.Is(err, ErrUntranslated) {
			t.Errorf("%q: %v, want ErrUntranslated", bad, err)
		}
	}
	if err := b.IPTRule("a", strings.Fields("-m set --match-set T dst -j ACCEPT"), false); err == nil || errors.Is(err, ErrUntranslated) {
		t.Errorf("a set of unknown index: %v", err)
	}
	if len(b.Rules) != 4 {
		t.Errorf("%d rules queued, want 4", len(b.Rules))
	}
}

// ParseRestore splits arguments as iptables-restore does (quotes group, a backslash in them
// escapes) and refuses what it does not know.
func TestParseRestore(t *testing.T) {
	in := "*nat\n:A - [0:0]\n-A A -m comment --comment \"x \\\"y\\\" z\" -j B\n-A A -m comment --comment ab\"c d\"e -s 10.0.0.1/32\n-X OLD\nCOMMIT\n*filter\nCOMMIT\n"
	tables, err := ParseRestore([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 || tables[0].Name != "nat" || tables[1].Name != "filter" || len(tables[0].Decls) != 1 || len(tables[0].Deletes) != 1 || tables[0].Deletes[0] != "OLD" {
		t.Fatalf("tables %+v", tables)
	}
	r := tables[0].Rules
	if len(r) != 2 || r[0].Line != 3 || strings.Join(r[0].Args, "|") != `-m|comment|--comment|x "y" z|-j|B` || strings.Join(r[1].Args, "|") != "-m|comment|--comment|abc de|-s|10.0.0.1/32" {
		t.Errorf("rules %+v", r)
	}
	for _, bad := range []string{"*nat\n-I A 1 -j B\nCOMMIT\n", "*nat\n:INPUT ACCEPT [0:0]\nCOMMIT\n", "*nat\n-A A -m comment --comment \"open\nCOMMIT\n", "-A A -j B\n", "*nat\n-A A -j B\n"} {
		if _, err := ParseRestore([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
