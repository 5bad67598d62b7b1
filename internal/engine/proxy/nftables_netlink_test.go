package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// translate is what applyNFTNetlink queues for input, without a kernel: the batch, or the
// error that makes ApplyNFTables run nft instead.
func translate(input string) (*nftnl.Batch, error) {
	b := nftnl.New(NFTable)
	for line := range strings.SplitSeq(strings.TrimSpace(input), "\n") {
		if err := command(b, strings.TrimSpace(line)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Every partial input the renderer writes, with and without NodePorts (Cluster and Local),
// with one endpoint and with several (a numgen vmap), is translated, and so is every
// deletion; anything the renderer does not write is not.
func TestNFTNetlinkTranslates(t *testing.T) {
	opt := partialOpt()
	one := Service{Namespace: "cnb", Name: "one", ClusterIP: "10.96.0.5", Port: 80, Protocol: "tcp",
		Endpoints: []Endpoint{{IP: "10.244.0.7", Port: 8080, Node: "node0"}}}
	local := one
	local.Name, local.ClusterIP, local.NodePort, local.ExternalLocal = "local", "10.96.0.6", 30080, true
	cluster := one
	cluster.Name, cluster.ClusterIP, cluster.NodePort = "cluster", "10.96.0.8", 30081
	empty := Service{Namespace: "cnb", Name: "empty", PortName: "p", ClusterIP: "10.96.0.9", Port: 53, Protocol: "udp", NodePort: 30082}
	base := []Service{cluster, empty}
	_, st, _ := RenderNFTablesPartial(nil, base, opt)
	for _, add := range []Service{one, local} {
		in, st2, _ := RenderNFTablesPartial(st, append(base[:2:2], add), opt)
		if _, err := translate(string(in)); err != nil {
			t.Errorf("adding %s: %v\n%s", add.Name, err, in)
		}
		del, _, _ := RenderNFTablesPartial(st2, base, opt)
		if _, err := translate(string(del)); err != nil {
			t.Errorf("removing %s: %v\n%s", add.Name, err, del)
		}
	}
	two := one
	two.Endpoints = append(two.Endpoints[:1:1], Endpoint{IP: "10.244.1.7", Port: 8080, Node: "node1"})
	in, _, _ := RenderNFTablesPartial(st, append(base[:2:2], two), opt)
	if _, err := translate(string(in)); err != nil {
		t.Errorf("a numgen vmap is not translated (%v):\n%s", err, in)
	}
	for _, bad := range []string{
		"add rule ip kube-proxy services ip daddr { 10.96.0.0/12, 10.1.0.0/16 } drop",
		"add element ip kube-proxy service-ips { 10.96.0.1 . tcp . 80 : queue }",
		"flush chain ip other x",
		"add chain ip kube-proxy x { ip daddr 10.96.0.300 goto y ; }",
		"add chain ip kube-proxy x { masquerade ; }",
		"add set ip kube-proxy cluster-ips { type ipv4_addr ; elements = { 10.96.0.1 } ; }",
		`add chain ip kube-proxy x { comment "unterminated ; }`,
		"delete element ip kube-proxy service-ips { 10.96.0.1 . tcp }",
		"delete element ip kube-proxy service-nodeports { icmp . 80 }",
	} {
		if _, err := translate(bad); err == nil {
			t.Errorf("translated %q", bad)
		}
	}
	if err := applyNFTNetlink("/nonexistent", []byte("add rule ip kube-proxy services masquerade\n")); !errors.Is(err, errNFTUntranslated) {
		t.Errorf("an untranslated input gives %v, want errNFTUntranslated (before any netlink)", err)
	}
}

// The expressions are those nft 1.0.6 generates for the same rules (nft --debug=netlink
// -c, recorded in testdata/nft-debug-netlink.txt): payload loads as long as the prefix,
// l4proto compared as one byte, fib's address type in host order, dnat's flags.
func TestNFTNetlinkExpressions(t *testing.T) {
	rec, err := os.ReadFile("testdata/nft-debug-netlink.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rule string
		want []expr.Any
	}{
		{"ip daddr 10.96.39.26 ip saddr != 10.244.0.0/16 jump mark-for-masquerade", []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 96, 39, 26}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 2},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{10, 244}},
			&expr.Verdict{Kind: expr.VerdictJump, Chain: "mark-for-masquerade"}}},
		{"ip saddr 10.244.0.0/20 goto x", []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 240, 0}, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 244, 0, 0}},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: "x"}}},
		{"meta l4proto tcp dnat to 10.244.39.16:8080", []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6}},
			&expr.Immediate{Register: 1, Data: []byte{10, 244, 39, 16}},
			&expr.Immediate{Register: 2, Data: []byte{0x1f, 0x90}},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true}}},
		{`fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"`, []expr.Any{
			&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
			&expr.Verdict{Kind: expr.VerdictJump, Chain: "mark-for-masquerade"}}},
	} {
		b, err := translate("add chain ip kube-proxy c { " + c.rule + " ; }")
		if err != nil {
			t.Errorf("%s: %v", c.rule, err)
			continue
		}
		if len(b.Rules) != 1 {
			t.Fatalf("%s: %d rules", c.rule, len(b.Rules))
		}
		if got := b.Rules[0].Exprs; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c.rule, got, c.want)
		}
		if !bytes.Contains(rec, []byte(c.rule)) {
			t.Errorf("%s: not in the recording", c.rule)
		}
	}
	if b, err := translate(`add chain ip kube-proxy c { fib saddr type local goto x comment "short-circuit local traffic" ; }`); err != nil || len(b.Rules[0].UserData) == 0 {
		t.Errorf("a rule comment is not kept (%v)", err)
	}
}

