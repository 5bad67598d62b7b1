// Package userspace holds seed 000's user-space firewalls: transparent network functions whose
// frames leave the kernel for a forwarder written in Go that runs inside the cnibench process
// (no subprocess). Per direction (in -> out, out -> in) one goroutine, locked to its OS thread
// and pinned to Env.CPU when one is given, reads a batch of frames from one interface, checks
// each against the rule set (nf.RuleSet.Verdict: ARP passes, IPv4 by the rules, the rest is
// dropped) and writes the allowed ones to the other interface.
//
//   - userspace: AF_PACKET sockets with a memory-mapped TPACKET_V2 receive ring and sendmmsg
//     (packet.go);
//   - userspace-afxdp: AF_XDP sockets in copy mode sharing one UMEM, fed by a small XDP program
//     that redirects every frame into an XSKMAP (afxdp.go, bpf/xsk_redirect.c).
package userspace

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/cpupin"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

func init() {
	nf.Register(packetKind{})
	nf.Register(xdpKind{})
}

// counters are one direction's packet counts (atomic: Counts reads them while the direction's
// goroutine writes).
type counters struct {
	received  atomic.Uint64 // frames taken from the receive ring
	forwarded atomic.Uint64 // frames handed to the other interface
	denied    atomic.Uint64 // frames the rule set (or the frame's class) dropped
	errors    atomic.Uint64 // frames lost otherwise: cut short, refused by the kernel on send
	sends     atomic.Uint64 // send system calls (sendmmsg, or sendto kicks of AF_XDP)
	waits     atomic.Uint64 // times the goroutine slept in poll for frames
}

// Counts is a snapshot of a direction's counters.
type Counts struct {
	Received, Forwarded, Denied, Errors uint64
	// Overruns are the frames the kernel dropped because the forwarder had no room for them
	// (its receive ring was full): the forwarder is the bottleneck.
	Overruns uint64
	// Sends are the send system calls (sendmmsg; AF_XDP: sendto kicks), Waits the times the
	// goroutine found nothing to do and slept in poll: Received/Sends is the batch size.
	Sends, Waits uint64
}

func (c *counters) snapshot() Counts {
	return Counts{Received: c.received.Load(), Forwarded: c.forwarded.Load(), Denied: c.denied.Load(),
		Errors: c.errors.Load(), Sends: c.sends.Load(), Waits: c.waits.Load()}
}

// workers runs an NF's forwarding goroutines and stops them: Close sets stop and makes the
// eventfd readable, which every goroutine polls next to its receive socket, so a goroutine
// asleep in poll wakes at once and one that is busy sees stop before its next batch.
type workers struct {
	efd  int
	stop atomic.Bool
	wg   sync.WaitGroup
}

func newWorkers() (*workers, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &workers{efd: efd}, nil
}

// start runs fn on a new goroutine locked to its OS thread and, when cpu >= 0, pinned to that
// CPU; it returns once the thread is pinned (or pinning failed: then fn does not run). When fn
// returns, the thread gets its former CPU set back and is unlocked; if that fails it stays
// locked, and the runtime ends it with the goroutine (the main thread it parks for good)
// rather than give a pinned thread to other goroutines.
func (w *workers) start(cpu int, fn func()) error {
	errc := make(chan error, 1)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		runtime.LockOSThread()
		if cpu < 0 {
			defer runtime.UnlockOSThread()
			errc <- nil
			fn()
			return
		}
		restore, err := cpupin.Pin(cpu)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("the forwarding thread: %w", err)
			return
		}
		defer func() {
			if restore() == nil {
				runtime.UnlockOSThread()
			}
		}()
		errc <- nil
		fn()
	}()
	return <-errc
}

func (w *workers) stopped() bool { return w.stop.Load() }

// halt stops the goroutines and waits for them; it leaves the eventfd open (close does that).
func (w *workers) halt() {
	w.stop.Store(true)
	one := [8]byte{1}
	_, _ = unix.Write(w.efd, one[:])
	w.wg.Wait()
}

func (w *workers) close() error {
	w.halt()
	return unix.Close(w.efd)
}

// waitReadable sleeps until fd is readable, the workers are told to stop, or timeoutMs passes
// (-1: no timeout). A pending socket error (the interface went down) is read and cleared, so
// that poll does not return at once forever, and returned after a short pause, so that the
// caller does not spin.
func (w *workers) waitReadable(fd int, timeoutMs int) error {
	pfd := [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(w.efd), Events: unix.POLLIN}}
	_, err := unix.Poll(pfd[:], timeoutMs)
	if err == nil && pfd[0].Revents&unix.POLLERR != 0 {
		if soerr, gerr := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); gerr == nil && soerr != 0 {
			err = unix.Errno(soerr)
		}
	}
	if err != nil && !errors.Is(err, unix.EINTR) {
		time.Sleep(10 * time.Millisecond)
		return err
	}
	return nil
}

// iface is an interface of the NF's namespace.
type iface struct {
	name       string
	index, mtu int
}

// linksOf looks the interfaces devs of namespace ns up.
func linksOf(ns string, devs ...string) ([]iface, error) {
	h, err := netns.Netlink(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var out []iface
	for _, dev := range devs {
		lk, err := h.LinkByName(dev)
		if err != nil {
			return nil, fmt.Errorf("interface %s in %s: %w", dev, ns, err)
		}
		out = append(out, iface{name: dev, index: lk.Attrs().Index, mtu: lk.Attrs().MTU})
	}
	return out, nil
}
