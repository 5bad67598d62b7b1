package pktengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/afpacket"
	"github.com/cnibench/cnibench/internal/cpupin"
)

// The user-space VNF of seed 002: a single-threaded UDP forwarder that takes each datagram
// with one system call and sends it on with another, the way a simple VNF program does (no
// batching, no rings). It forwards the UDP payload unchanged (a GTP-U G-PDU stays one), from
// its own address, so the receiver accounts for the generator's frames as if they came
// straight. Given several targets it sends the datagrams to each in turn: a user-space UDP
// load balancer (seed 002's Ingress, an nginx UDP stream proxy, does the same job).

// FwdOptions are a forwarder run of `cnibench pkt fwd`.
type FwdOptions struct {
	Port     int              // UDP port it receives on
	To       []netip.AddrPort // where the datagrams go, each in turn
	Duration time.Duration    // 0: until the context ends
	CPU      int              // pin the thread to this CPU; -1: no pinning
	// RcvBuf is the receive socket's buffer (bytes; 0: the kernel's default).
	RcvBuf int
}

// FwdResult is what a forwarder run did.
type FwdResult struct {
	Received   uint64  `json:"received"`
	Sent       uint64  `json:"sent"`
	SendErrors uint64  `json:"send_errors"`
	DurationS  float64 `json:"duration_s"`
	// SocketDrops are the datagrams the kernel dropped at the receive socket (its buffer was
	// full: the forwarder did not keep up), from SO_RXQ_OVFL's counter.
	SocketDrops uint64   `json:"socket_drops"`
	Port        int      `json:"port"`
	To          []string `json:"to"`
	// SentTo counts what went to each target, in To's order.
	SentTo []uint64 `json:"sent_to"`
}

// fwdPoll is how often a forwarder with nothing to do looks at its context.
const fwdPoll = 100 * time.Millisecond

// checkTargets checks a forwarder's port and targets (IPv4 address:port each) and returns the
// targets as strings.
func checkTargets(port int, to []netip.AddrPort) ([]string, error) {
	if port < 1 || port > 65535 {
		return nil, badField("port", "%d: want 1..65535", port)
	}
	if len(to) == 0 {
		return nil, badField("to", "no target: give an IPv4 address:port to send to")
	}
	var out []string
	for _, t := range to {
		if !t.IsValid() || !t.Addr().Is4() || t.Port() == 0 {
			return nil, badField("to", "%s: want an IPv4 address:port to send to", t)
		}
		out = append(out, t.String())
	}
	return out, nil
}

// RunFwd forwards until o.Duration has passed or ctx ends, on the calling goroutine's thread
// (inside the current network namespace).
func RunFwd(ctx context.Context, o FwdOptions) (FwdResult, error) {
	res := FwdResult{Port: o.Port, SentTo: make([]uint64, len(o.To))}
	var err error
	if res.To, err = checkTargets(o.Port, o.To); err != nil {
		return res, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore, err := cpupin.Pin(o.CPU)
	if err != nil {
		return res, err
	}
	defer func() { _ = restore() }()
	in, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return res, err
	}
	defer unix.Close(in)
	tv := unix.NsecToTimeval(fwdPoll.Nanoseconds())
	if err := unix.SetsockoptTimeval(in, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return res, err
	}
	if err := unix.SetsockoptInt(in, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
		return res, err
	}
	if o.RcvBuf > 0 {
		if err := afpacket.SetBuffer(in, unix.SO_RCVBUF, o.RcvBuf); err != nil {
			return res, fmt.Errorf("receive buffer %d: %w", o.RcvBuf, err)
		}
	}
	if err := unix.Bind(in, &unix.SockaddrInet4{Port: o.Port}); err != nil {
		return res, fmt.Errorf("bind UDP port %d: %w", o.Port, err)
	}
	outs := make([]int, len(o.To))
	for i, to := range o.To {
		if outs[i], err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return res, err
		}
		defer unix.Close(outs[i])
		if err := unix.Connect(outs[i], &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}); err != nil {
			return res, fmt.Errorf("connect to %s: %w", to, err)
		}
	}
	next := 0
	buf := make([]byte, 65536)
	oob := make([]byte, unix.CmsgSpace(4))
	start := time.Now()
	var end time.Time
	if o.Duration > 0 {
		end = start.Add(o.Duration)
	}
	for ctx.Err() == nil && (end.IsZero() || time.Now().Before(end)) {
		n, oobn, _, _, err := unix.Recvmsg(in, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return res, fmt.Errorf("receive: %w", err)
		}
		res.Received++
		res.SocketDrops = max(res.SocketDrops, overflows(oob[:oobn]))
		i := next
		next = (next + 1) % len(outs)
		if _, err := unix.Write(outs[i], buf[:n]); err != nil {
			res.SendErrors++ // ECONNREFUSED after an ICMP from the receiver, ENOBUFS: counted, not fatal
			continue
		}
		res.Sent++
		res.SentTo[i]++
	}
	res.DurationS = time.Since(start).Seconds()
	return res, nil
}

// overflows reads SO_RXQ_OVFL's drop counter from a datagram's control messages (0: none).
func overflows(oob []byte) uint64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_RXQ_OVFL && len(m.Data) >= 4 {
			return uint64(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}