// Element keys are encoded as nft encodes them: concatenations padded per field to 4 bytes
// (nft --debug=netlink prints "element 1a27600a 00000006 00005000" for
// 10.96.39.26 . tcp . 80), a single address as its 4 bytes.
func TestNFTNetlinkKeys(t *testing.T) {
	b, err := translate(`add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; elements = { 10.96.39.26 . tcp . 80 comment "ns/svc:p" : goto reject-chain } ; }
delete element ip kube-proxy cluster-ips { 10.96.39.26 }
add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; elements = { udp . 30080 comment "ns/svc" : drop } ; }`)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{
		{10, 96, 39, 26, 6, 0, 0, 0, 0, 80, 0, 0},
		{10, 96, 39, 26},
		{17, 0, 0, 0, 0x75, 0x80, 0, 0},
	}
	for i, w := range want {
		if got := b.Elems[i][0].Key; !bytes.Equal(got, w) {
			t.Errorf("element %d: key % x, want % x", i, got, w)
		}
	}
	if e := b.Elems[0][0]; e.Comment != "ns/svc:p" || e.VerdictData == nil || e.VerdictData.Kind != expr.VerdictGoto || e.VerdictData.Chain != "reject-chain" {
		t.Errorf("element 0: %+v", e)
	}
	if e := b.Elems[2][0]; e.VerdictData == nil || e.VerdictData.Kind != expr.VerdictDrop {
		t.Errorf("element 2: %+v", e)
	}
}

