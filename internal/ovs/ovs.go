// Package ovs runs an Open vSwitch of cnibench's own inside a network namespace: an
// ovsdb-server and an ovs-vswitchd started by cnibench (nsenter --net=), their database,
// sockets, pid files and logs in a directory of the caller's (OVS_RUNDIR, OVS_DBDIR,
// OVS_LOGDIR and OVS_SYSCONFDIR point there), so nothing touches the host's
// /var/run/openvswitch or /etc/openvswitch, and the system's Open vSwitch service is never
// involved. The network function "ovs-userspace" (a switch in a chain) and the lab's attach
// kind "ovs-userspace" (every node's pods on an OVS bridge) both run on it.
//
// userspace-tso-enable is on: the AF_PACKET sockets of a netdev bridge's system ports carry
// the virtio-net header, so veth peers' TSO super-packets and partial checksums go through
// intact.
package ovs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/procs"
)

// Schema is the Open_vSwitch database schema ovsdb-tool creates each switch's database from.
const Schema = "/usr/share/openvswitch/vswitch.ovsschema"

// Files inside a switch's directory.
const (
	DBFile   = "conf.db"
	DBSocket = "db.sock"
)

// Tools are the executables a switch runs (rows of internal/hosttools).
var Tools = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl"}

// Timeouts.
const (
	StartTimeout = 30 * time.Second // each daemon's sockets appear, a bridge is configured
	stopGrace    = 5 * time.Second  // SIGTERM to SIGKILL
)

