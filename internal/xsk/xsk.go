// Package xsk holds AF_XDP sockets in copy mode for whoever moves frames through them: a UMEM
// (the frames' memory shared with the kernel), the sockets and their four rings (fill and
// completion, RX and TX), and the XDP program that redirects an interface's frames into the
// sockets through an XSKMAP (bpf/xsk_redirect.c), attached through a bpf_link so that it goes
// when the link is closed and also when the process dies, however it dies.
//
// Users: the userspace-afxdp network function (internal/nf/userspace) and the packet engine's
// af_xdp engine (internal/pktengine).
package xsk

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/afpacket"
	"github.com/cnibench/cnibench/internal/ethtool"
)

// Usable tells why this host cannot run AF_XDP with the XDP program (nil: it can): it needs
// AF_XDP sockets (CONFIG_XDP_SOCKETS, CAP_NET_RAW), the program and its XSKMAP to load
// (CAP_BPF, CAP_NET_ADMIN) and CAP_NET_ADMIN to attach it. An unprivileged Kubernetes pod has
// CAP_NET_RAW only. The answer is worked out once per process.
var Usable = sync.OnceValue(usable)

func usable() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open an AF_XDP socket (a kernel without CONFIG_XDP_SOCKETS, or no CAP_NET_RAW): %w", err)
	}
	unix.Close(fd)
	if !hasCap(unix.CAP_NET_ADMIN) {
		return errors.New("no CAP_NET_ADMIN: attaching an XDP program needs it (an unprivileged pod lacks it)")
	}
	var objs xskObjects
	if err := loadXskObjects(&objs, nil); err != nil {
		return fmt.Errorf("the XDP program redirecting to AF_XDP sockets does not load (it needs CAP_BPF or CAP_SYS_ADMIN, and a kernel with XSKMAP): %w", err)
	}
	return objs.Close()
}

// hasCap tells whether the calling thread has capability c in its effective set.
func hasCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// NewUMEM maps the memory of a UMEM of frames frames of frameSize bytes (a power of two from
// 2048 to the page size); FreeUMEM unmaps it once no socket uses it.
func NewUMEM(frames, frameSize int) ([]byte, error) {
	m, err := unix.Mmap(-1, 0, frames*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("UMEM of %d frames of %d bytes: %w", frames, frameSize, err)
	}
	return m, nil
}

// FreeUMEM unmaps a UMEM of NewUMEM.
func FreeUMEM(umem []byte) error { return unix.Munmap(umem) }

// Ring is one of an AF_XDP socket's four rings. For the rings user space produces to (fill,
// TX) Local is the next producer index; for those it consumes (RX, completion), the next
// consumer index. Entries are addressed by index (Addr for the fill and completion rings,
// Desc for RX and TX); the index wraps.
type Ring struct {
	mem               []byte
	prod, cons, flags *uint32
	descs             unsafe.Pointer
	mask              uint32
	Local             uint32
}

