package nf

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// testPair makes two new namespaces (cnbt + 6 hex digits, -a and -b) joined by a veth pair
// (vethPair, as a chain makes them), eth0 in each, up, removed when the test ends; it returns
// the two ends.
func testPair(t *testing.T) (a, b Endpoint) {
	t.Helper()
	p := netnstest.NewPair(t, [2]string{"a", "b"}, [2]string{"eth0", "eth0"}, netip.MustParsePrefix("10.253.0.0/24"))
	return Endpoint{NS: p.NS[0], Dev: p.Dev[0]}, Endpoint{NS: p.NS[1], Dev: p.Dev[1]}
}

func featureOn(t *testing.T, ep Endpoint, f Feature) bool {
	t.Helper()
	on, err := FeatureOn(ep, f)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

// SetFeature and SwitchFeature change exactly the one feature of the one interface, to either
// value, and the undo restores what was there.
func TestSwitchFeature(t *testing.T) {
	a, b := testPair(t)
	for _, f := range []Feature{TxChecksum, GRO} {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v %v", f, on), func(t *testing.T) {
				before := map[Endpoint]map[Feature]bool{}
				for _, ep := range []Endpoint{a, b} {
					before[ep] = map[Feature]bool{}
					for _, g := range []Feature{TxChecksum, GRO} {
						before[ep][g] = featureOn(t, ep, g)
					}
				}
				undo, err := SwitchFeature(a, f, on)
				if err != nil {
					t.Fatal(err)
				}
				if got := featureOn(t, a, f); got != on {
					t.Errorf("%v of %v: %v after switching it to %v", f, a, got, on)
				}
				for _, ep := range []Endpoint{a, b} {
					for _, g := range []Feature{TxChecksum, GRO} {
						if (ep != a || g != f) && featureOn(t, ep, g) != before[ep][g] {
							t.Errorf("%v of %v changed too", g, ep)
						}
					}
				}
				if err := undo(); err != nil {
					t.Fatal(err)
				}
				if got := featureOn(t, a, f); got != before[a][f] {
					t.Errorf("%v of %v: %v after undo, was %v", f, a, got, before[a][f])
				}
				if err := undo(); err != nil {
					t.Errorf("second undo: %v", err)
				}
				was, err := SetFeature(a, f, on)
				if err != nil {
					t.Fatal(err)
				}
				if was != before[a][f] {
					t.Errorf("SetFeature says %v of %v was %v, want %v", f, a, was, before[a][f])
				}
				if was, err = SetFeature(a, f, before[a][f]); err != nil || was != on {
					t.Errorf("SetFeature back: was %v (want %v), %v", was, on, err)
				}
			})
		}
	}
}

// An endpoint without a namespace or interface is left alone.
func TestSwitchFeatureNoEndpoint(t *testing.T) {
	for _, ep := range []Endpoint{{}, {NS: "cnbt-none"}, {Dev: "eth0"}} {
		undo, err := SwitchFeature(ep, TxChecksum, false)
		if err != nil {
			t.Fatalf("%v: %v", ep, err)
		}
		if err := undo(); err != nil {
			t.Errorf("%v: undo: %v", ep, err)
		}
	}
}

// Undoing on an interface or a namespace that is gone is no error; switching there is one.
func TestSwitchFeatureGone(t *testing.T) {
	a, b := testPair(t)
	undoA, err := SwitchFeature(a, TxChecksum, !featureOn(t, a, TxChecksum))
	if err != nil {
		t.Fatal(err)
	}
	undoB, err := SwitchFeature(b, GRO, !featureOn(t, b, GRO))
	if err != nil {
		t.Fatal(err)
	}

	// The interface goes (and its peer with it); b's namespace stays.
	h, err := netns.Netlink(b.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lk, err := h.LinkByName(b.Dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(lk); err != nil {
		t.Fatal(err)
	}
	if _, err := SetFeature(b, GRO, true); !errors.Is(err, unix.ENODEV) {
		t.Errorf("SetFeature on a deleted interface: %v, want ENODEV", err)
	}
	if err := undoB(); err != nil {
		t.Errorf("undo on a deleted interface: %v", err)
	}

	// The namespace goes.
	if err := netns.Delete(a.NS); err != nil {
		t.Fatal(err)
	}
	if _, err := SetFeature(a, TxChecksum, true); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SetFeature in a deleted namespace: %v, want ErrNotExist", err)
	}
	if err := undoA(); err != nil {
		t.Errorf("undo in a deleted namespace: %v", err)
	}
}
