package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
)

// A cluster accounts a trial per node (cluster.Accounter) through the trial's own pods, at the
// window's edges: /proc/stat, /proc/softirqs and /proc/net/softnet_stat are the node's
// whichever pod reads them (they are not namespaced), so the client's and the server's pods
// read their nodes' CPUs; each pod also reads its own network namespace (/proc/net/dev: its
// devices; snmp and netstat: its kernel counters), its container's cgroup CPU usage (every
// process it ran, those that ended included; per CPU on cgroup v1's cpuacct) and its own
// processes (/proc/PID/stat and each thread's: their names, and where a cgroup v2 gives no
// per-CPU usage, each thread's time on the CPU it was last on). The pods are unprivileged and
// have PID namespaces of their own: the nodes' agents, kube-proxy and the CNI's processes are
// beyond what they see, and their time is outside the run's. A command a trial runs in one of
// the pods (Exec: the client's tool) runs under a shell that reports, when it ends, the CPU
// time it reaped (/proc/$$/stat of the shell), so without a readable cgroup a client that
// starts and ends inside the window is still accounted whole, and on the CPU it was pinned to.

var _ cluster.Accounter = (*Cluster)(nil)

// acctSep separates the files of one reading.
const acctSep = "@@cnibench-account@@"

// acctScript is one edge's reading in a pod: the shell's PID (its own processes are left
// out) and the kernel's boot ID (nodes that share a kernel share it), then the node's CPU files, the pod's devices and kernel counters, every process's
// stat line and every thread's, each part after a line acctSep.
const acctScript = `echo $$ $(cat /proc/sys/kernel/random/boot_id 2>/dev/null); for f in /proc/stat /proc/softirqs /proc/net/softnet_stat /proc/net/dev /proc/net/snmp /proc/net/netstat; do echo ` + acctSep + `; cat $f; done; ` +
	`echo ` + acctSep + `; cat /proc/[0-9]*/stat 2>/dev/null; echo ` + acctSep + `; cat /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null; echo ` + acctSep + `; ` +
	`if [ -r /sys/fs/cgroup/cpu.stat ]; then echo v2; cat /sys/fs/cgroup/cpu.stat; elif [ -r /sys/fs/cgroup/cpuacct/cpuacct.stat ]; then echo v1; cat /sys/fs/cgroup/cpuacct/cpuacct.stat /sys/fs/cgroup/cpuacct/cpuacct.usage_percpu; fi 2>/dev/null; true`

// rusageMark starts the line a wrapped command's shell adds to its stderr.
const rusageMark = "@@cnibench-rusage@@"

// rusageScript runs "$@", then prints the shell's own stat line (its reaped children's CPU
// time: the command's) on stderr after rusageMark, and exits as the command did.
const rusageScript = `"$@"; rc=$?; echo >&2; echo "` + rusageMark + ` $(cat /proc/$$/stat)" >&2; exit $rc`

// podReading is what a pod read at one edge.
type podReading struct {
	at      time.Time
	self    int    // the reading shell's PID
	boot    string // the kernel's boot ID ("": unreadable)
	host    account.HostSample
	hostErr error
	devs    map[string]account.DevCounters
	nstat   map[string]uint64
	procs   map[int]account.ProcStat
	threads map[int]account.ProcStat
	cg      cgroupCPU
	err     error
}

// cgroupCPU is a container's cgroup CPU usage, in seconds.
type cgroupCPU struct {
	ok        bool
	user, sys float64
	perCPU    []float64 // cgroup v1 cpuacct.usage_percpu (nil on v2)
}

// parseCgroupCPU parses acctScript's cgroup part: "v2" and cpu.stat (microseconds), or "v1",
// cpuacct.stat (user and system ticks) and cpuacct.usage_percpu (nanoseconds per CPU).
func parseCgroupCPU(s string) cgroupCPU {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 3 {
		return cgroupCPU{}
	}
	kv := map[string]float64{}
	var nums []float64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil { // "name value"
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && len(f) == 2 {
				kv[f[0]] = v
			}
			continue
		}
		nums = nums[:0] // a line of numbers: usage per CPU
		for _, x := range f {
			v, err := strconv.ParseFloat(x, 64)
			if err != nil {
				return cgroupCPU{}
			}
			nums = append(nums, v/1e9)
		}
	}
	switch lines[0] {
	case "v2":
		u, ok1 := kv["user_usec"]
		y, ok2 := kv["system_usec"]
		return cgroupCPU{ok: ok1 && ok2, user: u / 1e6, sys: y / 1e6}
	case "v1":
		u, ok1 := kv["user"]
		y, ok2 := kv["system"]
		return cgroupCPU{ok: ok1 && ok2 && len(nums) > 0, user: u / account.TicksPerSecond, sys: y / account.TicksPerSecond, perCPU: slices.Clone(nums)}
	}
	return cgroupCPU{}
}

