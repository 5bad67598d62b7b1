// Package kubeharness runs the project's own two-node Kubernetes test cluster on one host
// (docs/kube-lab.md has the measured recipe): Kubernetes binaries built from Go modules,
// etcd/containerd/runc from Debian, each node in its own network namespace of a lab (so the
// host's root network namespace stays unchanged), the control plane in node0's namespace and a
// relay from the host's loopback to the API server. Every process it starts it stops by PID;
// every mount, cgroup, sysctl and file it causes it removes or restores.
package kubeharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/mounts"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/procs"
)

// Config describes the test cluster.
type Config struct {
	Prefix    string // lab prefix, e.g. "cnbk1234"
	Dir       string // work directory (default /var/tmp/cnibench-kube/<prefix>)
	Bin       string // directory with kube-apiserver, kubelet, ... (scripts/kube-build.sh)
	ProxyMode string // kube-proxy's mode: iptables (default) or nftables; ProxyNone: no kube-proxy, the CNI replaces it
	CNI       string // the pod network: CNIBridge (default), CNIFlannel, CNIFlannelHostGW or CNICilium
	Image     string // tools image tarball to import on every node ("" = none)
	Log       io.Writer
}

// Harness is a running test cluster.
type Harness struct {
	cfg        Config
	lab        *lab.Lab
	pki        *pki
	nodes      []nodeInfo
	procs      []*proc
	relay      net.Listener
	Kubeconfig string // admin kubeconfig for clients on the host (through the relay)
	restore    map[string]string
	created    []string // host paths that did not exist before and must go
	mu         sync.Mutex
	starter    *starter
	born       time.Time // when Up began: log lines say how long after
}

// starter starts the cluster's processes from one OS thread that lives as long as the
// cluster. The processes get SIGKILL when the thread that forked them exits (Pdeathsig, so that
// nothing outlives a killed test), and a Go program's threads are not all forever: one whose
// goroutine ends while locked to it is terminated. Forked from a thread of its own, a kubelet
// cannot die with some other goroutine's thread mid-test.
type starter struct{ reqs chan func() }

func newStarter() *starter {
	s := &starter{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with close(reqs), after Down
		for f := range s.reqs {
			f()
		}
	}()
	return s
}

// do runs f on the starter's thread.
func (s *starter) do(f func()) {
	done := make(chan struct{})
	s.reqs <- func() { f(); close(done) }
	<-done
}

