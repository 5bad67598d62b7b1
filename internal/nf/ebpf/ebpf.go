// Package ebpf holds the network functions written in eBPF and what they share: loading the
// programs bpf2go generates from bpf/*.c (github.com/cilium/ebpf), the rule table, attaching in
// an NF's namespace, pinning under the NF's bpf directory and taking it all down again.
//
// The kinds (all transparent, nf.Transparent):
//   - ebpf-tc: one tc program (tcx ingress link) on in0 and out0; allowed -> bpf_redirect to
//     the other interface, denied -> TC_ACT_SHOT.
//   - xdp: one XDP program (native, on the veths) on in0 and out0; allowed -> XDP_REDIRECT to
//     the other interface, denied -> XDP_DROP. The veth peers (previous and next hop) get GRO
//     switched on, so that they run NAPI and can receive redirected frames, and TX checksumming
//     off, as an XDP frame cannot carry a checksum left to be completed (peers.go); Close
//     restores both. The senders then segment TCP in software: this kind sees every MTU-sized
//     frame where the tc kinds see GSO packets of up to 64 KB.
//   - ebpf-redirect: seed 003's Polycube firewall + pbforwarder as two programs: the firewall
//     on in0/out0 (tcx ingress) tail-calls, through a PROG_ARRAY, a forwarder that looks the
//     egress interface up in a map (ingress ifindex -> egress ifindex) and redirects there.
//
// Filter attaches the XDP firewall in pass mode (allowed -> XDP_PASS) for kinds that forward
// in user space.
//
// The rules: an nf.RuleSet is an ordered list, first match wins. Each program walks an ARRAY
// map holding the rules in order with bpf_loop from index 0 until a rule matches, its length a
// read-only global set at load time (bpf/rules.h). A hash or LPM lookup would make the cost
// independent of the rule count; the linear scan keeps the semantics of the ordered list for
// any rule set and costs per packet what the rules before the matching one cost, as the
// iptables chains the kinds are compared with do: that cost is what the benchmark's sweep of
// the rule count (10 .. 10,000, the matching rule last) measures. A packet that is not
// TCP/UDP, or a later IPv4 fragment, has no ports: only rules without ports can match it. A
// TCP/UDP first fragment too short to hold the ports is dropped.
package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

// ruleEntry is one entry of the rules map (struct rule in bpf/rules.h, the same in every
// program that includes it).
type ruleEntry = xdpFwRule

// Rule actions (enum rule_action in bpf/rules.h).
const (
	ruleDrop  = 0
	ruleAllow = 1
	ruleNever = 2 // a rule no IPv4 packet matches: a prefix that is not IPv4
)

// encodeRules turns a rule set into the entries of the rules map, in order. Addresses, masks and
// ports are laid out in network byte order, as the program reads them from the packet.
func encodeRules(rs nf.RuleSet) []ruleEntry {
	out := make([]ruleEntry, len(rs.Rules))
	for i, r := range rs.Rules {
		e := ruleEntry{Proto: r.Proto, Action: ruleDrop, Sport: be16(r.SrcPort), Dport: be16(r.DstPort)}
		if r.Allow {
			e.Action = ruleAllow
		}
		var ok1, ok2 bool
		e.Src, e.SrcMask, ok1 = prefix4(r.Src)
		e.Dst, e.DstMask, ok2 = prefix4(r.Dst)
		if !ok1 || !ok2 {
			e.Action = ruleNever
		}
		out[i] = e
	}
	return out
}

// prefix4 is p's masked address and its mask as they lie in memory in network byte order, and
// whether p is an IPv4 prefix at all (netip.Prefix.Contains never matches an IPv4 address
// otherwise).
func prefix4(p netip.Prefix) (addr, mask uint32, ok bool) {
	if !p.IsValid() || !p.Addr().Is4() {
		return 0, 0, false
	}
	a := p.Masked().Addr().As4()
	return binary.NativeEndian.Uint32(a[:]), binary.NativeEndian.Uint32(net.CIDRMask(p.Bits(), 32)), true
}

func be16(v uint16) uint16 { return binary.NativeEndian.Uint16([]byte{byte(v >> 8), byte(v)}) }

// setRules sizes a collection's rules map to the rule set and sets rule_count.
func setRules(spec *ebpf.CollectionSpec, rs nf.RuleSet) error {
	if len(rs.Rules) > nf.MaxRules {
		return fmt.Errorf("%d rules: at most %d", len(rs.Rules), nf.MaxRules)
	}
	m, ok := spec.Maps["rules"]
	if !ok {
		return errors.New("program has no rules map")
	}
	m.MaxEntries = uint32(max(1, len(rs.Rules)))
	return setVar(spec, "rule_count", uint32(len(rs.Rules)))
}

func setVar(spec *ebpf.CollectionSpec, name string, v any) error {
	vs, ok := spec.Variables[name]
	if !ok {
		return fmt.Errorf("program has no variable %s", name)
	}
	if err := vs.Set(v); err != nil {
		return fmt.Errorf("set %s: %w", name, err)
	}
	return nil
}

