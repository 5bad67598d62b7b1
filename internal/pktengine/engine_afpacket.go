package pktengine

// The af_packet engine: AF_PACKET sockets with memory-mapped rings.
//
// RoleSend: a TPACKET_V2 TX ring with PACKET_QDISC_BYPASS (the frames go straight to the driver,
// past the qdisc layer), flushed with one non-blocking sendto per batch. This kernel (6.18)
// accepts TPACKET_V3 for a TX ring as well, but sends from it exactly as from V2 (fixed slots,
// tp_next_offset must be 0), and it measured the same: 64-byte frames, unlimited, over a veth
// pair to the receiver (holding its Sink), generator on CPU 0 and receiver on CPU 1, three 2 s
// runs each (BenchmarkGen64): V2
// 318,022 / 323,853 / 341,288 pps, V3 306,879 / 338,088 / 337,059 pps. V2 is kept: its slot
// header is smaller and older kernels (before 4.11) have no V3 TX ring. Neither a blocking
// sendto nor batches of 16 or 256 instead of 64 changed the rate beyond that noise: over veth
// the kernel's work per frame (the peer's receive path runs in the sender's softirq) is the
// limit, not the generator's loop.
//
// RoleRecv: a TPACKET_V3 RX ring. The kernel fills blocks of frames and hands a block over when
// it is full or its retire timer (rxRetireMs) fires, so the receiver wakes once per block, not
// per frame; the receive time in each frame's header is taken when the frame arrived, so the
// block's wait adds nothing to a probe's latency. A socket filter cuts every frame to rxSnap
// bytes (the generator's headers and payload take at most 96), so a block holds as many large
// frames as small ones; the header keeps the length on the wire.

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/afpacket"
)

func init() { Register(afPacket{}) }

type afPacket struct{}

func (afPacket) Name() string { return "af_packet" }

// Rank: af_packet is the receiver's default (its frames carry the kernel's receive time, and it
// receives as fast as af_xdp: see afXDPRank), af_xdp the sender's.
func (afPacket) Rank(r Role) int {
	if r == RoleRecv {
		return 30
	}
	return 10
}

// Usable needs AF_PACKET sockets (CAP_NET_RAW) with the ring versions and options used.
func (afPacket) Usable() error {
	fd, err := afpacket.Open()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return afpacket.SetInts(fd, unix.SOL_PACKET, [2]int{unix.PACKET_VERSION, unix.TPACKET_V3}, [2]int{unix.PACKET_QDISC_BYPASS, 1})
}

const (
	txFrameSize = 2048 // a slot: the header and a 1514-byte frame
	txFrames    = 1024
	txBlockSize = 1 << 16
	sndBufBytes = 8 << 20 // the frames in flight are charged to the send buffer

	rxBlockSize = 1 << 18
	rxBlocks    = 64
	rxFrameSize = 2048 // V3 ignores it but for the arithmetic of frame_nr
	rxRetireMs  = 4
	rxSnap      = 128
)

// txRing is an AF_PACKET TPACKET_V2 TX ring: slots of txFrameSize bytes, each a struct
// tpacket2_hdr (its status and length) and the frame after it.
type txRing struct {
	fd       int
	mem      []byte
	head     int // next slot to fill
	reserved [][]byte
	addr     unix.RawSockaddrLinklayer // for sendto: the protocol of the frames
}

// txDataOff is where a frame starts in a slot: TPACKET2_HDRLEN - sizeof(struct sockaddr_ll).
const txDataOff = unix.SizeofTpacket2Hdr