func mapRing(fd int, off unix.XDPRingOffset, pgoff int64, size int, entry uintptr, producer bool) (*Ring, error) {
	mem, err := unix.Mmap(fd, pgoff, int(off.Desc+uint64(size)*uint64(entry)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap an AF_XDP ring: %w", err)
	}
	r := &Ring{mem: mem, mask: uint32(size) - 1,
		prod:  (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		cons:  (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags: (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		descs: unsafe.Pointer(&mem[off.Desc])}
	if producer {
		r.Local = atomic.LoadUint32(r.prod)
	} else {
		r.Local = atomic.LoadUint32(r.cons)
	}
	return r, nil
}

// Size is how many entries the ring holds.
func (r *Ring) Size() uint32 { return r.mask + 1 }

// Addr is entry i of a fill or completion ring: a frame's address in the UMEM.
func (r *Ring) Addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

// Desc is entry i of an RX or TX ring: a frame's address in the UMEM and its length.
func (r *Ring) Desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// Ready is how many entries a consumer ring holds for user space.
func (r *Ring) Ready() uint32 { return atomic.LoadUint32(r.prod) - r.Local }

// Release gives the entries consumed so far back to the kernel.
func (r *Ring) Release() { atomic.StoreUint32(r.cons, r.Local) }

// Submit publishes the entries produced so far to the kernel.
func (r *Ring) Submit() { atomic.StoreUint32(r.prod, r.Local) }

// Pending is whether the kernel has not consumed everything produced to this ring.
func (r *Ring) Pending() bool { return atomic.LoadUint32(r.cons) != r.Local }

// NeedWakeup is whether the kernel asks for a system call to go on with this ring
// (XDP_USE_NEED_WAKEUP).
func (r *Ring) NeedWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// Rings are a socket's ring sizes in entries (powers of two); 0: no such ring. A socket bound
// with its own UMEM needs a fill and a completion ring, and an RX or a TX ring.
type Rings struct{ RX, TX, Fill, Completion int }

// Config is an AF_XDP socket.
type Config struct {
	// UMEM is registered with the socket, in frames of FrameSize bytes; nil: the socket will
	// share another's (Bind with shared).
	UMEM      []byte
	FrameSize int
	Rings     Rings
	// SndBuf is the send buffer in bytes (copy mode charges the frames in flight to it); 0:
	// the kernel's default. Beyond the host's limit only with CAP_NET_ADMIN.
	SndBuf int
	// TxBudget is how many frames copy mode sends per sendto at most
	// (XDP_MAX_TX_SKB_BUDGET); 0, or a kernel without the option: the kernel's 32.
	TxBudget int
}

// Socket is an AF_XDP socket and its rings (nil where Config asked for none).
type Socket struct {
	FD                       int
	RX, TX, Fill, Completion *Ring
}

func sockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	n := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Open opens an AF_XDP socket (inside the namespace of the interface it will be bound to),
// registers c.UMEM with it unless it is nil, and creates and maps the rings c asks for.
func Open(c Config) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP socket: %w", err)
	}
	s := &Socket{FD: fd}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if c.UMEM != nil {
		reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&c.UMEM[0]))), Len: uint64(len(c.UMEM)), Size: uint32(c.FrameSize)}
		if err := sockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
			hint := ""
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
				hint = " (beyond RLIMIT_MEMLOCK without CAP_IPC_LOCK?)"
			}
			return nil, fmt.Errorf("register the UMEM (%d bytes in frames of %d)%s: %w", len(c.UMEM), c.FrameSize, hint, err)
		}
	}
	rings := []struct {
		opt, size int
	}{{unix.XDP_UMEM_FILL_RING, c.Rings.Fill}, {unix.XDP_UMEM_COMPLETION_RING, c.Rings.Completion},
		{unix.XDP_RX_RING, c.Rings.RX}, {unix.XDP_TX_RING, c.Rings.TX}}
	for _, r := range rings {
		if r.size == 0 {
			continue
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, r.size); err != nil {
			return nil, fmt.Errorf("AF_XDP ring (option %d) of %d entries: %w", r.opt, r.size, err)
		}
	}
	if c.SndBuf > 0 {
		if err := afpacket.SetBuffer(fd, unix.SO_SNDBUF, c.SndBuf); err != nil {
			return nil, err
		}
	}
	if c.TxBudget > 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, c.TxBudget)
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	desc, addr := unsafe.Sizeof(unix.XDPDesc{}), unsafe.Sizeof(uint64(0))
	for _, m := range []struct {
		ring     **Ring
		size     int
		off      unix.XDPRingOffset
		pgoff    int64
		entry    uintptr
		producer bool
	}{
		{&s.RX, c.Rings.RX, off.Rx, unix.XDP_PGOFF_RX_RING, desc, false},
		{&s.TX, c.Rings.TX, off.Tx, unix.XDP_PGOFF_TX_RING, desc, true},
		{&s.Fill, c.Rings.Fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, addr, true},
		{&s.Completion, c.Rings.Completion, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, addr, false},
	} {
		if m.size == 0 {
			continue
		}
		if *m.ring, err = mapRing(fd, m.off, m.pgoff, m.size, m.entry, m.producer); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Bind binds the socket to receive queue 0 of interface ifindex (dev names it in errors) in
// copy mode with XDP_USE_NEED_WAKEUP, or, when shared is not nil, to share shared's UMEM.
func (s *Socket) Bind(dev string, ifindex int, shared *Socket) error {
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY | unix.XDP_USE_NEED_WAKEUP, Ifindex: uint32(ifindex), QueueID: 0}
	if shared != nil {
		sa = &unix.SockaddrXDP{Flags: unix.XDP_SHARED_UMEM, Ifindex: uint32(ifindex), QueueID: 0, SharedUmemFD: uint32(shared.FD)}
	}
	// The kernel releases a closed socket's hold on the queue in a work item, after close
	// returned: a socket bound right after another one closed may find the queue busy a while.
	for end := time.Now().Add(bindBusyWait); ; time.Sleep(5 * time.Millisecond) {
		err := unix.Bind(s.FD, sa)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(end) {
			return fmt.Errorf("bind an AF_XDP socket to %s queue 0 (copy mode): %w", dev, err)
		}
	}
}

