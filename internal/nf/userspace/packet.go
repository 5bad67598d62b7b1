package userspace

// The userspace kind: AF_PACKET.
//
// Receive: one socket per interface with a memory-mapped TPACKET_V2 ring. V2 rather than V3:
// V3 hands a block of frames to user space only when the block is full or its retire timer
// (milliseconds) fires, so a forwarder on V3 adds up to that timer to every packet at low rates
// (a request/response transaction would take milliseconds; libpcap's move to V3 delayed arping
// replies by tens of milliseconds); V2 publishes every frame at once and wakes the reader per
// frame, and the reader still batches by walking all the frames that are ready (up to 64)
// before it sends. V2's fixed slots are sized from the interface's MTU (2 KiB at 1500). A GSO
// super-packet of up to 64 KiB (veth passes the sender's TSO packets through) does not fit a
// slot: with PACKET_COPY_THRESH the kernel then also queues the whole packet on the socket and
// flags the slot TP_STATUS_COPY, and the forwarder reads it with recvmsg. The ring stays small
// for 64-byte frames and nothing is cut short.
//
// PACKET_VNET_HDR puts a virtio_net_hdr in front of every frame received (GSO type and size,
// where the partial checksum starts) and takes one in front of every frame sent, so a super-
// packet goes out as one GSO packet with its checksum still to be completed, exactly as it came
// in: the kernel (or the next veth's receiver) segments and checksums it, and TCP runs at full
// size through the chain.
//
// Send: sendmmsg on a second, send-only socket per interface (bound with protocol 0, so it
// receives nothing), one call per batch. Its iovecs point straight into the receive ring (the
// virtio_net_hdr sits right before the Ethernet header in a slot), so the only copy is the
// kernel's into the new skb; the slots go back to the kernel after the call. A TX ring would
// need a user-space copy from the RX ring into the TX slots and slots of 64 KiB for GSO
// packets, for the same one syscall per batch. PACKET_QDISC_BYPASS skips the (empty) qdisc
// layer. The receive sockets set PACKET_IGNORE_OUTGOING, so they never see what the other
// direction sends out of their interface (and outgoing frames are skipped by sll_pkttype too).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/afpacket"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

type packetKind struct{}

func (packetKind) Name() string { return "userspace" }
func (packetKind) Summary() string {
	return "transparent user-space firewall in Go: AF_PACKET TPACKET_V2 receive ring, sendmmsg, GSO passed through (virtio-net headers)"
}
func (packetKind) Layer() nf.Layer { return nf.Transparent }

// Usable needs AF_PACKET sockets (CAP_NET_RAW) with the options the forwarder sets.
func (packetKind) Usable() error {
	fd, err := afpacket.Open()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, o := range []struct {
		name     string
		opt, val int
	}{
		{"PACKET_VERSION TPACKET_V2", unix.PACKET_VERSION, unix.TPACKET_V2},
		{"PACKET_VNET_HDR", unix.PACKET_VNET_HDR, 1},
		{"PACKET_IGNORE_OUTGOING", unix.PACKET_IGNORE_OUTGOING, 1},
		{"PACKET_QDISC_BYPASS", unix.PACKET_QDISC_BYPASS, 1},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, o.opt, o.val); err != nil {
			return fmt.Errorf("AF_PACKET socket option %s not supported by this kernel: %w", o.name, err)
		}
	}
	return nil
}

const (
	vnetHdrLen  = 10 // struct virtio_net_hdr
	tpacket2Len = 32 // TPACKET_ALIGN(sizeof(struct tpacket2_hdr)); struct sockaddr_ll follows
	sllLen      = 20 // sizeof(struct sockaddr_ll)
	sllPkttype  = 10 // offset of sll_pkttype in struct sockaddr_ll
	// macOffset is where the kernel writes the Ethernet header in a V2 slot of a SOCK_RAW
	// socket with a virtio_net_hdr (tpacket_rcv: TPACKET_ALIGN(hdrlen + 16) + vnet - maclen);
	// the virtio_net_hdr is the vnetHdrLen bytes before it.
	macOffset = (tpacket2Len+sllLen+16+15)&^15 + vnetHdrLen - ethHeaderLen

	pktBatch      = 64      // frames per sendmmsg
	pktCopies     = 4       // GSO packets read with recvmsg per batch
	gsoBufLen     = 1 << 17 // a GSO packet and its virtio_net_hdr (64 KiB, or more with BIG TCP)
	ringMaxFrames = 2048
	ringMaxBytes  = 8 << 20
	rcvBufBytes   = 8 << 20 // room for the queued copies of GSO packets
	sndBufBytes   = 4 << 20
	sendTimeout   = 200 * time.Millisecond // a send blocked longer drops the frame (Close stays prompt)
)

// rxRing is a TPACKET_V2 receive ring.
type rxRing struct {
	fd        int
	mem       []byte
	frameSize int
	frames    int
	head      int // next slot to read
	drops     atomic.Uint64
}

