// Package ovs is the network function "ovs-userspace": Open vSwitch with the user-space
// datapath (datapath_type=netdev) as the switch between in0 and out0 and OpenFlow rules as the
// firewall, the user-space vSwitch of the IETF draft on container networking benchmarks.
//
// Every NF runs its own ovsdb-server and ovs-vswitchd inside its network namespace (nsenter
// --net=), as children of cnibench: not detached, stopped by PID on Close (SIGTERM, SIGKILL
// after a grace period; Pdeathsig kills them if cnibench dies). Their database, sockets, pid
// files and logs live in a directory under env.Dir (OVS_RUNDIR, OVS_DBDIR, OVS_LOGDIR and
// OVS_SYSCONFDIR point there), so nothing touches the host's /var/run/openvswitch or
// /etc/openvswitch. Close removes that directory.
//
// The bridge "br0" (fail_mode=secure: no flow but ours) has in0 as OpenFlow port 1 and out0 as
// port 2, received and sent through AF_PACKET sockets by ovs-vswitchd's main thread (PMD
// threads serve only DPDK ports). userspace-tso-enable is on, so those sockets carry the
// virtio-net header: the veth peers' TSO super-packets and partial checksums go through intact,
// with no change to the peers. Render gives the flow table: see there.
package ovs

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/l2probe"
	"github.com/cnibench/cnibench/internal/procs"
)

// Schema is the Open_vSwitch database schema ovsdb-tool creates each NF's database from.
const Schema = "/usr/share/openvswitch/vswitch.ovsschema"

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

// tools are the executables the kind runs (rows of internal/hosttools).
var tools = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl"}

// Timeouts.
const (
	startTimeout = 30 * time.Second // each daemon's sockets appear, the bridge is configured
	stopGrace    = 5 * time.Second  // SIGTERM to SIGKILL
	probeTimeout = 10 * time.Second // the datapath forwards
)

type kind struct{}

func init() { nf.Register(kind{}) }

func (kind) Name() string { return "ovs-userspace" }
func (kind) Summary() string {
	return "Open vSwitch, user-space datapath (netdev) between in0 and out0; OpenFlow rules as the firewall"
}
func (kind) Layer() nf.Layer { return nf.Transparent }

// Usable needs the Open vSwitch tools and the database schema.
func (kind) Usable() error {
	for _, name := range tools {
		if _, err := hosttools.Look(name); err != nil {
			return err
		}
	}
	if _, err := os.Stat(Schema); err != nil {
		t, _ := hosttools.Get("ovs-vswitchd")
		return fmt.Errorf("Open vSwitch database schema %s is missing: %s", Schema, t.Install())
	}
	return nil
}

// look finds a tool of the table on PATH or in the sbin directories (ovs-vswitchd and
// ovsdb-server live in /usr/sbin, which a non-login PATH may lack).

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

// instance is one NF's pair of daemons.
type instance struct {
	dir     string
	daemons []*daemon // started order; stopped in reverse
	once    sync.Once
	err     error
}

// Dir is where an NF keeps its database, sockets, pid files and logs.
func Dir(env nf.Env) string { return filepath.Join(env.Dir, "ovs") }

// Paths inside Dir.
const (
	DBFile    = "conf.db"
	DBSocket  = "db.sock"
	FlowsFile = "flows.txt"
)

