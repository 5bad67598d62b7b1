package nf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
)

// Interface names inside a chain's namespaces.
const (
	ClientIf = "eth0" // the client's and the server's interface
	InIf     = "in0"  // an NF's interface towards the client
	OutIf    = "out0" // an NF's interface towards the server
)

// MaxLength bounds a chain (the sweep's top is 8).
const MaxLength = 32

// ChainSpec asks for a chain between two existing namespaces.
type ChainSpec struct {
	Kind   Kind
	Length int // network functions between client and server (0: client and server joined directly)
	Rules  int // rule count of every NF's rule set
	Ports  []Port
	// Client and Server are existing, empty network namespaces; NFName(i) names NF i's
	// namespace (i = 1..Length), which the chain creates and deletes.
	Client, Server string
	NFName         func(i int) string
	// Dir is a scratch directory; each NF gets Dir/nf<i>. BPFDir, when set, is where the chain
	// mounts a bpf file system for its NFs' pins (each NF gets BPFDir/nf<i>); Close unmounts it.
	Dir, BPFDir string
	MTU         int
	CPU         int // Env.CPU of every NF
}

// Chain is a built chain.
type Chain struct {
	Spec     ChainSpec
	ClientIP netip.Addr
	ServerIP netip.Addr
	Rules    RuleSet
	nfs      []Instance
	nss      []string
	mounted  bool
}

// Namespaces are the network functions' namespaces, NF 1 first (nil once the chain is closed).
func (c *Chain) Namespaces() []string { return slices.Clone(c.nss) }

// hopAddr is the address of the left (1) or right (2) end of link h.
func hopAddr(h, end int) netip.Addr { return netip.AddrFrom4([4]byte{10, 250, byte(h), byte(end)}) }

// BuildChain wires client -> NF 1 .. NF N -> server with veth pairs, addresses and routes as the
// kind's layer needs, and starts every NF with the rule set. On an error everything it made is
// removed again.
func BuildChain(ctx context.Context, spec ChainSpec) (_ *Chain, err error) {
	if spec.Kind == nil {
		return nil, errors.New("chain: no network-function kind")
	}
	if spec.Length < 0 || spec.Length > MaxLength {
		return nil, fmt.Errorf("chain length %d: must be 0..%d; set chain_length: in the plan to a value in range", spec.Length, MaxLength)
	}
	if err := spec.Kind.Usable(); err != nil {
		return nil, err
	}
	if spec.MTU == 0 {
		spec.MTU = 1500
	}
	n := spec.Length
	c := &Chain{Spec: spec, ClientIP: hopAddr(0, 1), ServerIP: hopAddr(0, 2)}
	routed := spec.Kind.Layer() == Routed
	if routed {
		c.ServerIP = hopAddr(n, 2)
	}
	if c.Rules, err = Build(Flow{Client: c.ClientIP, Server: c.ServerIP, Ports: spec.Ports}, spec.Rules); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	for i := 1; i <= n; i++ {
		name := spec.NFName(i)
		if err := netns.Create(name); err != nil {
			return nil, fmt.Errorf("NF %d namespace: %w", i, err)
		}
		c.nss = append(c.nss, name)
	}
	if spec.BPFDir != "" {
		if err := MountBPF(spec.BPFDir); err != nil {
			return nil, err
		}
		c.mounted = true
	}
	// Link h joins (left, leftIf) and (right, rightIf).
	for h := 0; h <= n; h++ {
		left, leftIf, right, rightIf := spec.Client, ClientIf, spec.Server, ClientIf
		if h > 0 {
			left, leftIf = spec.NFName(h), OutIf
		}
		if h < n {
			right, rightIf = spec.NFName(h+1), InIf
		}
		if err := netns.VethPair(left, leftIf, right, rightIf, spec.MTU); err != nil {
			return nil, fmt.Errorf("link %d: %w", h, err)
		}
	}
	if err := c.address(routed); err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		env := Env{NS: spec.NFName(i), In: InIf, Out: OutIf, Name: spec.NFName(i), Dir: filepath.Join(spec.Dir, "nf"+strconv.Itoa(i)), CPU: spec.CPU,
			InPeer: Endpoint{NS: spec.Client, Dev: ClientIf}, OutPeer: Endpoint{NS: spec.Server, Dev: ClientIf}}
		if i > 1 {
			env.InPeer = Endpoint{NS: spec.NFName(i - 1), Dev: OutIf}
		}
		if i < n {
			env.OutPeer = Endpoint{NS: spec.NFName(i + 1), Dev: InIf}
		}
		if c.mounted {
			env.BPFDir = filepath.Join(spec.BPFDir, "nf"+strconv.Itoa(i))
			if err := os.MkdirAll(env.BPFDir, 0o700); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(env.Dir, 0o755); err != nil {
			return nil, err
		}
		inst, err := spec.Kind.Start(ctx, env, c.Rules)
		if err != nil {
			return nil, fmt.Errorf("%s NF %d: %w", spec.Kind.Name(), i, err)
		}
		c.nfs = append(c.nfs, inst)
	}
	return c, ctx.Err()
}

