package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"regexp"
	"runtime"
	"strings"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/names"
	"github.com/cnibench/cnibench/internal/netns"
)

// kernelFeatures lists the kernel checks in report order.
var kernelFeatures = []struct {
	name     string
	required bool
}{
	{"veth", true}, {"bridge", true}, {"br_netfilter", false}, {"vxlan", true},
	{"geneve", false}, {"ipip", false}, {"wireguard", false}, {"ipvs", false},
	{"nftables", false}, {"iptables-nft", false}, {"iptables-legacy", false},
	{"ipset", false}, {"bpf", false}, {"xdp-veth", false},
}

const (
	vethA, vethB = "cnbveth0", "cnbveth1"
	underlayCIDR = "10.255.0.1/24"
	remoteIP     = "10.255.0.2"
)

type outcome struct {
	ok     bool
	detail string
}

// skipError marks a trial that could not be attempted (Table shows "-").
type skipError string

func (e skipError) Error() string { return string(e) }

func kernelChecks(ctx context.Context, root bool) []Check {
	var res map[string]outcome
	fallback := skipped + "needs root"
	if root {
		if s, err := newScratch(); err != nil {
			fallback = "scratch netns: " + oneLine(err.Error())
		} else {
			func() {
				defer s.close()
				res = s.probe(ctx)
			}()
		}
	}
	cs := make([]Check, 0, len(kernelFeatures))
	for _, f := range kernelFeatures {
		o, found := res[f.name]
		if !found {
			o.detail = fallback
		}
		cs = append(cs, Check{Name: f.name, Kind: "kernel", OK: o.ok, Detail: o.detail, Required: f.required})
	}
	return cs
}

// scratch is a named network namespace that exists only while probing.
type scratch struct {
	name, path string
	h          *netlink.Handle // route and generic netlink inside the namespace
}

// ScratchName matches the names of the scratch namespaces: "cnbdoc", five random
// characters of names.Lower, "-scratch" (`cnibench lab clean` removes old ones).
var ScratchName = regexp.MustCompile(`^cnbdoc[a-z0-9]{5}-scratch$`)

// newScratch creates /run/netns/cnbdocXXXXX-scratch without moving the
// calling thread out of its namespace.
func newScratch() (*scratch, error) {
	s := &scratch{name: "cnbdoc" + names.Random(names.Lower, 5) + "-scratch"}
	s.path = netns.Path(s.name)
	if err := netns.Create(s.name); err != nil {
		return nil, err
	}
	h, err := netns.Netlink(s.name, unix.NETLINK_ROUTE, unix.NETLINK_GENERIC)
	if err != nil {
		s.close()
		return nil, err
	}
	s.h = h
	return s, nil
}

// close releases the handle and deletes the namespace.
func (s *scratch) close() {
	if s.h != nil {
		s.h.Close()
	}
	_ = netns.Delete(s.name)
}

// do runs fn on a locked OS thread inside the scratch namespace.
func (s *scratch) do(fn func() error) error { return netns.Do(s.name, fn) }

// exec runs tool inside the namespace via nsenter (argv, never a shell).
func (s *scratch) exec(ctx context.Context, stdin, tool string, args ...string) (string, error) {
	nsenter, err := hosttools.Look("nsenter")
	if err != nil {
		return "", err
	}
	path, err := hosttools.Look(tool)
	if err != nil {
		return "", skipError(tool + " not installed")
	}
	out, err := run(ctx, stdin, nil, nsenter, append([]string{"--net=" + s.path, "--", path}, args...)...)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", tool, strings.Join(args, " "), err)
	}
	return out, nil
}