type nodeInfo struct {
	name, ns, ip, podCIDR string
	dir, cgroupRoot       string
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

const (
	serviceCIDR = "10.96.0.0/16"
	clusterCIDR = "10.244.0.0/16"
)

// hostSysctls are the global (non-network) sysctls the kubelet changes; restored on Down.
var hostSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// hostPaths are host locations kubelet or containerd write to whatever their configuration.
var hostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd", "/etc/cni"}

func (h *Harness) logf(format string, args ...any) {
	if h.cfg.Log != nil {
		if !h.born.IsZero() {
			format = fmt.Sprintf("[%5.1f s] ", time.Since(h.born).Seconds()) + format
		}
		fmt.Fprintf(h.cfg.Log, "kubeharness: "+format+"\n", args...)
	}
}

// Up builds the cluster and waits until both nodes are Ready. On error it tears down.
func Up(ctx context.Context, cfg Config) (h *Harness, err error) {
	if cfg.ProxyMode == "" {
		cfg.ProxyMode = "iptables"
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(Root, cfg.Prefix)
	}
	if cfg.CNI == "" {
		cfg.CNI = CNIBridge
	}
	if err := validCNI(cfg.CNI); err != nil {
		return nil, err
	}
	pn := podNetworks[cfg.CNI]
	switch {
	case cfg.ProxyMode == ProxyNone && !pn.replacesProxy:
		return nil, fmt.Errorf("proxy mode %q: the %s network does not replace kube-proxy", ProxyNone, cfg.CNI)
	case !slices.Contains([]string{"iptables", "nftables", ProxyNone}, cfg.ProxyMode):
		return nil, fmt.Errorf("unknown proxy mode %q (valid: iptables, nftables, %s)", cfg.ProxyMode, ProxyNone)
	}
	for _, b := range Binaries(cfg.CNI) {
		if _, err := os.Stat(filepath.Join(cfg.Bin, b)); err != nil {
			return nil, fmt.Errorf("missing %s in %s: run scripts/kube-build.sh", b, cfg.Bin)
		}
	}
	for _, t := range []string{"etcd", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter"} {
		if _, err := exec.LookPath(t); err != nil {
			return nil, fmt.Errorf("missing %s: install etcd-server containerd runc (scripts/install-deps.sh --kube)", t)
		}
	}
	// A cluster killed mid-test (its maker gone) would hold the shared host paths and leave
	// its sysctls to be recorded below as the host's own.
	if _, err := CleanStale(cfg.Log); err != nil {
		return nil, err
	}
	h = &Harness{cfg: cfg, restore: map[string]string{}, starter: newStarter(), born: time.Now()}
	for _, s := range hostSysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return nil, err
		}
		h.restore[s] = strings.TrimSpace(string(b))
	}
	for _, p := range append(slices.Clone(hostPaths), pn.hostDirs...) {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			h.created = append(h.created, p)
		}
	}
	defer func() {
		if err != nil {
			h.logf("up failed: %v; tearing down", err)
			_ = h.Down()
			h = nil
		}
	}()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return h, err
	}
	for _, p := range pn.hostDirs {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return h, err
		}
	}
	if err := h.writeRecords(); err != nil {
		return h, err
	}
	if h.lab, err = lab.Up(ctx, lab.Config{Prefix: cfg.Prefix, Dataplane: "node2node", Nodes: 2}); err != nil {
		return h, err
	}
	nodes, _ := h.lab.Nodes(ctx)
	for i, n := range nodes {
		ns, _ := h.lab.NodeNS(n.Name)
		h.nodes = append(h.nodes, nodeInfo{name: n.Name, ns: ns, ip: n.IP, podCIDR: fmt.Sprintf("10.244.%d.0/24", i),
			dir: filepath.Join(cfg.Dir, n.Name), cgroupRoot: "/" + cfg.Prefix + "-" + n.Name})
	}
	// Native routes between the nodes' pod CIDRs, as the bridge CNI has no agent (flanneld
	// and cilium-agent route by themselves).
	for _, a := range h.nodes {
		for _, b := range h.nodes {
			if a.name != b.name && pn.staticRoutes {
				if err := run("nsenter", "--net="+netns.Path(a.ns), "--", "ip", "route", "add", b.podCIDR, "via", b.ip); err != nil {
					return h, err
				}
			}
		}
	}
	if err := h.certs(); err != nil {
		return h, fmt.Errorf("certificates: %w", err)
	}
	if err := h.controlPlane(ctx); err != nil {
		return h, fmt.Errorf("control plane: %w", err)
	}
	if pn.cluster != nil {
		if err := pn.cluster(h); err != nil {
			return h, fmt.Errorf("%s: %w", cfg.CNI, err)
		}
	}
	for _, n := range h.nodes {
		if err := h.node(ctx, n); err != nil {
			return h, fmt.Errorf("node %s: %w", n.name, err)
		}
	}
	// The pod network's agents once every node has joined, as a CNI's DaemonSet is applied to
	// a cluster whose nodes are there: kube-router, for one, learns the other nodes' pod
	// CIDRs (the set its pod-egress masquerading spares) when it starts and then only every
	// routes-sync-period (5 minutes), so an agent started before the other node joined would
	// masquerade traffic between pods on the two nodes for that long.
	if pn.agent != nil {
		for _, n := range h.nodes {
			if err := pn.agent(h, n); err != nil {
				return h, fmt.Errorf("node %s: %w", n.name, err)
			}
		}
	}
	if pn.routed != nil {
		if err := pn.routed(h); err != nil {
			return h, fmt.Errorf("%s: %w", cfg.CNI, err)
		}
	}
	return h, h.waitNodesReady(ctx, 120*time.Second)
}

func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// start runs argv inside a node's network namespace (nsenter execs the binary, so the PID is
// the binary's), logging to DIR/logs/NAME.log.
func (h *Harness) start(name, ns string, argv ...string) error {
	return h.startEnv(name, ns, nil, argv...)
}

