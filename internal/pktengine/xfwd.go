package pktengine

// The XDP forwarding VNF: seed 002's packet-forwarding VNF done by an eBPF program at the
// interface's driver hook, the sibling of pkt fwd (user space, a system call each way) and
// pkt knf (the kernel's NAT). Inside a pod's network namespace it attaches bpf/xdp_vnf.c to the
// pod's interface; the program sends every IPv4 UDP datagram to the interface's address on a
// port on to a target, from that address, rewritten in place and sent back out of the
// interface it came in by (XDP_TX): no socket, no routing, no netfilter. Several targets are
// taken in turn, datagram by datagram (an atomic counter shared by the CPUs). The MAC address
// of each target's next hop is resolved once, before the program is attached (ResolvePath), so
// every target must be reached through that interface.
//
// The program is attached through a bpf_link that nothing pins: it goes when the run ends, and
// also when the process dies, however it dies.
//
// Mode: generic (SKB) XDP works on any interface, and XDP_TX on a veth sends the frame to the
// peer like any other frame (measured: TestXfwdRoundRobin). Native XDP on a veth hands the
// frame to the peer's NAPI ring, which the kernel (6.18) flushes only when the peer (the host's
// end of a pod's veth, out of the pod's reach) has an XDP program of its own: without one
// every forwarded frame is dropped (GRO on the peer is not enough: the frames stay in its
// ring), though counted here (TestXfwdNative). Native mode also takes the GSO features off the
// peer while it is attached. Hence generic by default.
//
// Checksums: the UDP checksum is updated incrementally as a full checksum. A datagram a local
// socket sent through a veth with TX checksumming on carries a partial one (CHECKSUM_PARTIAL:
// the pseudo-header's sum, for a device to complete), which XDP cannot tell from a full one:
// a receiver on veths trusts it, but a real NIC completing it on the way would write a wrong
// checksum. The packet engine's datagrams (checksum 0) and those of a sender that computes
// its checksums are forwarded right.

//go:generate go tool bpf2go -target bpfel -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include" xdpVnf ../../bpf/xdp_vnf.c

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// XfwdReadyLine is what `cnibench pkt xfwd` prints on stderr once its program is attached: a
// scenario starts sending after it.
const XfwdReadyLine = "pkt xfwd: ready"

// The XDP modes of the VNF (XfwdOptions.Mode, XfwdResult.Mode).
const (
	XfwdGeneric = "generic"
	XfwdNative  = "native"
)

// xfwdMaxTargets is MAX_TARGETS of bpf/xdp_vnf.c.
const xfwdMaxTargets = 64

// xfwdResolveWait is how long the MAC address of a target's next hop may take to resolve.
const xfwdResolveWait = 3 * time.Second

// XfwdOptions are a run of `cnibench pkt xfwd`.
type XfwdOptions struct {
	Port     int              // UDP port whose datagrams are forwarded
	To       []netip.AddrPort // where they go, each in turn (up to 64)
	Duration time.Duration    // 0: until the context ends
	// Dev is the interface to attach to ("": the only one other than loopback).
	Dev string
	// Mode is XfwdGeneric ("": the default) or XfwdNative.
	Mode string
	// Ready, when set, is called once the program is attached.
	Ready func() `json:"-"`
}

// XfwdResult is what an XDP forwarding run did.
type XfwdResult struct {
	// Forwarded is what the program sent on (XDP_TX).
	Forwarded
	Mode string `json:"mode"` // XfwdGeneric or XfwdNative
	Dev  string `json:"dev"`  // the interface it was attached to
}

