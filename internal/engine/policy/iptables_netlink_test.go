package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"
)

// iptForeign is what another owner has in the filter table before the engine comes: a chain
// and FORWARD rules around it, which applying and clearing the engine must leave as they are.
const iptForeign = `*filter
:FOREIGN - [0:0]
-A FORWARD -s 10.99.0.0/16 -j FOREIGN
-A FOREIGN -p tcp -m tcp --dport 22 -j ACCEPT
-A FOREIGN -m conntrack --ctstate INVALID -j DROP
COMMIT
`

// iptSaved is iptables-nft-save -t filter of the namespace at ns without its comment lines,
// and the names of its ipsets, sorted.
func iptSaved(t *testing.T, ns string) string {
	t.Helper()
	sets, err := output(ns, "ipset", []string{"list", "-n"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(sets))
	slices.Sort(names)
	return nftnltest.IPTSave(t, ns, "filter") + "ipsets: " + strings.Join(names, " ")
}

// iptRaw is every rule, chain and table of the namespace at ns as the kernel holds it
// (nftnltest.RawObjects: every attribute, the xt matches' and targets' structures included).
func iptRaw(t *testing.T, ns string) string {
	t.Helper()
	var out []string
	for _, msg := range []int{unix.NFT_MSG_GETTABLE, unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_GETRULE} {
		out = append(out, nftnltest.RawObjects(t, ns, msg)...)
	}
	return strings.Join(out, "\n")
}

// A rendering programmed through netlink leaves the filter table, its ipsets and every
// attribute of its rules, chains and table exactly as iptables-nft-restore (the tools' way)
// does, step after step in the same two namespaces: each program applied over the one
// before (chains, sets and the hook of the earlier rendering replaced), and at the end the
// engine removed; a foreign chain and its FORWARD rule stay throughout. Programs with SCTP
// ports (xt match sctp) are in the list, and the applies are checked to have gone through
// netlink, not through the tools' fallback.
func TestIPTNetlinkAsRestore(t *testing.T) {
	byTools, _ := netnstest.Scratch(t)
	byNetlink, _ := netnstest.Scratch(t)
	for _, ns := range []string{byTools, byNetlink} {
		if _, err := output(ns, "iptables-nft-restore", []string{"--noflush"}, []byte(iptForeign)); err != nil {
			t.Fatal(err)
		}
	}
	progs := append(nftNetlinkPrograms(t), nil) // nil: the engine removed
	sawSCTP, sawSet := false, false
	for i, p := range progs {
		var sets, filter []byte
		what := "removed"
		if p != nil {
			var c Counts
			sets, filter, c = RenderIPTables(p)
			what = fmt.Sprintf("%+v", c)
			sawSCTP = sawSCTP || strings.Contains(string(filter), "-m sctp")
			sawSet = sawSet || strings.Contains(string(filter), "--match-set")
		}
		if err := applyIPTTools(byTools, "nft", sets, filter); err != nil {
			t.Fatalf("%d: tools: %v", i, err)
		}
		if err := applyIPTNetlink(byNetlink, sets, filter); err != nil {
			t.Fatalf("%d: netlink: %v", i, err)
		}
		want, got := iptSaved(t, byTools), iptSaved(t, byNetlink)
		if got != want {
			t.Fatalf("%d (%s): iptables-nft-save differs:\n%s", i, what, nftnltest.FirstDiff(want, got))
		}
		if !strings.Contains(want, "-A FOREIGN -p tcp -m tcp --dport 22 -j ACCEPT") {
			t.Fatalf("%d: the foreign chain is gone:\n%s", i, want)
		}
		if w, g := iptRaw(t, byTools), iptRaw(t, byNetlink); g != w {
			t.Fatalf("%d (%s): the objects differ:\n%s\n\n%s\n\n%s", i, what, nftnltest.FirstDiff(w, g), w, g)
		}
	}
	if !sawSCTP || !sawSet {
		t.Errorf("no program had an SCTP port (%v) or a set match (%v)", sawSCTP, sawSet)
	}
}

// What IPTRule does not know leaves the rendering to the tools, before anything is sent.
func TestIPTNetlinkUntranslated(t *testing.T) {
	for _, in := range []string{
		"*filter\n:X - [0:0]\n-I X 1 -j ACCEPT\nCOMMIT\n",
		"*filter\n:X - [0:0]\n-A X -m limit --limit 1/s -j ACCEPT\nCOMMIT\n",
		"*filter\n:X - [0:0]\n-A X ! -p tcp -j ACCEPT\nCOMMIT\n",
		"*filter\n:X - [0:0]\n-A X -j LOG\nCOMMIT\n",
	} {
		ns, _ := netnstest.Scratch(t)
		before := iptRaw(t, ns)
		if err := applyIPTNetlink(ns, nil, []byte(in)); !errors.Is(err, errIPTUntranslated) {
			t.Errorf("%q: %v, want errIPTUntranslated", in, err)
		}
		if after := iptRaw(t, ns); after != before {
			t.Errorf("%q: the namespace changed:\n%s", in, after)
		}
	}
}