// startEnv is start with env added to the harness's environment.
func (h *Harness) startEnv(name, ns string, env []string, argv ...string) error {
	logDir := filepath.Join(h.cfg.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + netns.Path(ns), "--"}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = procs.Attr()
	h.starter.do(func() { err = cmd.Start() })
	if err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		werr := cmd.Wait()
		// How it ended, in the log that a failed test dumps (a component that dies mid-test
		// otherwise just stops logging).
		fmt.Fprintf(f, "kubeharness: %s (pid %d) exited at %s: %v\n", name, cmd.Process.Pid, time.Now().UTC().Format(time.RFC3339Nano), werr)
		f.Close()
		close(p.done)
	}()
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	h.logf("started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

// logTail returns the last lines of a component's log, for error messages.
func (h *Harness) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(h.cfg.Dir, "logs", name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func (h *Harness) exited(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.procs {
		if p.name == name {
			select {
			case <-p.done:
				return true
			default:
			}
		}
	}
	return false
}

// Down stops everything in reverse order and restores the host. Idempotent.
func (h *Harness) Down() error {
	var errs []error
	down := time.Now()
	h.logf("taking the cluster down")
	defer func() { h.logf("down in %.1f s", time.Since(down).Seconds()) }()
	h.mu.Lock()
	procs := append([]*proc(nil), h.procs...)
	h.procs = nil
	h.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		stopProc(procs[i])
	}
	if h.relay != nil {
		h.relay.Close()
	}
	// Container processes and shims: everything in our cgroups or naming our directory.
	for _, pid := range h.strayPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(200 * time.Millisecond)
	errs = append(errs, unmountUnder(h.cfg.Dir))
	for _, n := range h.nodes {
		errs = append(errs, removeCgroups(n.cgroupRoot))
	}
	if h.lab != nil {
		errs = append(errs, h.lab.Close(context.Background()))
	}
	errs = append(errs, os.RemoveAll(h.cfg.Dir))
	_ = os.Remove(filepath.Dir(h.cfg.Dir)) // the shared parent, when this was its last cluster
	for s, v := range h.restore {
		errs = append(errs, os.WriteFile("/proc/sys/"+s, []byte(v), 0o644))
	}
	for _, p := range h.created {
		errs = append(errs, unmountUnder(p), os.RemoveAll(p))
	}
	if h.starter != nil {
		close(h.starter.reqs)
		h.starter = nil
	}
	return errors.Join(errs...)
}

// stopGrace is how long a component has to exit after SIGTERM before it is killed.
const stopGrace = 5 * time.Second

func stopProc(p *proc) { procs.Stop(p.cmd.Process.Pid, p.done, stopGrace) }

// strayPIDs lists processes of this cluster that the harness did not start itself: container
// processes (in the nodes' cgroups) and containerd shims (their command line names our dir).
func (h *Harness) strayPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		mine := h.cfg.Dir != "" && strings.Contains(string(cl), h.cfg.Dir)
		for _, n := range h.nodes {
			mine = mine || strings.Contains(string(cg), n.cgroupRoot+"/")
		}
		if mine {
			pids = append(pids, pid)
		}
	}
	return pids
}

// unmountUnder lazily unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	if dir == "" {
		return nil
	}
	var errs []error
	for _, m := range mounts.Under(dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies are the cgroup v1 hierarchies a kubelet needs its cgroupRoot in.
func cgroupHierarchies() []string {
	var out []string
	for _, h := range allCgroupHierarchies() {
		if filepath.Base(h) != "unified" {
			out = append(out, h)
		}
	}
	return out
}

// allCgroupHierarchies are every hierarchy under /sys/fs/cgroup, the cgroup v2 one ("unified")
// of a hybrid host included: the kubelet and containerd create the nodes' cgroups there too.
func allCgroupHierarchies() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

func makeCgroups(root string) error {
	for _, hier := range cgroupHierarchies() {
		if err := os.MkdirAll(hier+root, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroups removes a cgroup subtree in every hierarchy (the unified one too), leaves first.
func removeCgroups(root string) error {
	var errs []error
	for _, hier := range allCgroupHierarchies() {
		base := hier + root
		var dirs []string
		_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
