package ethtool

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// A veth has one receive queue and says whether GRO is on (the kernel turns it off on a new
// veth); switched on, it reads on; an interface that does not exist is an error.
func TestOnAVeth(t *testing.T) {
	p := netnstest.NewPair(t, [2]string{"a", "b"}, [2]string{"eth0", "eth0"}, netip.MustParsePrefix("10.253.1.0/24"))
	err := netns.Do(p.NS[0], func() error {
		n, err := RxQueues(p.Dev[0])
		if err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("%s has %d receive queues, want 1", p.Dev[0], n)
		}
		if err := SetValue(p.Dev[0], unix.ETHTOOL_SGRO, 1); err != nil {
			return err
		}
		if v, err := Value(p.Dev[0], unix.ETHTOOL_GGRO); err != nil || v == 0 {
			t.Errorf("GRO after switching it on: %d %v", v, err)
		}
		if _, err := RxQueues("cnbtnone"); !errors.Is(err, unix.ENODEV) {
			t.Errorf("RxQueues of a missing interface: %v, want ENODEV", err)
		}
		if _, err := Value("cnbtnone", unix.ETHTOOL_GGRO); !errors.Is(err, unix.ENODEV) {
			t.Errorf("Value of a missing interface: %v, want ENODEV", err)
		}
		if _, err := RxQueues("a-name-far-too-long"); err == nil {
			t.Error("RxQueues of a name longer than IFNAMSIZ: no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
