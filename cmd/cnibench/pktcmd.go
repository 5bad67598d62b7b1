package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cnibench/cnibench/internal/pktengine"
)

func newPktCmd() *cobra.Command {
	cmd := group("pkt", "Packet engine of the VNF scenario: a GTP-U/UDP generator and receiver on raw sockets")
	cmd.Long = `The packet engine of the VNF scenario, run inside a pod (a network namespace):
'pkt recv' counts the frames of 'pkt gen' per stream and measures the latency of its probes.
Each prints one JSON object on stdout when it ends. Engines: ` + strings.Join(pktengine.EngineNames(), ", ") + `.`
	cmd.AddCommand(newPktGenCmd(), newPktRecvCmd(), newPktFwdCmd(), newPktKnfCmd(), newPktXfwdCmd())
	return cmd
}

func newPktGenCmd() *cobra.Command {
	var (
		o                    pktengine.GenOptions
		dst, dstMAC, size    string
		mode                 string
		srcPort, dstPort     int
		streams, flows       int
		firstTEID            uint32
		rate, probeRate      float64
		duration, rotateEach time.Duration
	)
	cmd := &cobra.Command{
		Use:   "gen --dst IP",
		Short: "Send GTP-U (or UDP) frames at a held rate with rotating TEIDs and latency probes",
		Long: `Send frames of one size (or IMIX) to --dst at --rate packets/s for --duration, from an
AF_PACKET TX ring. Frame sizes count the 4-byte FCS (RFC 2544): a 64-byte frame is 60 bytes built.
In gtpu mode each frame is Ethernet/IPv4/UDP to port 2152, a GTP-U G-PDU header with the active
stream's TEID, and an inner IPv4/UDP packet carrying the payload (so at least 100 bytes); in udp
mode the payload is right in the UDP datagram. The payload holds the stream id (the TEID), a
sequence number per stream and the transmit time. Of --streams TEIDs (--teid, --teid+1, ...) one
is active at a time, the next every --rotate. --probe-rate frames per second are latency probes.
The next hop's MAC address comes from the neighbour table (an ARP request is triggered) unless
--dst-mac gives it. Prints one JSON object when done; SIGINT/SIGTERM end it early.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := netip.ParseAddr(dst)
			if err != nil || !a.Is4() {
				return usagef("--dst %q: an IPv4 address is required", dst)
			}
			o.Dst = a
			if dstMAC != "" {
				if o.DstMAC, err = net.ParseMAC(dstMAC); err != nil || len(o.DstMAC) != 6 {
					return usagef("--dst-mac %q is not an Ethernet address", dstMAC)
				}
			}
			if o.Mode, err = pktengine.ParseMode(mode); err != nil {
				return usagef("--mode: %v", err)
			}
			if o.Sizes, err = pktengine.ParseSize(size, o.Mode); err != nil {
				return usagef("--size: %v", err)
			}
			o.SizeName = strings.ToLower(size)
			for _, p := range []struct {
				name string
				v    int
				to   *uint16
			}{{"--src-port", srcPort, &o.SrcPort}, {"--dst-port", dstPort, &o.DstPort}} {
				if p.v < 1 || p.v > 65535 {
					return usagef("%s %d out of range (1..65535)", p.name, p.v)
				}
				*p.to = uint16(p.v)
			}
			o.Rate, o.ProbeRate, o.Duration, o.Rotate = rate, probeRate, duration, rotateEach
			o.Streams, o.FirstTEID, o.Flows = streams, firstTEID, flows
			if err := o.Check(); err != nil {
				var ce *pktengine.ConfigError
				if errors.As(err, &ce) {
					return usagef("--%s %s", ce.Field, ce.Msg)
				}
				return usageError{err.Error()}
			}
			return runPkt(cmd, o.Engine, o.CPU, func(ctx context.Context) (any, error) { return pktengine.RunGen(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&dst, "dst", "", "destination IPv4 address (required)")
	f.StringVar(&o.Dev, "dev", "", "interface to send from (default: the route's interface to --dst)")
	f.StringVar(&dstMAC, "dst-mac", "", "next hop's MAC address (default: resolved with ARP)")
	f.StringVar(&mode, "mode", string(pktengine.GTPU), "gtpu (payload in GTP-U over UDP port 2152) or udp (payload right in UDP)")
	f.StringVar(&size, "size", "256", fmt.Sprintf("frame size with FCS, %d..%d (gtpu: at least %d), or imix (64/594/1518 in 7:4:1; gtpu: 100 in place of 64)",
		pktengine.MinEthernetFrame, pktengine.MaxFrameSize, pktengine.MinFrameSize(pktengine.GTPU)))
	f.Float64Var(&rate, "rate", 10000, "packets per second to send (0: as fast as possible)")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long to send")
	f.IntVar(&streams, "streams", 1, "number of streams (TEIDs)")
	f.IntVar(&flows, "flows", 1, "outer UDP flows the frames take in turn: source ports --src-port, +1, ... (a Service's load balancer spreads flows, not frames)")
	f.Uint32Var(&firstTEID, "teid", 1, "TEID of the first stream (the others follow)")
	f.DurationVar(&rotateEach, "rotate", 2*time.Second, "period after which the next stream's TEID becomes the active one")
	f.Float64Var(&probeRate, "probe-rate", 1, "latency probes per second (0: none)")
	f.IntVar(&srcPort, "src-port", pktengine.GTPPort, "outer UDP source port")
	f.IntVar(&dstPort, "dst-port", pktengine.GTPPort, "outer UDP destination port")
	f.StringVar(&o.Engine, "engine", "", "packet engine: "+strings.Join(pktengine.EngineNames(), ", ")+" (default: the best usable)")
	f.IntVar(&o.CPU, "cpu", -1, "pin the sending thread to this CPU (-1: no pinning)")
	return cmd
}

func newPktRecvCmd() *cobra.Command {
	var o pktengine.RecvOptions
	cmd := &cobra.Command{
		Use:   "recv",
		Short: "Count the generator's frames per stream (loss, duplicates, reordering) and the probes' latency",
		Long: `Receive on an AF_PACKET TPACKET_V3 ring and account for the frames of 'pkt gen' (others are
counted apart): per TEID received, unique, duplicates, reordered, lost by sequence gaps; the
one-way latency of the probes (kernel receive time minus the generator's transmit time, both
CLOCK_REALTIME) in µs; the frames the ring dropped because the receiver did not keep up. While it
runs it holds --sink-port with a UDP socket that drops everything, so that the host does not
answer every frame with an ICMP port unreachable. It says "` + pktengine.RecvReadyLine + `" on stderr once it
sees frames. Runs for --duration, or until SIGINT/SIGTERM, then prints one JSON object.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Duration < 0 {
				return usagef("--duration %v must be >= 0 (0: until SIGINT/SIGTERM)", o.Duration)
			}
			if o.SinkPort < 0 || o.SinkPort > 65535 {
				return usagef("--sink-port %d out of range (0..65535)", o.SinkPort)
			}
			o.Ready = func() { fmt.Fprintln(cmd.ErrOrStderr(), pktengine.RecvReadyLine) }
			return runPkt(cmd, o.Engine, o.CPU, func(ctx context.Context) (any, error) { return pktengine.RunRecv(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dev, "dev", "", "interface to receive on (default: the only one other than loopback)")
	f.DurationVar(&o.Duration, "duration", 0, "how long to receive (0: until SIGINT/SIGTERM)")
	f.StringVar(&o.Engine, "engine", "", "packet engine: "+strings.Join(pktengine.EngineNames(), ", ")+" (default: the best usable)")
	f.IntVar(&o.CPU, "cpu", -1, "pin the receiving thread to this CPU (-1: no pinning)")
	f.IntVar(&o.SinkPort, "sink-port", pktengine.GTPPort, "UDP port to hold with a socket that drops what it gets, so that the host sends no ICMP port unreachable per frame (0: none)")
	return cmd
}

func newPktFwdCmd() *cobra.Command {
	var (
		o  pktengine.FwdOptions
		ff fwdFlags
	)
	cmd := &cobra.Command{
		Use:   "fwd --to IP:PORT[,IP:PORT..]",
		Short: "Forward every UDP datagram of a port, one system call each way (seed 002's VNF; several targets: a UDP load balancer)",
		Long: `A single-threaded user-space UDP forwarder, the VNF of seed 002: it receives each datagram on
--port with one system call and sends its payload unchanged to --to with another (no batching,
no rings), from its own address. With several --to targets it sends to each in turn: a
user-space UDP load balancer (the Ingress of seed 002). Runs for --duration, or until SIGINT/SIGTERM, then prints one
JSON object: datagrams received and sent, send errors, and the datagrams the kernel dropped at
its socket because it did not keep up.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.To, err = ff.targets(); err != nil {
				return err
			}
			if o.RcvBuf < 0 {
				return usagef("--rcvbuf %d must be >= 0", o.RcvBuf)
			}
			return runPkt(cmd, "", o.CPU, func(ctx context.Context) (any, error) { return pktengine.RunFwd(ctx, o) })
		},
	}
	f := cmd.Flags()
	ff.register(f, &o.Port, &o.Duration)
	f.IntVar(&o.CPU, "cpu", -1, "pin the forwarder to this CPU (-1: no pinning)")
	f.IntVar(&o.RcvBuf, "rcvbuf", 0, "receive socket buffer in bytes (0: the kernel's default)")
	return cmd
}

// fwdFlags are the flags every forwarder (pkt fwd, knf, xfwd) has: its targets, the port it
// forwards and how long it runs.
type fwdFlags struct {
	to       string
	port     *int
	duration *time.Duration
}

func (ff *fwdFlags) register(f *pflag.FlagSet, port *int, duration *time.Duration) {
	ff.port, ff.duration = port, duration
	f.StringVar(&ff.to, "to", "", "IPv4 address:port to send every datagram to, or several, comma-separated, taken in turn (required)")
	f.IntVar(port, "port", pktengine.GTPPort, "UDP port whose datagrams are forwarded")
	f.DurationVar(duration, "duration", 0, "how long to forward (0: until SIGINT/SIGTERM)")
}

// targets parses --to (IPv4 address:port targets, comma-separated) and checks --port and
// --duration; errors are usage errors.
func (ff *fwdFlags) targets() ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, t := range strings.Split(ff.to, ",") {
		ap, err := netip.ParseAddrPort(strings.TrimSpace(t))
		if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
			return nil, usagef("--to %q: give IPv4 address:port targets, comma-separated, e.g. 10.244.1.5:2152", ff.to)
		}
		out = append(out, ap)
	}
	if *ff.port < 1 || *ff.port > 65535 {
		return nil, usagef("--port %d out of range (1..65535)", *ff.port)
	}
	if *ff.duration < 0 {
		return nil, usagef("--duration %v must be >= 0 (0: until SIGINT/SIGTERM)", *ff.duration)
	}
	return out, nil
}

func newPktKnfCmd() *cobra.Command {
	var (
		o  pktengine.KnfOptions
		ff fwdFlags
	)
	cmd := &cobra.Command{
		Use:   "knf --to IP:PORT[,IP:PORT..]",
		Short: "Make the kernel forward every UDP datagram of a port (NAT rules; seed 002's VNF done by the kernel)",
		Long: `A kernel-forwarding VNF: run inside a pod's network namespace, it turns IPv4 forwarding on (and
ICMP redirects off: the datagrams leave by the interface they came in by) and installs NAT
rules, so that the kernel sends every UDP datagram arriving for the namespace's own address on
--port on to --to, from the namespace's own address. With nftables (table ip ` + pktengine.KnfTable + `) the
rules are stateless and several --to targets are taken in turn, datagram by datagram; without
nft, iptables' conntrack DNAT and MASQUERADE serve one target. It needs CAP_NET_ADMIN and a
writable /proc/sys where a sysctl must change. It says "` + pktengine.KnfReadyLine + `" on stderr once the rules
are in. Runs for --duration, or until SIGINT/SIGTERM, then removes its rules, puts the sysctls
back and prints one JSON object: the datagrams and bytes the rules forwarded, per target too.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.To, err = ff.targets(); err != nil {
				return err
			}
			if o.Rules != "" && o.Rules != pktengine.KnfNFTables && o.Rules != pktengine.KnfIPTables {
				return usagef("--rules %q: want %s or %s (default: %s if nft is installed)", o.Rules, pktengine.KnfNFTables, pktengine.KnfIPTables, pktengine.KnfNFTables)
			}
			o.Ready = func() { fmt.Fprintln(cmd.ErrOrStderr(), pktengine.KnfReadyLine) }
			return runPkt(cmd, "", -1, func(ctx context.Context) (any, error) { return pktengine.RunKnf(ctx, o) })
		},
	}
	f := cmd.Flags()
	ff.register(f, &o.Port, &o.Duration)
	f.StringVar(&o.Rules, "rules", "", "nftables or iptables (default: nftables if nft is installed, else iptables)")
	return cmd
}

func newPktXfwdCmd() *cobra.Command {
	var (
		o  pktengine.XfwdOptions
		ff fwdFlags
	)
	cmd := &cobra.Command{
		Use:   "xfwd --to IP:PORT[,IP:PORT..]",
		Short: "Forward every UDP datagram of a port with an XDP program (XDP_TX; seed 002's VNF done in eBPF)",
		Long: `An XDP forwarding VNF: run inside a pod's network namespace, it attaches an XDP program to the
pod's interface (--dev, default: the only one other than loopback) that sends every IPv4 UDP
datagram arriving for the interface's own address on --port on to --to, from that address,
rewritten in place (addresses, port, MACs, TTL, checksums; a UDP checksum of 0 stays 0) and
sent back out of the same interface (XDP_TX); everything else goes on to the stack. Several
--to targets are taken in turn, datagram by datagram; each must be reached through that
interface (the MAC address of its next hop is resolved once, before the program is attached).
--mode generic (the default) works on any interface; native on a veth needs an XDP program on
its peer. It needs CAP_NET_ADMIN and CAP_BPF. The program is attached through a bpf_link: it
goes when the command ends, however it ends. It says "` + pktengine.XfwdReadyLine + `" on stderr once attached.
Runs for --duration, or until SIGINT/SIGTERM, then prints one JSON object: the datagrams and
bytes the program forwarded, per target too.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.To, err = ff.targets(); err != nil {
				return err
			}
			if o.Mode != pktengine.XfwdGeneric && o.Mode != pktengine.XfwdNative {
				return usagef("--mode %q: want %s or %s", o.Mode, pktengine.XfwdGeneric, pktengine.XfwdNative)
			}
			o.Ready = func() { fmt.Fprintln(cmd.ErrOrStderr(), pktengine.XfwdReadyLine) }
			return runPkt(cmd, "", -1, func(ctx context.Context) (any, error) { return pktengine.RunXfwd(ctx, o) })
		},
	}
	f := cmd.Flags()
	ff.register(f, &o.Port, &o.Duration)
	f.StringVar(&o.Dev, "dev", "", "interface to attach to (default: the only one other than loopback)")
	f.StringVar(&o.Mode, "mode", pktengine.XfwdGeneric, "XDP mode: generic or native")
	return cmd
}

// runPkt checks the engine and CPU (usage errors), then runs fn until it ends or SIGINT or
// SIGTERM ends it early, and prints its result as one JSON object.
func runPkt(cmd *cobra.Command, engine string, cpu int, fn func(ctx context.Context) (any, error)) error {
	if cpu < -1 || cpu >= runtime.NumCPU() {
		return usagef("--cpu %d out of range (-1, or 0..%d)", cpu, runtime.NumCPU()-1)
	}
	if engine != "" {
		if _, err := pktengine.Lookup(engine, pktengine.RoleSend); err != nil {
			return usagef("--engine: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := fn(ctx)
	if err != nil {
		return fmt.Errorf("pkt %s: %w", cmd.Name(), err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
	return err
}
