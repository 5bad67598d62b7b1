package afpacket

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHtons(t *testing.T) {
	if got := Htons(unix.ETH_P_IP); got != 0x0008 {
		t.Fatalf("Htons(0x0800) = %#04x", got)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// ringMaps counts the mappings of AF_PACKET rings in this process.
func ringMaps(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "socket:[")
}

// OpenRing leaves no socket open and no ring mapped when a step fails, and its rings map and
// read statistics when none does. No interface is bound: nothing is sent or received.
func TestOpenRingCleansUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (AF_PACKET sockets)")
	}
	fds, maps := openFDs(t), ringMaps(t)
	ring := func(fd int) (int, error) {
		if err := SetInts(fd, unix.SOL_PACKET, [2]int{unix.PACKET_VERSION, unix.TPACKET_V3}); err != nil {
			return 0, err
		}
		req := unix.TpacketReq3{Block_size: 1 << 16, Block_nr: 2, Frame_size: 2048, Frame_nr: 64, Retire_blk_tov: 10}
		return 2 << 16, unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req)
	}
	boom := errors.New("setup failed")
	for name, c := range map[string]struct {
		ifindex int
		setup   func(fd int) (int, error)
	}{
		"setup fails": {1, func(int) (int, error) { return 0, boom }},
		"no ring":     {1, func(int) (int, error) { return 4096, nil }}, // nothing to map
		"no such if":  {1 << 30, ring},                                  // the bind fails after the map
		"bad option":  {1, func(fd int) (int, error) { return 0, SetInts(fd, unix.SOL_PACKET, [2]int{unix.PACKET_VERSION, 99}) }},
	} {
		fd, mem, err := OpenRing(c.ifindex, 0, false, c.setup)
		if err == nil || fd != -1 || mem != nil {
			t.Errorf("%s: fd %d, %d bytes mapped, error %v; want -1, none and an error", name, fd, len(mem), err)
		}
		if got := openFDs(t); got != fds {
			t.Errorf("%s: %d file descriptors open, %d before", name, got, fds)
		}
		if got := ringMaps(t); got != maps {
			t.Errorf("%s: %d rings mapped, %d before", name, got, maps)
		}
	}
	// Interface 1 is the loopback of whatever namespace the test runs in; protocol 0 receives
	// nothing from it.
	fd, mem, err := OpenRing(1, 0, false, ring)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem) != 2<<16 || ringMaps(t) != maps+1 {
		t.Errorf("%d bytes mapped, %d rings", len(mem), ringMaps(t))
	}
	if st, err := ReadStats(fd); err != nil || st != (Stats{}) {
		t.Errorf("statistics of an idle ring: %+v, %v", st, err)
	}
	if err := Close(fd, mem); err != nil {
		t.Fatal(err)
	}
	if openFDs(t) != fds || ringMaps(t) != maps {
		t.Errorf("after Close: %d file descriptors (%d before), %d rings (%d before)", openFDs(t), fds, ringMaps(t), maps)
	}
}