// probe tries every kernel feature; everything it creates is removed again.
func (s *scratch) probe(ctx context.Context) map[string]outcome {
	res := map[string]outcome{}
	set := func(name, detail string, err error) {
		var skip skipError
		switch {
		case errors.As(err, &skip):
			res[name] = outcome{detail: skipped + skip.Error()}
		case err != nil:
			res[name] = outcome{detail: explain(name, err)}
		default:
			res[name] = outcome{ok: true, detail: detail}
		}
	}

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: vethA}, PeerName: vethB}
	vethErr := s.h.LinkAdd(veth)
	set("veth", "veth pair created", vethErr)
	if vethErr == nil {
		defer s.h.LinkDel(veth)
	}

	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cnbbr0"}}
	if err := s.h.LinkAdd(br); err != nil {
		set("bridge", "", err)
		set("br_netfilter", "", skipError("no bridge to test with"))
	} else {
		set("bridge", "bridge created", nil)
		v, err := s.sysctl("net/bridge/bridge-nf-call-iptables")
		set("br_netfilter", "bridge-nf-call-iptables="+v+" in netns", err)
		s.h.LinkDel(br)
	}

	if vethErr != nil {
		set("vxlan", "", skipError("no veth underlay"))
	} else {
		d, err := s.vxlan()
		set("vxlan", d, err)
	}
	set("geneve", "geneve device created", s.tryLink(&netlink.Geneve{
		LinkAttrs: netlink.LinkAttrs{Name: "cnbgnv0"}, ID: 42, Remote: net.ParseIP(remoteIP)}))
	set("ipip", "ipip tunnel created", s.tryLink(&netlink.Iptun{
		LinkAttrs: netlink.LinkAttrs{Name: "cnbipip0"}, Local: net.ParseIP("10.255.0.1"), Remote: net.ParseIP(remoteIP)}))
	set("wireguard", "wireguard device created", s.tryLink(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: "cnbwg0"}}))
	_, err := s.h.GenlFamilyGet("IPVS")
	set("ipvs", "IPVS genetlink family present", err)

	d, err := s.nftables(ctx)
	set("nftables", d, err)
	for _, bin := range []string{"iptables-nft", "iptables-legacy"} {
		d, err := s.iptables(ctx, bin)
		set(bin, d, err)
	}
	d, err = s.ipset(ctx)
	set("ipset", d, err)

	fd, bpfErr := loadXDPPass()
	set("bpf", "XDP program (r0 = XDP_PASS; exit) loaded", bpfErr)
	switch {
	case bpfErr != nil:
		set("xdp-veth", "", skipError("no BPF program"))
	case vethErr != nil:
		set("xdp-veth", "", skipError("no veth"))
	default:
		d, err := s.xdpVeth(fd)
		set("xdp-veth", d, err)
	}
	if bpfErr == nil {
		unix.Close(fd)
	}
	return res
}

// explain turns a trial error into one line, with a hint when the kernel
// simply lacks the feature.
func explain(name string, err error) string {
	_, modErr := os.Stat("/proc/modules")
	noModules := errors.Is(modErr, fs.ErrNotExist)
	hint := " (not built in and no module available)"
	if noModules {
		hint = " (kernel built without it; no loadable modules)"
	}
	msg := name + ": " + oneLine(err.Error())
	switch {
	case name == "ipvs" && errors.Is(err, unix.ENOENT):
		if noModules {
			return "ipvs: IPVS not in this kernel (no modules)"
		}
		return "ipvs: IPVS genetlink family not found (ip_vs not loaded)"
	case errors.Is(err, unix.EOPNOTSUPP),
		name == "br_netfilter" && errors.Is(err, fs.ErrNotExist):
		return msg + hint
	}
	return msg
}

func (s *scratch) tryLink(l netlink.Link) error {
	if err := s.h.LinkAdd(l); err != nil {
		return err
	}
	return s.h.LinkDel(l)
}

// sysctl reads /proc/sys/key as seen from inside the namespace.
func (s *scratch) sysctl(key string) (string, error) { return netns.Sysctl(s.name, key) }

// vxlan creates a VXLAN device with a port and a local address on the veth.
func (s *scratch) vxlan() (string, error) {
	under, err := s.h.LinkByName(vethA)
	if err != nil {
		return "", err
	}
	addr, err := netlink.ParseAddr(underlayCIDR)
	if err != nil {
		return "", err
	}
	if err := s.h.AddrAdd(under, addr); err != nil {
		return "", fmt.Errorf("underlay address: %w", err)
	}
	if err := s.h.LinkSetUp(under); err != nil {
		return "", fmt.Errorf("underlay up: %w", err)
	}
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "cnbvx0"},
		VxlanId: 42, VtepDevIndex: under.Attrs().Index, SrcAddr: addr.IP, Port: 4789}
	if err := s.h.LinkAdd(vx); err != nil {
		return "", err
	}
	defer s.h.LinkDel(vx)
	if err := s.h.LinkSetUp(vx); err != nil {
		return "", fmt.Errorf("up: %w", err)
	}
	return fmt.Sprintf("vni 42, port 4789, local %s on veth", addr.IP), nil
}