// parseReading parses the output of acctScript.
func parseReading(at time.Time, out []byte) podReading {
	r := podReading{at: at}
	parts := strings.Split(string(out), acctSep+"\n")
	if len(parts) != 10 {
		r.err = fmt.Errorf("reading: %d parts, want 10", len(parts))
		return r
	}
	var err error
	head := strings.Fields(parts[0])
	if len(head) > 1 {
		r.boot = head[1]
	}
	if len(head) == 0 {
		r.err = errors.New("reading: no shell PID")
		return r
	}
	if r.self, err = strconv.Atoi(head[0]); err != nil {
		r.err = fmt.Errorf("reading: the shell's PID %q", head[0])
		return r
	}
	r.host, r.hostErr = account.ParseHost(at, []byte(parts[1]), []byte(parts[2]), []byte(parts[3]))
	if r.devs, err = account.ParseNetDev([]byte(parts[4])); err != nil {
		r.err = err
		return r
	}
	if r.nstat, err = account.ParseNstat([]byte(parts[5]), []byte(parts[6])); err != nil {
		r.err = err
		return r
	}
	r.procs, r.threads = statLines(parts[7]), statLines(parts[8])
	r.cg = parseCgroupCPU(parts[9])
	return r
}

// statLines parses stat lines by PID (or TID); a line that does not parse (a process that
// went away mid-read) is left out.
func statLines(s string) map[int]account.ProcStat {
	out := map[int]account.ProcStat{}
	for _, line := range strings.Split(s, "\n") {
		if ps, err := account.ParseProcStat([]byte(line)); err == nil {
			out[ps.PID] = ps
		}
	}
	return out
}

// mine says whether a process is the reading shell or a child of it.
func (r podReading) mine(ps account.ProcStat) bool { return ps.PID == r.self || ps.PPID == r.self }

// acctPod is one pod a window reads.
type acctPod struct {
	name, node string
	order      int // 0: the client's, 1: the server's
}

// acctWindow is an open accounting window of a cluster.
type acctWindow struct {
	c     *Cluster
	pods  []acctPod
	began time.Time
	r0    []podReading
	notes []string

	mu     sync.Mutex
	credit map[string][2]float64 // pod -> user and system seconds of the commands that ended
	comms  map[string]map[string]bool
	// creditOn is the part of a pod's credit whose CPU is known (a command pinned to one:
	// cluster.Pin), seconds by CPU.
	creditOn map[string]map[int]float64
}

// Account implements cluster.Accounter.
func (c *Cluster) Account(ctx context.Context, p cluster.AccountPath) (cluster.AccountWindow, error) {
	w := &acctWindow{c: c, credit: map[string][2]float64{}, comms: map[string]map[string]bool{}, creditOn: map[string]map[int]float64{}}
	c.mu.Lock()
	for i, name := range []string{p.Client, p.Server} {
		if pod, ok := c.pods[name]; ok && name != "" && (i == 0 || name != p.Client) {
			w.pods = append(w.pods, acctPod{name: name, node: pod.Node, order: i})
		}
	}
	c.mu.Unlock()
	if len(w.pods) == 0 {
		return nil, fmt.Errorf("no pod of the trial to read the nodes' counters in (client %q, server %q)", p.Client, p.Server)
	}
	if p.Trace != "" {
		w.notes = append(w.notes, "not traced: the kube backend's pods are unprivileged and cannot attach the hop tracer's eBPF programs")
	}
	c.acctMu.Lock()
	if c.windows == nil {
		c.windows = map[*acctWindow]bool{}
	}
	c.windows[w] = true
	c.acctMu.Unlock()
	w.r0 = w.readAll(ctx)
	w.began = time.Now()
	if ctx.Err() != nil {
		w.end()
		return nil, ctx.Err()
	}
	return w, nil
}

