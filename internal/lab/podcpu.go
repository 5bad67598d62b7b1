package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/mounts"
)

// Pod CPU resources (cluster.PodSpec.CPU) live in the host's cgroup v1 cpu and cpuset
// hierarchies (a host of this kind mounts those controllers v1; its v2 hierarchy has none),
// under a cnibench directory of each, named with the lab's prefix:
//
//   - a limit is a CFS quota: <cpu>/cnibench/<prefix>-<pod>, cpu.cfs_quota_us = limit ×
//     cpu.cfs_period_us / 1000;
//   - exclusive CPUs are a cpuset of whole CPUs: <cpuset>/cnibench/<prefix>-<pod>, taken from
//     the highest CPUs down, none that another lab's pod holds; CPU 0 is never given (it stays
//     in the shared pool, as a kubelet keeps reserved CPUs). From the first exclusive grant on, every other process of the
//     lab's pods runs in <cpuset>/cnibench/<prefix>-shared, the CPUs nobody holds (the static
//     CPU manager's shared pool), which grows back as exclusive pods go.
//
// cgroup v1 cannot start a process inside a cgroup, so a pod process with a cgroup to join is
// started through /bin/sh waiting on a pipe: its PID is written to the cgroups, then the pipe
// lets it exec the command (nothing of the command runs outside them).

// cgroupV1 is the mount point of the v1 hierarchy holding controller ("" when none).
func cgroupV1(controller string) string {
	for _, m := range mounts.List() {
		if m.Type == "cgroup" && slices.Contains(m.Super, controller) {
			return m.Point
		}
	}
	return ""
}

// CPURoots are the cnibench directories of the v1 cpu and cpuset hierarchies ("" for one
// this host does not mount).
var CPURoots = sync.OnceValues(func() (cpu, cpuset string) {
	if mp := cgroupV1("cpu"); mp != "" {
		cpu = filepath.Join(mp, "cnibench")
	}
	if mp := cgroupV1("cpuset"); mp != "" {
		cpuset = filepath.Join(mp, "cnibench")
	}
	return cpu, cpuset
})

// cgroupRoots are the cnibench directories of every cgroup hierarchy the lab uses: the v2
// one of the nodes (cgroup.go) and the v1 cpu and cpuset ones of the pods.
func cgroupRoots() []string {
	var out []string
	cpu, cpuset := CPURoots()
	for _, r := range []string{CgroupRoot(), cpu, cpuset} {
		if r != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// podCPU is what a pod was given: its cgroups and its exclusive CPUs.
type podCPU struct {
	cpu, cpuset string // cgroup directories ("" none)
	cpus        []int  // exclusive CPUs
}

func (c podCPU) dirs() []string {
	var out []string
	for _, d := range []string{c.cpu, c.cpuset} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

func writeFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s = %q: %w", path, value, err)
	}
	return nil
}

// cpusetDir makes a cpuset directory under the cnibench one (made too, with the host's CPUs
// and memory nodes) holding cpus.
func cpusetDir(dir string, cpus []int) error {
	root := filepath.Dir(dir)
	if _, err := os.Stat(root); err != nil {
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(filepath.Dir(root), f))
			if err != nil {
				return err
			}
			if err := writeFile(filepath.Join(root, f), strings.TrimSpace(string(v))); err != nil {
				return err
			}
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	mems, err := os.ReadFile(filepath.Join(root, "cpuset.mems"))
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "cpuset.mems"), strings.TrimSpace(string(mems))); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "cpuset.cpus"), cluster.FormatCPUList(cpus))
}

// hostCPUs are the CPUs the cpuset hierarchy's root holds.
func hostCPUs(cpusetRoot string) ([]int, error) {
	v, err := os.ReadFile(filepath.Join(filepath.Dir(cpusetRoot), "cpuset.cpus"))
	if err != nil {
		return nil, err
	}
	return cluster.ParseCPUList(string(v))
}

// cpuState is the lab's exclusive CPUs (by CPU, the pod holding it) and whether its shared
// pool exists.
type cpuState struct {
	mu     sync.Mutex
	held   map[int]string
	shared bool
}

func (l *Lab) sharedCgroup() string {
	_, cs := CPURoots()
	return filepath.Join(cs, l.cfg.Prefix+"-shared")
}

