// Package dpdk is the network function "dpdk": a user-space DPDK forwarder between in0 and
// out0, the way NSM's VPP forwarder sits in a chain. dpdk-testpmd forwards in io mode between
// two AF_PACKET virtual devices (net_af_packet0 on in0, net_af_packet1 on out0): no hugepages
// (--no-huge), no PCI, no shared files (--no-shconf), its runtime directory under env.Dir
// (RUNTIME_DIRECTORY), its file prefix env.Name, one forwarding lcore that busy-polls (pinned to
// env.CPU when set, as is the main lcore, which only waits on its standard input).
//
// testpmd cannot filter on AF_PACKET ports, so the rule set is an XDP program in pass mode on
// in0 and out0 (ebpf.Filter): denied frames are dropped before the AF_PACKET sockets see them.
//
// AF_PACKET (without a virtio-net header, which DPDK 22.11's PMD does not use) hands the
// forwarder a frame as it lies in memory: a veth peer's TSO super-packet would be truncated to
// the ring's frame size and a partial checksum would be forwarded unfinished. So Start turns
// TX checksumming (and with it TSO) off on the peers of in0 and out0 (env.InPeer, env.OutPeer;
// ETHTOOL_STXCSUM), so they send MTU-sized frames with complete checksums, and Close turns it
// back on where it was on.
//
// Close ends testpmd the way it is meant to (EOF on its standard input), SIGTERM and SIGKILL
// after grace periods, by PID; then it detaches the filter, restores the peers and removes the
// runtime directory (and /var/run/dpdk/<env.Name>, which it never creates).
package dpdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/ebpf"
	"github.com/cnibench/cnibench/internal/nf/l2probe"
	"github.com/cnibench/cnibench/internal/procs"
)

// Testpmd is the forwarder (a row of internal/hosttools).
const Testpmd = "dpdk-testpmd"

// PMDGlob finds the AF_PACKET poll-mode driver among the plugins DPDK's EAL loads (Debian's
// shared build; the package librte-net-af-packet23, a dependency of dpdk-dev).
const PMDGlob = "/usr/lib/*/dpdk/pmds-*/librte_net_af_packet.so*"

// VarRunDPDK is where EAL puts a root process's runtime directory by default; a testpmd of this
// kind puts it under env.Dir instead, and Close removes VarRunDPDK/<env.Name> in case.
const VarRunDPDK = "/var/run/dpdk"

// Timeouts.
const (
	probeTimeout = 20 * time.Second // testpmd starts and forwards
	eofGrace     = 3 * time.Second  // after EOF on stdin, before SIGTERM
	stopGrace    = 3 * time.Second  // after SIGTERM, before SIGKILL
)

// Memory: testpmd's default pool would be sized for 32 ports (hundreds of MB); AF_PACKET
// rings copy every frame, so a few thousand buffers are plenty.
const (
	mbufs   = 4096
	memBase = 24 // MB of EAL memory besides the buffers
)

type kind struct{}

func init() { nf.Register(kind{}) }

func (kind) Name() string { return "dpdk" }
func (kind) Summary() string {
	return "user-space DPDK forwarder (testpmd io mode, AF_PACKET vdevs on in0/out0, no hugepages); XDP filter as the firewall"
}
func (kind) Layer() nf.Layer { return nf.Transparent }

// Usable needs dpdk-testpmd and DPDK's AF_PACKET driver.
func (kind) Usable() error {
	if _, err := look(); err != nil {
		return err
	}
	if m, _ := filepath.Glob(PMDGlob); len(m) == 0 {
		t, _ := hosttools.Get(Testpmd)
		return fmt.Errorf("DPDK has no AF_PACKET driver (net_af_packet: no %s): %s", PMDGlob, t.Install())
	}
	return nil
}

func look() (string, error) { return hosttools.Look(Testpmd) }

// RunDir is the runtime directory (RUNTIME_DIRECTORY) of an NF's testpmd; EAL makes
// RunDir/dpdk/<env.Name> in it.
func RunDir(env nf.Env) string { return filepath.Join(env.Dir, "dpdk") }

// instance is a running forwarder.
type instance struct {
	env    nf.Env
	dir    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	log    *bytes.Buffer
	logMu  *sync.Mutex
	filter nf.Instance
	peers  []func() error // turn the peers' TX checksumming back on where Start turned it off
	once   sync.Once
	err    error
}

// Args is testpmd's argv (after the program name) for env; mtu is in0's MTU.
func Args(env nf.Env, mtu int, cpus string) []string {
	// af_packet rings: a frame holds the TPACKET2 header and the Ethernet frame; the default
	// 2048-byte frames fit MTU 1500.
	frame, mbufSize := 2048, 2048+128
	if need := mtu + 18 + 96; need > 2048 {
		frame = 4096
		for frame < need {
			frame *= 2
		}
		mbufSize = frame + 128
	}
	vdev := func(i int, dev string) string {
		s := "net_af_packet" + strconv.Itoa(i) + ",iface=" + dev
		if frame != 2048 {
			s += ",blocksz=" + strconv.Itoa(frame) + ",framesz=" + strconv.Itoa(frame)
		}
		return s
	}
	mem := memBase + (mbufs*(mbufSize+256)+(1<<20)-1)>>20
	args := []string{
		"--no-huge", "-m", strconv.Itoa(mem), "--no-pci", "--no-shconf", "--no-telemetry",
		"--file-prefix", env.Name,
		"--lcores", "0@(" + cpus + "),1@(" + cpus + ")",
		"--vdev", vdev(0, env.In), "--vdev", vdev(1, env.Out),
		"--",
		"--forward-mode=io", "--auto-start", "--total-num-mbufs=" + strconv.Itoa(mbufs),
	}
	if mbufSize != 2048+128 {
		args = append(args, "--mbuf-size="+strconv.Itoa(mbufSize))
	}
	return args
}

