package pktengine

// The af_xdp engine: AF_XDP sockets in copy mode (internal/xsk), for interfaces without
// zero-copy support (veth, and a pod's interface in general).
//
// RoleSend: a socket with a UMEM of xdpTxFrames frames and a TX ring as large, bound to queue 0 of
// the interface; no XDP program is needed to send. Reserve hands out free UMEM frames, Submit
// puts their descriptors on the TX ring and kicks it with sendto: copy mode builds an skb per
// frame and sends it to the driver (past the qdisc layer) in that sendto, up to a budget of
// xdpTxBudget frames per call, so Submit kicks until the ring is drained (at most xdpTxKicks
// times). A frame's UMEM frame comes back through the completion ring once its skb is freed.
//
// RoleRecv: a copy of bpf/xsk_redirect.c with udp4_only set, attached to the interface in
// generic (SKB) mode through a bpf_link, redirects the IPv4 UDP frames (the generator's, and any
// other UDP) into a socket bound to queue 0; everything else (ARP above all) goes on to the
// interface's stack. Generic mode works on any interface (a pod's may be veth, macvlan,
// ipvlan...) and leaves the peer alone: native XDP on veth takes the GSO features off the peer
// (the host's end of a pod's veth) and caps its MTU while the program is attached. The frames
// the program takes never reach the stack (no ICMP port unreachable, no socket: a sink is not
// needed, and harmless). The link dies with the process, so even a receiver killed with
// SIGKILL leaves no XDP program on the pod's interface.
//
// RoleRecv time: copy mode has no per-frame timestamp (the RX descriptor holds an address and a
// length only), so the receive time of a frame is the time Read took it from the ring (once
// per batch of xdpRxBatch frames). A probe's latency then includes the time the frame waited in
// the ring for the receiver, which an idle receiver (woken by poll) keeps short and a busy
// one does not; af_packet's comes from the kernel's receive path.

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/xsk"
)

func init() { Register(afXDP{}) }

type afXDP struct{}

func (afXDP) Name() string { return "af_xdp" }

// Rank: see afXDPRank.
func (afXDP) Rank(Role) int { return afXDPRank }

// afXDPRank puts af_xdp above af_packet for sending (af_packet: 10): it sends faster. It
// receives as fast, but times the probes by its read, not the kernel's receive time, so
// af_packet stays the receiver's default (its receive rank: 30). Measured by
// BenchmarkEngines64 in one run (`go test -run '^$' -bench Engines64 -benchtime 1x -v
// ./internal/pktengine`: 5 rounds, engines in alternating order, 2 s each, 64-byte frames flat
// out, sender on CPU 0, receiver on CPU 1, one veth pair; ratios paired by round):
//
//   - send, pps the peer received: af_packet 447,609 / 443,980 / 441,594 / 443,378 / 448,485,
//     af_xdp 732,320 / 735,066 / 714,653 / 718,760 / 720,627: af_xdp/af_packet 1.625
//     [1.596, 1.655];
//   - receive, from the af_packet generator: neither engine lost a frame or dropped one in its
//     ring; af_xdp/af_packet 1.001 [0.967, 1.036] (both took what the generator sent). The
//     probes' p50 was 4.1 to 7.2 us with af_packet (kernel receive time), 13.6 to 41.8 us with
//     af_xdp (time of the read: the receiver's wake-up is included) in the helper's runs.
//
// With a UMEM of 4096 RX frames instead of 16384, a loaded host made the af_xdp receiver drop
// (rx_dropped: no free frame) in 4 rounds of 5; af_packet's ring holds ~100,000 64-byte frames.
const afXDPRank = 20

// Usable needs AF_XDP sockets, and, for the receiver, the XDP program to load and attach
// (CAP_BPF, CAP_NET_ADMIN: an unprivileged pod has neither, and then af_packet is the default).
func (afXDP) Usable() error { return xsk.Usable() }

const (
	xdpFrameSize = 2048 // a UMEM frame: XDP's 256 bytes of headroom and a frame of up to 1792 bytes

	xdpTxFrames = 2048
	xdpTxBudget = DefaultBatch // frames sent per sendto
	xdpTxKicks  = 4 * xdpTxFrames / xdpTxBudget
	xdpSndBuf   = 8 << 20 // the skbs in flight are charged to the send buffer
	xdpTxWait   = 100 * time.Millisecond
	xdpRxFrames = 16384 // 32 MiB: at 300,000 frames/s, 55 ms of frames before the receiver must read
	xdpRxBatch  = 64
	xdpRxSettle = 5 * time.Millisecond
	xdpSmallQ   = 64 // the rings a socket must have but does not use (fill when sending, completion when receiving)
)