func (s *scratch) nftables(ctx context.Context) (string, error) {
	const script = `table inet cnbdoc {
	chain input {
		type filter hook input priority 0; policy accept;
		counter accept
	}
}
`
	if _, err := s.exec(ctx, script, "nft", "-f", "-"); err != nil {
		return "", err
	}
	out, err := s.exec(ctx, "", "nft", "list", "table", "inet", "cnbdoc")
	if err != nil {
		return "", err
	}
	if !strings.Contains(out, "counter") {
		return "", errors.New("rule missing from nft list output")
	}
	if _, err := s.exec(ctx, "", "nft", "delete", "table", "inet", "cnbdoc"); err != nil {
		return "", err
	}
	return "table, chain and rule added, listed, deleted", nil
}

func (s *scratch) iptables(ctx context.Context, bin string) (string, error) {
	for _, args := range [][]string{
		{"-N", "CNBDOC"}, {"-A", "CNBDOC", "-j", "RETURN"}, {"-S", "CNBDOC"}, {"-F", "CNBDOC"}, {"-X", "CNBDOC"},
	} {
		out, err := s.exec(ctx, "", bin, append([]string{"-w", "5", "-t", "filter"}, args...)...)
		if err != nil {
			return "", err
		}
		if args[0] == "-S" && !strings.Contains(out, "-A CNBDOC -j RETURN") {
			return "", fmt.Errorf("rule missing from %s -S output", bin)
		}
	}
	return "chain with rule added, listed, deleted", nil
}

func (s *scratch) ipset(ctx context.Context) (string, error) {
	for _, args := range [][]string{
		{"create", "cnbdoc", "hash:ip"}, {"add", "cnbdoc", remoteIP}, {"test", "cnbdoc", remoteIP}, {"destroy", "cnbdoc"},
	} {
		if _, err := s.exec(ctx, "", "ipset", args...); err != nil {
			return "", err
		}
	}
	return "hash:ip set created, tested, destroyed", nil
}

// xdpVeth attaches the program natively (driver mode) to the veth and checks
// the kernel reports it attached.
func (s *scratch) xdpVeth(fd int) (string, error) {
	var detail string
	err := s.do(func() error {
		l, err := netlink.LinkByName(vethA)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetXdpFdWithFlags(l, fd, nl.XDP_FLAGS_DRV_MODE); err != nil {
			return err
		}
		defer netlink.LinkSetXdpFdWithFlags(l, -1, nl.XDP_FLAGS_DRV_MODE)
		if l, err = netlink.LinkByName(vethA); err != nil {
			return err
		}
		x := l.Attrs().Xdp
		if x == nil || !x.Attached || x.AttachMode != nl.XDP_ATTACHED_DRV {
			return errors.New("program not reported attached in driver mode")
		}
		detail = fmt.Sprintf("native XDP attached (prog id %d) and detached", x.ProgId)
		return nil
	})
	return detail, err
}

// loadXDPPass loads "r0 = XDP_PASS (2); exit" and returns the program fd.
func loadXDPPass() (int, error) {
	// struct bpf_insn, little-endian: {code, dst|src<<4, off(2), imm(4)}.
	insns := []byte{
		0xb7, 0, 0, 0, 2, 0, 0, 0, // BPF_ALU64|BPF_MOV|BPF_K r0 = 2
		0x95, 0, 0, 0, 0, 0, 0, 0, // BPF_JMP|BPF_EXIT
	}
	license := []byte("GPL\x00")
	// Leading fields of union bpf_attr for BPF_PROG_LOAD (64-bit layout).
	attr := struct {
		progType, insnCnt uint32
		insns, license    unsafe.Pointer
		logLevel, logSize uint32
		logBuf            unsafe.Pointer
		kernVersion       uint32
		progFlags         uint32
	}{progType: unix.BPF_PROG_TYPE_XDP, insnCnt: uint32(len(insns) / 8),
		insns: unsafe.Pointer(&insns[0]), license: unsafe.Pointer(&license[0])}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&attr)
	if errno != 0 {
		return -1, fmt.Errorf("BPF_PROG_LOAD: %w", errno)
	}
	return int(fd), nil
}