// ringGeometry sizes a V2 ring for an interface MTU: power-of-two slots that hold a full frame
// behind the slot's headers, at most ringMaxFrames of them and ringMaxBytes in all; blocks of
// 64 KiB (or one slot, if larger).
func ringGeometry(mtu int) (frameSize, frames, blockSize int) {
	need := macOffset + ethHeaderLen + 4 + mtu // 4: a VLAN tag
	frameSize = 2048
	for frameSize < need {
		frameSize <<= 1
	}
	frames = min(ringMaxFrames, ringMaxBytes/frameSize)
	blockSize = max(frameSize, 1<<16)
	frames -= frames % (blockSize / frameSize)
	return frameSize, frames, blockSize
}

// openRX opens the receive socket and ring of an interface (call it inside the namespace).
// The socket is promiscuous, for interfaces that filter by MAC address (veth does not); the
// membership goes with the socket.
func openRX(ifindex, mtu int) (*rxRing, error) {
	r := &rxRing{}
	var blockSize int
	r.frameSize, r.frames, blockSize = ringGeometry(mtu)
	var err error
	r.fd, r.mem, err = afpacket.OpenRing(ifindex, unix.ETH_P_ALL, true, func(fd int) (int, error) {
		if err := afpacket.SetInts(fd, unix.SOL_PACKET,
			[2]int{unix.PACKET_VERSION, unix.TPACKET_V2},
			[2]int{unix.PACKET_VNET_HDR, 1},
			[2]int{unix.PACKET_IGNORE_OUTGOING, 1},
			[2]int{unix.PACKET_COPY_THRESH, 1}); err != nil {
			return 0, err
		}
		if err := afpacket.SetBuffer(fd, unix.SO_RCVBUF, rcvBufBytes); err != nil {
			return 0, err
		}
		req := unix.TpacketReq{Block_size: uint32(blockSize), Block_nr: uint32(r.frames * r.frameSize / blockSize),
			Frame_size: uint32(r.frameSize), Frame_nr: uint32(r.frames)}
		if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
			return 0, fmt.Errorf("PACKET_RX_RING %+v: %w", req, err)
		}
		return r.frames * r.frameSize, nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// overruns is how many frames the kernel dropped so far for want of a free slot.
func (r *rxRing) overruns() uint64 {
	// PACKET_STATISTICS clears on read: keep the sum.
	if st, err := afpacket.ReadStats(r.fd); err == nil {
		r.drops.Add(st.Drops)
	}
	return r.drops.Load()
}

func (r *rxRing) close() error {
	err := afpacket.Close(r.fd, r.mem)
	r.fd, r.mem = -1, nil
	return err
}

// openTX opens the send-only socket of an interface (call it inside the namespace).
func openTX(ifindex int) (_ int, err error) {
	fd, err := afpacket.Open()
	if err != nil {
		return -1, err
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err := afpacket.SetInts(fd, unix.SOL_PACKET, [2]int{unix.PACKET_VNET_HDR, 1}, [2]int{unix.PACKET_QDISC_BYPASS, 1}); err != nil {
		return -1, err
	}
	if err := afpacket.SetBuffer(fd, unix.SO_SNDBUF, sndBufBytes); err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval(sendTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return -1, err
	}
	// Protocol 0: the socket is bound to the interface for sending but receives nothing.
	if err := afpacket.Bind(fd, ifindex, 0); err != nil {
		return -1, err
	}
	return fd, nil
}

func sendmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// pktDir forwards one direction: frames received on rx go out through txfd.
type pktDir struct {
	w     *workers
	rules *nf.RuleSet
	rx    *rxRing
	txfd  int
	c     counters

	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	nmsg  int
	slots []int
	bufs  [][]byte
	// per batch, added to c once
	received, denied, errs uint64
}

func newPktDir(w *workers, rules *nf.RuleSet, rx *rxRing, txfd int) *pktDir {
	d := &pktDir{w: w, rules: rules, rx: rx, txfd: txfd,
		msgs: make([]unix.Mmsghdr, pktBatch), iovs: make([]unix.Iovec, pktBatch), slots: make([]int, 0, pktBatch)}
	for i := range d.msgs {
		d.msgs[i].Hdr.Iov = &d.iovs[i]
		d.msgs[i].Hdr.Iovlen = 1
	}
	for range pktCopies {
		d.bufs = append(d.bufs, make([]byte, gsoBufLen))
	}
	return d
}

func (d *pktDir) run() {
	for !d.w.stopped() {
		d.collect()
		if len(d.slots) == 0 {
			d.c.waits.Add(1)
			if err := d.w.waitReadable(d.rx.fd, -1); err != nil {
				d.c.errors.Add(1) // e.g. the interface went down
			}
			continue
		}
		d.send()
		for _, s := range d.slots {
			h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&d.rx.mem[s*d.rx.frameSize]))
			atomic.StoreUint32(&h.Status, unix.TP_STATUS_KERNEL)
		}
		d.c.received.Add(d.received)
		d.c.denied.Add(d.denied)
		d.c.errors.Add(d.errs)
		d.received, d.denied, d.errs = 0, 0, 0
	}
}

// collect takes up to pktBatch ready slots from the ring (d.slots) and queues the allowed
// frames among them for sending (d.msgs[:d.nmsg]).
func (d *pktDir) collect() {
	r := d.rx
	d.slots = d.slots[:0]
	d.nmsg = 0
	copies := 0
	for len(d.slots) < pktBatch {
		base := r.head * r.frameSize
		h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&r.mem[base]))
		status := atomic.LoadUint32(&h.Status)
		if status&unix.TP_STATUS_USER == 0 {
			break
		}
		if status&unix.TP_STATUS_COPY != 0 && copies == len(d.bufs) {
			break // next batch
		}
		d.slots = append(d.slots, r.head)
		if r.head++; r.head == r.frames {
			r.head = 0
		}
		d.received++
		pkt := d.frame(base, h, status, &copies)
		if pkt == nil {
			continue
		}
		if !allowed(d.rules, pkt[vnetHdrLen:]) {
			d.denied++
			continue
		}
		d.iovs[d.nmsg].Base = &pkt[0]
		d.iovs[d.nmsg].SetLen(len(pkt))
		d.nmsg++
	}
}