// xdpTX sends through an AF_XDP socket's TX ring.
type xdpTX struct {
	s        *xsk.Socket
	umem     []byte
	free     []uint64 // UMEM frames neither reserved nor in flight
	reserved []uint64 // the last Reserve's frames, in order
	bufs     [][]byte
}

func (afXDP) OpenTX(ifc Iface) (_ TX, err error) {
	t := &xdpTX{free: make([]uint64, 0, xdpTxFrames), reserved: make([]uint64, 0, xdpTxFrames), bufs: make([][]byte, 0, xdpTxFrames)}
	defer func() {
		if err != nil {
			_ = t.Close()
		}
	}()
	if t.umem, err = xsk.NewUMEM(xdpTxFrames, xdpFrameSize); err != nil {
		return nil, err
	}
	if t.s, err = xsk.Open(xsk.Config{UMEM: t.umem, FrameSize: xdpFrameSize, SndBuf: xdpSndBuf, TxBudget: xdpTxBudget,
		Rings: xsk.Rings{TX: xdpTxFrames, Completion: xdpTxFrames, Fill: xdpSmallQ}}); err != nil {
		return nil, err
	}
	if err := t.s.Bind(ifc.Name, ifc.Index, nil); err != nil {
		return nil, err
	}
	for f := xdpTxFrames - 1; f >= 0; f-- {
		t.free = append(t.free, uint64(f)*xdpFrameSize)
	}
	return t, nil
}

// reap takes the frames the kernel has sent (their skbs freed) back.
func (t *xdpTX) reap() {
	c := t.s.Completion
	n := c.Ready()
	for range n {
		t.free = append(t.free, *c.Addr(c.Local)&^(xdpFrameSize-1))
		c.Local++
	}
	if n > 0 {
		c.Release()
	}
}

func (t *xdpTX) Reserve(n int) ([][]byte, error) {
	for i := len(t.reserved) - 1; i >= 0; i-- { // a Reserve without a Submit: unused
		t.free = append(t.free, t.reserved[i])
	}
	t.reap()
	if len(t.free) == 0 {
		// Every frame is in the TX ring or in flight: send, and wait for completions.
		for end := time.Now().Add(xdpTxWait); len(t.free) == 0 && time.Now().Before(end); {
			if t.s.TX.Pending() {
				_ = t.s.Kick() // a frame it drops completes all the same; Submit reported kicks' errors
			} else {
				time.Sleep(50 * time.Microsecond)
			}
			t.reap()
		}
	}
	n = min(n, len(t.free))
	t.reserved, t.bufs = t.reserved[:0], t.bufs[:0]
	for range n {
		a := t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		t.reserved = append(t.reserved, a)
		t.bufs = append(t.bufs, t.umem[a:a+MaxFrameSize-FCSLen])
	}
	return t.bufs, nil
}

func (t *xdpTX) Submit(lens []int) error {
	tx := t.s.TX
	for i, l := range lens {
		*tx.Desc(tx.Local) = unix.XDPDesc{Addr: t.reserved[i], Len: uint32(l)}
		tx.Local++
	}
	tx.Submit()
	for i := len(t.reserved) - 1; i >= len(lens); i-- { // back in the order Reserve took them
		t.free = append(t.free, t.reserved[i])
	}
	t.reserved = t.reserved[:0]
	return t.kick()
}

// kick sends what the TX ring holds, a budget per sendto, reaping completions in between. A
// frame the interface dropped (EBUSY: veth's peer had no room) is lost and reported; the
// kicks go on with the frames after it. Frames the kernel could not take (no memory, the send
// buffer full) stay in the ring for the next kick.
func (t *xdpTX) kick() error {
	var lost int
	var last error
	for i := 0; i < xdpTxKicks && t.s.TX.Pending(); i++ {
		err := t.s.Kick()
		t.reap()
		switch {
		case err == nil:
		case errors.Is(err, unix.EBUSY):
			lost++
		case errors.Is(err, unix.ENOBUFS):
			return nil
		default:
			last = err
		}
	}
	if last != nil {
		return fmt.Errorf("sendto (AF_XDP TX ring): %w", last)
	}
	if lost > 0 {
		return fmt.Errorf("sendto (AF_XDP TX ring): the interface dropped %d frames: %w", lost, unix.EBUSY)
	}
	return nil
}

func (t *xdpTX) Describe() string {
	return fmt.Sprintf("AF_XDP TX ring of %d frames, copy mode (an skb per frame, past the qdisc layer), up to %d frames per sendto", xdpTxFrames, xdpTxBudget)
}

// Close sends what the ring still holds (for at most a second), then closes the socket and
// unmaps its UMEM.
func (t *xdpTX) Close() error {
	var errs []error
	if t.s != nil {
		for end := time.Now().Add(time.Second); t.s.FD >= 0 && t.s.TX != nil && t.s.TX.Pending() && time.Now().Before(end); {
			if err := t.s.Kick(); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOBUFS) {
				break
			}
			t.reap()
		}
		errs = append(errs, t.s.Close())
		t.s = nil
	}
	if t.umem != nil {
		errs = append(errs, xsk.FreeUMEM(t.umem))
		t.umem = nil
	}
	return errors.Join(errs...)
}

