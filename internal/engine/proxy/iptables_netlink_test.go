package proxy

import (
	"errors"
	"math/rand"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"
)

// iptState is what iptables-nft-restore or its netlink counterpart leaves in the namespace
// at ns: iptables-nft-save of nat and filter without its comment lines, then every table,
// chain and rule as the kernel holds it (nftnltest.RawObjects: every attribute, the xt
// matches' and targets' structures included).
func iptState(t *testing.T, ns string) (save, raw string) {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"nat", "filter"} {
		b.WriteString(nftnltest.IPTSave(t, ns, table))
	}
	var objs []string
	for _, msg := range []int{unix.NFT_MSG_GETTABLE, unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_GETRULE} {
		objs = append(objs, nftnltest.RawObjects(t, ns, msg)...)
	}
	return b.String(), strings.Join(objs, "\n")
}

// chainCounters is a chain's NFTA_CHAIN_COUNTERS in a RawObjects line.
var chainCounters = regexp.MustCompile(` 8=0c0002[0-9a-f]{42}`)

// Every input the iptables renderer writes, programmed through netlink, leaves the nat and
// filter tables exactly as iptables-nft-restore --noflush of the same input (the tools' way,
// hooks checked with -C first) does, step after step in the same two namespaces: the fixed
// steps (NodePorts Cluster and Local, endpoints added and removed: partial renderings with
// -X deletions), then random changes; comments, statistic, DNAT, MASQUERADE, addrtype,
// marks and REJECT among the forms. A foreign rule in each table stays throughout. Each
// input goes through netlink, not the tools' fallback.
func TestIPTNetlinkAsRestore(t *testing.T) {
	byTools, _ := netnstest.Scratch(t)
	byNetlink, _ := netnstest.Scratch(t)
	const foreign = "*nat\n:FOREIGN - [0:0]\n-A POSTROUTING -s 10.99.0.0/16 -j FOREIGN\nCOMMIT\n*filter\n-A INPUT -p udp -m udp --dport 53 -j ACCEPT\nCOMMIT\n"
	for _, ns := range []string{byTools, byNetlink} {
		cmd := exec.Command("nsenter", "--net="+ns, "iptables-nft-restore", "--noflush")
		cmd.Stdin = strings.NewReader(foreign)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	seq := fixedSteps()
	g := &svcGen{rng: rand.New(rand.NewSource(7))}
	svcs := seq[len(seq)-1].svcs
	for range 15 {
		var what string
		svcs, what = g.change(svcs)
		seq = append(seq, partialStep{what, svcs})
	}
	opt := partialOpt()
	var state *IPTState
	forms := map[string]bool{}
	for i, step := range seq {
		in, next, _ := RenderIPTablesPartial(state, step.svcs, opt)
		state = next
		for _, f := range []string{"--comment", "statistic", "DNAT", "MASQUERADE", "addrtype", "REJECT", "--or-mark", "-X "} {
			forms[f] = forms[f] || strings.Contains(string(in), f)
		}
		if err := applyIPTTools(byTools, "nft", "", in); err != nil {
			t.Fatalf("%d (%s): tools: %v\n%s", i, step.what, err, in)
		}
		if err := applyIPTNetlink(byNetlink, in); err != nil {
			t.Fatalf("%d (%s): netlink: %v\n%s", i, step.what, err, in)
		}
		wantSave, wantRaw := iptState(t, byTools)
		// The tools' way puts -Z first in each table (wholeTableCache, for iptables-nft's
		// cache), which turns the base chains' packet counters on; kube-proxy's restores
		// have no -Z, and neither has the netlink way: counters are left out of the chains.
		wantRaw = chainCounters.ReplaceAllString(wantRaw, "")
		gotSave, gotRaw := iptState(t, byNetlink)
		if gotSave != wantSave {
			t.Fatalf("%d (%s): iptables-nft-save differs:\n%s", i, step.what, nftnltest.FirstDiff(wantSave, gotSave))
		}
		if !strings.Contains(wantSave, "-A POSTROUTING -s 10.99.0.0/16 -j FOREIGN") || !strings.Contains(wantSave, "-A INPUT -p udp -m udp --dport 53 -j ACCEPT") {
			t.Fatalf("%d: a foreign rule is gone:\n%s", i, wantSave)
		}
		if gotRaw != wantRaw {
			t.Fatalf("%d (%s): the objects differ:\n%s", i, step.what, nftnltest.FirstDiff(wantRaw, gotRaw))
		}
	}
	for f, seen := range forms {
		if !seen {
			t.Errorf("no input had %q", f)
		}
	}
}

// Inputs with what nftnl does not write go to the tools, with nothing sent.
func TestIPTNetlinkUntranslated(t *testing.T) {
	ns, _ := netnstest.Scratch(t)
	_, before := iptState(t, ns)
	for _, in := range []string{
		"*nat\n:X - [0:0]\n-A X -j ACCEPT\n-A X -m limit --limit 1/s -j ACCEPT\nCOMMIT\n",
		"*nat\n-F X\nCOMMIT\n",
		"*mangle\n:X - [0:0]\n-A PREROUTING -j X\nCOMMIT\n",
	} {
		if err := applyIPTNetlink(ns, []byte(in)); !errors.Is(err, errIPTUntranslated) {
			t.Errorf("%q: %v, want errIPTUntranslated", in, err)
		}
		if _, after := iptState(t, ns); after != before {
			t.Errorf("%q: the namespace changed:\n%s", in, after)
		}
	}
}