func (kind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	paths := map[string]string{}
	for _, name := range tools {
		p, err := hosttools.Look(name)
		if err != nil {
			return nil, err
		}
		paths[name] = p
	}
	in := &instance{dir: Dir(env)}
	defer func() {
		if err != nil {
			_ = in.Close()
		}
	}()
	if err := os.RemoveAll(in.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(in.dir, 0o700); err != nil {
		return nil, err
	}
	environ := append(os.Environ(), "OVS_RUNDIR="+in.dir, "OVS_DBDIR="+in.dir, "OVS_LOGDIR="+in.dir, "OVS_SYSCONFDIR="+in.dir)
	run := func(tool string, args ...string) error {
		ctx, cancel := context.WithTimeout(ctx, startTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, paths[tool], args...)
		cmd.Env = environ
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	db := filepath.Join(in.dir, DBFile)
	sock := filepath.Join(in.dir, DBSocket)
	dbTarget := "--db=unix:" + sock
	if err := run("ovsdb-tool", "create", db, Schema); err != nil {
		return nil, err
	}
	ovsdb, err := in.start(env, paths["ovsdb-server"], environ, db, "--remote=punix:"+sock)
	if err != nil {
		return nil, err
	}
	if err := ovsdb.waitFor(ctx, sock); err != nil {
		return nil, err
	}
	// userspace-tso-enable is read once, when ovs-vswitchd starts: set it first.
	if err := run("ovs-vsctl", dbTarget, "--no-wait", "--", "init", "--",
		"set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true"); err != nil {
		return nil, err
	}
	vswitchd, err := in.start(env, paths["ovs-vswitchd"], environ, "unix:"+sock)
	if err != nil {
		return nil, err
	}
	// Without --no-wait, ovs-vsctl returns once ovs-vswitchd has applied the change.
	if err := run("ovs-vsctl", dbTarget, "--timeout="+strconv.Itoa(int(startTimeout/time.Second)),
		"--", "add-br", Bridge,
		"--", "set", "Bridge", Bridge, "datapath_type=netdev", "fail_mode=secure", "other_config:disable-in-band=true",
		"--", "add-port", Bridge, env.In, "--", "set", "Interface", env.In, "ofport_request="+strconv.Itoa(InPort),
		"--", "add-port", Bridge, env.Out, "--", "set", "Interface", env.Out, "ofport_request="+strconv.Itoa(OutPort)); err != nil {
		return nil, vswitchd.withLog(err)
	}
	mgmt := filepath.Join(in.dir, Bridge+".mgmt")
	if err := vswitchd.waitFor(ctx, mgmt); err != nil {
		return nil, err
	}
	flows := filepath.Join(in.dir, FlowsFile)
	if err := os.WriteFile(flows, Render(rules), 0o600); err != nil {
		return nil, err
	}
	// One OpenFlow 1.4 bundle: the whole table is installed atomically (or not at all).
	if err := run("ovs-ofctl", "-O", "OpenFlow14", "--bundle", "add-flows", "unix:"+mgmt, flows); err != nil {
		return nil, vswitchd.withLog(err)
	}
	if err := in.portsUp(ctx, paths["ovs-vsctl"], environ, dbTarget, env); err != nil {
		return nil, vswitchd.withLog(err)
	}
	if err := l2probe.Forwards(ctx, env, probeTimeout); err != nil {
		return nil, vswitchd.withLog(err)
	}
	return in, ctx.Err()
}

// portsUp waits until both ports have their OpenFlow numbers and are up.
func (in *instance) portsUp(ctx context.Context, vsctl string, environ []string, dbTarget string, env nf.Env) error {
	deadline := time.Now().Add(startTimeout)
	var last string
	for {
		ok := true
		for i, dev := range []string{env.In, env.Out} {
			cmd := exec.CommandContext(ctx, vsctl, dbTarget, "--timeout=5", "get", "Interface", dev, "ofport", "admin_state", "link_state")
			cmd.Env = environ
			out, err := cmd.Output()
			last = strings.Join(strings.Fields(string(out)), " ")
			if err != nil || last != fmt.Sprintf("%d up up", []int{InPort, OutPort}[i]) {
				ok = false
				last = dev + ": " + last
				if err != nil {
					last += " (" + err.Error() + ")"
				}
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bridge %s: ports not up (ofport admin_state link_state of %s)", Bridge, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// daemon is an Open vSwitch daemon cnibench started and waits for.
type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// start runs an Open vSwitch daemon in env's namespace (pinned to env.CPU when set), with its
// pid file, control socket and log file in in.dir and console logging off.
func (in *instance) start(env nf.Env, path string, environ []string, args ...string) (*daemon, error) {
	name := filepath.Base(path)
	d := &daemon{name: name, done: make(chan struct{}), log: filepath.Join(in.dir, name+".log")}
	argv := []string{"--net=" + netns.Path(env.NS)}
	if env.CPU >= 0 {
		taskset, err := hosttools.Get("taskset")
		if err != nil {
			return nil, err
		}
		argv = append(argv, taskset.Name, "-c", strconv.Itoa(env.CPU))
	}
	argv = append(argv, path)
	argv = append(argv, args...)
	argv = append(argv,
		"--pidfile="+filepath.Join(in.dir, name+".pid"),
		"--unixctl="+filepath.Join(in.dir, name+".ctl"),
		"--log-file="+d.log, "-vconsole:off", "-vfile:info")
	d.cmd = exec.Command("nsenter", argv...)
	d.cmd.Env = environ
	d.cmd.Dir = in.dir
	d.cmd.SysProcAttr = procs.Attr()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	in.daemons = append(in.daemons, d)
	return d, nil
}

// Pid is the daemon's process ID (nsenter and taskset exec it: the PID cnibench started).
func (d *daemon) Pid() int { return d.cmd.Process.Pid }

// waitFor waits until the daemon has created file (a socket), failing early if it exits.
func (d *daemon) waitFor(ctx context.Context, file string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if _, err := os.Stat(file); err == nil {
			return nil
		}
		select {
		case <-d.done:
			return d.withLog(fmt.Errorf("%s exited (%v) before it created %s", d.name, d.cmd.ProcessState, filepath.Base(file)))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return d.withLog(fmt.Errorf("%s did not create %s within %v", d.name, filepath.Base(file), startTimeout))
		}
	}
}

// withLog adds the last lines of the daemon's log that report a problem to err.
func (d *daemon) withLog(err error) error {
	b, rerr := os.ReadFile(d.log)
	if rerr != nil {
		return err
	}
	var bad []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "|WARN|") || strings.Contains(l, "|ERR|") || strings.Contains(l, "|EMER|") {
			bad = append(bad, l)
		}
	}
	if len(bad) > 5 {
		bad = bad[len(bad)-5:]
	}
	if len(bad) == 0 {
		return err
	}
	return fmt.Errorf("%w; %s log: %s", err, d.name, strings.Join(bad, "\n"))
}

// stop ends the daemon: SIGTERM, SIGKILL after stopGrace, and waits for it.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	procs.Stop(d.Pid(), d.done, stopGrace)
}

// PIDs are the processes of the instance (for tests).
func (in *instance) PIDs() []int {
	var pids []int
	for _, d := range in.daemons {
		pids = append(pids, d.Pid())
	}
	return pids
}

// Close stops ovs-vswitchd, then ovsdb-server, and removes their directory. Idempotent.
func (in *instance) Close() error {
	in.once.Do(func() {
		for i := len(in.daemons) - 1; i >= 0; i-- {
			in.daemons[i].stop()
		}
		in.err = os.RemoveAll(in.dir)
	})
	return in.err
}