// RunXfwd attaches the XDP VNF to an interface of the current network namespace, lets it
// forward until o.Duration has passed or ctx ends, detaches it and returns what it counted. A
// process without CAP_NET_ADMIN, or without CAP_BPF (or CAP_SYS_ADMIN), fails at once with
// one line naming what it lacks.
func RunXfwd(ctx context.Context, o XfwdOptions) (XfwdResult, error) {
	res := XfwdResult{Forwarded: Forwarded{Port: o.Port, PacketsTo: make([]uint64, len(o.To))}, Mode: o.Mode}
	var err error
	if res.To, err = checkTargets(o.Port, o.To); err != nil {
		return res, err
	}
	if len(o.To) > xfwdMaxTargets {
		return res, badField("to", "%d targets: at most %d", len(o.To), xfwdMaxTargets)
	}
	flags := link.XDPGenericMode
	switch o.Mode {
	case "", XfwdGeneric:
		res.Mode = XfwdGeneric
	case XfwdNative:
		flags = link.XDPDriverMode
	default:
		return res, badField("mode", "%q: want %s or %s", o.Mode, XfwdGeneric, XfwdNative)
	}
	// netlink, the next hops' resolution and the attachment act on this thread's namespace.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := xfwdCaps(); err != nil {
		return res, err
	}

	ifc, err := DefaultIface()
	if o.Dev != "" {
		ifc, err = IfaceByName(o.Dev)
	}
	if err != nil {
		return res, err
	}
	res.Dev = ifc.Name
	var own Path
	targets := make([]xdpVnfTarget, len(o.To))
	for i, to := range o.To {
		p, err := ResolvePath(to.Addr(), ifc.Name, nil, xfwdResolveWait)
		if err != nil {
			return res, fmt.Errorf("target %s: %w (the datagrams go back out of %s: every target must be reached through it)", to, err, ifc.Name)
		}
		if i == 0 {
			own = p
		} else if p.Src != own.Src {
			return res, fmt.Errorf("target %s is reached from %s, target %s from %s: the VNF has one address", o.To[0], own.Src, to, p.Src)
		}
		a, port := to.Addr().As4(), binary.BigEndian.AppendUint16(nil, to.Port())
		targets[i] = xdpVnfTarget{Addr: binary.NativeEndian.Uint32(a[:]), Port: binary.NativeEndian.Uint16(port), Mac: p.DstMAC}
	}

	objs, err := loadXfwd(own, o.Port, targets)
	if err != nil {
		return res, err
	}
	defer objs.Close()
	lk, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpVnf, Interface: ifc.Index, Flags: flags})
	if err != nil {
		hint := ""
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			hint = " (another XDP program is attached to it: another pkt xfwd?)"
		}
		return res, fmt.Errorf("attach the XDP program to %s in %s mode (bpf_link): %w%s", ifc.Name, res.Mode, err, hint)
	}
	start := time.Now()
	if o.Ready != nil {
		o.Ready()
	}
	var timeout <-chan time.Time
	if o.Duration > 0 {
		t := time.NewTimer(o.Duration)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-timeout:
	}
	res.DurationS = time.Since(start).Seconds()
	if err := lk.Close(); err != nil {
		return res, fmt.Errorf("detach the XDP program from %s: %w", ifc.Name, err)
	}
	return res, xfwdCount(objs.Counters, &res)
}

// xfwdCaps fails, in one line naming them, when this thread lacks the capabilities to load
// and attach an XDP program: CAP_NET_ADMIN, and CAP_BPF or CAP_SYS_ADMIN.
func xfwdCaps() error {
	var missing []string
	for _, c := range []struct {
		name string
		caps []int
	}{{"CAP_NET_ADMIN", []int{unix.CAP_NET_ADMIN}}, {"CAP_BPF", []int{unix.CAP_BPF, unix.CAP_SYS_ADMIN}}} {
		ok := false
		for _, cp := range c.caps {
			has, err := hasCap(cp)
			if err != nil {
				return fmt.Errorf("read this process's capabilities: %w", err)
			}
			ok = ok || has
		}
		if !ok {
			missing = append(missing, c.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("needs the capabilities CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN) to load and attach an XDP program; missing: %s (a Kubernetes pod: securityContext.capabilities.add [NET_ADMIN, BPF])", strings.Join(missing, ", "))
}

// loadXfwd loads bpf/xdp_vnf.c for the VNF's own address and MAC (own.Src, own.SrcMAC), its
// port and targets.
func loadXfwd(own Path, port int, targets []xdpVnfTarget) (*xdpVnfObjects, error) {
	spec, err := loadXdpVnf()
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]any{"own_addr": own.Src.As4(), "port": [2]byte(binary.BigEndian.AppendUint16(nil, uint16(port))),
		"own_mac": own.SrcMAC, "n_targets": uint32(len(targets))} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s of the XDP program: %w", name, err)
		}
	}
	var objs xdpVnfObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load the XDP program: %+v", ve)
		}
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("load the XDP program: %w (needs CAP_BPF in the host's user namespace)", err)
		}
		return nil, fmt.Errorf("load the XDP program: %w", err)
	}
	for i, t := range targets {
		if err := objs.Targets.Put(uint32(i), t); err != nil {
			_ = objs.Close()
			return nil, fmt.Errorf("put target %d in the XDP program's map: %w", i, err)
		}
	}
	return &objs, nil
}

// xfwdCount reads the program's per-CPU counters into res.
func xfwdCount(counters *ebpf.Map, res *XfwdResult) error {
	for i := range res.PacketsTo {
		var perCPU []xdpVnfCounter
		if err := counters.Lookup(uint32(i), &perCPU); err != nil {
			return fmt.Errorf("read the XDP program's counters of target %d: %w", i, err)
		}
		for _, c := range perCPU {
			res.PacketsTo[i] += c.Packets
			res.Packets += c.Packets
			res.Bytes += c.Bytes
		}
	}
	return nil
}
