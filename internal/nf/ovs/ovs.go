// Package ovs is the network function "ovs-userspace": Open vSwitch with the user-space
// datapath (datapath_type=netdev) as the switch between in0 and out0 and OpenFlow rules as the
// firewall, the user-space vSwitch of the IETF draft on container networking benchmarks.
//
// Every NF runs its own Open vSwitch (internal/ovs) inside its network namespace, as children
// of cnibench: not detached, stopped by PID on Close (SIGTERM, SIGKILL after a grace period;
// Pdeathsig kills them if cnibench dies), with its files in a directory under env.Dir that
// Close removes.
//
// The bridge "br0" (fail_mode=secure: no flow but ours) has in0 as OpenFlow port 1 and out0 as
// port 2, received and sent through AF_PACKET sockets by ovs-vswitchd's main thread (PMD
// threads serve only DPDK ports). Render gives the flow table: see there.
package ovs

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/l2probe"
	ovsd "github.com/cnibench/cnibench/internal/ovs"
)

// The bridge and its OpenFlow ports.
const (
	Bridge  = "br0"
	InPort  = 1 // env.In
	OutPort = 2 // env.Out
)

// Flow table layout (see Render).
const (
	// FwdTable sends a packet out of the port it did not come in by.
	FwdTable = 253
	// PerTable is how many rules one table holds: priorities PerTable+1 down to 2, below the
	// ARP flow (65535) and above the table's miss flow (0).
	PerTable    = 65000
	arpPriority = 65535
)

// probeTimeout bounds the check that the datapath forwards.
const probeTimeout = 10 * time.Second

type kind struct{}

func init() { nf.Register(kind{}) }

func (kind) Name() string { return "ovs-userspace" }
func (kind) Summary() string {
	return "Open vSwitch, user-space datapath (netdev) between in0 and out0; OpenFlow rules as the firewall"
}
func (kind) Layer() nf.Layer { return nf.Transparent }

// Usable needs the Open vSwitch tools and the database schema.
func (kind) Usable() error { return ovsd.Usable() }

// Render is the OpenFlow table (ovs-ofctl add-flows input) of a rule set. Table 0 holds ARP
// (highest priority, to the forwarding table) and then the rules in order at decreasing
// priorities: an allowed match goes to FwdTable, a denied one is dropped. Rules beyond PerTable
// continue in table 1, 2, ...: each rule table's lowest flow (priority 0) sends what none of
// its rules matched to the next one, and the last one's drops it, as the rule set drops an
// IPv4 packet no rule matches and every non-IPv4 frame but ARP. FwdTable outputs a packet on
// the port it did not come in by.
func Render(rules nf.RuleSet) []byte {
	var b bytes.Buffer
	b.Grow(100 * (len(rules.Rules) + 4))
	fmt.Fprintf(&b, "table=0,priority=%d,arp,actions=resubmit(,%d)\n", arpPriority, FwdTable)
	n := len(rules.Rules)
	tables := (n + PerTable - 1) / PerTable
	if tables == 0 {
		tables = 1
	}
	for i, r := range rules.Rules {
		match, ok := flowMatch(r)
		if !ok {
			continue // no packet can match it
		}
		action := "drop"
		if r.Allow {
			action = fmt.Sprintf("resubmit(,%d)", FwdTable)
		}
		fmt.Fprintf(&b, "table=%d,priority=%d,%s,actions=%s\n", i/PerTable, PerTable+1-i%PerTable, match, action)
	}
	for t := 0; t < tables; t++ {
		if t < tables-1 {
			fmt.Fprintf(&b, "table=%d,priority=0,actions=resubmit(,%d)\n", t, t+1)
		} else {
			fmt.Fprintf(&b, "table=%d,priority=0,actions=drop\n", t)
		}
	}
	fmt.Fprintf(&b, "table=%d,priority=1,in_port=%d,actions=output:%d\n", FwdTable, InPort, OutPort)
	fmt.Fprintf(&b, "table=%d,priority=1,in_port=%d,actions=output:%d\n", FwdTable, OutPort, InPort)
	return b.Bytes()
}

// flowMatch is the OpenFlow match of a rule, false when no IPv4 packet can match it (a prefix
// that is not IPv4, or ports on a protocol without ports).
func flowMatch(r nf.Rule) (string, bool) {
	var m []string
	switch r.Proto {
	case nf.TCP, nf.UDP:
		m = append(m, nf.ProtoName(r.Proto))
	default:
		if r.SrcPort != 0 || r.DstPort != 0 {
			return "", false
		}
		m = append(m, "ip", "nw_proto="+strconv.Itoa(int(r.Proto)))
	}
	for _, p := range []struct {
		field  string
		prefix netip.Prefix
	}{{"nw_src", r.Src}, {"nw_dst", r.Dst}} {
		if !p.prefix.IsValid() || !p.prefix.Addr().Is4() {
			return "", false
		}
		if p.prefix.Bits() > 0 {
			m = append(m, p.field+"="+p.prefix.Masked().String())
		}
	}
	if r.SrcPort != 0 {
		m = append(m, "tp_src="+strconv.Itoa(int(r.SrcPort)))
	}
	if r.DstPort != 0 {
		m = append(m, "tp_dst="+strconv.Itoa(int(r.DstPort)))
	}
	return strings.Join(m, ","), true
}

// instance is one NF's switch.
type instance struct {
	*ovsd.Switch
}

// Dir is where an NF keeps its database, sockets, pid files and logs.
func Dir(env nf.Env) string { return filepath.Join(env.Dir, "ovs") }

// Paths inside Dir.
const (
	DBFile   = ovsd.DBFile
	DBSocket = ovsd.DBSocket
)

func (kind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	sw, err := ovsd.Start(ctx, ovsd.Options{NS: env.NS, Dir: Dir(env), CPU: env.CPU})
	if err != nil {
		return nil, err
	}
	in := &instance{sw}
	defer func() {
		if err != nil {
			_ = in.Close()
		}
	}()
	if err := sw.Vsctl(ctx, "--", "add-br", Bridge,
		"--", "set", "Bridge", Bridge, "datapath_type=netdev", "fail_mode=secure", "other_config:disable-in-band=true",
		"--", "add-port", Bridge, env.In, "--", "set", "Interface", env.In, "ofport_request="+strconv.Itoa(InPort),
		"--", "add-port", Bridge, env.Out, "--", "set", "Interface", env.Out, "ofport_request="+strconv.Itoa(OutPort)); err != nil {
		return nil, err
	}
	if err := sw.WaitBridge(ctx, Bridge); err != nil {
		return nil, err
	}
	if err := sw.AddFlows(ctx, Bridge, Render(rules)); err != nil {
		return nil, err
	}
	if err := sw.PortsUp(ctx, []string{env.In, env.Out}, []int{InPort, OutPort}); err != nil {
		return nil, err
	}
	if err := l2probe.Forwards(ctx, env, probeTimeout); err != nil {
		return nil, fmt.Errorf("bridge %s: %w", Bridge, err)
	}
	return in, ctx.Err()
}
