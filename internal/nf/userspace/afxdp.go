package userspace

// The userspace-afxdp kind: AF_XDP in copy mode (veth has no zero-copy support).
//
// The sockets, their rings and the XDP program are internal/xsk's. Each interface gets its own
// copy of the program (bpf/xsk_redirect.c, with its XSKMAP), attached in driver mode (veth runs
// XDP natively, in its NAPI poll) through a bpf_link: the program is detached when the link is
// closed, and so also when the process dies. It redirects every frame to the socket of its
// receive queue. One socket per interface, bound to queue 0 with
// XDP_COPY|XDP_USE_NEED_WAKEUP; the second binds with XDP_SHARED_UMEM to the first one's UMEM
// (its own fill and completion rings, as the kernel requires for another device), so a frame
// received on one interface is sent from the other by handing the same UMEM address from the
// RX ring to the other socket's TX ring: no copy in user space (the kernel copies into the
// UMEM on receive and out of it on send in copy mode).
//
// The UMEM's frames are split between the directions and stay with theirs: in -> out cycles
// in.fill -> in.rx -> out.tx -> out.completion -> in.fill, out -> in the other way round. Each
// ring thus has exactly one user-space producer or consumer, the goroutine of its direction
// (no locks), and no ring can overflow (each holds as many entries as its direction has
// frames). A denied frame goes straight back to the fill ring it came from. Copy-mode TX runs
// in the sendto that kicks it (up to a budget per call), so the goroutine kicks after every
// batch and again while the TX ring is not drained; completions come when the sent skb is
// freed, which the goroutine reaps after each batch and, while frames are out, at least every
// millisecond.
//
// Checksums: a veth peer's own stack (the client's or server's) hands veth TCP and UDP packets
// whose checksum is still to be completed (CHECKSUM_PARTIAL: veth offers checksum offload).
// XDP sees only the bytes, so the frame would reach the UMEM, and leave as a new packet, with
// a wrong checksum. Start switches the peers' transmit checksum offload off (their stack then
// computes the checksums) and Close switches it back on.
//
// Frames must fit a UMEM frame (4 KiB less XDP's 256-byte headroom): no XDP_USE_SG. That is
// what veth allows anyway while an XDP program is attached: the kernel takes the GSO features
// off the peer (and caps its MTU) until the program goes, so the peers send MTU-sized frames.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/xsk"
)

type xdpKind struct{}

func (xdpKind) Name() string { return "userspace-afxdp" }
func (xdpKind) Summary() string {
	return "transparent user-space firewall in Go over AF_XDP (copy mode, one shared UMEM); an XDP program redirects every frame to the sockets"
}
func (xdpKind) Layer() nf.Layer { return nf.Transparent }

// Usable needs AF_XDP sockets and the XDP program (with its XSKMAP) to load and attach.
func (xdpKind) Usable() error { return xsk.Usable() }

const (
	umemFrameSize = 4096
	umemFrames    = 4096 // half for each direction
	xskRingSize   = umemFrames / 2
	xskBatch      = 64
	xskKicks      = 16 // sendto calls per batch at most (copy mode sends a budget per call)
)

// xskDir forwards one direction: frames arriving in from's RX ring leave through to's TX ring.
type xskDir struct {
	w        *workers
	rules    *nf.RuleSet
	umem     []byte
	from, to *xsk.Socket
	c        counters
	out      uint32 // frames handed to to's TX ring and not completed yet
}

func (d *xskDir) run() {
	for !d.w.stopped() {
		d.reap()
		rx := d.from.RX
		n := min(rx.Ready(), xskBatch)
		if n == 0 {
			if d.to.TX.Pending() {
				d.kick()
			}
			timeout := -1
			if d.out > 0 {
				timeout = 1 // completions to reap
			}
			d.c.waits.Add(1)
			if err := d.w.waitReadable(d.from.FD, timeout); err != nil {
				d.c.errors.Add(1)
			}
			continue
		}
		fill, tx := d.from.Fill, d.to.TX
		var sent, denied uint64
		for range n {
			desc := *rx.Desc(rx.Local)
			rx.Local++
			end := desc.Addr + uint64(desc.Len)
			if end > uint64(len(d.umem)) {
				d.c.errors.Add(1) // not from the kernel; nothing to give back
				continue
			}
			if allowed(d.rules, d.umem[desc.Addr:end]) {
				*tx.Desc(tx.Local) = desc
				tx.Local++
				sent++
				continue
			}
			denied++
			*fill.Addr(fill.Local) = desc.Addr &^ (umemFrameSize - 1)
			fill.Local++
		}
		rx.Release()
		fill.Submit()
		if denied > 0 {
			d.from.WakeRX()
		}
		if sent > 0 {
			tx.Submit()
			d.out += uint32(sent)
			d.kick()
		}
		d.c.received.Add(uint64(n))
		d.c.forwarded.Add(sent)
		d.c.denied.Add(denied)
	}
}

// kick sends what the TX ring holds, a budget per sendto, reaping completions in between.
func (d *xskDir) kick() {
	for i := 0; i < xskKicks && d.to.TX.Pending(); i++ {
		d.c.sends.Add(1)
		// EBUSY (the interface dropped a frame) and ENOBUFS: busy, kick again.
		if err := d.to.Kick(); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOBUFS) {
			d.c.errors.Add(1)
			return
		}
		d.reap()
	}
}

