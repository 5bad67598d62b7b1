package pktengine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/iptsave"
)

// The kernel-forwarding VNF: seed 002's packet-forwarding VNF with the forwarding done by the
// kernel instead of a user-space program. Inside a pod's network namespace it turns on IPv4
// forwarding and installs NAT rules that send every UDP datagram arriving for one of the
// namespace's own addresses on a port on to a target, from the namespace's own address (so
// the receiver sees the VNF as the sender, as with pkt fwd, and the way back and reverse-path
// filters work). Several targets are taken in turn.
//
// With nftables the rules are stateless: the datagram is marked untracked and its addresses
// and port rewritten (the kernel fixes the checksums), so every datagram goes to the next
// target (numgen inc), as pkt fwd does, and conntrack costs nothing. iptables has no stateless
// NAT: its DNAT and MASQUERADE are conntrack's, which decides once per flow (a generator's
// stream is one flow), so without nft one target only is served.

// KnfReadyLine is what `cnibench pkt knf` prints on stderr once its rules are in and the
// kernel forwards: a scenario starts sending after it.
const KnfReadyLine = "pkt knf: ready"

// KnfTable is the nftables table (family ip) of a kernel-forwarding VNF; knfChain is the
// name of its iptables chains (in the mangle and nat tables; knfChain+"-SNAT" in nat).
const (
	KnfTable = "cnibench-knf"
	knfChain = "CNIBENCH-KNF"
)

// The rule sets a kernel-forwarding VNF installs (KnfOptions.Rules, KnfResult.Rules).
const (
	KnfNFTables = "nftables"
	KnfIPTables = "iptables"
)

// KnfOptions are a kernel-forwarding run of `cnibench pkt knf`.
type KnfOptions struct {
	Port     int              // UDP port whose datagrams are forwarded
	To       []netip.AddrPort // where they go, each in turn (iptables: one)
	Duration time.Duration    // 0: until the context ends
	// Rules is KnfNFTables, KnfIPTables, or "": nftables if nft is installed, else iptables.
	Rules string
	// Ready, when set, is called once the rules are in and forwarding is on.
	Ready func() `json:"-"`
}

// Forwarded is what an in-kernel forwarder (pkt knf, pkt xfwd) sent on.
type Forwarded struct {
	// Packets and Bytes (IPv4 bytes: headers and payload) are the datagrams sent on.
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// PacketsTo counts the datagrams sent to each target, in To's order.
	PacketsTo []uint64 `json:"packets_to"`
	DurationS float64  `json:"duration_s"`
	Port      int      `json:"port"`
	To        []string `json:"to"`
}

// KnfResult is what a kernel-forwarding run did.
type KnfResult struct {
	// Forwarded is what the DNAT rule counted.
	Forwarded
	Rules string `json:"rules"` // KnfNFTables or KnfIPTables
	// NAT is "stateless" (nftables: each datagram to the next target) or "conntrack"
	// (iptables: DNAT and MASQUERADE of conntrack).
	NAT string `json:"nat"`
}

// knfSysctl is a sysctl the VNF needs (key: the path under /proc/sys) and the value it found.
type knfSysctl struct {
	key, want, old string
}

// name is the sysctl's dotted name, as users write it (the interface name stays whole).
func (s knfSysctl) name() string {
	if dev, ok := strings.CutPrefix(s.key, "net/ipv4/conf/"); ok {
		d, rest, _ := strings.Cut(dev, "/")
		return "net.ipv4.conf." + d + "." + rest
	}
	return strings.ReplaceAll(s.key, "/", ".")
}

// knfLook finds a tool (a variable: tests hide nft with it).
var knfLook = hosttools.Look