// AddAddr gives dev in namespace ns the address a/bits.
func AddAddr(ns, dev string, a netip.Addr, bits int) error {
	return netns.WithNetlink(ns, func(h *netlink.Handle) error {
		lk, err := h.LinkByName(dev)
		if err != nil {
			return err
		}
		return h.AddrAdd(lk, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}})
	})
}

func addRoute(ns, dev string, dst, via netip.Addr) error {
	return netns.WithNetlink(ns, func(h *netlink.Handle) error {
		lk, err := h.LinkByName(dev)
		if err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: lk.Attrs().Index, Dst: &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(32, 32)}, Gw: via.AsSlice()})
	})
}

// address gives the chain's ends (and a routed kind's NFs) their addresses and routes.
func (c *Chain) address(routed bool) error {
	s := c.Spec
	n := s.Length
	if !routed {
		if err := AddAddr(s.Client, ClientIf, c.ClientIP, 24); err != nil {
			return err
		}
		return AddAddr(s.Server, ClientIf, c.ServerIP, 24)
	}
	if err := AddAddr(s.Client, ClientIf, hopAddr(0, 1), 24); err != nil {
		return err
	}
	if err := AddAddr(s.Server, ClientIf, hopAddr(n, 2), 24); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := addRoute(s.Client, ClientIf, c.ServerIP, hopAddr(0, 2)); err != nil {
		return err
	}
	if err := addRoute(s.Server, ClientIf, c.ClientIP, hopAddr(n, 1)); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		ns := s.NFName(i)
		if err := AddAddr(ns, InIf, hopAddr(i-1, 2), 24); err != nil {
			return err
		}
		if err := AddAddr(ns, OutIf, hopAddr(i, 1), 24); err != nil {
			return err
		}
		if err := netns.SetSysctl(ns, "net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
		if i > 1 {
			if err := addRoute(ns, InIf, c.ClientIP, hopAddr(i-1, 1)); err != nil {
				return err
			}
		}
		if i < n {
			if err := addRoute(ns, OutIf, c.ServerIP, hopAddr(i, 2)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Pause pauses the chain's NFs that poll (Pauser); the others need no pause.
func (c *Chain) Pause() error { return c.each(Pauser.Pause) }

// Resume resumes what Pause paused.
func (c *Chain) Resume() error { return c.each(Pauser.Resume) }

func (c *Chain) each(fn func(Pauser) error) error {
	var errs []error
	for _, in := range c.nfs {
		if p, ok := in.(Pauser); ok {
			errs = append(errs, fn(p))
		}
	}
	return errors.Join(errs...)
}

// Close stops the NFs (last first), deletes their namespaces and unmounts the chain's bpf file
// system. Idempotent.
func (c *Chain) Close() error {
	var errs []error
	for i := len(c.nfs) - 1; i >= 0; i-- {
		errs = append(errs, c.nfs[i].Close())
	}
	c.nfs = nil
	for _, ns := range c.nss {
		errs = append(errs, netns.KillAll(ns), netns.Delete(ns))
	}
	c.nss = nil
	if c.mounted {
		errs = append(errs, Unmount(c.Spec.BPFDir))
		c.mounted = false
	}
	return errors.Join(errs...)
}

// MountBPF mounts a bpf file system of its own at dir (made if missing), so pins stay under the
// run's prefix whether or not the host has one at /sys/fs/bpf; Unmount removes it.
func MountBPF(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount a bpf file system at %s: %w", dir, err)
	}
	return nil
}

// Unmount detaches a bpf file system (and anything it pins) and removes its directory; a
// directory that is not mounted is only removed.
func Unmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
