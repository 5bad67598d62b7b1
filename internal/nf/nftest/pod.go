package nftest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nf"
)

// CheckInPod proves a kind's pod form on the topology a bridge CNI gives the pods of one node:
// a "node" namespace with a Linux bridge, and client, NF and server namespaces each attached
// to it by a veth named eth0, all in one /24. The NFs get nf.PodSysctls, then nf.StartPodChain
// and nf.CheckPodChain run with PodRunners that exec in the namespaces (as the kube backend's
// exec into the pods), and Verify sends allowed and denied traffic through chains of one and
// two NFs. A client that routes around the NFs must be caught as bypassed.
func CheckInPod(t *testing.T, k nf.PodKind) {
	for _, c := range []struct{ n, rules int }{{1, 10}, {2, 1000}} {
		t.Run(fmt.Sprintf("len=%d/rules=%d", c.n, c.rules), func(t *testing.T) {
			ch, hops := BuildPods(t, k, c.n, c.rules)
			ctx := context.Background()
			before, err := k.Dropped(ctx, hops[1].Run)
			if err != nil {
				t.Fatal(err)
			}
			Traffic(t, ch)
			after, err := k.Dropped(ctx, hops[1].Run)
			if err != nil {
				t.Fatal(err)
			}
			// The denied UDP datagrams and TCP SYNs all end at the first NF.
			if after-before < 20 {
				t.Errorf("the first NF dropped %d packets during the denied traffic, want >= 20", after-before)
			}
		})
	}
	t.Run("bypassed", func(t *testing.T) {
		// The client sends to the server directly (as after an ICMP redirect, or on a CNI
		// whose pods do not share a segment): the replies still cross the NF and die there,
		// so the pings fail as they should, and only the route check can tell.
		_, hops := BuildPods(t, k, 1, 10)
		ctx := context.Background()
		client, nf1, server := hops[0], hops[1], hops[2]
		if _, err := client.Run(ctx, nil, "ip", "route", "replace", server.IP.String()+"/32", "dev", nf.PodInterface); err != nil {
			t.Fatal(err)
		}
		err := nf.CheckPodChain(ctx, k, client, server, nf1)
		if !errors.Is(err, nf.ErrBypassed) {
			t.Fatalf("CheckPodChain on a bypassed chain: %v, want ErrBypassed", err)
		}
		t.Logf("caught: %v", err)
	})
}

// BuildPods builds the bridge-CNI topology of CheckInPod with n NFs of kind k and rules rules
// and programs it with nf.StartPodChain and nf.CheckPodChain (the NFs get nf.PodSysctls). It returns the chain (for Verify) and the hops: client, NFs,
// server. Everything is removed when the test ends.
func BuildPods(t *testing.T, k nf.PodKind, n, rules int) (*nf.Chain, []nf.PodHop) {
	t.Helper()
	NeedRoot(t)
	if err := k.Usable(); err != nil {
		t.Skipf("%s not usable on this host: %v", k.Name(), err)
	}
	prefix := netnstest.Prefix()
	node := prefix + "-node"
	names := []string{prefix + "-c"}
	for i := 1; i <= n; i++ {
		names = append(names, nfName(prefix, i))
	}
	names = append(names, prefix+"-s")
	t.Cleanup(func() {
		for _, ns := range append([]string{node}, names...) {
			_ = netns.KillAll(ns)
			if err := netns.Delete(ns); err != nil {
				t.Errorf("delete %s: %v", ns, err)
			}
		}
	})
	for _, ns := range append([]string{node}, names...) {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
	}
	h, err := netns.Netlink(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	hops := make([]nf.PodHop, len(names))
	for i, ns := range names {
		ip := netip.AddrFrom4([4]byte{10, 251, 0, byte(10 + i)})
		hops[i] = nf.PodHop{IP: ip, Run: nsRunner(ns)}
		if err := podIface(h, br, node, ns, fmt.Sprintf("veth%d", i), ip); err != nil {
			t.Fatal(err)
		}
		if i == 0 || i == len(names)-1 {
			continue
		}
		for key, v := range nf.PodSysctls() {
			if err := netns.SetSysctl(ns, strings.ReplaceAll(key, ".", "/"), v); err != nil {
				t.Fatal(err)
			}
		}
	}
	client, server, nfs := hops[0], hops[len(hops)-1], hops[1:len(hops)-1]
	ctx := context.Background()
	rs, err := nf.StartPodChain(ctx, k, Ports, rules, client, server, nfs)
	if err != nil {
		t.Fatal(err)
	}
	if err := nf.CheckPodChain(ctx, k, client, server, nfs[0]); err != nil {
		t.Fatal(err)
	}
	ch := &nf.Chain{Spec: nf.ChainSpec{Kind: k, Length: n, Rules: rules, Ports: Ports, Client: names[0], Server: names[len(names)-1]},
		ClientIP: client.IP, ServerIP: server.IP, Rules: rs}
	return ch, hops
}

// podIface gives namespace ns an eth0 with ip/24, its peer (named peer) on the node's bridge.
func podIface(h *netlink.Handle, br *netlink.Bridge, node, ns, peer string, ip netip.Addr) error {
	if err := netns.VethPair(node, peer, ns, nf.PodInterface, 1500); err != nil {
		return fmt.Errorf("veth for %s: %w", ns, err)
	}
	lk, err := h.LinkByName(peer)
	if err != nil {
		return err
	}
	if err := h.LinkSetMaster(lk, br); err != nil {
		return err
	}
	if err := nf.AddAddr(ns, nf.PodInterface, ip, 24); err != nil {
		return err
	}
	ph, err := netns.Netlink(ns)
	if err != nil {
		return err
	}
	defer ph.Close()
	lo, err := ph.LinkByName("lo")
	if err != nil {
		return err
	}
	return ph.LinkSetUp(lo)
}

// nsRunner is a PodRunner that runs in a namespace of this host.
func nsRunner(ns string) nf.PodRunner {
	return func(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
		if len(argv) == 0 {
			return nil, errors.New("empty command")
		}
		return netns.Output(netns.Path(ns), argv[0], argv[1:], stdin)
	}
}