func (afPacket) OpenTX(ifc Iface) (TX, error) {
	r := &txRing{reserved: make([][]byte, 0, txFrames)}
	// Bound with protocol 0: the socket sends through the interface and receives nothing;
	// sendto names the frames' protocol.
	var err error
	r.fd, r.mem, err = afpacket.OpenRing(ifc.Index, 0, false, func(fd int) (int, error) {
		// PACKET_LOSS: a frame the kernel cannot send is dropped (its slot freed), not left to
		// stop the ring.
		if err := afpacket.SetInts(fd, unix.SOL_PACKET, [2]int{unix.PACKET_VERSION, unix.TPACKET_V2},
			[2]int{unix.PACKET_QDISC_BYPASS, 1}, [2]int{unix.PACKET_LOSS, 1}); err != nil {
			return 0, err
		}
		if err := afpacket.SetBuffer(fd, unix.SO_SNDBUF, sndBufBytes); err != nil {
			return 0, err
		}
		tv := unix.NsecToTimeval(time.Second.Nanoseconds()) // bounds the blocking flush in Close
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			return 0, err
		}
		req := unix.TpacketReq{Block_size: txBlockSize, Block_nr: txFrames * txFrameSize / txBlockSize,
			Frame_size: txFrameSize, Frame_nr: txFrames}
		if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &req); err != nil {
			return 0, fmt.Errorf("PACKET_TX_RING %+v: %w", req, err)
		}
		return txFrames * txFrameSize, nil
	})
	if err != nil {
		return nil, err
	}
	r.addr = unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Protocol: afpacket.Htons(unix.ETH_P_IP), Ifindex: int32(ifc.Index)}
	return r, nil
}

func (r *txRing) hdr(slot int) *unix.Tpacket2Hdr {
	return (*unix.Tpacket2Hdr)(unsafe.Pointer(&r.mem[slot*txFrameSize]))
}

// free: neither waiting to be sent nor in flight (an skb still holds a sent frame's slot until
// the skb is freed).
func (r *txRing) free(slot int) bool {
	return atomic.LoadUint32(&r.hdr(slot).Status)&(unix.TP_STATUS_SEND_REQUEST|unix.TP_STATUS_SENDING|unix.TP_STATUS_WRONG_FORMAT) == 0
}

func (r *txRing) Reserve(n int) ([][]byte, error) {
	n = min(n, txFrames)
	for try := 0; ; try++ {
		r.reserved = r.reserved[:0]
		for slot := r.head; len(r.reserved) < n && r.free(slot); {
			off := slot*txFrameSize + txDataOff
			r.reserved = append(r.reserved, r.mem[off:off+MaxFrameSize-FCSLen])
			if slot++; slot == txFrames {
				slot = 0
			}
		}
		if len(r.reserved) > 0 || try > 0 {
			return r.reserved, nil
		}
		// The ring is full of frames in flight: wait until the kernel frees the next one.
		pfd := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 100); err != nil && err != unix.EINTR {
			return nil, fmt.Errorf("poll the TX ring: %w", err)
		}
	}
}

func (r *txRing) Submit(lens []int) error {
	for i, l := range lens {
		h := r.hdr((r.head + i) % txFrames)
		h.Len = uint32(l)
		atomic.StoreUint32(&h.Status, unix.TP_STATUS_SEND_REQUEST) // after the frame and its length
	}
	r.head = (r.head + len(lens)) % txFrames
	return r.kick(unix.MSG_DONTWAIT)
}

// kick asks the kernel to send every slot marked SEND_REQUEST. EAGAIN (the send buffer is
// charged full) leaves the rest marked for the next kick; another error means a frame was
// dropped (the next kick sends the frames after it).
func (r *txRing) kick(flags int) error {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(r.fd), 0, 0, uintptr(flags),
			uintptr(unsafe.Pointer(&r.addr)), unix.SizeofSockaddrLinklayer)
		switch errno {
		case 0, unix.EAGAIN:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("sendto (TX ring): %w", errno)
	}
}

func (r *txRing) Describe() string {
	return fmt.Sprintf("TPACKET_V2 TX ring of %d frames, qdisc bypass, one sendto per batch", txFrames)
}

// Close sends what is still marked for sending (waiting for it at most SO_SNDTIMEO), then
// closes the socket and unmaps the ring.
func (r *txRing) Close() error {
	err := r.kick(0)
	if errors.Is(err, unix.ETIMEDOUT) {
		err = nil
	}
	if cerr := afpacket.Close(r.fd, r.mem); cerr != nil {
		err = cerr
	}
	r.fd, r.mem = -1, nil
	return err
}