// reap moves the frames the other socket has sent back to this direction's fill ring.
func (d *xskDir) reap() {
	c := d.to.Completion
	n := c.Ready()
	if n == 0 {
		return
	}
	fill := d.from.Fill
	for range n {
		*fill.Addr(fill.Local) = *c.Addr(c.Local) &^ (umemFrameSize - 1)
		fill.Local++
		c.Local++
	}
	c.Release()
	fill.Submit()
	d.out -= n
	d.from.WakeRX()
}

// xdpNF is a running userspace-afxdp NF.
type xdpNF struct {
	w     *workers
	umem  []byte
	socks []*xsk.Socket
	progs []*xsk.Program
	dirs  []*xskDir
	undo  []func() error // give the peers their checksum offload back
	once  sync.Once
	err   error
}

func (xdpKind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	links, err := linksOf(env.NS, env.In, env.Out)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if l.mtu+ethHeaderLen > umemFrameSize-unix.XDP_PACKET_HEADROOM {
			return nil, fmt.Errorf("%s: MTU %d does not fit a %d-byte AF_XDP frame (multi-buffer is not supported)", l.name, l.mtu, umemFrameSize)
		}
	}
	x := &xdpNF{}
	defer func() {
		if err != nil {
			_ = x.Close()
		}
	}()
	for _, ep := range []nf.Endpoint{env.InPeer, env.OutPeer} {
		undo, err := nf.SwitchFeature(ep, nf.TxChecksum, false)
		if err != nil {
			return nil, fmt.Errorf("peer %s in %s: %w", ep.Dev, ep.NS, err)
		}
		x.undo = append(x.undo, undo)
	}
	if x.w, err = newWorkers(); err != nil {
		return nil, err
	}
	if x.umem, err = xsk.NewUMEM(umemFrames, umemFrameSize); err != nil {
		return nil, err
	}
	for range links {
		p, err := xsk.LoadProgram(false)
		if err != nil {
			return nil, err
		}
		x.progs = append(x.progs, p)
	}
	err = netns.Do(env.NS, func() error {
		for i, l := range links {
			if err := xsk.OneRxQueue(l.name); err != nil {
				return err
			}
			cfg := xsk.Config{UMEM: x.umem, FrameSize: umemFrameSize, SndBuf: sndBufBytes, TxBudget: xskBatch,
				Rings: xsk.Rings{RX: xskRingSize, TX: xskRingSize, Fill: xskRingSize, Completion: xskRingSize}}
			var shared *xsk.Socket
			if i > 0 {
				cfg.UMEM, shared = nil, x.socks[0] // shares the first socket's
			}
			s, err := xsk.Open(cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			x.socks = append(x.socks, s)
			if err := s.Bind(l.name, l.index, shared); err != nil {
				return err
			}
			// This interface's frames live in this half of the UMEM.
			for f := range xskRingSize {
				*s.Fill.Addr(s.Fill.Local) = uint64(i*xskRingSize+f) * umemFrameSize
				s.Fill.Local++
			}
			s.Fill.Submit()
			if err := x.progs[i].Put(0, s); err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
		}
		for i, l := range links {
			if err := x.progs[i].Attach(l.name, l.index, link.XDPDriverMode); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("in %s: %w", env.NS, err)
	}
	rs := &rules
	x.dirs = []*xskDir{
		{w: x.w, rules: rs, umem: x.umem, from: x.socks[0], to: x.socks[1]},
		{w: x.w, rules: rs, umem: x.umem, from: x.socks[1], to: x.socks[0]},
	}
	for _, d := range x.dirs {
		if err := x.w.start(env.CPU, d.run); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return x, nil
}

// Counts returns the counters of the two directions (in -> out, then out -> in), with the
// sockets' XDP_STATISTICS: Overruns are the frames dropped for want of room in the RX ring or
// of a free UMEM frame (or too big for one), Errors include invalid descriptors. Call it before
// Close.
func (x *xdpNF) Counts() [2]Counts {
	var c [2]Counts
	for i, d := range x.dirs {
		c[i] = d.c.snapshot()
		if st, err := d.from.Statistics(); err == nil {
			c[i].Overruns = st.Rx_dropped + st.Rx_ring_full
			c[i].Errors += st.Rx_invalid_descs
		}
		if st, err := d.to.Statistics(); err == nil {
			c[i].Errors += st.Tx_invalid_descs
		}
	}
	return c
}

// Close detaches the XDP programs, stops the goroutines, then closes the sockets, the maps and
// programs, unmaps the rings and the UMEM, and gives the peers their checksum offload back.
// Idempotent.
func (x *xdpNF) Close() error {
	x.once.Do(func() {
		var errs []error
		for _, p := range x.progs {
			errs = append(errs, p.Detach())
		}
		if x.w != nil {
			errs = append(errs, x.w.close())
		}
		for i := len(x.socks) - 1; i >= 0; i-- {
			errs = append(errs, x.socks[i].Close())
		}
		for _, p := range x.progs {
			errs = append(errs, p.Close())
		}
		if x.umem != nil {
			errs = append(errs, xsk.FreeUMEM(x.umem))
		}
		for _, undo := range x.undo {
			errs = append(errs, undo())
		}
		x.err = errors.Join(errs...)
	})
	return x.err
}
