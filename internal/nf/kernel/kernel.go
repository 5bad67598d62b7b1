// Package kernel holds the network functions the kernel runs by itself with iptables as the
// firewall: route-iptables routes between two subnets (seed 000's first sub-case) and
// bridge-iptables is a transparent Linux bridge whose bridged IPv4 packets pass iptables
// through br_netfilter (its second sub-case).
package kernel

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/iptsave"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

type kind struct {
	name, summary string
	bridge        bool
}

func init() {
	nf.Register(routeKind{kind{name: "route-iptables", summary: "routes between two subnets; iptables FORWARD rules as the firewall"}})
	nf.Register(kind{name: "bridge-iptables", bridge: true, summary: "transparent Linux bridge; iptables rules on bridged packets (br_netfilter)"})
}

func (k kind) Name() string    { return k.name }
func (k kind) Summary() string { return k.summary }
func (k kind) Layer() nf.Layer {
	if k.bridge {
		return nf.Transparent
	}
	return nf.Routed
}

// Usable needs iptables-restore, and br_netfilter for the bridge.
func (k kind) Usable() error {
	for _, t := range []string{"iptables-restore", "ip6tables-restore"} {
		if _, err := hosttools.Look(t); err != nil {
			return err
		}
	}
	if k.bridge {
		if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
			return fmt.Errorf("this kernel has no br_netfilter (/proc/sys/net/bridge/bridge-nf-call-iptables is missing)")
		}
	}
	return nil
}

// Render is the iptables-restore input of a rule set: the rules in order in FORWARD, whose
// policy drops what none of them allows.
func Render(rules nf.RuleSet) []byte {
	var b strings.Builder
	b.Grow(80 * (len(rules.Rules) + 4))
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, r := range rules.Rules {
		fmt.Fprintf(&b, "-A FORWARD -s %s -d %s -p %s", r.Src, r.Dst, nf.ProtoName(r.Proto))
		if r.SrcPort != 0 {
			fmt.Fprintf(&b, " --sport %d", r.SrcPort)
		}
		if r.DstPort != 0 {
			fmt.Fprintf(&b, " --dport %d", r.DstPort)
		}
		if r.Allow {
			b.WriteString(" -j ACCEPT\n")
		} else {
			b.WriteString(" -j DROP\n")
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// ipv6Drop makes the namespace forward no IPv6 (the rule set drops every non-IPv4 packet but ARP).
const ipv6Drop = "*filter\n:FORWARD DROP [0:0]\nCOMMIT\n"

type instance struct{}

// Close: the rules, the bridge and the sysctls live in the NF's namespace and go with it.
func (instance) Close() error { return nil }

func (k kind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (nf.Instance, error) {
	if k.bridge {
		if err := bridge(env); err != nil {
			return nil, err
		}
		for _, key := range []string{"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"} {
			if err := netns.SetSysctl(env.NS, key, "1"); err != nil {
				return nil, err
			}
		}
	}
	path := netns.Path(env.NS)
	if _, err := netns.Output(path, "ip6tables-restore", nil, []byte(ipv6Drop)); err != nil {
		return nil, err
	}
	if _, err := netns.Output(path, "iptables-restore", nil, Render(rules)); err != nil {
		return nil, err
	}
	return instance{}, ctx.Err()
}

// routeKind is route-iptables, which also runs in a pod of a cluster network (nf.PodKind).
type routeKind struct{ kind }

var _ nf.PodKind = routeKind{}

// PodTools: iptables-restore loads the rules, iptables-save reads the counters.
func (routeKind) PodTools() []string { return []string{"iptables-restore", "iptables-save"} }

// PodFiles are the xtables plug-ins the rendered rules load (-p tcp/udp with ports, ACCEPT and
// DROP), wherever the host's multiarch directory is.
func (routeKind) PodFiles() []string {
	return []string{
		"/usr/lib/*/xtables/libxt_standard.so", "/usr/lib/*/xtables/libxt_tcp.so", "/usr/lib/*/xtables/libxt_udp.so",
	}
}

// StartInPod loads the rules into the pod's FORWARD chain (the pod forwards: nf.PodSysctls).
// IPv6 is not forwarded there (the pod's net.ipv6.conf.all.forwarding stays 0).
func (routeKind) StartInPod(ctx context.Context, run nf.PodRunner, rules nf.RuleSet) error {
	_, err := run(ctx, Render(rules), "iptables-restore")
	return err
}

// Dropped sums the FORWARD chain's drops: its policy counter and its DROP rules' counters.
func (routeKind) Dropped(ctx context.Context, run nf.PodRunner) (uint64, error) {
	out, err := run(ctx, nil, "iptables-save", "-c", "-t", "filter")
	if err != nil {
		return 0, err
	}
	return iptsave.ForwardDrops(out)
}

// bridge joins In and Out in a Linux bridge "br0" (no address, no STP: ports forward at once).
func bridge(env nf.Env) error {
	h, err := netns.Netlink(env.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("bridge br0: %w", err)
	}
	for _, dev := range []string{env.In, env.Out} {
		lk, err := h.LinkByName(dev)
		if err != nil {
			return err
		}
		if err := h.LinkSetMaster(lk, br); err != nil {
			return fmt.Errorf("enslave %s to br0: %w", dev, err)
		}
	}
	return h.LinkSetUp(br)
}
