package policy

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// renderExample is a small Program with every kind of set, peer and port: web is isolated for
// ingress, client for egress and ingress, one policy no local pod uses, one set no rule uses.
func renderExample() *Program {
	return &Program{
		Sets: []Set{
			{Name: "KUBE-SRC-CLIENTS", Kind: SetAddrs, Members: []Member{{Addr: "10.244.0.5"}, {Addr: "10.244.1.7"}}},
			{Name: "KUBE-DST-TEN", Kind: SetNets, Members: []Member{{Addr: "10.0.0.0/8"}, {Addr: "10.1.0.0/16", Except: true}, {Addr: "10.1.2.0/24"}}},
			{Name: "KUBE-DST-HTTP", Kind: SetAddrPorts, Members: []Member{{Addr: "10.244.0.6", Protocol: "TCP", Port: 8080}, {Addr: "10.244.1.9", Protocol: "SCTP", Port: 7777}}},
			{Name: "KUBE-SRC-ALL", Kind: SetNets, Members: []Member{{Addr: "0.0.0.0/0"}, {Addr: "192.168.0.0/16", Except: true}}},
			{Name: "KUBE-SRC-UNUSED", Kind: SetAddrs, Members: []Member{{Addr: "10.244.9.9"}}},
		},
		Policies: []PolicyChain{
			{Name: "KUBE-NWPLCY-WEB", Namespace: "default", Policy: "web",
				Ingress: []Rule{{
					Peers: []Peer{{Set: "KUBE-SRC-CLIENTS"}, {Set: "KUBE-SRC-ALL"}},
					Ports: []PortMatch{{Protocol: "TCP", Port: 8080, EndPort: 8080}, {Protocol: "UDP", Port: 9000, EndPort: 9100}},
				}}},
			{Name: "KUBE-NWPLCY-OUT", Namespace: "default", Policy: "out",
				Egress: []Rule{
					{Peers: []Peer{{Any: true}}, Ports: []PortMatch{{Protocol: "TCP", Set: "KUBE-DST-HTTP"}}},
					{Peers: []Peer{{Set: "KUBE-DST-TEN"}}, Ports: []PortMatch{{Any: true}, {Protocol: "SCTP"}}},
				}},
			{Name: "KUBE-NWPLCY-DENY", Namespace: "other", Policy: "deny-all"},
		},
		Pods: []PodFirewall{
			{Pod: "default/web", IP: "10.244.0.6", Chain: "KUBE-POD-FW-WEB", IngressOf: []string{"KUBE-NWPLCY-WEB"}},
			{Pod: "default/client", IP: "10.244.0.5", Chain: "KUBE-POD-FW-CLIENT",
				IngressOf: []string{"KUBE-NWPLCY-WEB", "KUBE-NWPLCY-DENY"}, EgressOf: []string{"KUBE-NWPLCY-OUT"}},
		},
	}
}

// rulesOf returns the -A lines of chain, without "-A chain ".
func rulesOf(filter, chain string) []string {
	var out []string
	for _, l := range strings.Split(filter, "\n") {
		if rest, ok := strings.CutPrefix(l, "-A "+chain+" "); ok {
			out = append(out, rest)
		}
	}
	return out
}