// fillRules writes the rule set into a loaded rules map (one batch; element by element on a
// kernel without batch operations).
func fillRules(m *ebpf.Map, rs nf.RuleSet) error {
	entries := encodeRules(rs)
	if len(entries) == 0 {
		return nil
	}
	keys := make([]uint32, len(entries))
	for i := range keys {
		keys[i] = uint32(i)
	}
	n, err := m.BatchUpdate(keys, entries, nil)
	if err == nil && n == len(entries) {
		return nil
	}
	if err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("write %d rules: %w", len(entries), err)
	}
	for i := range entries {
		if err := m.Update(keys[i], &entries[i], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write rule %d: %w", i, err)
		}
	}
	return nil
}

// load loads a collection spec into objs, with the verifier's log in the error.
func load(spec *ebpf.CollectionSpec, objs any) error {
	if err := spec.LoadAndAssign(objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load: %+v", ve)
		}
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// object is a loaded program, map or link: pinnable and closable.
type object interface {
	Pin(string) error
	Unpin() error
	Close() error
}

// instance is a running eBPF NF: its links (detached first on Close), what undoes its changes
// to other interfaces, and its programs and maps. With a bpf directory, each object is pinned
// there under the instance's prefix.
type instance struct {
	mu     sync.Mutex
	dir    string // "" : nothing pinned
	prefix string
	links  []object
	undo   []func() error
	objs   []object
}

func newInstance(dir, prefix string) *instance { return &instance{dir: dir, prefix: prefix} }

// keep adds loaded programs and maps (unpinned and closed on Close).
func (in *instance) keep(objs ...object) { in.objs = append(in.objs, objs...) }

// pin pins o as prefix_name in the bpf directory (nothing without one).
func (in *instance) pin(o object, name string) error {
	if in.dir == "" {
		return nil
	}
	p := filepath.Join(in.dir, in.prefix+"_"+name)
	if err := o.Pin(p); err != nil {
		return fmt.Errorf("pin %s: %w", p, err)
	}
	return nil
}

// Close detaches every link (unpinned first: a pinned link stays attached), undoes the changes
// to other interfaces, unpins and closes the programs and maps. Idempotent.
func (in *instance) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	var errs []error
	for _, l := range in.links {
		errs = append(errs, l.Unpin(), l.Close())
	}
	for i := len(in.undo) - 1; i >= 0; i-- {
		errs = append(errs, in.undo[i]())
	}
	for _, o := range in.objs {
		errs = append(errs, o.Unpin(), o.Close())
	}
	in.links, in.undo, in.objs = nil, nil, nil
	return errors.Join(errs...)
}

// ifindexes resolves interface names in a namespace.
func ifindexes(ns string, devs ...string) ([]int, error) {
	h, err := netns.Netlink(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	out := make([]int, len(devs))
	for i, d := range devs {
		lk, err := h.LinkByName(d)
		if err != nil {
			return nil, fmt.Errorf("interface %s in %s: %w", d, ns, err)
		}
		out[i] = lk.Attrs().Index
	}
	return out, nil
}

// attachXDP attaches prog in native mode to dev (ifindex idx) of namespace ns, and keeps and
// pins the link.
func (in *instance) attachXDP(ns, dev string, idx int, prog *ebpf.Program) error {
	var l link.Link
	err := netns.Do(ns, func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: idx, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach XDP to %s in %s: %w", dev, ns, err)
	}
	in.links = append(in.links, l)
	return in.pin(l, "link_"+dev)
}

// attachTCX attaches prog to the tcx ingress hook of dev (ifindex idx) of namespace ns, and
// keeps and pins the link.
func (in *instance) attachTCX(ns, dev string, idx int, prog *ebpf.Program) error {
	var l link.Link
	err := netns.Do(ns, func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Program: prog, Interface: idx, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach tcx ingress to %s in %s: %w", dev, ns, err)
	}
	in.links = append(in.links, l)
	return in.pin(l, "link_"+dev)
}

// usableHelpers says why this kernel cannot run a firewall program of type pt: no such program
// type or no bpf_loop (Linux 5.17).
func usableHelpers(pt ebpf.ProgramType) error {
	if err := features.HaveProgramType(pt); err != nil {
		return fmt.Errorf("the kernel cannot load %s BPF programs: %w (needs root, or CAP_BPF and CAP_NET_ADMIN)", pt, err)
	}
	if err := features.HaveProgramHelper(pt, asm.FnLoop); err != nil {
		return fmt.Errorf("the kernel has no bpf_loop helper for %s programs (needs Linux 5.17+): %w", pt, err)
	}
	return nil
}

// oneRule is the rule set Usable loads the real programs with.
var oneRule = nf.RuleSet{Rules: []nf.Rule{{Src: netip.MustParsePrefix("10.0.0.0/8"), Dst: netip.MustParsePrefix("10.0.0.0/8"), Proto: nf.TCP, DstPort: 1, Allow: true}}}