// setupCPU gives pod p the resources of req: its cgroups, and exclusive CPUs (then the
// shared pool shrinks, and the lab's running pod processes are moved into it).
func (l *Lab) setupCPU(p *pod, req cluster.CPU) (err error) {
	if err := req.Check(); err != nil {
		return err
	}
	cpuRoot, cpusetRoot := CPURoots()
	base := l.cfg.Prefix + "-" + p.Name
	defer func() {
		if err != nil {
			l.releaseCPU(p)
		}
	}()
	if req.LimitMilli > 0 {
		if cpuRoot == "" {
			return cluster.Unsupported("pod %s: a CPU limit needs the cgroup v1 cpu controller, which this host does not mount", p.Name)
		}
		p.cpu.cpu = filepath.Join(cpuRoot, base)
		if err := os.MkdirAll(p.cpu.cpu, 0o755); err != nil {
			return err
		}
		period, err := os.ReadFile(filepath.Join(p.cpu.cpu, "cpu.cfs_period_us"))
		if err != nil {
			return err
		}
		us, err := strconv.Atoi(strings.TrimSpace(string(period)))
		if err != nil {
			return fmt.Errorf("cpu.cfs_period_us %q", period)
		}
		if err := writeFile(filepath.Join(p.cpu.cpu, "cpu.cfs_quota_us"), strconv.Itoa(req.LimitMilli*us/1000)); err != nil {
			return err
		}
	}
	if !req.Exclusive {
		return nil
	}
	if cpusetRoot == "" {
		return cluster.Unsupported("pod %s: exclusive CPUs need the cgroup v1 cpuset controller, which this host does not mount", p.Name)
	}
	all, err := hostCPUs(cpusetRoot)
	if err != nil {
		return err
	}
	l.cpus.mu.Lock()
	defer l.cpus.mu.Unlock()
	others := heldElsewhere(cpusetRoot, l.cfg.Prefix)
	var free []int
	for i := len(all) - 1; i >= 0; i-- {
		if c := all[i]; c != 0 && l.cpus.held[c] == "" && !others[c] {
			free = append(free, c)
		}
	}
	if n := req.CPUs(); len(free) < n {
		return cluster.Unsupported("pod %s asks for %d exclusive CPUs: this host has %d (CPU 0 stays shared), %d of them free", p.Name, n, len(all), len(free))
	}
	p.cpu.cpus = free[:req.CPUs()]
	slices.Sort(p.cpu.cpus)
	for _, c := range p.cpu.cpus {
		l.cpus.held[c] = p.Name
	}
	p.cpu.cpuset = filepath.Join(cpusetRoot, base)
	if err := cpusetDir(p.cpu.cpuset, p.cpu.cpus); err != nil {
		return err
	}
	return l.resizeShared(all)
}

// heldElsewhere are the CPUs other labs on this host hold exclusively (the cpusets of their
// pods under the cnibench directory; their shared pools excepted): one host, one set of CPUs.
func heldElsewhere(cpusetRoot, prefix string) map[int]bool {
	out := map[int]bool{}
	ents, _ := os.ReadDir(cpusetRoot)
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), prefix+"-") || strings.HasSuffix(e.Name(), "-shared") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(cpusetRoot, e.Name(), "cpuset.cpus"))
		if err != nil {
			continue
		}
		cpus, _ := cluster.ParseCPUList(string(b))
		for _, c := range cpus {
			out[c] = true
		}
	}
	return out
}

// resizeShared (under cpus.mu) sets the shared pool to the CPUs no pod holds, making it (and
// moving the lab's running pod processes into it) the first time.
func (l *Lab) resizeShared(all []int) error {
	var pool []int
	for _, c := range all {
		if l.cpus.held[c] == "" {
			pool = append(pool, c)
		}
	}
	if err := cpusetDir(l.sharedCgroup(), pool); err != nil {
		return err
	}
	if l.cpus.shared {
		return nil
	}
	l.cpus.shared = true
	l.mu.Lock()
	var pids []int
	for pr := range l.procs {
		if p := l.pods[pr.pod]; p != nil && p.cpu.cpuset == "" && !pr.exited() {
			pids = append(pids, pr.cmd.Process.Pid)
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, pid := range pids {
		if err := writeFile(filepath.Join(l.sharedCgroup(), "cgroup.procs"), strconv.Itoa(pid)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseCPU gives back pod p's exclusive CPUs (to the shared pool) and removes its cgroups
// (its processes are gone).
func (l *Lab) releaseCPU(p *pod) error {
	var errs []error
	if len(p.cpu.cpus) > 0 {
		l.cpus.mu.Lock()
		for _, c := range p.cpu.cpus {
			if l.cpus.held[c] == p.Name {
				delete(l.cpus.held, c)
			}
		}
		_, cs := CPURoots()
		if all, err := hostCPUs(cs); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, l.resizeShared(all))
		}
		l.cpus.mu.Unlock()
	}
	for _, d := range p.cpu.dirs() {
		errs = append(errs, removeCgroup(d))
	}
	p.cpu = podCPU{}
	return errors.Join(errs...)
}

// cpuCgroups are the v1 cgroups a process of pod p joins: its own, or the shared pool's.
func (l *Lab) cpuCgroups(p *pod) []string {
	dirs := p.cpu.dirs()
	l.cpus.mu.Lock()
	shared := l.cpus.shared
	l.cpus.mu.Unlock()
	if p.cpu.cpuset == "" && shared {
		dirs = append(dirs, l.sharedCgroup())
	}
	return dirs
}

// gateScript runs in /bin/sh: it waits for a line on fd 3 (sent once the shell's PID is in
// the pod's cgroups), closes it and becomes the command.
const gateScript = `read -r _ <&3; exec 3<&-; exec "$@"`

// startGated starts cmd through gateScript with start (which starts it in the pod's
// namespace), puts it in the cgroups dirs, then lets it run.
func startGated(cmd *exec.Cmd, dirs []string, start func(*exec.Cmd) error) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	defer w.Close()
	if cmd.Err != nil {
		return cmd.Err
	}
	argv := append([]string{"/bin/sh", "-c", gateScript, "sh", cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args, cmd.Err = "/bin/sh", argv, nil
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	if len(cmd.ExtraFiles) != 1 {
		return errors.New("a gated pod process takes no other extra files")
	}
	if err := start(cmd); err != nil {
		return err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return err
		}
	}
	_, err = w.Write([]byte("go\n"))
	return err
}