func TestRenderIPTablesLayout(t *testing.T) {
	ipset, filterB, c := RenderIPTables(renderExample())
	filter := string(filterB)
	if !strings.HasPrefix(filter, "*filter\n") || !strings.HasSuffix(filter, "\nCOMMIT\n") {
		t.Fatalf("not one filter block:\n%s", filter)
	}
	wantChains := []string{"KUBE-ROUTER-FORWARD", "KUBE-ROUTER-IDLE", "KUBE-POD-FW-WEB", "KUBE-POD-FW-CLIENT",
		"KUBE-NWPLCY-WEB", "KUBE-NWPLCY-OUT", "KUBE-NWPLCY-DENY"}
	var gotChains []string
	for _, l := range strings.Split(filter, "\n") {
		if strings.HasPrefix(l, ":") {
			gotChains = append(gotChains, strings.Fields(l[1:])[0])
		}
	}
	if !reflect.DeepEqual(gotChains, wantChains) {
		t.Errorf("chains %v, want %v", gotChains, wantChains)
	}
	if strings.Contains(filter, "FORWARD -j") && strings.Contains(filter, "-A FORWARD") {
		t.Errorf("the rendering must not append to FORWARD (the hook is ApplyIPTables' job):\n%s", filter)
	}

	// Top chain: conntrack first, the egress (-s) jumps, the ingress (-d) jumps, bits cleared.
	top := rulesOf(filter, IPTablesTopChain)
	wantTop := []string{
		"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"-s 10.244.0.5/32 -j KUBE-POD-FW-CLIENT",
		"-d 10.244.0.6/32 -j KUBE-POD-FW-WEB",
		"-d 10.244.0.5/32 -j KUBE-POD-FW-CLIENT",
		"-j MARK --set-xmark 0x0/0x30000",
	}
	if !reflect.DeepEqual(top, wantTop) {
		t.Errorf("top chain:\n%s\nwant:\n%s", strings.Join(top, "\n"), strings.Join(wantTop, "\n"))
	}

	// Pod chain: each direction sets its mode, jumps to its policies, drops what none admitted.
	client := rulesOf(filter, "KUBE-POD-FW-CLIENT")
	wantClient := []string{
		"-s 10.244.0.5/32 -j MARK --set-xmark 0x20000/0x30000",
		"-s 10.244.0.5/32 -j KUBE-NWPLCY-OUT",
		"-s 10.244.0.5/32 -m mark --mark 0x0/0x10000 -j DROP",
		"-d 10.244.0.5/32 -j MARK --set-xmark 0x0/0x30000",
		"-d 10.244.0.5/32 -j KUBE-NWPLCY-WEB",
		"-d 10.244.0.5/32 -j KUBE-NWPLCY-DENY",
		"-d 10.244.0.5/32 -m mark --mark 0x0/0x10000 -j DROP",
	}
	if !reflect.DeepEqual(client, wantClient) {
		t.Errorf("client chain:\n%s\nwant:\n%s", strings.Join(client, "\n"), strings.Join(wantClient, "\n"))
	}
	if got := rulesOf(filter, "KUBE-POD-FW-WEB"); len(got) != 3 || strings.Contains(strings.Join(got, "\n"), "-s ") {
		t.Errorf("web (ingress only) chain: %q", got)
	}

	// Policy chains: peers x ports, each rule matching its direction, then RETURN once admitted.
	web := rulesOf(filter, "KUBE-NWPLCY-WEB")
	if len(web) != 2*2*2 {
		t.Errorf("web policy: %d rules, want 8 (2 peers x 2 ports, each with its RETURN):\n%s", len(web), strings.Join(web, "\n"))
	}
	for _, want := range []string{
		"-m mark --mark 0x0/0x20000 -m set --match-set KUBE-SRC-CLIENTS src -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x10000/0x10000",
		"-m mark --mark 0x0/0x20000 -m set --match-set KUBE-SRC-ALL src -p udp -m udp --dport 9000:9100 -j MARK --set-xmark 0x10000/0x10000",
	} {
		if !hasString(web, want) {
			t.Errorf("web policy lacks %q", want)
		}
	}
	for i, r := range web {
		if i%2 == 1 && r != "-m mark --mark 0x10000/0x10000 -j RETURN" {
			t.Errorf("web policy rule %d = %q, want the RETURN of the admitted", i, r)
		}
	}
	out := rulesOf(filter, "KUBE-NWPLCY-OUT")
	for _, want := range []string{
		"-m mark --mark 0x20000/0x20000 -p tcp -m set --match-set KUBE-DST-HTTP dst,dst -j MARK --set-xmark 0x10000/0x10000",
		"-m mark --mark 0x20000/0x20000 -m set --match-set KUBE-DST-TEN dst -j MARK --set-xmark 0x10000/0x10000",
		"-m mark --mark 0x20000/0x20000 -m set --match-set KUBE-DST-TEN dst -p sctp -j MARK --set-xmark 0x10000/0x10000",
	} {
		if !hasString(out, want) {
			t.Errorf("out policy lacks %q; has:\n%s", want, strings.Join(out, "\n"))
		}
	}
	// Every admitting rule matches the direction bit: an ingress rule never admits during an
	// egress check, nor the reverse.
	for _, l := range strings.Split(filter, "\n") {
		if strings.Contains(l, "--set-xmark 0x10000/0x10000") && !strings.Contains(l, "-m mark --mark 0x0/0x20000") &&
			!strings.Contains(l, "-m mark --mark 0x20000/0x20000") {
			t.Errorf("admitting rule without direction match: %s", l)
		}
	}
	if got := rulesOf(filter, "KUBE-NWPLCY-DENY"); len(got) != 0 {
		t.Errorf("deny-all policy has rules: %q", got)
	}
	if got := rulesOf(filter, IPTablesIdleChain); len(got) != 0 {
		// DENY is used by the client's ingress: the idle chain must not list it.
		t.Errorf("idle chain = %q, want empty (every policy is used)", got)
	}

	wantSet := strings.Join([]string{
		"create KUBE-SRC-CLIENTS hash:ip family inet maxelem 1048576 -exist",
		"flush KUBE-SRC-CLIENTS",
		"add KUBE-SRC-CLIENTS 10.244.0.5",
		"add KUBE-SRC-CLIENTS 10.244.1.7",
		"create KUBE-DST-TEN hash:net family inet maxelem 1048576 -exist",
		"flush KUBE-DST-TEN",
		"add KUBE-DST-TEN 10.0.0.0/8",
		"add KUBE-DST-TEN 10.1.0.0/16 nomatch",
		"add KUBE-DST-TEN 10.1.2.0/24",
		"create KUBE-DST-HTTP hash:ip,port family inet maxelem 1048576 -exist",
		"flush KUBE-DST-HTTP",
		"add KUBE-DST-HTTP 10.244.0.6,tcp:8080",
		"add KUBE-DST-HTTP 10.244.1.9,sctp:7777",
		"create KUBE-SRC-ALL hash:net family inet maxelem 1048576 -exist",
		"flush KUBE-SRC-ALL",
		"add KUBE-SRC-ALL 0.0.0.0/1",
		"add KUBE-SRC-ALL 128.0.0.0/1",
		"add KUBE-SRC-ALL 192.168.0.0/16 nomatch",
	}, "\n") + "\n"
	if string(ipset) != wantSet {
		t.Errorf("ipset input:\n%s\nwant:\n%s", ipset, wantSet)
	}

	want := Counts{Policies: 3, PodChains: 2, Sets: 4, SetMembers: 2 + 3 + 2 + 2, Rules: strings.Count(filter, "\n-A ")}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestRenderIPTablesIdlePolicy(t *testing.T) {
	p := renderExample()
	p.Pods = p.Pods[:1] // the client goes: OUT and DENY are used by no local pod
	ipset, filterB, c := RenderIPTables(p)
	filter := string(filterB)
	if got, want := rulesOf(filter, IPTablesIdleChain), []string{"-j KUBE-NWPLCY-OUT", "-j KUBE-NWPLCY-DENY"}; !reflect.DeepEqual(got, want) {
		t.Errorf("idle chain %q, want %q", got, want)
	}
	if !strings.Contains(filter, ":KUBE-NWPLCY-OUT - [0:0]\n") {
		t.Errorf("an unused policy still gets its chain (kube-router creates every policy's chain)")
	}
	// OUT still references its sets, so they are rendered; the unused set is not.
	if !bytes.Contains(ipset, []byte("create KUBE-DST-HTTP ")) || bytes.Contains(ipset, []byte("KUBE-SRC-UNUSED")) {
		t.Errorf("sets:\n%s", ipset)
	}
	if c.PodChains != 1 || c.Policies != 3 {
		t.Errorf("counts %+v", c)
	}
}

func TestRenderDeterministic(t *testing.T) {
	s1, f1, _ := RenderIPTables(renderExample())
	s2, f2, _ := RenderIPTables(renderExample())
	n1, _ := RenderNFTables(renderExample())
	n2, _ := RenderNFTables(renderExample())
	if !bytes.Equal(s1, s2) || !bytes.Equal(f1, f2) || !bytes.Equal(n1, n2) {
		t.Error("two renderings of one Program differ")
	}
}

// nftBlocks maps each "chain X {", "set X {" and "map X {" block of an nft file to its lines
// (up to the first closing brace: the end of an elements list ends a set's lines).
func nftBlocks(text string) map[string][]string {
	out := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasSuffix(l, "{") && (strings.HasPrefix(l, "chain ") || strings.HasPrefix(l, "set ") || strings.HasPrefix(l, "map ")):
			f := strings.Fields(l)
			cur = f[0] + " " + f[1]
			out[cur] = []string{}
		case l == "}":
			cur = ""
		case cur != "" && l != "":
			out[cur] = append(out[cur], l)
		}
	}
	return out
}