// readAll reads every pod of the window at once.
func (w *acctWindow) readAll(ctx context.Context) []podReading {
	out := make([]podReading, len(w.pods))
	_ = cluster.Parallel(ctx, len(w.pods), len(w.pods), func(i int) error {
		res, err := w.c.execPlain(ctx, w.pods[i].name, []string{busybox, "sh", "-c", acctScript})
		switch {
		case err != nil:
			out[i] = podReading{err: err}
		case res.ExitCode != 0:
			out[i] = podReading{err: fmt.Errorf("reading /proc exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))}
		default:
			out[i] = parseReading(time.Now(), res.Stdout)
		}
		return nil
	})
	return out
}

// end takes the window off the cluster's list.
func (w *acctWindow) end() {
	w.c.acctMu.Lock()
	delete(w.c.windows, w)
	w.c.acctMu.Unlock()
}

// watching says whether the window reads pod.
func (w *acctWindow) watching(pod string) bool {
	return slices.ContainsFunc(w.pods, func(p acctPod) bool { return p.name == pod })
}

// credited adds a command that ended in pod with its CPU time, on cpu when it was pinned
// there (-1: not).
func (w *acctWindow) credited(pod, command string, cpu int, user, sys float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.credit[pod]
	w.credit[pod] = [2]float64{c[0] + user, c[1] + sys}
	if w.comms[pod] == nil {
		w.comms[pod], w.creditOn[pod] = map[string]bool{}, map[int]float64{}
	}
	w.comms[pod][command] = true
	if cpu >= 0 {
		w.creditOn[pod][cpu] += user + sys
	}
}

// Close implements cluster.AccountWindow.
func (w *acctWindow) Close(ctx context.Context) (*account.Trial, error) {
	w.end()
	r1 := w.readAll(ctx)
	window := time.Since(w.began).Seconds()
	a := &account.Trial{WindowS: window, Notes: slices.Clone(w.notes)}
	w.mu.Lock()
	defer w.mu.Unlock()
	hostOf := w.machines(r1, a)
	hosts := map[string]bool{}
	read := 0
	for i, p := range w.pods {
		b, e := w.r0[i], r1[i]
		if err := errors.Join(b.err, e.err); err != nil {
			a.Notes = append(a.Notes, fmt.Sprintf("pod %s on %s not read at both edges: %v", p.name, p.node, err))
			continue
		}
		read++
		host := hostOf[p.node]
		if !hosts[host] {
			if err := errors.Join(b.hostErr, e.hostErr); err != nil {
				a.Notes = append(a.Notes, fmt.Sprintf("node %s's CPUs not read in pod %s: %v", p.node, p.name, err))
			} else {
				hosts[host] = true
				a.Hosts = append(a.Hosts, account.HostDelta(host, b.host, e.host, nil))
			}
		}
		if r := w.role(p, host, b, e, e.at.Sub(b.at).Seconds()); r != nil {
			a.Roles = append(a.Roles, *r)
		} else {
			a.Notes = append(a.Notes, fmt.Sprintf("pod %s: no process of it used CPU time between the window's edges that its /proc shows (a process that began and ended between them unwaited for, such as netserver's child per test, is not seen)", p.name))
		}
		for _, dev := range slices.Sorted(maps.Keys(e.devs)) {
			d0, ok := b.devs[dev]
			if !ok || dev == "lo" {
				continue
			}
			if h := account.DevDelta(p.name, dev, "", p.order, d0, e.devs[dev]); h.RxPackets+h.TxPackets+h.Drops() > 0 {
				a.Hops = append(a.Hops, h)
			}
		}
		if k := account.KernelDelta(b.nstat, e.nstat); len(k) > 0 {
			a.Kernel = append(a.Kernel, account.Kernel{Where: p.name, Counters: k})
		}
	}
	if read == 0 {
		return nil, fmt.Errorf("no pod of the trial read at both edges: %s", strings.Join(a.Notes, "; "))
	}
	account.SortHops(a.Hops)
	return a, nil
}

// machines names the machine each node of the window is: its own name, or, for nodes whose
// pods read the same kernel boot ID (a test cluster's nodes on one host), their names joined
// with "+", accounted once (with a note saying so).
func (w *acctWindow) machines(r1 []podReading, a *account.Trial) map[string]string {
	byBoot := map[string][]string{}
	out := map[string]string{}
	for i, p := range w.pods {
		out[p.node] = p.node
		if b := r1[i].boot; b != "" && r1[i].err == nil && !slices.Contains(byBoot[b], p.node) {
			byBoot[b] = append(byBoot[b], p.node)
		}
	}
	for _, nodes := range byBoot {
		if len(nodes) < 2 {
			continue
		}
		slices.Sort(nodes)
		name := strings.Join(nodes, "+")
		for _, n := range nodes {
			out[n] = name
		}
		a.Notes = append(a.Notes, fmt.Sprintf("nodes %s run on one kernel (the same boot ID): their CPUs are one machine's, accounted once as %s", strings.Join(nodes, " and "), name))
	}
	return out
}

// role is a pod's processes over the window: those alive at the end less what they had at the
// start (all of it for one born in the window; a process's time includes its reaped
// children's), and the commands a trial ran there that ended (their shells' report). Each
// thread's time in the window goes on the CPU it was last on. Nil when they used nothing.
func (w *acctWindow) role(p acctPod, host string, b, e podReading, window float64) *account.Role {
	var user, sys float64
	comms := map[string]bool{}
	for pid, ps := range e.procs {
		if e.mine(ps) {
			continue
		}
		was, ok := b.procs[pid]
		if ok && b.mine(was) {
			ok = false // a PID of the first reading's shell, used again
		}
		var u0, s0 uint64
		if ok {
			u0, s0 = was.UTime+was.CUTime, was.STime+was.CSTime
		}
		du, ds := float64(account.Sub(ps.UTime+ps.CUTime, u0)), float64(account.Sub(ps.STime+ps.CSTime, s0))
		if du+ds > 0 {
			comms[ps.Comm] = true
		}
		user += du / account.TicksPerSecond
		sys += ds / account.TicksPerSecond
	}
	on := map[int]float64{}
	for tid, ts := range e.threads {
		if e.mine(ts) {
			continue
		}
		var t0 uint64
		if was, ok := b.threads[tid]; ok && !b.mine(was) {
			t0 = was.UTime + was.STime
		}
		if d := account.Sub(ts.UTime+ts.STime, t0); d > 0 {
			on[ts.Processor] += float64(d) / account.TicksPerSecond
		}
	}
	for cmd := range w.comms[p.name] {
		comms[cmd] = true
	}
	if b.cg.ok && e.cg.ok && e.cg.user+e.cg.sys >= b.cg.user+b.cg.sys {
		// The container's cgroup holds every process it ran (the credited commands too).
		user, sys = max(e.cg.user-b.cg.user, 0), max(e.cg.sys-b.cg.sys, 0)
		if len(b.cg.perCPU) == len(e.cg.perCPU) && len(e.cg.perCPU) > 0 {
			clear(on)
			for cpu := range e.cg.perCPU {
				if d := e.cg.perCPU[cpu] - b.cg.perCPU[cpu]; d > 0 {
					on[cpu] = d
				}
			}
		} else {
			for cpu, s := range w.creditOn[p.name] {
				on[cpu] += s
			}
		}
	} else {
		c := w.credit[p.name]
		user, sys = user+c[0], sys+c[1]
		for cpu, s := range w.creditOn[p.name] {
			on[cpu] += s
		}
	}
	if user+sys == 0 || window <= 0 {
		return nil
	}
	if len(comms) == 0 {
		// The time was its cgroup's only (a child that came and went between the edges):
		// name the pod's processes but its main one (the container's sleep).
		for _, ps := range e.procs {
			if !e.mine(ps) && ps.PID != 1 {
				comms[ps.Comm] = true
			}
		}
	}
	r := &account.Role{Name: p.name, Kind: "pod", Host: host, UserS: user, SystemS: sys, CPUPct: 100 * (user + sys) / window,
		Commands: slices.Sorted(maps.Keys(comms))}
	for _, cpu := range slices.Sorted(maps.Keys(on)) {
		r.RanOn = append(r.RanOn, account.Share{CPU: cpu, Pct: 100 * on[cpu] / window})
	}
	return r
}

// windowsOn are the open windows that read pod.
func (c *Cluster) windowsOn(pod string) []*acctWindow {
	c.acctMu.Lock()
	defer c.acctMu.Unlock()
	var out []*acctWindow
	for w := range c.windows {
		if w.watching(pod) {
			out = append(out, w)
		}
	}
	return out
}

// execAccounted runs argv in pod under rusageScript and credits what it used to the windows
// ws; the report is taken off its stderr.
func (c *Cluster) execAccounted(ctx context.Context, pod string, argv []string, ws []*acctWindow) (cluster.ExecResult, error) {
	res, err := c.execPlain(ctx, pod, append([]string{busybox, "sh", "-c", rusageScript, "sh"}, argv...))
	i := bytes.LastIndex(res.Stderr, []byte("\n"+rusageMark+" "))
	if i < 0 {
		return res, err
	}
	line := bytes.TrimSpace(res.Stderr[i+len(rusageMark)+2:])
	res.Stderr = res.Stderr[:i]
	if ps, perr := account.ParseProcStat(line); perr == nil {
		cpu, cmd, _ := cluster.Pinned(argv)
		for _, w := range ws {
			w.credited(pod, path.Base(cmd[0]), cpu, float64(ps.CUTime)/account.TicksPerSecond, float64(ps.CSTime)/account.TicksPerSecond)
		}
	}
	return res, err
}