// xdpRX receives from an AF_XDP socket's RX ring, fed by the XDP program.
type xdpRX struct {
	s    *xsk.Socket
	prog *xsk.Program
	umem []byte
}

func (afXDP) OpenRX(ifc Iface) (_ RX, err error) {
	if ethLen+ifc.MTU > xdpFrameSize-unix.XDP_PACKET_HEADROOM {
		return nil, fmt.Errorf("MTU %d of %s: a frame does not fit a %d-byte AF_XDP frame (multi-buffer is not supported)", ifc.MTU, ifc.Name, xdpFrameSize)
	}
	if err := xsk.OneRxQueue(ifc.Name); err != nil {
		return nil, err
	}
	r := &xdpRX{}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if r.prog, err = xsk.LoadProgram(true); err != nil {
		return nil, err
	}
	if r.umem, err = xsk.NewUMEM(xdpRxFrames, xdpFrameSize); err != nil {
		return nil, err
	}
	if r.s, err = xsk.Open(xsk.Config{UMEM: r.umem, FrameSize: xdpFrameSize,
		Rings: xsk.Rings{RX: xdpRxFrames, Fill: xdpRxFrames, Completion: xdpSmallQ}}); err != nil {
		return nil, err
	}
	fill := r.s.Fill
	for f := range xdpRxFrames {
		*fill.Addr(fill.Local) = uint64(f) * xdpFrameSize
		fill.Local++
	}
	fill.Submit()
	if err := r.s.Bind(ifc.Name, ifc.Index, nil); err != nil {
		return nil, err
	}
	if err := r.prog.Put(0, r.s); err != nil {
		return nil, err
	}
	if err := r.prog.Attach(ifc.Name, ifc.Index, link.XDPGenericMode); err != nil {
		return nil, err
	}
	return r, nil
}

// Read gives each frame the time it was taken from the ring as its receive time (see the
// file's comment), and gives the frames back to the fill ring a batch at a time.
func (r *xdpRX) Read(timeout time.Duration, fn func(frame []byte, wireLen int, rxNs int64)) error {
	rx, fill := r.s.RX, r.s.Fill
	if rx.Ready() == 0 {
		pfd := []unix.PollFd{{Fd: int32(r.s.FD), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(timeout.Milliseconds())); err != nil && err != unix.EINTR {
			return fmt.Errorf("poll the AF_XDP RX ring: %w", err)
		}
	}
	for done := uint32(0); done < xdpRxFrames; {
		n := min(rx.Ready(), xdpRxBatch)
		if n == 0 {
			break
		}
		now := time.Now().UnixNano()
		for range n {
			d := *rx.Desc(rx.Local)
			rx.Local++
			if end := d.Addr + uint64(d.Len); end <= uint64(len(r.umem)) {
				fn(r.umem[d.Addr:end], int(d.Len), now)
			}
			*fill.Addr(fill.Local) = d.Addr &^ (xdpFrameSize - 1)
			fill.Local++
		}
		rx.Release()
		fill.Submit()
		r.s.WakeRX()
		done += n
	}
	return nil
}

func (r *xdpRX) Settle() time.Duration { return xdpRxSettle }

// Drops are XDP_STATISTICS' rx_dropped (no free UMEM frame: the fill ring was empty) plus
// rx_ring_full (no room in the RX ring); full is rx_ring_full.
func (r *xdpRX) Drops() (drops, full uint64) {
	st, err := r.s.Statistics()
	if err != nil {
		return 0, 0
	}
	return st.Rx_dropped + st.Rx_ring_full, st.Rx_ring_full
}

func (r *xdpRX) Describe() string {
	return fmt.Sprintf("AF_XDP RX ring of %d frames, copy mode, fed by an XDP program (generic mode, bpf_link) that takes the IPv4 UDP frames; "+
		"receive time = time of the read (copy mode has no per-frame timestamp: latency includes the wait in the ring)", xdpRxFrames)
}

// Close detaches the XDP program first (the interface's frames go to its stack again), then
// closes the socket and the program and unmaps the UMEM. Idempotent.
func (r *xdpRX) Close() error {
	var errs []error
	if r.prog != nil {
		errs = append(errs, r.prog.Detach())
	}
	if r.s != nil {
		errs = append(errs, r.s.Close())
		r.s = nil
	}
	if r.prog != nil {
		errs = append(errs, r.prog.Close())
		r.prog = nil
	}
	if r.umem != nil {
		errs = append(errs, xsk.FreeUMEM(r.umem))
		r.umem = nil
	}
	return errors.Join(errs...)
}