func (kind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	path, err := look()
	if err != nil {
		return nil, err
	}
	in := &instance{env: env, dir: RunDir(env), done: make(chan struct{}), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	defer func() {
		if err != nil {
			_ = in.Close()
		}
	}()
	filter, err := ebpf.Filter(env, rules, []string{env.In, env.Out})
	if err != nil {
		return nil, fmt.Errorf("XDP filter on %s and %s: %w", env.In, env.Out, err)
	}
	in.filter = filter
	for _, p := range []nf.Endpoint{env.InPeer, env.OutPeer} {
		undo, err := nf.SwitchFeature(p, nf.TxChecksum, false)
		if err != nil {
			return nil, fmt.Errorf("turn TX checksumming off on %s/%s: %w", p.NS, p.Dev, err)
		}
		in.peers = append(in.peers, func() error {
			if err := undo(); err != nil {
				return fmt.Errorf("turn TX checksumming back on on %s/%s: %w", p.NS, p.Dev, err)
			}
			return nil
		})
	}
	mtu, err := linkMTU(env.NS, env.In)
	if err != nil {
		return nil, err
	}
	cpus := strconv.Itoa(env.CPU)
	if env.CPU < 0 {
		if cpus, err = allowedCPUs(); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(in.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(in.dir, 0o700); err != nil {
		return nil, err
	}
	in.cmd = exec.Command("nsenter", append([]string{"--net=" + netns.Path(env.NS), path}, Args(env, mtu, cpus)...)...)
	in.cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+in.dir)
	in.cmd.Dir = in.dir
	in.cmd.SysProcAttr = procs.Attr()
	w := &lockedWriter{mu: in.logMu, b: in.log}
	in.cmd.Stdout, in.cmd.Stderr = w, w
	// testpmd without -i runs until its standard input ends: keep it open.
	if in.stdin, err = in.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := in.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", Testpmd, err)
	}
	go func() { _ = in.cmd.Wait(); close(in.done) }()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-in.done:
			cancel()
		case <-pctx.Done():
		}
	}()
	if err := l2probe.Forwards(pctx, env, probeTimeout); err != nil {
		select {
		case <-in.done:
			return nil, fmt.Errorf("%s exited (%v): %s", Testpmd, in.cmd.ProcessState, in.output())
		default:
		}
		return nil, fmt.Errorf("%w; %s says: %s", err, Testpmd, in.output())
	}
	return in, ctx.Err()
}

// output is the end of what testpmd wrote (stdio buffers it: mostly seen once it exits).
func (in *instance) output() string {
	in.logMu.Lock()
	defer in.logMu.Unlock()
	lines := strings.Split(strings.TrimSpace(in.log.String()), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() > 1<<20 {
		w.b.Reset()
	}
	return w.b.Write(p)
}

// PID is testpmd's process ID (nsenter execs it), 0 before it started.
func (in *instance) PID() int {
	if in.cmd == nil || in.cmd.Process == nil {
		return 0
	}
	return in.cmd.Process.Pid
}

// Pause stops testpmd (SIGSTOP to its process group): its poll-mode driver keeps a CPU busy
// whether traffic comes or not, and a stopped testpmd uses none (nf.Pauser).
// It returns once every thread of testpmd has stopped (a signal takes effect asynchronously).
func (in *instance) Pause() error {
	if err := in.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	for !stopped(in.PID()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (PID %d) did not stop within 2 s of SIGSTOP", Testpmd, in.PID())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// stopped tells whether every thread of process pid is stopped (state T in /proc).
func stopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if len(stats) == 0 {
		return false
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Resume lets a paused testpmd go on (SIGCONT).
func (in *instance) Resume() error { return in.signal(syscall.SIGCONT) }

func (in *instance) signal(sig syscall.Signal) error {
	if in.PID() == 0 {
		return errors.New(Testpmd + " not started")
	}
	select {
	case <-in.done:
		return fmt.Errorf("%s exited (%v): %s", Testpmd, in.cmd.ProcessState, in.output())
	default:
	}
	if err := syscall.Kill(-in.PID(), sig); err != nil {
		return fmt.Errorf("%s %v: %w", Testpmd, sig, err)
	}
	return nil
}

// stop ends testpmd: EOF on its standard input (it stops forwarding, closes its ports and
// exits), SIGTERM to its process group after eofGrace, SIGKILL after stopGrace; waits for it.
func (in *instance) stop() {
	if in.PID() == 0 {
		return
	}
	_ = syscall.Kill(-in.PID(), syscall.SIGCONT) // a paused testpmd reads no EOF
	_ = in.stdin.Close()
	t := time.NewTimer(eofGrace)
	defer t.Stop()
	select {
	case <-in.done:
	case <-t.C:
		procs.Stop(in.PID(), in.done, stopGrace)
	}
}

// Close stops testpmd, detaches the filter, restores the peers and removes the runtime
// directories. Idempotent.
func (in *instance) Close() error {
	in.once.Do(func() {
		in.stop()
		var errs []error
		if in.filter != nil {
			errs = append(errs, in.filter.Close())
		}
		for _, restore := range in.peers {
			errs = append(errs, restore()) // a peer that is gone is no error
		}
		errs = append(errs, os.RemoveAll(in.dir), os.RemoveAll(filepath.Join(VarRunDPDK, in.env.Name)))
		in.err = errors.Join(errs...)
	})
	return in.err
}
