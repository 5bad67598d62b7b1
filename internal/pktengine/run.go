package pktengine

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/cpupin"
)

// GenOptions are a generator run of `cnibench pkt gen`: where to, through what, and GenConfig
// (whose Addrs RunGen fills in).
type GenOptions struct {
	GenConfig
	Engine  string // "" = the best usable one
	Dst     netip.Addr
	Dev     string           // "" = the route's interface
	DstMAC  net.HardwareAddr // nil = resolve the next hop (ARP)
	SrcPort uint16
	DstPort uint16
	CPU     int // pin the sending thread to this CPU; -1: no pinning
}

// ARPTimeout bounds the wait for the next hop's MAC address.
const ARPTimeout = 3 * time.Second

// RunGen resolves the path to o.Dst and runs the generator, on the calling goroutine's thread
// (inside the current network namespace).
func RunGen(ctx context.Context, o GenOptions) (GenResult, error) {
	if err := o.Check(); err != nil {
		return GenResult{}, err
	}
	e, err := Lookup(o.Engine, RoleSend)
	if err != nil {
		return GenResult{}, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := ResolvePath(o.Dst, o.Dev, o.DstMAC, ARPTimeout)
	if err != nil {
		return GenResult{}, err
	}
	o.Addrs = Addrs{SrcMAC: p.SrcMAC, DstMAC: p.DstMAC, Src: p.Src, Dst: o.Dst, SrcPort: o.SrcPort, DstPort: o.DstPort}
	restore, err := cpupin.Pin(o.CPU)
	if err != nil {
		return GenResult{}, err
	}
	defer func() { _ = restore() }()
	return Generate(ctx, e, p.Iface, o.GenConfig)
}

// RecvOptions are a receiver run of `cnibench pkt recv`.
type RecvOptions struct {
	RecvConfig
	Engine string // "" = the best usable one
	Dev    string // "" = the only interface other than loopback
	CPU    int    // -1: no pinning
	// SinkPort is a UDP port to hold with a sink socket during the run (see Sink); 0: none.
	SinkPort int
}

// RunRecv runs the receiver on the calling goroutine's thread (inside the current network
// namespace).
func RunRecv(ctx context.Context, o RecvOptions) (RecvResult, error) {
	e, err := Lookup(o.Engine, RoleRecv)
	if err != nil {
		return RecvResult{}, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ifc, err := DefaultIface()
	if o.Dev != "" {
		ifc, err = IfaceByName(o.Dev)
	}
	if err != nil {
		return RecvResult{}, err
	}
	if o.SinkPort != 0 {
		closeSink, err := Sink(o.SinkPort)
		if err != nil {
			return RecvResult{}, err
		}
		defer closeSink()
	}
	restore, err := cpupin.Pin(o.CPU)
	if err != nil {
		return RecvResult{}, err
	}
	defer func() { _ = restore() }()
	return Receive(ctx, e, ifc, o.RecvConfig)
}

// Sink binds a UDP socket to port (every address of the current namespace) whose socket
// filter drops every datagram, until closeSink. The receiver's host then neither queues the
// generator's datagrams anywhere nor answers each with an ICMP port unreachable: over a veth
// pair that ICMP work (route lookups, mostly; rate-limiting comes after them) ran in the
// generator's softirq and cost a quarter of its rate (64-byte frames, unlimited: 233,131 and
// 235,908 pps without a sink, 306,450 and 322,478 with one).
func Sink(port int) (closeSink func(), err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sink socket: %w", err)
	}
	drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &drop[0]}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sink socket filter: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sink on UDP port %d (in use? --sink-port 0 goes without): %w", port, err)
	}
	return func() { unix.Close(fd) }, nil
}