func TestRenderNFTablesLayout(t *testing.T) {
	text, c := RenderNFTables(renderExample())
	s := string(text)
	head := "table ip cnibench-policy\ndelete table ip cnibench-policy\ntable ip cnibench-policy {\n"
	if !strings.HasPrefix(s, head) || !strings.HasSuffix(s, "\n}\n") {
		t.Fatalf("not create + delete + define of one table:\n%s", s)
	}
	b := nftBlocks(s)
	fwd := b["chain forward"]
	wantFwd := []string{
		"type filter hook forward priority filter; policy accept;",
		"ct state established,related accept",
		"ip saddr vmap @pod-egress",
		"ip daddr vmap @pod-ingress",
	}
	if !reflect.DeepEqual(fwd, wantFwd) {
		t.Errorf("forward chain %q, want %q", fwd, wantFwd)
	}
	if got := strings.Join(b["map pod-ingress"], " "); !strings.Contains(got, "10.244.0.6 : jump KUBE-POD-FW-WEB-ingress") ||
		!strings.Contains(got, "10.244.0.5 : jump KUBE-POD-FW-CLIENT-ingress") {
		t.Errorf("pod-ingress map: %s", got)
	}
	if got := strings.Join(b["map pod-egress"], " "); !strings.Contains(got, "10.244.0.5 : jump KUBE-POD-FW-CLIENT-egress") ||
		strings.Contains(got, "10.244.0.6") {
		t.Errorf("pod-egress map: %s", got)
	}
	if _, ok := b["chain KUBE-POD-FW-WEB-egress"]; ok {
		t.Error("web is not egress-isolated but has an egress chain")
	}
	clear := "meta mark set meta mark and 0xfffeffff"
	wantClientIn := []string{clear, "jump KUBE-NWPLCY-WEB-ingress", "meta mark and 0x00010000 == 0 drop", clear}
	if got := b["chain KUBE-POD-FW-CLIENT-ingress"]; !reflect.DeepEqual(got, wantClientIn) {
		// DENY has no ingress rule: no chain, no jump; it still isolates (the drop).
		t.Errorf("client ingress chain %q, want %q", got, wantClientIn)
	}
	for _, name := range []string{"chain KUBE-NWPLCY-DENY-ingress", "chain KUBE-NWPLCY-DENY-egress", "chain KUBE-NWPLCY-WEB-egress", "chain KUBE-NWPLCY-OUT-ingress", "set KUBE-SRC-UNUSED"} {
		if _, ok := b[name]; ok {
			t.Errorf("unexpected %s", name)
		}
	}
	mark := " meta mark set meta mark or 0x00010000 return"
	wantOut := []string{
		"ip daddr . meta l4proto . th dport @KUBE-DST-HTTP" + mark,
		"ip daddr @KUBE-DST-TEN" + mark,
		"ip daddr @KUBE-DST-TEN meta l4proto sctp" + mark,
	}
	if got := b["chain KUBE-NWPLCY-OUT-egress"]; !reflect.DeepEqual(got, wantOut) {
		t.Errorf("out policy %q, want %q", got, wantOut)
	}
	web := b["chain KUBE-NWPLCY-WEB-ingress"]
	if len(web) != 4 || web[0] != "ip saddr @KUBE-SRC-CLIENTS tcp dport 8080"+mark || web[3] != "ip saddr @KUBE-SRC-ALL udp dport 9000-9100"+mark {
		t.Errorf("web policy %q", web)
	}
	wantSets := map[string]string{
		"set KUBE-SRC-CLIENTS": "type ipv4_addr|elements = {|10.244.0.5, 10.244.1.7",
		// 10.0.0.0/8 minus 10.1.0.0/16 plus 10.1.2.0/24, as disjoint ranges.
		"set KUBE-DST-TEN":  "type ipv4_addr|flags interval|elements = {|10.0.0.0-10.0.255.255, 10.1.2.0-10.1.2.255, 10.2.0.0-10.255.255.255",
		"set KUBE-DST-HTTP": "type ipv4_addr . inet_proto . inet_service|elements = {|10.244.0.6 . tcp . 8080, 10.244.1.9 . sctp . 7777",
		"set KUBE-SRC-ALL":  "type ipv4_addr|flags interval|elements = {|0.0.0.0-192.167.255.255, 192.169.0.0-255.255.255.255",
	}
	for name, want := range wantSets {
		if got := strings.Join(b[name], "|"); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	rules := 0
	for name, lines := range b {
		if strings.HasPrefix(name, "chain ") {
			for _, l := range lines {
				if !strings.HasPrefix(l, "type ") {
					rules++
				}
			}
		}
	}
	want := Counts{Policies: 3, PodChains: 2, Sets: 4, SetMembers: 9, Rules: rules}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

func TestNetRanges(t *testing.T) {
	m := func(spec ...string) []Member {
		var out []Member
		for _, s := range spec {
			ex := strings.HasPrefix(s, "!")
			out = append(out, Member{Addr: strings.TrimPrefix(s, "!"), Except: ex})
		}
		return out
	}
	for _, tc := range []struct {
		in   []Member
		want string
	}{
		{m("10.0.0.0/8"), "10.0.0.0-10.255.255.255"},
		{m("10.0.0.5"), "10.0.0.5"},
		{m("0.0.0.0/0"), "0.0.0.0-255.255.255.255"},
		{m("0.0.0.0/1", "128.0.0.0/1"), "0.0.0.0-255.255.255.255"}, // adjacent halves merge
		{m("0.0.0.0/0", "!255.255.255.255/32"), "0.0.0.0-255.255.255.254"},
		{m("0.0.0.0/0", "!0.0.0.0/32"), "0.0.0.1-255.255.255.255"},
		{m("10.0.0.0/8", "!10.0.0.0/8"), ""}, // equal prefixes: the exception wins (ipset nomatch)
		{m("10.0.0.0/24", "10.0.1.0/24"), "10.0.0.0-10.0.1.255"},
		{m("10.0.0.0/16", "10.0.0.0/24"), "10.0.0.0-10.0.255.255"}, // nested includes
		{m("10.0.0.0/8", "!10.1.0.0/16", "10.1.2.0/24", "!10.1.2.128/25"), "10.0.0.0-10.0.255.255 10.1.2.0-10.1.2.127 10.2.0.0-10.255.255.255"},
		{m("!10.1.0.0/16"), ""}, // an exception alone matches nothing
		{m("bogus", "10.0.0.0/8"), "10.0.0.0-10.255.255.255"},
	} {
		var got []string
		for _, r := range netRanges(tc.in) {
			got = append(got, r.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("netRanges(%v) = %q, want %q", tc.in, strings.Join(got, " "), tc.want)
		}
	}
}

func TestParseSaveAndMerge(t *testing.T) {
	save := `# Generated by iptables-save
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-NWPLCY-A - [0:0]
:KUBE-NWPLCY-IDLE1 - [0:0]
:KUBE-POD-FW-X - [0:0]
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-ROUTER-IDLE - [0:0]
:OTHER - [0:0]
-A FORWARD -j KUBE-ROUTER-FORWARD
-A FORWARD -j OTHER
-A KUBE-NWPLCY-A -p tcp -m mark --mark 0x0/0x20000 -m set --match-set KUBE-SRC-1 src -m tcp --dport 80 -j MARK --set-xmark 0x10000/0x10000
-A KUBE-NWPLCY-IDLE1 -m set --match-set KUBE-DST-2 dst,dst -j MARK --set-xmark 0x10000/0x10000
-A KUBE-POD-FW-X -d 10.0.0.1/32 -j KUBE-NWPLCY-A
-A KUBE-ROUTER-FORWARD -d 10.0.0.1/32 -j KUBE-POD-FW-X
-A KUBE-ROUTER-IDLE -j KUBE-NWPLCY-IDLE1
-A OTHER -m set --match-set FOREIGN src -j DROP
COMMIT
`
	o := parseSave([]byte(save))
	if want := []string{"KUBE-NWPLCY-A", "KUBE-NWPLCY-IDLE1", "KUBE-POD-FW-X", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-IDLE"}; !reflect.DeepEqual(o.chains, want) {
		t.Errorf("chains %v, want %v", o.chains, want)
	}
	if want := []string{"KUBE-SRC-1", "KUBE-DST-2"}; !reflect.DeepEqual(o.sets, want) {
		t.Errorf("sets %v, want %v", o.sets, want)
	}
	if o.hooks != 1 {
		t.Errorf("hooks %d, want 1", o.hooks)
	}

	// Merged with a new rendering: the foreign chain, its rules and FORWARD's policy are kept,
	// the old rendering is gone, the hook comes first in FORWARD, once.
	_, filter, _ := RenderIPTables(renderExample())
	merged, err := o.merge(filter)
	if err != nil {
		t.Fatal(err)
	}
	m := string(merged)
	for _, want := range []string{":FORWARD DROP [0:0]\n", ":OTHER - [0:0]\n", "-A OTHER -m set --match-set FOREIGN src -j DROP\n",
		"\n-A FORWARD -j KUBE-ROUTER-FORWARD\n-A FORWARD -j OTHER\n", ":KUBE-NWPLCY-WEB - [0:0]\n", "-A KUBE-POD-FW-WEB "} {
		if !strings.Contains(m, want) {
			t.Errorf("merged table lacks %q:\n%s", want, m)
		}
	}
	for _, gone := range []string{"KUBE-NWPLCY-A ", "KUBE-NWPLCY-IDLE1", "KUBE-POD-FW-X", "KUBE-SRC-1"} {
		if strings.Contains(m, gone) {
			t.Errorf("merged table still has %q:\n%s", gone, m)
		}
	}
	if n := strings.Count(m, "-A FORWARD -j KUBE-ROUTER-FORWARD\n"); n != 1 {
		t.Errorf("%d hooks", n)
	}
	if !strings.HasPrefix(m, "*filter\n") || !strings.HasSuffix(m, "\nCOMMIT\n") || strings.Count(m, "COMMIT") != 1 {
		t.Errorf("not one filter block:\n%s", m)
	}
	// Every declaration comes before every rule (iptables-restore needs a chain before a jump).
	if strings.LastIndex(m, "\n:") > strings.Index(m, "\n-A ") {
		t.Errorf("a declaration after a rule:\n%s", m)
	}

	// Merged with nothing: the engine is gone, the rest stays.
	cleared, err := o.merge(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:OTHER - [0:0]\n" +
		"-A FORWARD -j OTHER\n-A OTHER -m set --match-set FOREIGN src -j DROP\nCOMMIT\n"
	if string(cleared) != want {
		t.Errorf("cleared:\n%s\nwant:\n%s", cleared, want)
	}
	if _, err := o.merge([]byte("*nat\nCOMMIT\n")); err == nil {
		t.Error("merge accepted a nat block")
	}
	if e := parseSave([]byte("*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n")); len(e.chains) != 0 || e.hooks != 0 {
		t.Errorf("empty table: %+v", e)
	}
}

func TestCreatedSets(t *testing.T) {
	ipset, _, _ := RenderIPTables(renderExample())
	if got := createdSets(ipset); len(got) != 4 || !got["KUBE-SRC-ALL"] || got["KUBE-SRC-UNUSED"] {
		t.Errorf("created %v", got)
	}
}

// A prefix given both as a member and as an exception: the exception wins, in both engines.
func TestRenderExceptWins(t *testing.T) {
	p := &Program{
		Sets:     []Set{{Name: "N", Kind: SetNets, Members: []Member{{Addr: "10.0.0.0/8"}, {Addr: "10.1.0.0/16"}, {Addr: "10.1.0.0/16", Except: true}}}},
		Policies: []PolicyChain{{Name: "P", Ingress: []Rule{{Peers: []Peer{{Set: "N"}}, Ports: []PortMatch{{Any: true}}}}}},
	}
	ipset, _, _ := RenderIPTables(p)
	if strings.Contains(string(ipset), "add N 10.1.0.0/16\n") || !strings.Contains(string(ipset), "add N 10.1.0.0/16 nomatch\n") {
		t.Errorf("ipset:\n%s", ipset)
	}
	text, _ := RenderNFTables(p)
	if !strings.Contains(string(text), "10.0.0.0-10.0.255.255, 10.2.0.0-10.255.255.255") {
		t.Errorf("nft:\n%s", text)
	}
}
