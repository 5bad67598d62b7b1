package userspace

// The userspace-afxdp kind: AF_XDP in copy mode (veth has no zero-copy support).
//
// Each interface gets its own copy of bpf/xsk_redirect.c (program and XSKMAP), attached in
// driver mode (veth runs XDP natively, in its NAPI poll) through a bpf_link: the program is
// detached when the link is closed, and so also when the process dies. It redirects every frame
// to the socket of its receive queue. One socket per interface, bound to queue 0 with
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
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

type xdpKind struct{}

func (xdpKind) Name() string { return "userspace-afxdp" }
func (xdpKind) Summary() string {
	return "transparent user-space firewall in Go over AF_XDP (copy mode, one shared UMEM); an XDP program redirects every frame to the sockets"
}
func (xdpKind) Layer() nf.Layer { return nf.Transparent }

// Usable needs AF_XDP sockets and the XDP program (with its XSKMAP) to load.
func (xdpKind) Usable() error { return xdpUsable() }

var xdpUsable = sync.OnceValue(func() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open an AF_XDP socket (a kernel without CONFIG_XDP_SOCKETS, or no CAP_NET_RAW): %w", err)
	}
	unix.Close(fd)
	var objs xskObjects
	if err := loadXskObjects(&objs, nil); err != nil {
		return fmt.Errorf("the XDP program redirecting to AF_XDP sockets does not load on this kernel: %w", err)
	}
	return objs.Close()
})

const (
	umemFrameSize = 4096
	umemFrames    = 4096 // half for each direction
	xskRingSize   = umemFrames / 2
	xskBatch      = 64
	xskKicks      = 16 // sendto calls per batch at most (copy mode sends a budget per call)
)

// xskRing is one of an AF_XDP socket's four rings. For the rings user space produces to (fill,
// TX) local is the next producer index; for those it consumes (RX, completion), the next
// consumer index.
type xskRing struct {
	mem               []byte
	prod, cons, flags *uint32
	descs             unsafe.Pointer
	mask              uint32
	local             uint32
}

func mapRing(fd int, off unix.XDPRingOffset, pgoff int64, entry uintptr, producer bool) (*xskRing, error) {
	mem, err := unix.Mmap(fd, pgoff, int(off.Desc+uint64(xskRingSize)*uint64(entry)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap an AF_XDP ring: %w", err)
	}
	r := &xskRing{mem: mem, mask: xskRingSize - 1,
		prod:  (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		cons:  (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags: (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		descs: unsafe.Pointer(&mem[off.Desc])}
	if producer {
		r.local = atomic.LoadUint32(r.prod)
	} else {
		r.local = atomic.LoadUint32(r.cons)
	}
	return r, nil
}

func (r *xskRing) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

func (r *xskRing) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// ready is how many entries a consumer ring holds for user space.
func (r *xskRing) ready() uint32 { return atomic.LoadUint32(r.prod) - r.local }

// release gives the entries consumed so far back to the kernel.
func (r *xskRing) release() { atomic.StoreUint32(r.cons, r.local) }

// submit publishes the entries produced so far to the kernel.
func (r *xskRing) submit() { atomic.StoreUint32(r.prod, r.local) }

// pending is whether the kernel has not consumed everything produced to this ring.
func (r *xskRing) pending() bool { return atomic.LoadUint32(r.cons) != r.local }

func (r *xskRing) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// xsk is an AF_XDP socket and its rings.
type xsk struct {
	fd                  int
	rx, tx, fill, compl *xskRing
}

func sockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// newXSK opens an AF_XDP socket (inside the namespace), registers umem with it unless it is
// nil (a socket that will share another's), and creates and maps its four rings.
func newXSK(umem []byte) (_ *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP socket: %w", err)
	}
	x := &xsk{fd: fd}
	defer func() {
		if err != nil {
			_ = x.close()
		}
	}()
	if umem != nil {
		reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))), Len: uint64(len(umem)), Size: umemFrameSize}
		if err := sockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
			return nil, fmt.Errorf("register the UMEM: %w", err)
		}
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, xskRingSize); err != nil {
			return nil, fmt.Errorf("AF_XDP ring %d: %w", opt, err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndBufBytes); err != nil {
		return nil, err
	}
	// Copy mode sends at most this many frames per sendto (a fixed 32 where the kernel lacks the
	// option).
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, xskBatch)
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); errno != 0 {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", errno)
	}
	desc, addr := unsafe.Sizeof(unix.XDPDesc{}), unsafe.Sizeof(uint64(0))
	if x.rx, err = mapRing(fd, off.Rx, unix.XDP_PGOFF_RX_RING, desc, false); err != nil {
		return nil, err
	}
	if x.tx, err = mapRing(fd, off.Tx, unix.XDP_PGOFF_TX_RING, desc, true); err != nil {
		return nil, err
	}
	if x.fill, err = mapRing(fd, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, addr, true); err != nil {
		return nil, err
	}
	if x.compl, err = mapRing(fd, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, addr, false); err != nil {
		return nil, err
	}
	return x, nil
}