// A transaction of many messages, every one a rule, goes through: it is sent in one sendmsg
// (the send buffer raised to its size) and only the last message asks for an ack, so the
// replies stay small (github.com/google/nftables's Flush asks for an ack and an echo of every
// message, and the replies of 99 Services overflowed the receive buffer).
func TestNFTNetlinkMostMessages(t *testing.T) {
	const nlMaxMessages = 20000
	ns, _ := netnstest.Scratch(t)
	in, _, _ := RenderNFTablesPartial(nil, nftTestServices(), partialOpt())
	if err := ApplyNFTables(ns, in); err != nil {
		t.Fatal(err)
	}
	long := "endpoint-XXXXXXXX-" + strings.Repeat("n", 200)
	var b strings.Builder
	b.WriteString("add chain ip kube-proxy " + long + "\nadd chain ip kube-proxy " + long + " {")
	for i := range nlMaxMessages - 1 {
		fmt.Fprintf(&b, ` fib saddr type local jump mark-for-masquerade comment "%03d %s" ;`, i, strings.Repeat("c", 100))
	}
	b.WriteString(" }\n")
	if err := applyNFTNetlink(ns, []byte(b.String())); err != nil {
		t.Fatalf("%d messages: %v", nlMaxMessages, err)
	}
	out, err := exec.Command("nsenter", "--net="+ns, "nft", "list", "chain", "ip", NFTable, long).CombinedOutput()
	if err != nil || bytes.Count(out, []byte("jump mark-for-masquerade")) != nlMaxMessages-1 {
		t.Errorf("the chain does not hold the %d rules (%v):\n%s", nlMaxMessages-1, err, out)
	}
}

// Every rule form the netlink writer knows is the rule nft writes for the same text: the
// kernel's expressions for a chain filled through applyNFTNetlink and for one filled by
// `nft -f` list alike under `nft --debug=netlink`, comments (user data) included.
func TestNFTNetlinkRulesAsNft(t *testing.T) {
	ns, _ := netnstest.Scratch(t)
	if out, err := exec.Command("nsenter", "--net="+ns, "nft", "add table ip "+NFTable+" ; add chain ip "+NFTable+" mark-for-masquerade ; add chain ip "+NFTable+" x").CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	rules := []string{
		"ip daddr 10.96.39.26 ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
		"ip saddr 10.244.0.0/20 goto x",
		"ip saddr 10.244.39.16 jump mark-for-masquerade",
		"meta l4proto tcp dnat to 10.244.39.16:8080",
		"meta l4proto udp dnat to 10.244.39.17:53",
		`ip saddr 10.244.0.0/16 goto x comment "short-circuit pod traffic"`,
		`fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"`,
		`fib saddr type local goto x comment "short-circuit local traffic"`,
		"jump mark-for-masquerade",
		"goto x",
	}
	listing := func(chain string) string {
		out, err := exec.Command("nsenter", "--net="+ns, "nft", "--debug=netlink", "list", "chain", "ip", NFTable, chain).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list chain %s: %v: %s", chain, err, out)
		}
		var exprs []string
		for _, l := range strings.Split(string(out), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "[") || strings.HasPrefix(l, "userdata") {
				exprs = append(exprs, l)
			}
		}
		return strings.Join(exprs, "\n")
	}
	for i, r := range rules {
		byNft, byNetlink := fmt.Sprintf("nft%d", i), fmt.Sprintf("nl%d", i)
		in := fmt.Sprintf("add chain ip %s %s\nadd chain ip %[1]s %[2]s { %s ; }\n", NFTable, byNft, r)
		cmd := exec.Command("nsenter", "--net="+ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft -f: %v: %s", err, out)
		}
		if err := applyNFTNetlink(ns, []byte(strings.ReplaceAll(in, byNft, byNetlink))); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		want, got := listing(byNft), listing(byNetlink)
		if want == "" || got != want {
			t.Errorf("%s:\nthrough netlink\n%s\nby nft\n%s", r, got, want)
		}
	}
}

