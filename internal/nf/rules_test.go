package nf

import (
	"net/netip"
	"strings"
	"testing"
)

var testFlow = Flow{Client: netip.MustParseAddr("10.250.0.1"), Server: netip.MustParseAddr("10.250.0.2"),
	Ports: []Port{{TCP, 5201}, {UDP, 5201}, {TCP, 12865}}}

// Build makes exactly count rules, the allow rules last; the fillers match none of the flow's
// packets, so every packet of the flow is decided by the last rules, and only the flow passes.
func TestBuild(t *testing.T) {
	for _, count := range []int{6, 10, 10000, MaxRules} {
		rs, err := Build(testFlow, count)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.Rules) != count {
			t.Fatalf("%d rules, want %d", len(rs.Rules), count)
		}
		seen := map[netip.Prefix]bool{}
		for i, r := range rs.Rules[:count-6] {
			if r.Allow || !netip.MustParsePrefix("198.18.0.0/15").Contains(r.Src.Addr()) || seen[r.Src] {
				t.Fatalf("filler %d: %+v (allow, outside 198.18.0.0/15 or repeated)", i, r)
			}
			seen[r.Src] = true
		}
		for _, r := range rs.Rules[count-6:] {
			if !r.Allow {
				t.Fatalf("last rules must allow: %+v", r)
			}
		}
	}
	rs, _ := Build(testFlow, 50)
	c, s := testFlow.Client, testFlow.Server
	for _, x := range []struct {
		p    Packet
		want bool
	}{
		{Packet{c, s, TCP, 40000, 5201}, true},
		{Packet{s, c, TCP, 5201, 40000}, true},
		{Packet{c, s, UDP, 40000, 5201}, true},
		{Packet{c, s, TCP, 40000, 12865}, true},
		{Packet{c, s, UDP, 40000, 12865}, false}, // the flow has no UDP 12865
		{Packet{c, s, TCP, 40000, 5299}, false},
		{Packet{s, c, TCP, 40000, 5201}, false}, // the server does not open connections
		{Packet{netip.MustParseAddr("198.18.0.1"), s, TCP, 1, 5201}, false},
		{Packet{c, s, 1, 0, 0}, false}, // ICMP
	} {
		if got := rs.Verdict(x.p); got != x.want {
			t.Errorf("%+v: verdict %v, want %v", x.p, got, x.want)
		}
	}
	if _, err := Build(testFlow, 5); err == nil || !strings.Contains(err.Error(), "must be 6..100000") {
		t.Errorf("5 rules: %v", err)
	}
	if _, err := Build(Flow{Client: c, Server: s}, 10); err == nil {
		t.Error("a flow without ports built")
	}
}

// The first matching rule decides, whatever follows.
func TestVerdictFirstMatch(t *testing.T) {
	c, s := testFlow.Client, testFlow.Server
	rs := RuleSet{Rules: []Rule{
		{Src: netip.PrefixFrom(c, 32), Dst: netip.PrefixFrom(s, 32), Proto: TCP, DstPort: 5201},
		{Src: netip.MustParsePrefix("10.250.0.0/16"), Dst: netip.MustParsePrefix("0.0.0.0/0"), Proto: TCP, Allow: true},
	}}
	if rs.Verdict(Packet{c, s, TCP, 1, 5201}) {
		t.Error("the first rule drops TCP 5201")
	}
	if !rs.Verdict(Packet{c, s, TCP, 1, 80}) {
		t.Error("the second rule allows other TCP")
	}
}
