// Package bpfdp holds the eBPF data paths that the lab's data-plane parts attach (it builds no
// namespace, see internal/engine): the programs bpf2go generates from bpf/*.c, loaded once per
// lab node into maps of that node's own, pinned in the node's bpf file system
// (the lab's state directory), and attached with tcx links in the node's namespace.
//
// Pinning is the state: whichever process programs a node (a run, or a later one against a lab
// kept by `lab up`) finds the node's programs, maps and links by their paths; nothing lives only
// in a process. Teardown is the lab's: it unmounts the node's bpf file system (every pin goes)
// and deletes the namespaces (every link goes with its device), after which the kernel frees
// the programs and maps. A SIGKILLed run leaves the pins, which `cnibench lab clean` removes
// the same way.
package bpfdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

// Node is one lab node as its eBPF data paths see it.
type Node struct {
	NS  string // network namespace name
	Dir string // the node's bpf file system (mounted on first use)
}

// locks serialises loading and attaching per node directory within this process (pods of one
// node are attached in parallel).
var locks sync.Map

func (n Node) lock() func() {
	m, _ := locks.LoadOrStore(n.Dir, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// hostPort is a pod's host-side interface, checked to be fit for programs that deliver to the
// pod themselves: an IPv4 pod, Ethernet on both sides (they write the MACs).
func (n Node) hostPort(ip netip.Addr, hostVeth string, podMAC net.HardwareAddr) (netlink.Link, error) {
	h, err := n.netlink()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	lk, err := h.LinkByName(hostVeth)
	if err != nil {
		return nil, fmt.Errorf("host interface %s in %s: %w", hostVeth, n.NS, err)
	}
	if len(podMAC) != 6 || len(lk.Attrs().HardwareAddr) != 6 || !ip.Is4() {
		return nil, fmt.Errorf("pod %s: want an IPv4 address and Ethernet interfaces", ip)
	}
	return lk, nil
}

// mounted makes sure n.Dir is a bpf file system.
func (n Node) mounted() error {
	var st unix.Statfs_t
	if err := unix.Statfs(n.Dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	return nf.MountBPF(n.Dir)
}

func (n Node) netlink() (*netlink.Handle, error) { return netns.Netlink(n.NS) }

func (n Node) path(name string) string { return filepath.Join(n.Dir, name) }

// pinned reports whether name is pinned in the node's directory.
func (n Node) pinned(name string) bool {
	_, err := os.Stat(n.path(name))
	return err == nil
}

// loadSpec loads a collection into objs, with the verifier's log in the error.
func loadSpec(spec *ebpf.CollectionSpec, objs any) error {
	err := spec.LoadAndAssign(objs, nil)
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("load: %+v", ve)
	}
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// pinAll pins objects under the node's directory by name.
func (n Node) pinAll(objs map[string]interface{ Pin(string) error }) error {
	for name, o := range objs {
		if err := o.Pin(n.path(name)); err != nil {
			return fmt.Errorf("pin %s: %w", n.path(name), err)
		}
	}
	return nil
}

// linkPin is the pin of a program's tcx link on the interface with index idx (interface
// indexes are not reused within a namespace, names can be).
func linkPin(prog string, idx int) string { return prog + "_link_" + strconv.Itoa(idx) }

// stages order the lab's programs at a tcx ingress hook, by kernel program name: Service
// translation first, then policy (it judges the translated packet), then forwarding (it may
// redirect the packet away, so it must come last).
var stages = map[string]int{"svc_lb": 0, "pol_check": 1, "from_pod": 2, "to_pod": 2,
	// seed 003's provider (polycube.go): its entries forward, so they come last too.
	"pc_ilb": 2, "pc_router": 2, "pc_discnat": 2, "pcm_from_pod": 2, "pcm_from_ovl": 2, "pcm_from_net": 2}

// anchorFor is where a program of stage st goes on the tcx ingress of interface idx (called
// inside the node's namespace): before the first program already there of a later stage, else
// last.
func anchorFor(idx, st int) (link.Anchor, error) {
	q, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return nil, err
	}
	for _, ap := range q.Programs {
		p, err := ebpf.NewProgramFromID(ap.ID)
		if err != nil {
			continue // gone meanwhile
		}
		info, err := p.Info()
		_ = p.Close()
		if err != nil {
			continue
		}
		if s, ok := stages[info.Name]; ok && s > st {
			return link.BeforeProgramByID(ap.ID), nil
		}
	}
	return link.Tail(), nil
}

// linkList lists a namespace's interfaces, again when the dump was interrupted (interfaces of
// pods being attached meanwhile).
func linkList(h *netlink.Handle) ([]netlink.Link, error) {
	for i := 0; ; i++ {
		all, err := h.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == 20 {
			return all, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// attachIngress attaches the pinned program prog to the tcx ingress of the node's interfaces
// devs (every interface but loopback and bridges when devs is empty), at its stage's place
// (stages), skipping those it is attached to already, and pins each link. With devs empty,
// the pins of links whose interface is gone are removed too.
func (n Node) attachIngress(prog string, devs []string) error {
	h, err := n.netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	var links []netlink.Link
	for _, d := range devs {
		l, err := h.LinkByName(d)
		if err != nil {
			return fmt.Errorf("interface %s in %s: %w", d, n.NS, err)
		}
		links = append(links, l)
	}
	if len(devs) == 0 {
		all, err := linkList(h)
		if err != nil {
			return fmt.Errorf("interfaces of %s: %w", n.NS, err)
		}
		live := map[string]bool{}
		for _, l := range all {
			live[linkPin(prog, l.Attrs().Index)] = true
			if l.Type() != "bridge" && l.Attrs().Flags&net.FlagLoopback == 0 {
				links = append(links, l)
			}
		}
		if ents, err := os.ReadDir(n.Dir); err == nil {
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), prog+"_link_") && !live[e.Name()] {
					_ = os.Remove(n.path(e.Name()))
				}
			}
		}
	}
	var p *ebpf.Program
	stage := 0
	for _, l := range links {
		pin := linkPin(prog, l.Attrs().Index)
		if n.pinned(pin) {
			continue
		}
		if p == nil {
			if p, err = ebpf.LoadPinnedProgram(n.path(prog), nil); err != nil {
				return fmt.Errorf("program %s: %w", prog, err)
			}
			defer p.Close()
			info, err := p.Info()
			if err != nil {
				return err
			}
			s, ok := stages[info.Name]
			if !ok {
				return fmt.Errorf("program %s (%s) has no stage", prog, info.Name)
			}
			stage = s
		}
		var lk link.Link
		err := netns.Do(n.NS, func() error {
			anchor, err := anchorFor(l.Attrs().Index, stage)
			if err != nil {
				return err
			}
			lk, err = link.AttachTCX(link.TCXOptions{Program: p, Interface: l.Attrs().Index, Attach: ebpf.AttachTCXIngress, Anchor: anchor})
			return err
		})
		if err != nil {
			return fmt.Errorf("attach %s to the tcx ingress of %s in %s: %w", prog, l.Attrs().Name, n.NS, err)
		}
		err = lk.Pin(n.path(pin))
		_ = lk.Close()
		if err != nil {
			return fmt.Errorf("pin %s: %w", n.path(pin), err)
		}
	}
	return nil
}

// counters reads the first k entries of a pinned per-CPU array of counters, each summed over
// the CPUs.
func (n Node) counters(pin string, k int) ([]uint64, error) {
	m, err := ebpf.LoadPinnedMap(n.path(pin), nil)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", pin, err)
	}
	defer m.Close()
	out := make([]uint64, k)
	for i := range out {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("map %s entry %d: %w", pin, i, err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}