// bindBusyWait bounds how long Bind waits for a busy queue (another socket's, or one closed
// just before).
const bindBusyWait = time.Second

// OneRxQueue checks that dev (of the current namespace) receives on one queue only: a socket
// is bound to one queue, queue 0, and the frames of another would not reach it.
func OneRxQueue(dev string) error {
	n, err := ethtool.RxQueues(dev)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%s has %d receive queues: an AF_XDP socket here serves one, queue 0 (ethtool -L %s combined 1)", dev, n, dev)
	}
	return nil
}

// Close unmaps the rings and closes the socket. Idempotent.
func (s *Socket) Close() error {
	var errs []error
	for _, r := range []**Ring{&s.RX, &s.TX, &s.Fill, &s.Completion} {
		if *r != nil {
			errs = append(errs, unix.Munmap((*r).mem))
			*r = nil
		}
	}
	if s.FD >= 0 {
		errs = append(errs, unix.Close(s.FD))
		s.FD = -1
	}
	return errors.Join(errs...)
}

// Kick makes the kernel send what the TX ring holds: copy mode sends in this sendto, up to
// the budget. nil also when it sent a budget and more is left (EAGAIN: kick again) or was
// interrupted; EBUSY: the interface dropped a frame (it is completed but not sent); ENOBUFS:
// no memory for a frame (it stays in the ring).
func (s *Socket) Kick() error {
	_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.FD), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0, unix.EAGAIN, unix.EINTR:
		return nil
	}
	return errno
}

// WakeRX tells the kernel that the fill ring has frames again, when it asks for that.
func (s *Socket) WakeRX() {
	if s.Fill.NeedWakeup() {
		_, _, _ = unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.FD), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// Statistics is the socket's XDP_STATISTICS.
func (s *Socket) Statistics() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := getsockopt(s.FD, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

// Program is a copy of the XDP program bpf/xsk_redirect.c with its own XSKMAP: it redirects
// the frames of receive queue q to the socket Put at q.
type Program struct {
	objs   xskObjects
	link   link.Link
	closed bool
}

// LoadProgram loads a copy of the program. udp4Only: only IPv4 UDP frames go to the sockets,
// the rest (ARP above all) and the frames of a queue without a socket go on to the stack;
// otherwise every frame goes to the sockets and those of a queue without a socket are dropped.
func LoadProgram(udp4Only bool) (*Program, error) {
	spec, err := loadXsk()
	if err != nil {
		return nil, err
	}
	if udp4Only {
		if err := spec.Variables["udp4_only"].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("set udp4_only: %w", err)
		}
	}
	p := &Program{}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the XDP program redirecting to AF_XDP sockets: %w", err)
	}
	return p, nil
}

// Put makes socket s the target of receive queue q.
func (p *Program) Put(q uint32, s *Socket) error {
	if err := p.objs.Xsks.Update(q, uint32(s.FD), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("put the AF_XDP socket in the XSKMAP: %w", err)
	}
	return nil
}

// Attach attaches the program to interface ifindex of the current namespace (dev names it in
// errors) through a bpf_link, in mode (link.XDPDriverMode, link.XDPGenericMode). The program
// stays attached until Detach or Close, or until the process ends: nothing pins the link.
func (p *Program) Attach(dev string, ifindex int, mode link.XDPAttachFlags) error {
	if p.link != nil {
		return fmt.Errorf("attach the XDP program to %s: attached already", dev)
	}
	lk, err := link.AttachXDP(link.XDPOptions{Program: p.objs.XskRedirect, Interface: ifindex, Flags: mode})
	if err != nil {
		return fmt.Errorf("attach the XDP program to %s (bpf_link): %w", dev, err)
	}
	p.link = lk
	return nil
}

// Detach detaches the program from its interface (closes the link). Idempotent.
func (p *Program) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	return err
}

// Close detaches the program and releases it and its map. Idempotent.
func (p *Program) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	return errors.Join(p.Detach(), p.objs.Close())
}