// RunKnf makes the kernel of the current network namespace forward until o.Duration has
// passed or ctx ends, then removes its rules, puts the sysctls back and returns what the rules
// counted. A process without CAP_NET_ADMIN, or whose /proc/sys is read-only where a sysctl
// must change, fails before it changes anything.
func RunKnf(ctx context.Context, o KnfOptions) (KnfResult, error) {
	res := KnfResult{Forwarded: Forwarded{Port: o.Port, PacketsTo: make([]uint64, len(o.To))}}
	var err error
	if res.To, err = checkTargets(o.Port, o.To); err != nil {
		return res, err
	}
	// Every step below acts on the namespace of this thread: netlink, /proc/sys/net and the
	// tools run (a child inherits its parent thread's namespace).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if ok, err := hasCapNetAdmin(); err != nil {
		return res, fmt.Errorf("read this process's capabilities: %w", err)
	} else if !ok {
		return res, errors.New("needs the capability CAP_NET_ADMIN in its network namespace (to install NAT rules and enable forwarding; a Kubernetes pod: securityContext.capabilities.add [NET_ADMIN])")
	}
	rs, err := knfRuleSet(o)
	if err != nil {
		return res, err
	}
	res.Rules, res.NAT = rs.name, rs.nat
	srcs := make([]netip.Addr, len(o.To))
	for i, to := range o.To {
		if srcs[i], err = routeSource(to.Addr()); err != nil {
			return res, err
		}
	}
	sysctls, err := knfSysctls()
	if err != nil {
		return res, err
	}
	if err := rs.absent(); err != nil {
		return res, err
	}

	if err := rs.install(o.Port, o.To, srcs); err != nil {
		if rs.name == KnfIPTables { // nft -f is one transaction: nothing of it is in
			_ = rs.remove(o.Port, o.To)
		}
		return res, err
	}
	for i := range sysctls {
		if sysctls[i].old == sysctls[i].want {
			continue
		}
		if err := writeSysctl(sysctls[i].key, sysctls[i].want); err != nil {
			return res, errors.Join(err, restoreSysctls(sysctls[:i]), rs.remove(o.Port, o.To))
		}
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
	cerr := rs.count(&res)
	return res, errors.Join(cerr, rs.remove(o.Port, o.To), restoreSysctls(sysctls))
}

// hasCapNetAdmin says whether this thread has CAP_NET_ADMIN in its effective set.
func hasCapNetAdmin() (bool, error) { return hasCap(unix.CAP_NET_ADMIN) }

// hasCap says whether this thread has capability c (unix.CAP_*) in its effective set.
func hasCap(c int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, err
	}
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// routeSource is the address the namespace sends from towards dst.
func routeSource(dst netip.Addr) (netip.Addr, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("no route to target %s: %v", dst, err)
	}
	src, ok := netip.AddrFromSlice(routes[0].Src.To4())
	if !ok || !src.IsValid() || src.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("the route to target %s has no IPv4 source address", dst)
	}
	return src, nil
}

// knfSysctls are the sysctls the VNF needs, with their values now: forwarding on, and no ICMP
// redirects (the datagrams leave by the interface they came in by; a redirect is sent when
// either "all" or the incoming interface says so, so both are turned off on every interface).
// It fails, naming the missing privilege, if one that must change cannot be written.
func knfSysctls() ([]knfSysctl, error) {
	out := []knfSysctl{{key: "net/ipv4/ip_forward", want: "1"}, {key: "net/ipv4/conf/all/send_redirects", want: "0"}}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	for _, lk := range links {
		a := lk.Attrs()
		if a.Flags&net.FlagLoopback != 0 {
			continue
		}
		key := "net/ipv4/conf/" + a.Name + "/send_redirects"
		if _, err := os.Stat("/proc/sys/" + key); err == nil { // an interface without IPv4 has none
			out = append(out, knfSysctl{key: key, want: "0"})
		}
	}
	for i := range out {
		s := &out[i]
		b, err := os.ReadFile("/proc/sys/" + s.key)
		if err != nil {
			return nil, fmt.Errorf("read sysctl %s: %w", s.name(), err)
		}
		s.old = strings.TrimSpace(string(b))
		if s.old == s.want {
			continue
		}
		fd, err := unix.Open("/proc/sys/"+s.key, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			unix.Close(fd)
		case errors.Is(err, unix.EROFS):
			return nil, fmt.Errorf("cannot set %s=%s (it is %s): /proc/sys is read-only here (a container's default): give the pod the sysctl (securityContext.sysctls, allowed by the kubelet's --allowed-unsafe-sysctls) or run it privileged", s.name(), s.want, s.old)
		default:
			return nil, fmt.Errorf("cannot set %s=%s (it is %s): %v: needs CAP_NET_ADMIN and a writable /proc/sys", s.name(), s.want, s.old, err)
		}
	}
	return out, nil
}

