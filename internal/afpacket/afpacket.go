// Package afpacket holds the low-level pieces of AF_PACKET sockets that every user of them
// needs alike (the user-space firewall in internal/nf/userspace and the packet engine in
// internal/pktengine): opening, socket options, binding to an interface, promiscuous mode,
// mapping a ring, and the ring's statistics. What a user does with its ring (TPACKET_V2 slots,
// TPACKET_V3 blocks, a TX ring) stays with that user.
package afpacket

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Htons converts a 16-bit value to network byte order (what sockaddr_ll and socket() take).
func Htons(v uint16) uint16 { return v<<8 | v>>8 }

// Open opens a raw AF_PACKET socket with protocol 0: it receives nothing until it is bound
// with a protocol, so a ring can be set up first.
func Open() (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open an AF_PACKET socket (needs CAP_NET_RAW): %w", err)
	}
	return fd, nil
}

// SetInts sets integer socket options of one level, each {option, value}, and names the one
// that fails.
func SetInts(fd, level int, opts ...[2]int) error {
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, level, o[0], o[1]); err != nil {
			return fmt.Errorf("setsockopt %d/%d=%d: %w", level, o[0], o[1], err)
		}
	}
	return nil
}

// SetBuffer sets a socket's send (unix.SO_SNDBUF) or receive (unix.SO_RCVBUF) buffer to
// bytes: past the host's limit (net.core.wmem_max, rmem_max) with the FORCE option where the
// process may (CAP_NET_ADMIN: the lab), else up to that limit (a pod of a cluster has
// CAP_NET_RAW but not CAP_NET_ADMIN).
func SetBuffer(fd, opt, bytes int) error {
	force := map[int]int{unix.SO_SNDBUF: unix.SO_SNDBUFFORCE, unix.SO_RCVBUF: unix.SO_RCVBUFFORCE}[opt]
	if force == 0 {
		return fmt.Errorf("SetBuffer: option %d is neither SO_SNDBUF nor SO_RCVBUF", opt)
	}
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, bytes)
	if errors.Is(err, unix.EPERM) {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, bytes)
	}
	if err != nil {
		return fmt.Errorf("socket buffer (option %d) of %d bytes: %w", opt, bytes, err)
	}
	return nil
}

// Bind binds fd to interface ifindex for protocol (an ETH_P_* value in host order; 0: the
// socket sends through the interface but receives nothing).
func Bind(fd, ifindex int, protocol uint16) error {
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: Htons(protocol), Ifindex: ifindex}); err != nil {
		return fmt.Errorf("bind to interface %d: %w", ifindex, err)
	}
	return nil
}

// Promisc puts interface ifindex into promiscuous mode for as long as fd is open (for
// interfaces that filter by MAC address; veth does not).
func Promisc(fd, ifindex int) error {
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP,
		&unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}); err != nil {
		return fmt.Errorf("promiscuous mode on interface %d: %w", ifindex, err)
	}
	return nil
}

// MapRing maps the size bytes of the ring(s) set up on fd (PACKET_RX_RING and/or
// PACKET_TX_RING), populated at once so that the first frames do not fault.
func MapRing(fd, size int) ([]byte, error) {
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap the ring (%d bytes): %w", size, err)
	}
	return mem, nil
}

// OpenRing opens an AF_PACKET socket, lets setup set its options and request its ring(s)
// (setup returns their size in bytes), maps the rings, binds the socket to interface ifindex
// for protocol (see Bind) and, with promisc, puts the interface in promiscuous mode. On error
// nothing is left open.
func OpenRing(ifindex int, protocol uint16, promisc bool, setup func(fd int) (size int, err error)) (fd int, mem []byte, err error) {
	if fd, err = Open(); err != nil {
		return -1, nil, err
	}
	defer func() {
		if err != nil {
			_ = Close(fd, mem)
			fd, mem = -1, nil
		}
	}()
	size, err := setup(fd)
	if err != nil {
		return
	}
	if mem, err = MapRing(fd, size); err != nil {
		return
	}
	if err = Bind(fd, ifindex, protocol); err != nil {
		return
	}
	if promisc {
		err = Promisc(fd, ifindex)
	}
	return
}

// Close unmaps mem (if any) and closes fd (if >= 0).
func Close(fd int, mem []byte) error {
	var errs []error
	if mem != nil {
		errs = append(errs, unix.Munmap(mem))
	}
	if fd >= 0 {
		errs = append(errs, unix.Close(fd))
	}
	return errors.Join(errs...)
}

// Stats are a socket's PACKET_STATISTICS since the last read: the kernel clears them on every
// read, so a caller keeps the sums.
type Stats struct {
	Packets uint64 // frames the socket accepted (those it dropped included)
	Drops   uint64 // frames dropped for want of room in the ring (or the receive buffer)
	Freezes uint64 // TPACKET_V3 only: times the ring was found full (every block with user space)
}

// ReadStats reads and clears fd's PACKET_STATISTICS. It asks for the TPACKET_V3 layout; a V1
// or V2 socket fills the first two fields only, so it serves every version.
func ReadStats(fd int) (Stats, error) {
	st, err := unix.GetsockoptTpacketStatsV3(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return Stats{}, fmt.Errorf("PACKET_STATISTICS: %w", err)
	}
	return Stats{Packets: uint64(st.Packets), Drops: uint64(st.Drops), Freezes: uint64(st.Freeze_q_cnt)}, nil
}