// frame is the virtio_net_hdr and frame of a ready slot, or nil when it is not to be
// forwarded.
func (d *pktDir) frame(base int, h *unix.Tpacket2Hdr, status uint32, copies *int) []byte {
	r := d.rx
	if r.mem[base+tpacket2Len+sllPkttype] == unix.PACKET_OUTGOING {
		return nil // not ours to forward (PACKET_IGNORE_OUTGOING already hides these)
	}
	if status&unix.TP_STATUS_VLAN_VALID != 0 {
		d.denied++ // an 802.1Q frame: not IPv4 nor ARP
		return nil
	}
	if status&unix.TP_STATUS_COPY != 0 {
		buf := d.bufs[*copies]
		n, _, flags, _, err := unix.Recvmsg(r.fd, buf, nil, unix.MSG_DONTWAIT)
		if err != nil || flags&unix.MSG_TRUNC != 0 || n < vnetHdrLen+ethHeaderLen {
			d.errs++
			return nil
		}
		*copies++
		return buf[:n]
	}
	mac, snap := int(h.Mac), int(h.Snaplen)
	if h.Len != h.Snaplen || mac < vnetHdrLen || mac+snap > r.frameSize || snap < ethHeaderLen {
		d.errs++ // cut short (no copy was queued: the receive buffer was full)
		return nil
	}
	return r.mem[base+mac-vnetHdrLen : base+mac+snap]
}

// send hands the queued frames to the kernel, one sendmmsg per batch; a frame the kernel
// refuses is counted and skipped.
func (d *pktDir) send() {
	off := 0
	for off < d.nmsg && !d.w.stopped() {
		n, err := sendmmsg(d.txfd, d.msgs[off:d.nmsg])
		d.c.sends.Add(1)
		switch {
		case err == unix.EINTR:
		case err != nil:
			d.errs++
			off++
		default:
			d.c.forwarded.Add(uint64(n))
			off += n
		}
	}
}

// packetNF is a running userspace NF.
type packetNF struct {
	w    *workers
	rxs  []*rxRing
	txs  []int
	dirs []*pktDir
	once sync.Once
	err  error
}

func (k packetKind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	links, err := linksOf(env.NS, env.In, env.Out)
	if err != nil {
		return nil, err
	}
	p := &packetNF{}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if p.w, err = newWorkers(); err != nil {
		return nil, err
	}
	err = netns.Do(env.NS, func() error {
		for _, l := range links {
			rx, err := openRX(l.index, l.mtu)
			if err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			p.rxs = append(p.rxs, rx)
			tx, err := openTX(l.index)
			if err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			p.txs = append(p.txs, tx)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("in %s: %w", env.NS, err)
	}
	rs := &rules
	p.dirs = []*pktDir{newPktDir(p.w, rs, p.rxs[0], p.txs[1]), newPktDir(p.w, rs, p.rxs[1], p.txs[0])}
	for _, d := range p.dirs {
		if err := p.w.start(env.CPU, d.run); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// Counts returns the counters of the two directions: in -> out, then out -> in. Call it
// before Close.
func (p *packetNF) Counts() [2]Counts {
	var c [2]Counts
	for i, d := range p.dirs {
		c[i] = d.c.snapshot()
		c[i].Overruns = d.rx.overruns()
	}
	return c
}

// Close stops the goroutines, then closes the sockets and unmaps the rings. Idempotent.
func (p *packetNF) Close() error {
	p.once.Do(func() {
		var errs []error
		if p.w != nil {
			errs = append(errs, p.w.close())
		}
		for _, r := range p.rxs {
			errs = append(errs, r.close())
		}
		for _, fd := range p.txs {
			errs = append(errs, unix.Close(fd))
		}
		p.err = errors.Join(errs...)
	})
	return p.err
}