// Usable is nil when the host has the Open vSwitch tools and the database schema.
func Usable() error {
	for _, name := range Tools {
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

// Options say where a switch runs.
type Options struct {
	NS  string // network namespace name
	Dir string // its directory (made afresh; Close removes it)
	CPU int    // pin both daemons to this CPU; -1 = no pinning
	// DPDK makes the switch OVS-DPDK (nil: the plain user-space datapath).
	DPDK *DPDK
	// Detached daemons outlive the process that started them (a lab kept standing by `lab up`):
	// they lead a session of their own and get no signal when cnibench exits; whoever removes
	// the namespace kills them (netns.KillAll, as lab clean does).
	Detached bool
}

// DPDK are the settings of an OVS-DPDK switch: ovs-vswitchd's DPDK build, its EAL on plain
// memory (no hugepages: --no-huge with --legacy-mem, which also keeps OVS from adding
// --in-memory, which DPDK refuses beside --no-huge), no PCI devices, EAL's runtime directory in
// the switch's directory (RUNTIME_DIRECTORY: nothing under /var/run/dpdk). Its ports of type
// dpdk are served by one poll-mode (PMD) thread that busy-polls its CPU.
type DPDK struct {
	MemMB    int // EAL memory (-m); 0 = 512
	LcoreCPU int // EAL's main lcore (dpdk-lcore-mask)
	PMDCPU   int // the PMD thread's CPU (pmd-cpu-mask)
	// MaxSleepUS lets an idle PMD thread sleep up to this long (pmd-maxsleep, OVS 3.1's
	// load-based sleeping: a loaded PMD never sleeps); 0 = busy-poll always.
	MaxSleepUS int
}

// VswitchdDPDK is the DPDK build of ovs-vswitchd (Debian's openvswitch-switch-dpdk installs it
// beside the plain one, as an alternative of lower priority: the plain one stays the default).
const VswitchdDPDK = "ovs-vswitchd-dpdk"

// Switch is a running pair of daemons.
type Switch struct {
	opt     Options
	paths   map[string]string
	environ []string
	daemons []*daemon // started order; stopped in reverse
	opened  bool      // by Open: another process's daemons
	once    sync.Once
	err     error
}

// Open is a switch another process started (detached) in opt.Dir: its tools work on it, and
// Close removes nothing (its daemons are not this process's).
func Open(opt Options) (*Switch, error) {
	s := &Switch{opt: opt, paths: map[string]string{}}
	for _, name := range Tools {
		p, err := hosttools.Look(name)
		if err != nil {
			return nil, err
		}
		s.paths[name] = p
	}
	s.environ = append(os.Environ(), "OVS_RUNDIR="+opt.Dir, "OVS_DBDIR="+opt.Dir, "OVS_LOGDIR="+opt.Dir, "OVS_SYSCONFDIR="+opt.Dir)
	s.opened = true // Close: nothing of ours to stop or remove
	return s, nil
}

// Start creates the database, starts ovsdb-server, sets the switch-wide options ovs-vswitchd
// reads once at start (userspace-tso-enable) and starts ovs-vswitchd. On error nothing of it
// is left.
func Start(ctx context.Context, opt Options) (_ *Switch, err error) {
	s, err := Open(opt)
	if err != nil {
		return nil, err
	}
	s.opened = false
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if err := os.RemoveAll(opt.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, err
	}
	db := filepath.Join(opt.Dir, DBFile)
	sock := filepath.Join(opt.Dir, DBSocket)
	if err := s.run(ctx, "ovsdb-tool", "create", db, Schema); err != nil {
		return nil, err
	}
	ovsdb, err := s.start(s.paths["ovsdb-server"], db, "--remote=punix:"+sock)
	if err != nil {
		return nil, err
	}
	if err := ovsdb.waitFor(ctx, sock); err != nil {
		return nil, err
	}
	if err := s.Vsctl(ctx, "--no-wait", "--", "init", "--",
		"set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true"); err != nil {
		return nil, err
	}
	vswitchd := s.paths["ovs-vswitchd"]
	if d := opt.DPDK; d != nil {
		if vswitchd, err = hosttools.Look(VswitchdDPDK); err != nil {
			return nil, err
		}
		mem := d.MemMB
		if mem == 0 {
			mem = 512
		}
		s.environ = append(s.environ, "RUNTIME_DIRECTORY="+opt.Dir)
		if err := s.Vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".", "other_config:dpdk-init=true",
			fmt.Sprintf("other_config:dpdk-extra=--no-huge -m %d --legacy-mem --no-pci --file-prefix=ovs", mem),
			fmt.Sprintf("other_config:dpdk-lcore-mask=0x%x", uint64(1)<<d.LcoreCPU),
			fmt.Sprintf("other_config:pmd-cpu-mask=0x%x", uint64(1)<<d.PMDCPU),
			fmt.Sprintf("other_config:pmd-maxsleep=%d", d.MaxSleepUS)); err != nil {
			return nil, err
		}
	}
	if _, err := s.start(vswitchd, "unix:"+sock); err != nil {
		return nil, err
	}
	if opt.DPDK != nil {
		if err := s.dpdkInitialized(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// dpdkInitialized waits until ovs-vswitchd reports DPDK initialised (it exits when EAL fails).
func (s *Switch) dpdkInitialized(ctx context.Context) error {
	d := s.vswitchd()
	deadline := time.Now().Add(StartTimeout)
	for {
		out, err := s.VsctlOutput(ctx, "get", "Open_vSwitch", ".", "dpdk_initialized")
		if err == nil && strings.TrimSpace(out) == "true" {
			return nil
		}
		select {
		case <-d.done:
			return d.withLog(fmt.Errorf("%s exited (%v) while initialising DPDK", d.name, d.cmd.ProcessState))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return d.withLog(fmt.Errorf("DPDK not initialised within %v", StartTimeout))
		}
	}
}

// run runs an Open vSwitch tool against this switch (its environment), bounded by StartTimeout.
func (s *Switch) run(ctx context.Context, tool string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.paths[tool], args...)
	cmd.Env = s.environ
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Vsctl runs ovs-vsctl against the switch's database. Without --no-wait it returns once
// ovs-vswitchd has applied the change (or after StartTimeout); its errors carry the warnings of
// ovs-vswitchd's log.
func (s *Switch) Vsctl(ctx context.Context, args ...string) error {
	all := append([]string{"--db=unix:" + filepath.Join(s.opt.Dir, DBSocket), "--timeout=" + strconv.Itoa(int(StartTimeout/time.Second))}, args...)
	return s.withLog(s.run(ctx, "ovs-vsctl", all...))
}

// VsctlOutput is Vsctl returning the tool's output.
func (s *Switch) VsctlOutput(ctx context.Context, args ...string) (string, error) {
	all := append([]string{"--db=unix:" + filepath.Join(s.opt.Dir, DBSocket), "--timeout=5"}, args...)
	cmd := exec.CommandContext(ctx, s.paths["ovs-vsctl"], all...)
	cmd.Env = s.environ
	out, err := cmd.Output()
	return string(out), err
}

// AddFlows installs a flow table (ovs-ofctl add-flows input) on a bridge in one OpenFlow 1.4
// bundle: all of it, atomically, or nothing. The bridge's management socket must exist
// (WaitBridge).
func (s *Switch) AddFlows(ctx context.Context, bridge string, flows []byte) error {
	return s.ofctlFlows(ctx, "add-flows", bridge, flows)
}

// ReplaceFlows replaces a bridge's whole flow table in one bundle.
func (s *Switch) ReplaceFlows(ctx context.Context, bridge string, flows []byte) error {
	return s.ofctlFlows(ctx, "replace-flows", bridge, flows)
}

func (s *Switch) ofctlFlows(ctx context.Context, verb, bridge string, flows []byte) error {
	f := filepath.Join(s.opt.Dir, bridge+".flows")
	if err := os.WriteFile(f, flows, 0o600); err != nil {
		return err
	}
	return s.withLog(s.run(ctx, "ovs-ofctl", "-O", "OpenFlow14", "--bundle", verb, "unix:"+s.Mgmt(bridge), f))
}

// Mgmt is a bridge's OpenFlow management socket.
func (s *Switch) Mgmt(bridge string) string { return filepath.Join(s.opt.Dir, bridge+".mgmt") }

// WaitBridge waits until ovs-vswitchd has made a bridge's management socket.
func (s *Switch) WaitBridge(ctx context.Context, bridge string) error {
	if len(s.daemons) == 0 { // opened: not ours to watch
		d := &daemon{name: "ovs-vswitchd", done: make(chan struct{}), log: s.logFile()}
		return d.waitFor(ctx, s.Mgmt(bridge))
	}
	return s.vswitchd().waitFor(ctx, s.Mgmt(bridge))
}

func (s *Switch) logFile() string { return filepath.Join(s.opt.Dir, "ovs-vswitchd.log") }

// PortsUp waits until every port has its OpenFlow number (ofports[i], 0 = any) and is up.
func (s *Switch) PortsUp(ctx context.Context, ports []string, ofports []int) error {
	deadline := time.Now().Add(StartTimeout)
	var last string
	for {
		ok := true
		for i, dev := range ports {
			out, err := s.VsctlOutput(ctx, "get", "Interface", dev, "ofport", "admin_state", "link_state")
			f := strings.Fields(out)
			good := err == nil && len(f) == 3 && f[1] == "up" && f[2] == "up" && f[0] != "-1" && f[0] != "[]"
			if good && i < len(ofports) && ofports[i] != 0 {
				good = f[0] == strconv.Itoa(ofports[i])
			}
			if !good {
				ok = false
				last = dev + ": " + strings.Join(f, " ")
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
			return s.withLog(fmt.Errorf("ports not up (ofport admin_state link_state of %s)", last))
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

// start runs an Open vSwitch daemon in the switch's namespace (pinned to its CPU when set),
// with its pid file, control socket and log file in the directory and console logging off.
func (s *Switch) start(path string, args ...string) (*daemon, error) {
	name := filepath.Base(path)
	d := &daemon{name: name, done: make(chan struct{}), log: filepath.Join(s.opt.Dir, name+".log")}
	argv := []string{"--net=" + netns.Path(s.opt.NS)}
	if s.opt.CPU >= 0 {
		taskset, err := hosttools.Get("taskset")
		if err != nil {
			return nil, err
		}
		argv = append(argv, taskset.Name, "-c", strconv.Itoa(s.opt.CPU))
	}
	argv = append(argv, path)
	argv = append(argv, args...)
	argv = append(argv,
		"--pidfile="+filepath.Join(s.opt.Dir, name+".pid"),
		"--unixctl="+filepath.Join(s.opt.Dir, name+".ctl"),
		"--log-file="+d.log, "-vconsole:off", "-vfile:info")
	d.cmd = exec.Command("nsenter", argv...)
	d.cmd.Env = s.environ
	d.cmd.Dir = s.opt.Dir
	d.cmd.SysProcAttr = procs.Attr()
	if s.opt.Detached {
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // a process group of its own too
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	s.daemons = append(s.daemons, d)
	return d, nil
}

func (s *Switch) vswitchd() *daemon { return s.daemons[len(s.daemons)-1] }

// Pid is the daemon's process ID (nsenter and taskset exec it: the PID cnibench started).
func (d *daemon) Pid() int { return d.cmd.Process.Pid }

// waitFor waits until the daemon has created file (a socket), failing early if it exits.
func (d *daemon) waitFor(ctx context.Context, file string) error {
	deadline := time.Now().Add(StartTimeout)
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
			return d.withLog(fmt.Errorf("%s did not create %s within %v", d.name, filepath.Base(file), StartTimeout))
		}
	}
}

// withLog adds the last problem lines of ovs-vswitchd's log to err.
func (s *Switch) withLog(err error) error {
	if err == nil {
		return err
	}
	return (&daemon{name: "ovs-vswitchd", log: s.logFile()}).withLog(err)
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

// PIDs are the switch's daemons.
func (s *Switch) PIDs() []int {
	var pids []int
	for _, d := range s.daemons {
		pids = append(pids, d.Pid())
	}
	return pids
}

// Exited waits until every daemon has exited (after they were killed by someone else).
func (s *Switch) Exited() {
	for _, d := range s.daemons {
		<-d.done
	}
}

// Dir is the switch's directory.
func (s *Switch) Dir() string { return s.opt.Dir }

// Close stops ovs-vswitchd, then ovsdb-server, and removes their directory. Idempotent.
func (s *Switch) Close() error {
	if s.opened {
		return nil
	}
	s.once.Do(func() {
		for i := len(s.daemons) - 1; i >= 0; i-- {
			s.daemons[i].stop()
		}
		s.err = os.RemoveAll(s.opt.Dir)
	})
	return s.err
}