func (x *xsk) close() error {
	var errs []error
	for _, r := range []*xskRing{x.rx, x.tx, x.fill, x.compl} {
		if r != nil {
			errs = append(errs, unix.Munmap(r.mem))
		}
	}
	x.rx, x.tx, x.fill, x.compl = nil, nil, nil, nil
	if x.fd >= 0 {
		errs = append(errs, unix.Close(x.fd))
		x.fd = -1
	}
	return errors.Join(errs...)
}

// kick makes the kernel send what the TX ring holds (copy mode sends in this syscall).
func (x *xsk) kick() error {
	_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
		return nil // sent a budget, or busy: the caller kicks again
	}
	return errno
}

// wakeRX tells the kernel that the fill ring has frames again, when it asks for that.
func (x *xsk) wakeRX() {
	if x.fill.needWakeup() {
		_, _, _ = unix.Syscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// statistics is the socket's XDP_STATISTICS.
func (x *xsk) statistics() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	size := uint32(unsafe.Sizeof(st))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&size)), 0); errno != 0 {
		return st, errno
	}
	return st, nil
}

// xskDir forwards one direction: frames arriving in from's RX ring leave through to's TX ring.
type xskDir struct {
	w        *workers
	rules    *nf.RuleSet
	umem     []byte
	from, to *xsk
	c        counters
	out      uint32 // frames handed to to's TX ring and not completed yet
}

