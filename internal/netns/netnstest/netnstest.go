// Package netnstest makes network namespaces for tests: a test prefix, and two namespaces
// joined by a veth pair.
package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/netns"
)

// Prefix is a fresh test prefix: "cnbt" and 6 hex digits (the suite's leftover checks look
// for cnbt).
func Prefix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "cnbt" + hex.EncodeToString(b)
}

// Pair is two namespaces joined by a veth pair, both ends up with an address of one /24.
type Pair struct {
	Prefix string
	NS     [2]string     // the namespaces: Prefix-suffix
	Dev    [2]string     // the veth ends, NS[i]'s is Dev[i]
	IP     [2]netip.Addr // Dev[i]'s address: the subnet's .1 and .2
}

// NewPair makes a pair under a fresh prefix, namespaces named with suffix, ends named dev,
// addresses from subnet (a /24), and removes it when the test ends, also when it fails. It
// skips the test when not root.
func NewPair(t testing.TB, suffix, dev [2]string, subnet netip.Prefix) Pair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	p := Pair{Prefix: Prefix(), Dev: dev}
	base := subnet.Masked().Addr()
	p.IP[0], p.IP[1] = base.Next(), base.Next().Next()
	for i := range p.NS {
		p.NS[i] = p.Prefix + "-" + suffix[i]
	}
	t.Cleanup(func() {
		for _, ns := range p.NS {
			_ = netns.KillAll(ns)
			if err := netns.Delete(ns); err != nil {
				t.Errorf("delete %s: %v", ns, err)
			}
		}
	})
	for _, ns := range p.NS {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := netns.VethPair(p.NS[0], dev[0], p.NS[1], dev[1], 1500); err != nil {
		t.Fatal(err)
	}
	for i, ns := range p.NS {
		err := netns.WithNetlink(ns, func(h *netlink.Handle) error {
			lk, err := h.LinkByName(dev[i])
			if err != nil {
				return err
			}
			return h.AddrAdd(lk, &netlink.Addr{IPNet: &net.IPNet{IP: p.IP[i].AsSlice(), Mask: net.CIDRMask(24, 32)}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Eventually polls ok every 10 ms for up to d and says whether it held.
func Eventually(d time.Duration, ok func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