// rxRing is an AF_PACKET TPACKET_V3 RX ring.
type rxRing struct {
	fd          int
	mem         []byte
	cur         int // next block to read
	drops, full uint64
}

func (afPacket) OpenRX(ifc Iface) (RX, error) {
	r := &rxRing{}
	var err error
	r.fd, r.mem, err = afpacket.OpenRing(ifc.Index, unix.ETH_P_IP, true, func(fd int) (int, error) {
		if err := afpacket.SetInts(fd, unix.SOL_PACKET, [2]int{unix.PACKET_VERSION, unix.TPACKET_V3},
			[2]int{unix.PACKET_IGNORE_OUTGOING, 1}); err != nil {
			return 0, err
		}
		snap := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: rxSnap}} // accept, cut to rxSnap
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
			&unix.SockFprog{Len: uint16(len(snap)), Filter: &snap[0]}); err != nil {
			return 0, fmt.Errorf("attach the snap filter: %w", err)
		}
		req := unix.TpacketReq3{Block_size: rxBlockSize, Block_nr: rxBlocks, Frame_size: rxFrameSize,
			Frame_nr: rxBlockSize / rxFrameSize * rxBlocks, Retire_blk_tov: rxRetireMs}
		if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
			return 0, fmt.Errorf("PACKET_RX_RING %+v: %w", req, err)
		}
		return rxBlockSize * rxBlocks, nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// blockHdr is the header of block b (struct tpacket_block_desc: version, offset_to_priv, then
// struct tpacket_hdr_v1).
func (r *rxRing) blockHdr(b int) *unix.TpacketHdrV1 {
	return (*unix.TpacketHdrV1)(unsafe.Pointer(&r.mem[b*rxBlockSize+8]))
}

func (r *rxRing) Read(timeout time.Duration, fn func(frame []byte, wireLen int, rxNs int64)) error {
	for polled, n := false, 0; n < rxBlocks; {
		bh := r.blockHdr(r.cur)
		if atomic.LoadUint32(&bh.Block_status)&unix.TP_STATUS_USER == 0 {
			if polled || n > 0 {
				return nil
			}
			polled = true
			pfd := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, int(timeout.Milliseconds())); err != nil && err != unix.EINTR {
				return fmt.Errorf("poll the RX ring: %w", err)
			}
			continue
		}
		base := r.cur * rxBlockSize
		off := int(bh.Offset_to_first_pkt)
		for range bh.Num_pkts {
			h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&r.mem[base+off]))
			mac := base + off + int(h.Mac)
			if end := mac + int(h.Snaplen); end <= base+rxBlockSize {
				fn(r.mem[mac:end], int(h.Len), int64(h.Sec)*1e9+int64(h.Nsec))
			}
			off += int(h.Next_offset)
		}
		atomic.StoreUint32(&bh.Block_status, unix.TP_STATUS_KERNEL)
		if r.cur++; r.cur == rxBlocks {
			r.cur = 0
		}
		n++
	}
	return nil
}

func (r *rxRing) Settle() time.Duration { return 3 * rxRetireMs * time.Millisecond }

func (r *rxRing) Drops() (drops, full uint64) {
	if st, err := afpacket.ReadStats(r.fd); err == nil {
		r.drops += st.Drops
		r.full += st.Freezes
	}
	return r.drops, r.full
}

func (r *rxRing) Describe() string {
	return fmt.Sprintf("TPACKET_V3 RX ring of %d blocks of %d KiB, %d ms block timeout, frames cut to %d bytes",
		rxBlocks, rxBlockSize>>10, rxRetireMs, rxSnap)
}

func (r *rxRing) Close() error {
	err := afpacket.Close(r.fd, r.mem)
	r.fd, r.mem = -1, nil
	return err
}