func (d *xskDir) run() {
	for !d.w.stopped() {
		d.reap()
		rx := d.from.rx
		n := min(rx.ready(), xskBatch)
		if n == 0 {
			if d.to.tx.pending() {
				d.kick()
			}
			timeout := -1
			if d.out > 0 {
				timeout = 1 // completions to reap
			}
			d.c.waits.Add(1)
			if err := d.w.waitReadable(d.from.fd, timeout); err != nil {
				d.c.errors.Add(1)
			}
			continue
		}
		fill, tx := d.from.fill, d.to.tx
		var sent, denied uint64
		for range n {
			desc := *rx.desc(rx.local)
			rx.local++
			end := desc.Addr + uint64(desc.Len)
			if end > uint64(len(d.umem)) {
				d.c.errors.Add(1) // not from the kernel; nothing to give back
				continue
			}
			if allowed(d.rules, d.umem[desc.Addr:end]) {
				*tx.desc(tx.local) = desc
				tx.local++
				sent++
				continue
			}
			denied++
			*fill.addr(fill.local) = desc.Addr &^ (umemFrameSize - 1)
			fill.local++
		}
		rx.release()
		fill.submit()
		if denied > 0 {
			d.from.wakeRX()
		}
		if sent > 0 {
			tx.submit()
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
	for i := 0; i < xskKicks && d.to.tx.pending(); i++ {
		d.c.sends.Add(1)
		if err := d.to.kick(); err != nil {
			d.c.errors.Add(1)
			return
		}
		d.reap()
	}
}

// reap moves the frames the other socket has sent back to this direction's fill ring.
func (d *xskDir) reap() {
	c := d.to.compl
	n := c.ready()
	if n == 0 {
		return
	}
	fill := d.from.fill
	for range n {
		*fill.addr(fill.local) = *c.addr(c.local) &^ (umemFrameSize - 1)
		fill.local++
		c.local++
	}
	c.release()
	fill.submit()
	d.out -= n
	d.from.wakeRX()
}

// xdpNF is a running userspace-afxdp NF.
type xdpNF struct {
	w     *workers
	umem  []byte
	socks []*xsk
	objs  []*xskObjects
	links []link.Link
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
	if x.umem, err = unix.Mmap(-1, 0, umemFrames*umemFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("UMEM: %w", err)
	}
	for range links {
		objs := &xskObjects{}
		if err := loadXskObjects(objs, nil); err != nil {
			return nil, fmt.Errorf("load the XDP program: %w", err)
		}
		x.objs = append(x.objs, objs)
	}
	err = netns.Do(env.NS, func() error {
		for i, l := range links {
			if n, err := nf.RxQueues(l.name); err != nil {
				return err
			} else if n != 1 {
				return fmt.Errorf("%s has %d receive queues: userspace-afxdp serves one", l.name, n)
			}
			umem := x.umem
			if i > 0 {
				umem = nil // shares the first socket's
			}
			s, err := newXSK(umem)
			if err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			x.socks = append(x.socks, s)
			sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY | unix.XDP_USE_NEED_WAKEUP, Ifindex: uint32(l.index), QueueID: 0}
			if i > 0 {
				sa = &unix.SockaddrXDP{Flags: unix.XDP_SHARED_UMEM, Ifindex: uint32(l.index), QueueID: 0, SharedUmemFD: uint32(x.socks[0].fd)}
			}
			if err := unix.Bind(s.fd, sa); err != nil {
				return fmt.Errorf("bind an AF_XDP socket to %s queue 0 (copy mode): %w", l.name, err)
			}
			// This interface's frames live in this half of the UMEM.
			for f := range xskRingSize {
				*s.fill.addr(s.fill.local) = uint64(i*xskRingSize+f) * umemFrameSize
				s.fill.local++
			}
			s.fill.submit()
			if err := x.objs[i].Xsks.Update(uint32(0), uint32(s.fd), ebpf.UpdateAny); err != nil {
				return fmt.Errorf("%s: put the socket in the XSKMAP: %w", l.name, err)
			}
		}
		for i, l := range links {
			lk, err := link.AttachXDP(link.XDPOptions{Program: x.objs[i].XskRedirect, Interface: l.index, Flags: link.XDPDriverMode})
			if err != nil {
				return fmt.Errorf("attach the XDP program to %s: %w", l.name, err)
			}
			x.links = append(x.links, lk)
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
		if st, err := d.from.statistics(); err == nil {
			c[i].Overruns = st.Rx_dropped + st.Rx_ring_full
			c[i].Errors += st.Rx_invalid_descs
		}
		if st, err := d.to.statistics(); err == nil {
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
		for _, l := range x.links {
			errs = append(errs, l.Close())
		}
		if x.w != nil {
			errs = append(errs, x.w.close())
		}
		for i := len(x.socks) - 1; i >= 0; i-- {
			errs = append(errs, x.socks[i].close())
		}
		for _, o := range x.objs {
			errs = append(errs, o.Close())
		}
		if x.umem != nil {
			errs = append(errs, unix.Munmap(x.umem))
		}
		for _, undo := range x.undo {
			errs = append(errs, undo())
		}
		x.err = errors.Join(errs...)
	})
	return x.err
}