func writeSysctl(key, value string) error {
	if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// restoreSysctls puts back the values found, last set first (ip_forward, which resets every
// interface's forwarding, comes last).
func restoreSysctls(s []knfSysctl) error {
	var errs []error
	for i := len(s) - 1; i >= 0; i-- {
		if s[i].old != s[i].want {
			errs = append(errs, writeSysctl(s[i].key, s[i].old))
		}
	}
	return errors.Join(errs...)
}

// knfRules is one way of installing the VNF's rules.
type knfRules struct {
	name, nat string
	tool      string // nft or iptables-restore (found)
	save      string // iptables-save (found; iptables only)
}

// knfRuleSet picks the rules: o.Rules, or nftables when nft is installed, else iptables.
func knfRuleSet(o KnfOptions) (knfRules, error) {
	want := o.Rules
	if want == "" {
		want = KnfIPTables
		if _, err := knfLook("nft"); err == nil {
			want = KnfNFTables
		}
	}
	switch want {
	case KnfNFTables:
		nft, err := knfLook("nft")
		if err != nil {
			return knfRules{}, err
		}
		return knfRules{name: KnfNFTables, nat: "stateless", tool: nft}, nil
	case KnfIPTables:
		restore, err := knfLook("iptables-restore")
		if err != nil {
			if o.Rules == "" {
				return knfRules{}, fmt.Errorf("neither nft nor iptables-restore is installed: %v", err)
			}
			return knfRules{}, err
		}
		save, err := knfLook("iptables-save")
		if err != nil {
			return knfRules{}, err
		}
		if len(o.To) > 1 {
			return knfRules{}, badField("to", "%d targets need nftables (nft is not used or not installed): iptables NAT (conntrack) picks a target once per flow, so a stream would all go to one", len(o.To))
		}
		return knfRules{name: KnfIPTables, nat: "conntrack", tool: restore, save: save}, nil
	}
	return knfRules{}, badField("rules", "%q: want %s or %s", o.Rules, KnfNFTables, KnfIPTables)
}

// knfRun runs a tool with stdin (nil: none) and returns its standard output; the error names
// the command and the first line of its standard error.
func knfRun(tool string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(tool, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		return nil, fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// absent fails when the VNF's rules are already in the namespace (another pkt knf runs
// there, or one was killed before it could remove them).
func (r knfRules) absent() error {
	if r.name == KnfNFTables {
		if _, err := knfRun(r.tool, nil, "list", "table", "ip", KnfTable); err == nil {
			return fmt.Errorf("the nftables table ip %s is already there: another pkt knf runs in this network namespace, or one was killed (remove it: nft delete table ip %s)", KnfTable, KnfTable)
		}
		return nil
	}
	out, err := knfRun(r.save, nil, "-t", "nat")
	if err != nil {
		return err
	}
	if bytes.Contains(out, []byte(":"+knfChain+" ")) {
		return fmt.Errorf("the iptables chain %s is already there: another pkt knf runs in this network namespace, or one was killed", knfChain)
	}
	return nil
}

// RenderKnfNFTables is the nft -f input of the stateless rules: datagrams to one of the
// namespace's addresses (not from loopback) on port are untracked, counted and sent to the
// next target (its address and port written in, before routing, the checksums kept right
// whether the datagram has one or not); the forwarded datagrams to a
// target get the namespace's address towards it, srcs[i], as their source (after routing: an
// incoming packet with a local source address would be a martian).
func RenderKnfNFTables(port int, to []netip.AddrPort, srcs []netip.Addr) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "create table ip %s\ntable ip %s {\n\tcounter datagrams {\n\t}\n", KnfTable, KnfTable)
	for i := range to {
		fmt.Fprintf(&b, "\tcounter to%d {\n\t}\n", i)
	}
	b.WriteString("\tchain prerouting {\n\t\ttype filter hook prerouting priority raw; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname != \"lo\" udp dport %d fib daddr type local notrack counter name \"datagrams\" ", port)
	if len(to) == 1 {
		b.WriteString("jump to0\n")
	} else {
		fmt.Fprintf(&b, "numgen inc mod %d vmap {", len(to))
		for i := range to {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %d : jump to%d", i, i)
		}
		b.WriteString(" }\n")
	}
	b.WriteString("\t}\n")
	for i, t := range to {
		// The UDP match gives nft the protocol context that makes it fix the UDP checksum's
		// pseudo-header part when the address changes (the kernel leaves a checksum of 0, "none",
		// as it is).
		fmt.Fprintf(&b, "\tchain to%d {\n\t\tmeta l4proto udp counter name \"to%d\" ip daddr set %s\n", i, i, t.Addr())
		if int(t.Port()) != port {
			// `udp dport set` fixes the checksum, and would turn a checksum of 0 (the packet
			// engine's) into a wrong one: such a datagram gets its port written raw.
			fmt.Fprintf(&b, "\t\tudp checksum 0 @th,16,16 set %d\n\t\tudp checksum != 0 udp dport set %d\n", t.Port(), t.Port())
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	for i, t := range to {
		fmt.Fprintf(&b, "\t\tip daddr %s udp dport %d ip saddr set %s\n", t.Addr(), t.Port(), srcs[i])
	}
	b.WriteString("\t}\n}\n")
	return []byte(b.String())
}

// knfMatch matches the datagrams to forward in iptables: to one of the namespace's addresses,
// not from loopback, on port.
func knfMatch(port int) string {
	return fmt.Sprintf("! -i lo -p udp -m udp --dport %d -m addrtype --dst-type LOCAL", port)
}

// RenderKnfIPTables is the iptables-restore --noflush input of the conntrack rules: a chain in
// mangle that counts every datagram (the nat table sees only a flow's first), DNAT to the
// target, and MASQUERADE of the flows so translated.
func RenderKnfIPTables(port int, to netip.AddrPort) []byte {
	m := knfMatch(port)
	return []byte(fmt.Sprintf(`*mangle
:%[1]s - [0:0]
-A PREROUTING -j %[1]s
-A %[1]s %[2]s
COMMIT
*nat
:%[1]s - [0:0]
:%[1]s-SNAT - [0:0]
-A PREROUTING -j %[1]s
-A %[1]s %[2]s -j DNAT --to-destination %[3]s
-A POSTROUTING -j %[1]s-SNAT
-A %[1]s-SNAT -p udp -m conntrack --ctstate DNAT -d %[4]s/32 -m udp --dport %[5]d -j MASQUERADE
COMMIT
`, knfChain, m, to, to.Addr(), to.Port()))
}

func (r knfRules) install(port int, to []netip.AddrPort, srcs []netip.Addr) error {
	if r.name == KnfNFTables {
		_, err := knfRun(r.tool, RenderKnfNFTables(port, to, srcs), "-f", "-")
		return err
	}
	_, err := knfRun(r.tool, RenderKnfIPTables(port, to[0]), "--noflush")
	return err
}

// remove takes the rules out (what of them is there). With iptables it also deletes the flows
// conntrack translated, which would otherwise go on being translated for a while.
func (r knfRules) remove(port int, to []netip.AddrPort) error {
	if r.name == KnfNFTables {
		if _, err := knfRun(r.tool, nil, "list", "table", "ip", KnfTable); err != nil {
			return nil // not there
		}
		_, err := knfRun(r.tool, nil, "delete", "table", "ip", KnfTable)
		return err
	}
	var errs []error
	for _, table := range []string{"mangle", "nat"} {
		save, err := knfRun(r.save, nil, "-t", table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var in strings.Builder
		fmt.Fprintf(&in, "*%s\n", table)
		for _, ch := range []string{knfChain, knfChain + "-SNAT"} {
			if !bytes.Contains(save, []byte(":"+ch+" ")) {
				continue
			}
			hook := "PREROUTING"
			if strings.HasSuffix(ch, "-SNAT") {
				hook = "POSTROUTING"
			}
			if bytes.Contains(save, []byte("-A "+hook+" -j "+ch+"\n")) {
				fmt.Fprintf(&in, "-D %s -j %s\n", hook, ch)
			}
			fmt.Fprintf(&in, "-F %s\n-X %s\n", ch, ch)
		}
		in.WriteString("COMMIT\n")
		if _, err := knfRun(r.tool, []byte(in.String()), "--noflush"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, t := range to {
		f := &netlink.ConntrackFilter{}
		if err := errors.Join(f.AddProtocol(unix.IPPROTO_UDP), f.AddPort(netlink.ConntrackOrigDstPort, uint16(port)),
			f.AddIP(netlink.ConntrackReplySrcIP, t.Addr().AsSlice())); err != nil {
			return err
		}
		if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			return fmt.Errorf("delete the flows to %s from conntrack: %w", t, err)
		}
	}
	return nil
}

// count reads the rules' counters into res.
func (r knfRules) count(res *KnfResult) error {
	if r.name == KnfNFTables {
		out, err := knfRun(r.tool, nil, "-j", "list", "counters", "table", "ip", KnfTable)
		if err != nil {
			return err
		}
		var doc struct {
			Nftables []struct {
				Counter *struct {
					Name           string
					Packets, Bytes uint64
				} `json:"counter"`
			} `json:"nftables"`
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			return fmt.Errorf("nft -j list counters: %w", err)
		}
		for _, o := range doc.Nftables {
			c := o.Counter
			if c == nil {
				continue
			}
			var i int
			if c.Name == "datagrams" {
				res.Packets, res.Bytes = c.Packets, c.Bytes
			} else if _, err := fmt.Sscanf(c.Name, "to%d", &i); err == nil && i >= 0 && i < len(res.PacketsTo) {
				res.PacketsTo[i] = c.Packets
			}
		}
		return nil
	}
	out, err := knfRun(r.save, nil, "-c", "-t", "mangle")
	if err != nil {
		return err
	}
	p, b, found, err := iptsave.RuleCounters(out, "-A "+knfChain+" ")
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("iptables-save: no rule in chain %s of the mangle table", knfChain)
	}
	res.Packets, res.Bytes = p, b
	res.PacketsTo[0] = p
	return nil
}
