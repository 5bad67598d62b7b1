package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"
)

// nftEdgeProgram has what the generated clusters may miss: an interval set from 0.0.0.0 to
// 255.255.255.255 with holes (its first range starts at the bottom of the address space, its
// last ends at the top: no interval end there), a set of address, protocol and port, every
// port form (any, a protocol's every port, one port, a range; TCP, UDP, SCTP), any peer, a
// policy direction without rules, and a pod isolated one way only.
func nftEdgeProgram() *Program {
	return &Program{
		Sets: []Set{
			{Name: "NETS-ALL-BUT", Kind: SetNets, Members: []Member{{Addr: "0.0.0.0/0"}, {Addr: "10.0.0.0/8", Except: true}, {Addr: "10.1.0.0/16"}, {Addr: "192.168.7.0/24", Except: true}}},
			{Name: "ADDRS", Kind: SetAddrs, Members: []Member{{Addr: "10.244.0.2"}, {Addr: "10.244.1.9"}}},
			{Name: "ADDR-PORTS", Kind: SetAddrPorts, Members: []Member{{Addr: "10.244.0.2", Protocol: "TCP", Port: 8080}, {Addr: "10.244.1.9", Protocol: "UDP", Port: 53}, {Addr: "10.244.1.9", Protocol: "SCTP", Port: 9}}},
			{Name: "UNUSED", Kind: SetAddrs, Members: []Member{{Addr: "10.9.9.9"}}},
		},
		Policies: []PolicyChain{
			{Name: "POL-A", Namespace: "a", Policy: "a", Ingress: []Rule{
				{Peers: []Peer{{Set: "ADDRS"}, {Set: "NETS-ALL-BUT"}}, Ports: []PortMatch{{Protocol: "TCP", Port: 80, EndPort: 80}, {Protocol: "UDP", Port: 1000, EndPort: 2000}, {Protocol: "SCTP", Port: 5, EndPort: 5}}},
				{Peers: []Peer{{Any: true}}, Ports: []PortMatch{{Any: true}}},
			}, Egress: []Rule{
				{Peers: []Peer{{Any: true}}, Ports: []PortMatch{{Set: "ADDR-PORTS"}, {Protocol: "UDP"}}},
			}},
			{Name: "POL-EMPTY", Namespace: "a", Policy: "empty"},
		},
		Pods: []PodFirewall{
			{Pod: "a/p0", IP: "10.244.0.2", Chain: "POD-P0", IngressOf: []string{"POL-A", "POL-EMPTY"}, EgressOf: []string{"POL-A"}},
			{Pod: "a/p1", IP: "10.244.0.3", Chain: "POD-P1", IngressOf: []string{"POL-EMPTY"}},
		},
	}
}

// nftNetlinkPrograms are the programs the netlink tests load: generated clusters (as the
// property test makes them: selectors, ipBlocks with exceptions, named and numbered ports,
// ranges), the edge program, a bench-like one and an empty one.
func nftNetlinkPrograms(t *testing.T) []*Program {
	var progs []*Program
	for seed := range uint64(10) {
		c := genCase(seed)
		var local []Pod
		for i, p := range c.pods {
			if c.node[i] == 0 {
				p.Local = true
				local = append(local, p)
			}
		}
		p, err := Compile(c.pods, c.nss, c.pols)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		progs = append(progs, p)
	}
	return append(progs, nftEdgeProgram(), applyBenchProgram(30, 12), &Program{})
}

// A full rendering programmed through netlink (one transaction, into a fresh namespace and
// over the table an earlier rendering left) leaves the table exactly as `nft -f` of the same
// rendering does: the same listing, the same expressions and user data for every rule, the
// same elements (nft --debug=netlink), and the same attributes of the table, its chains and
// its sets as the kernel holds them.
func TestNFTNetlinkFullAsNft(t *testing.T) {
	byNft, _ := netnstest.Scratch(t)
	byNetlink, _ := netnstest.Scratch(t)
	progs := nftNetlinkPrograms(t)
	sawInterval := false
	for i, p := range progs {
		in, c := RenderNFTables(p)
		nftnltest.LoadBoth(t, byNft, byNetlink, in, applyNFTNetlink)
		diff, want := nftnltest.Diff(t, byNft, byNetlink, NFTablesTable)
		if diff != "" {
			t.Errorf("%d (%+v): %s", i, c, diff)
		}
		if !strings.Contains(want, "lookup reg 1 set pod-egress dreg 0") {
			t.Fatalf("%d: the listing has no expressions:\n%s", i, want)
		}
		sawInterval = sawInterval || strings.Contains(want, "flags interval")
	}
	if !sawInterval {
		t.Error("no program had an interval set")
	}
}

// What is not a full rendering (a partial one) is left to nft: untranslated, nothing sent.
func TestNFTNetlinkPartialToNft(t *testing.T) {
	p := nftEdgeProgram()
	_, st, _ := RenderNFTablesPartial(nil, p)
	p2 := nftEdgeProgram()
	p2.Pods = p2.Pods[:1]
	in, _, _ := RenderNFTablesPartial(st, p2)
	if len(in) == 0 {
		t.Fatal("the change renders nothing")
	}
	if _, err := translateNFT(in); err == nil {
		t.Errorf("a partial rendering was translated:\n%s", in)
	}
	if err := applyNFTNetlink("/nonexistent", in); !errors.Is(err, errNFTUntranslated) {
		t.Errorf("applyNFTNetlink of a partial rendering = %v, want errNFTUntranslated", err)
	}
	full, _ := RenderNFTables(p)
	if _, err := translateNFT(full); err != nil {
		t.Errorf("the full rendering is not translated: %v", err)
	}
}
