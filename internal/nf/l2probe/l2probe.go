// Package l2probe tells whether a transparent network function forwards yet: it sends marked
// ARP frames into one side of the NF and waits until they come out of the other. A kind whose
// data plane is a process that starts asynchronously (a DPDK forwarder, Open vSwitch's
// user-space datapath) calls Forwards before its Start returns, so a chain is measured only
// once every NF really forwards.
//
// The probes are ARP requests (every kind lets ARP pass) in RFC 5227's probe form: sender
// address 0.0.0.0 and a target from RFC 2544's benchmark range, from a random locally
// administered MAC address, so no neighbour answers them or learns anything from them; a nonce
// in the target hardware address tells the probe apart from other ARP traffic.
package l2probe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

// interval is how often a probe is sent while none has come through.
const interval = 20 * time.Millisecond

// Forwards returns nil once an ARP probe sent by env.InPeer has come out at env.OutPeer, and one
// sent by env.OutPeer at env.InPeer; else an error after timeout (or when ctx ends).
func Forwards(ctx context.Context, env nf.Env, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := probe(ctx, env.InPeer, env.OutPeer); err != nil {
		return fmt.Errorf("%s does not forward from %s to %s: %w", env.Name, env.In, env.Out, err)
	}
	if err := probe(ctx, env.OutPeer, env.InPeer); err != nil {
		return fmt.Errorf("%s does not forward from %s to %s: %w", env.Name, env.Out, env.In, err)
	}
	return nil
}

// probe sends probes from one endpoint until one arrives at the other.
func probe(ctx context.Context, from, to nf.Endpoint) error {
	tx, err := packetSocket(from)
	if err != nil {
		return err
	}
	defer unix.Close(tx.fd)
	rx, err := packetSocket(to)
	if err != nil {
		return err
	}
	defer unix.Close(rx.fd)
	frame, nonce := Frame()
	// The sender skips the packet taps (and so the AF_PACKET socket of a forwarder already
	// running on the sending interface): nothing but the NF under test sees the probe.
	_ = unix.SetsockoptInt(tx.fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	to4 := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: tx.ifindex, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	buf := make([]byte, 2048)
	for {
		if err := unix.Sendto(tx.fd, frame, 0, to4); err != nil {
			return fmt.Errorf("send a probe on %s/%s: %w", from.NS, from.Dev, err)
		}
		next := time.Now().Add(interval)
		for time.Now().Before(next) {
			if ctx.Err() != nil {
				return fmt.Errorf("no probe arrived: %w", ctx.Err())
			}
			fds := []unix.PollFd{{Fd: int32(rx.fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(time.Until(next).Milliseconds())+1)
			if err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("poll %s/%s: %w", to.NS, to.Dev, err)
			}
			if n <= 0 {
				continue
			}
			m, _, err := unix.Recvfrom(rx.fd, buf, unix.MSG_DONTWAIT)
			if err != nil {
				continue
			}
			if IsProbe(buf[:m], nonce) {
				return nil
			}
		}
	}
}

type sock struct{ fd, ifindex int }

// packetSocket opens an AF_PACKET socket for ARP frames bound to ep's interface, in ep's
// namespace.
func packetSocket(ep nf.Endpoint) (sock, error) {
	s := sock{fd: -1}
	err := netns.Do(ep.NS, func() error {
		ifc, err := net.InterfaceByName(ep.Dev)
		if err != nil {
			return err
		}
		s.ifindex = ifc.Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		s.fd = fd
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("packet socket on %s/%s: %w", ep.NS, ep.Dev, err)
	}
	return s, nil
}

// Frame is a new probe: an Ethernet broadcast ARP request and the nonce that marks it.
func Frame() (frame []byte, nonce [6]byte) {
	var mac [6]byte
	_, _ = rand.Read(mac[:])
	_, _ = rand.Read(nonce[:])
	mac[0] = mac[0]&0xfc | 0x02 // unicast, locally administered
	f := make([]byte, 0, 60)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, mac[:]...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = binary.BigEndian.AppendUint16(f, 1)      // Ethernet
	f = binary.BigEndian.AppendUint16(f, 0x0800) // IPv4
	f = append(f, 6, 4)
	f = binary.BigEndian.AppendUint16(f, 1) // request
	f = append(f, mac[:]...)
	f = append(f, 0, 0, 0, 0) // sender 0.0.0.0: a probe, nobody learns from it
	f = append(f, nonce[:]...)
	f = append(f, 198, 18, 255, 254) // a target nobody has (RFC 2544 range)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f, nonce
}

// IsProbe tells whether an Ethernet frame is the ARP probe marked with nonce.
func IsProbe(frame []byte, nonce [6]byte) bool {
	const eth, tha = 14, 14 + 18
	if len(frame) < tha+6 || binary.BigEndian.Uint16(frame[12:]) != unix.ETH_P_ARP {
		return false
	}
	return binary.BigEndian.Uint16(frame[eth+6:]) == 1 && [6]byte(frame[tha:tha+6]) == nonce
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