// A full rendering programmed through netlink (one transaction, from a fresh namespace and
// over an existing table) leaves the table exactly as `nft -f` of the same rendering does:
// the same listing, the same expressions and user data for every rule and element
// (nft --debug=netlink), the same attributes of the table, chains and sets. Services with 0 to 3 endpoints (numgen vmaps: anonymous maps), with
// and without NodePorts (Cluster and Local), with and without opt.ServiceCIDR.
func TestNFTNetlinkFullAsNft(t *testing.T) {
	byNft, _ := netnstest.Scratch(t)
	byNetlink, _ := netnstest.Scratch(t)
	g := &svcGen{rng: rand.New(rand.NewSource(7))}
	var svcs []Service
	for len(svcs) < 60 {
		svcs = append(svcs, g.service()) // 0 to 3 endpoints
	}
	opts := []Options{
		{ClusterCIDR: "10.244.0.0/16", NodeName: "node0", NodeIPs: []string{"172.30.0.10", "172.30.0.11"}},
		{},
		partialOpt(),
	}
	long := benchSvcs(1200) // elements over 64 KB a line (chain names of 100 characters)
	for i := range long {
		long[i].Namespace = strings.Repeat("n", 60)
	}
	for i, c := range []struct {
		svcs []Service
		opt  Options
	}{{long, opts[2]}, {nftTestServices(), opts[0]}, {svcs, opts[0]}, {svcs[:30], opts[0]}, {svcs[10:], opts[1]}, {nil, opts[1]}, {benchSvcs(200), opts[0]}, {svcs, opts[2]}, {svcs[:20], opts[2]}} {
		in, _ := RenderNFTables(c.svcs, c.opt)
		nftnltest.LoadBoth(t, byNft, byNetlink, in, applyNFTNetlink)
		diff, want := nftnltest.Diff(t, byNft, byNetlink, NFTable)
		if diff != "" {
			t.Errorf("%d: %s", i, diff)
		}
		if !strings.Contains(want, "lookup reg 1 set service-ips dreg 0") {
			t.Fatalf("%d: the listing has no expressions:\n%s", i, nftnl.FirstN(want, 2000))
		}
	}
}

// The table, chains and sets a full rendering creates through netlink carry exactly the
// attributes nft gives them (comments, key types and byte orders, concatenations, hooks),
// a numgen vmap's anonymous map included.
func TestNFTNetlinkFullObjectsAsNft(t *testing.T) {
	byNft, _ := netnstest.Scratch(t)
	byNetlink, _ := netnstest.Scratch(t)
	s := nftTestServices()[1]
	s.NodePort = 30080
	in, _ := RenderNFTables([]Service{s, nftTestServices()[0]}, Options{ClusterCIDR: "10.244.0.0/16", NodeName: "node0", NodeIPs: []string{"172.30.0.10"}})
	nftnltest.LoadBoth(t, byNft, byNetlink, in, applyNFTNetlink)
	if diff, _ := nftnltest.Diff(t, byNft, byNetlink, NFTable); diff != "" {
		t.Error(diff)
	}
}

// A transaction the kernel refuses (here a rule going to a chain that does not exist, in
// the middle of a full load) returns the kernel's error and changes nothing: the table
// programmed before stays as it was.
func TestNFTNetlinkFailedTransaction(t *testing.T) {
	ns, _ := netnstest.Scratch(t)
	in, _ := RenderNFTables(nftTestServices()[1:], Options{ClusterCIDR: "10.244.0.0/16"})
	if err := applyNFTNetlink(ns, in); err != nil {
		t.Fatal(err)
	}
	before := nftnltest.DebugListing(t, ns, NFTable)
	in2, _ := RenderNFTables(benchSvcs(50), Options{ClusterCIDR: "10.244.0.0/16"})
	lines := strings.Split(string(in2), "\n")
	bad := 0 // the line changed (1 the first)
	for i, l := range lines {
		if strings.HasPrefix(l, "add rule ") && strings.Contains(l, " goto endpoint-") {
			lines[i] = l[:strings.LastIndex(l, " goto ")] + " goto no-such-chain"
			bad = i + 1
			break
		}
	}
	err := applyNFTNetlink(ns, []byte(strings.Join(lines, "\n")))
	if err == nil || errors.Is(err, errNFTUntranslated) || !errors.Is(err, unix.ENOENT) {
		t.Fatalf("a rule going to a missing chain gives %v, want the kernel's ENOENT", err)
	}
	if want := fmt.Sprintf("of input line %d:", bad); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not name the input line (%q): %v", want, err)
	}
	if after := nftnltest.DebugListing(t, ns, NFTable); after != before {
		t.Errorf("the failed transaction changed the table:\n%s", nftnltest.FirstDiff(before, after))
	}
}
