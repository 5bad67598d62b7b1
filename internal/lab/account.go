package lab

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/hoptrace"
	"github.com/cnibench/cnibench/internal/netns"
)

// A lab owns every namespace, device and process of its cluster, so it accounts a trial
// whole (cluster.Accounter): at the window's edges it reads the host's CPU counters, every
// device of its namespaces (pods, nodes, the fabric, network functions: packets, bytes, drops,
// qdisc drops) with each namespace's nstat counters, and the CPU times of every process in
// them; in between a sampler looks every sampleEvery at the processes' threads and puts the
// CPU time each used since the last look on the CPU it is on (exact for a pinned thread).
// A command the lab runs to completion (Exec: the measuring client) that ends inside the
// window is credited with its own rusage, so a client that starts and ends inside the window
// is accounted whole.

// sampleEvery is the sampler's period: 4 looks a second, each some 0.5 ms of reading /proc
// (the trial records the looks' time: account.Trial.SamplerS; cnibench doctor --account-cost
// prints it and pairs accounted trials with unaccounted ones).
const sampleEvery = 250 * time.Millisecond

var _ cluster.Accounter = (*Lab)(nil)

// acctNS is one namespace a window accounts.
type acctNS struct {
	name  string // the namespace
	where string // what it is: a pod's, a node's or a network function's name, or "fabric"
	kind  string // "pod", "node", "nf", "fabric"
	order int    // its place along the path from the client
}

// Path orders: the client, its network functions, its node, the fabric, the server's node, the
// server; what is off the path comes after.
const (
	orderClient = 0
	orderNF     = 1 // + the NF's index
	orderNode   = 100
	orderFabric = 200
	orderPeer   = 300 // the server's node, when it is another
	orderServer = 400
	orderOther  = 500
)

// acctScope lists the lab's namespaces a window accounts: every pod that has one of its own
// (silent pods have none), every node, the fabric and every network function's.
func (l *Lab) acctScope(path cluster.AccountPath) []acctNS {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []acctNS
	seen := map[string]bool{}
	add := func(a acctNS) {
		if a.name != "" && !seen[a.name] {
			seen[a.name] = true
			out = append(out, a)
		}
	}
	clientNode, serverNode := "", ""
	if p := l.pods[path.Client]; p != nil {
		clientNode = p.Node
	}
	if p := l.pods[path.Server]; p != nil {
		serverNode = p.Node
	}
	var names []string
	for n, p := range l.pods {
		if !p.silent && !p.HostNetwork {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		o := orderOther
		switch n {
		case path.Client:
			o = orderClient
		case path.Server:
			o = orderServer
		}
		add(acctNS{name: l.pods[n].ns, where: n, kind: "pod", order: o})
	}
	if ch := l.chains[path.Client]; ch != nil {
		for i, ns := range ch.Namespaces() {
			add(acctNS{name: ns, where: "nf" + strconv.Itoa(i+1), kind: "nf", order: orderNF + i})
		}
	}
	for _, ch := range l.chains {
		for i, ns := range ch.Namespaces() {
			add(acctNS{name: ns, where: "nf" + strconv.Itoa(i+1) + " " + ns, kind: "nf", order: orderOther})
		}
	}
	for _, n := range l.nodes {
		o := orderOther
		switch n.name {
		case clientNode:
			o = orderNode
		case serverNode:
			o = orderPeer
		}
		add(acctNS{name: n.ns, where: n.name, kind: "node", order: o})
	}
	add(acctNS{name: l.fabric, where: "fabric", kind: "fabric", order: orderFabric})
	// cnibench itself, a role but no namespace: the network functions it runs in-process (the
	// user-space forwarders), the nodes' agents and the sampler are its threads.
	out = append(out, acctNS{where: "cnibench", kind: "self", order: orderOther})
	return out
}

// selfTimes is cnibench's own CPU time as a role: its threads only (its reaped children, the
// commands it ran in pods, are accounted to their pods).
func selfTimes(idx int) (procTimes, bool) {
	ps, ok := readProcStat("/proc/self/stat")
	if !ok {
		return procTimes{}, false
	}
	return procTimes{ns: idx, user: ps.UTime, sys: ps.STime, comm: ps.Comm}, true
}

// devReading is one device's counters.
type devReading struct {
	kind  string
	st    account.DevCounters
	l2    bool // its frames start with an Ethernet header
	vxlan int  // a VXLAN device's UDP port (0: not one)
}

// nsReading is what a namespace's devices and kernel counters said at one edge.
type nsReading struct {
	devs  map[string]devReading
	nstat map[string]uint64
	err   error
}

// readNS reads a namespace's devices (netlink: their statistics and their qdiscs' drops) and
// its nstat counters (/proc/thread-self/net/snmp and netstat, read from inside it).
func readNS(name string) nsReading {
	r := nsReading{devs: map[string]devReading{}}
	h, err := netns.Netlink(name)
	if err != nil {
		r.err = err
		return r
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		r.err = fmt.Errorf("links of %s: %w", name, err)
		return r
	}
	qdrops := map[int]uint64{}
	if qs, err := h.QdiscList(nil); err == nil {
		for _, q := range qs {
			if st := q.Attrs().Statistics; st != nil && st.Queue != nil {
				qdrops[q.Attrs().LinkIndex] += uint64(st.Queue.Drops)
			}
		}
	}
	for _, lk := range links {
		a := lk.Attrs()
		if a.Name == "lo" || a.Statistics == nil {
			continue
		}
		st := a.Statistics
		d := devReading{kind: lk.Type(), l2: a.EncapType == "ether", st: account.DevCounters{
			RxBytes: st.RxBytes, RxPackets: st.RxPackets, RxErrors: st.RxErrors, RxDropped: st.RxDropped,
			TxBytes: st.TxBytes, TxPackets: st.TxPackets, TxErrors: st.TxErrors, TxDropped: st.TxDropped,
			QdiscDrops: qdrops[a.Index]}}
		if vx, ok := lk.(*netlink.Vxlan); ok {
			d.vxlan = vx.Port
		}
		r.devs[a.Name] = d
	}
	r.err = netns.Do(name, func() error {
		snmp, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		ext, err := os.ReadFile("/proc/thread-self/net/netstat")
		if err != nil {
			return err
		}
		r.nstat, err = account.ParseNstat(snmp, ext)
		return err
	})
	return r
}

// procTimes are a process's CPU ticks (its own and its reaped children's) and what it is.
type procTimes struct {
	ns        int // index into the window's scope
	user, sys uint64
	reaped    uint64 // the part of user and sys that is its reaped children's
	comm      string
	ppid      int
}

func timesOf(ns int, s account.ProcStat) procTimes {
	return procTimes{ns: ns, user: s.UTime + s.CUTime, sys: s.STime + s.CSTime, reaped: s.CUTime + s.CSTime, comm: s.Comm, ppid: s.PPID}
}

func (t procTimes) ticks() uint64 { return t.user + t.sys }

// scanProcs finds every process in the scope's namespaces (by their namespace inodes) with
// its CPU times, leaving out the PIDs of known (nil: none), and returns every PID it listed.
func scanProcs(inos map[uint64]int, known map[int]bool) (map[int]procTimes, map[int]bool) {
	out, listed := map[int]procTimes{}, map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		listed[pid] = true
		if known[pid] {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/net", &st) != nil {
			continue
		}
		idx, ok := inos[st.Ino]
		if !ok {
			continue
		}
		if ps, ok := readProcStat("/proc/" + e.Name() + "/stat"); ok {
			out[pid] = timesOf(idx, ps)
		}
	}
	return out, listed
}

func readProcStat(path string) (account.ProcStat, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return account.ProcStat{}, false
	}
	ps, err := account.ParseProcStat(b)
	return ps, err == nil
}

// acctWindow is an open accounting window of a lab.
type acctWindow struct {
	l      *Lab
	scope  []acctNS
	inos   map[uint64]int
	cpus   []int
	began  time.Time
	host0  account.HostSample
	ns0    []nsReading
	procs0 map[int]procTimes

	mu     sync.Mutex
	watch  map[int]int       // pid -> scope index: processes the sampler looks at
	last   map[int]procTimes // each watched process as last seen
	credit map[int][2]float64
	ended  map[int]bool // commands credited with their rusage
	// threads are the watched processes' threads' CPU ticks when last seen; on is each
	// namespace's ticks by the CPU they were seen on (a thread's ticks since the last look go
	// to the CPU it is on now).
	threads map[int]uint64
	on      []map[int]uint64
	busy    time.Duration // the sampler's looks in the window, together
	looks   int           // and how many there were
	every   time.Duration // the sampler's period (sampleEvery / AccountPath.Amplify)
	comms   []map[string]bool
	// selfIdx is cnibench's own entry of the scope.
	selfIdx int
	// listed are the PIDs /proc had at the last look: each look also watches the processes of
	// the scope that are new since (a server's forked children: netserver forks one per test).
	listed map[int]bool

	// tracer stamps the path's TCP segments (AccountPath.Trace); traceNote says why a window
	// asked to trace does not.
	tracer    *hoptrace.Tracer
	traceNote string

	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

// Account implements cluster.Accounter.
func (l *Lab) Account(ctx context.Context, path cluster.AccountPath) (cluster.AccountWindow, error) {
	w := &acctWindow{l: l, scope: l.acctScope(path), inos: map[uint64]int{}, cpus: l.agentCPUs,
		watch: map[int]int{}, last: map[int]procTimes{}, credit: map[int][2]float64{}, ended: map[int]bool{},
		threads: map[int]uint64{}, every: sampleEvery, stop: make(chan struct{}), stopped: make(chan struct{})}
	if path.Amplify > 1 {
		w.every = sampleEvery / time.Duration(path.Amplify)
	}
	for i, s := range w.scope {
		if s.kind == "self" {
			w.selfIdx = i
		} else if ino, err := netns.Inode(s.name); err == nil {
			w.inos[ino] = i
		}
		w.on = append(w.on, map[int]uint64{})
		w.comms = append(w.comms, map[string]bool{})
	}
	// On the lab's list first, so a command started from now on is watched; then the
	// processes already there.
	l.acctMu.Lock()
	if l.windows == nil {
		l.windows = map[*acctWindow]bool{}
	}
	l.windows[w] = true
	l.acctMu.Unlock()
	w.ns0 = w.readAll()
	if path.Trace == cluster.TraceHops {
		w.startTrace()
	}
	procs0, listed := scanProcs(w.inos, nil)
	if t, ok := selfTimes(w.selfIdx); ok {
		procs0[os.Getpid()] = t
	}
	w.mu.Lock()
	w.procs0, w.listed = procs0, listed
	for pid, t := range procs0 {
		w.watch[pid] = t.ns
		w.comms[t.ns][t.comm] = true
	}
	w.mu.Unlock()
	var err error
	if w.host0, err = account.ReadHost("/proc"); err != nil {
		w.end()
		w.stopTrace()
		return nil, err
	}
	w.began = time.Now()
	w.look(true)
	go w.sample()
	return w, ctx.Err()
}

// startTrace attaches a hop tracer to both hooks of every device of the path's namespaces
// (the client's, its network functions', the nodes', the fabric's, the server's: what the
// scope orders before orderOther), looking into the VXLAN ports of the devices there. A tracer
// that cannot start leaves a note and the window untraced.
func (w *acctWindow) startTrace() {
	if err := hoptrace.Usable(); err != nil {
		w.traceNote = fmt.Sprintf("not traced: %v", err)
		return
	}
	var points []hoptrace.Point
	var ports []uint16
	for i, s := range w.scope {
		if s.kind == "self" || s.order >= orderOther || w.ns0[i].err != nil {
			continue
		}
		for _, dev := range slices.Sorted(maps.Keys(w.ns0[i].devs)) {
			d := w.ns0[i].devs[dev]
			for _, in := range []bool{false, true} {
				points = append(points, hoptrace.Point{NS: s.name, Where: s.where, Dev: dev, Ingress: in, L2: d.l2})
			}
			if p := uint16(d.vxlan); p != 0 && !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
	}
	if len(ports) > 2 {
		w.traceNote = fmt.Sprintf("not traced: VXLAN devices on %d ports %v (the tracer looks into 2)", len(ports), ports)
		return
	}
	t, err := hoptrace.Start(points, hoptrace.Options{TunnelPorts: ports})
	if err != nil {
		w.traceNote = fmt.Sprintf("not traced: %v", err)
		return
	}
	w.tracer = t
}

// stopTrace detaches the tracer and returns what it stamped, or a note.
func (w *acctWindow) stopTrace() (lat []account.HopLatency, traced int, note string) {
	if w.tracer == nil {
		return nil, 0, w.traceNote
	}
	t := w.tracer
	w.tracer = nil
	stamps, err := t.Stop()
	if err != nil {
		return nil, 0, fmt.Sprintf("not traced: %v", err)
	}
	lat, traced = hoptrace.Latency(t.Points(), stamps)
	if traced == 0 {
		note = "traced, but no TCP segment of the trial was stamped at two points (the tracer follows TCP only)"
	}
	return lat, traced, note
}

// readAll reads every namespace of the scope, at once (the edges should be short).
func (w *acctWindow) readAll() []nsReading {
	out := make([]nsReading, len(w.scope))
	_ = cluster.Parallel(context.Background(), len(w.scope), 8, func(i int) error {
		if w.scope[i].kind != "self" {
			out[i] = readNS(w.scope[i].name)
		}
		return nil
	})
	return out
}

// sample looks at the watched processes every w.every until the window closes.
func (w *acctWindow) sample() {
	defer close(w.stopped)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.look(false)
		}
	}
}

// look is one sample: each watched process's times, and each of its threads' ticks since
// the last look, on the CPU the thread is on. At the first look (first) threads only get their
// starting point; a thread first seen later was born in the window and all its ticks count.
func (w *acctWindow) look(first bool) {
	began := time.Now()
	defer func() {
		if !first {
			w.mu.Lock()
			w.busy += time.Since(began)
			w.looks++
			w.mu.Unlock()
		}
	}()
	w.mu.Lock()
	known := w.listed
	w.mu.Unlock()
	born, listed := scanProcs(w.inos, known)
	w.mu.Lock()
	w.listed = listed
	for pid, t := range born {
		if _, ok := w.watch[pid]; !ok && !w.ended[pid] {
			w.watch[pid] = t.ns
		}
	}
	pids := maps.Clone(w.watch)
	w.mu.Unlock()
	type thread struct {
		tid   int
		ticks uint64
		cpu   int
	}
	type obs struct {
		pid     int
		t       procTimes
		threads []thread
	}
	var got []obs
	for pid, idx := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		ps, ok := readProcStat(dir + "/stat")
		if !ok {
			continue
		}
		o := obs{pid: pid, t: timesOf(idx, ps)}
		if idx == w.selfIdx {
			o.t = procTimes{ns: idx, user: ps.UTime, sys: ps.STime, comm: ps.Comm}
		}
		tasks, _ := os.ReadDir(dir + "/task")
		for _, task := range tasks {
			if ts, ok := readProcStat(dir + "/task/" + task.Name() + "/stat"); ok {
				o.threads = append(o.threads, thread{ts.PID, ts.UTime + ts.STime, ts.Processor})
			}
		}
		got = append(got, o)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range got {
		if w.ended[o.pid] {
			continue
		}
		w.last[o.pid] = o.t
		w.comms[o.t.ns][o.t.comm] = true
		for _, th := range o.threads {
			prev, known := w.threads[th.tid]
			w.threads[th.tid] = th.ticks
			if first || th.ticks < prev {
				continue
			}
			if !known {
				prev = 0
			}
			w.on[o.t.ns][th.cpu] += th.ticks - prev
		}
	}
}

// started is told of a command the lab started in a namespace (Exec), so the sampler watches it.
func (w *acctWindow) started(ns string, pid int) {
	for i, s := range w.scope {
		if s.name == ns {
			w.mu.Lock()
			w.watch[pid] = i
			w.mu.Unlock()
			return
		}
	}
}

// finished credits a command that ended with its rusage (less what it had used when the
// window opened, for one that was running then).
func (w *acctWindow) finished(pid int, ru *syscall.Rusage) {
	w.mu.Lock()
	defer w.mu.Unlock()
	idx, ok := w.watch[pid]
	if !ok || ru == nil {
		return
	}
	user, sys := tv(ru.Utime), tv(ru.Stime)
	if t0, ok := w.procs0[pid]; ok {
		user -= float64(t0.user) / account.TicksPerSecond
		sys -= float64(t0.sys) / account.TicksPerSecond
	}
	c := w.credit[idx]
	w.credit[idx] = [2]float64{c[0] + max(user, 0), c[1] + max(sys, 0)}
	w.ended[pid] = true
	delete(w.watch, pid)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// end stops the sampler and takes the window off the lab's list.
func (w *acctWindow) end() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.l.acctMu.Lock()
	delete(w.l.windows, w)
	w.l.acctMu.Unlock()
}

// Close implements cluster.AccountWindow.
func (w *acctWindow) Close(ctx context.Context) (*account.Trial, error) {
	w.end()
	<-w.stopped
	lat, traced, traceNote := w.stopTrace()
	host1, err := account.ReadHost("/proc")
	if err != nil {
		return nil, err
	}
	window := host1.At.Sub(w.began).Seconds()
	procs1, _ := scanProcs(w.inos, nil)
	if t, ok := selfTimes(w.selfIdx); ok {
		procs1[os.Getpid()] = t
	}
	ns1 := w.readAll()
	a := &account.Trial{WindowS: window, Hosts: []account.Host{account.HostDelta("host", w.host0, host1, slices.Clone(w.cpus))},
		Latency: lat, Traced: float64(traced)}
	if traceNote != "" {
		a.Notes = append(a.Notes, traceNote)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	a.SamplerS, a.SamplerLooks = w.busy.Seconds(), w.looks
	a.Roles = w.roles(procs1, window)
	for i, s := range w.scope {
		r0, r1 := w.ns0[i], ns1[i]
		if r0.err != nil || r1.err != nil {
			if r0.err != nil && r1.err != nil {
				continue // gone for the whole window: nothing of it to account
			}
			a.Notes = append(a.Notes, fmt.Sprintf("%s (%s) not read at both edges: %v", s.where, s.name, cmpErr(r0.err, r1.err)))
			continue
		}
		for _, dev := range slices.Sorted(maps.Keys(r1.devs)) {
			d1 := r1.devs[dev]
			d0, ok := r0.devs[dev]
			if !ok {
				continue // made during the window: no reading to start from
			}
			h := account.DevDelta(s.where, dev, d1.kind, s.order, d0.st, d1.st)
			if h.RxPackets+h.TxPackets+h.Drops() > 0 {
				a.Hops = append(a.Hops, h)
			}
		}
		if k := account.KernelDelta(r0.nstat, r1.nstat); len(k) > 0 {
			a.Kernel = append(a.Kernel, account.Kernel{Where: s.where, Counters: k})
		}
	}
	account.SortHops(a.Hops)
	return a, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// roles sums the processes of each namespace: those alive at the end (less what they had at
// the start), commands that ended (their rusage), and the other processes that ended in the
// window, as last seen (less what they had at the start) unless their parent, alive in the
// scope, reaped them (its children's time grew by at least half of theirs: then it holds
// them). Call with w.mu held.
func (w *acctWindow) roles(procs1 map[int]procTimes, window float64) []account.Role {
	user := make([]float64, len(w.scope))
	sys := make([]float64, len(w.scope))
	add := func(idx int, t1, t0 procTimes) {
		if t1.user >= t0.user {
			user[idx] += float64(t1.user-t0.user) / account.TicksPerSecond
		}
		if t1.sys >= t0.sys {
			sys[idx] += float64(t1.sys-t0.sys) / account.TicksPerSecond
		}
	}
	for pid, t1 := range procs1 {
		if w.ended[pid] {
			continue
		}
		add(t1.ns, t1, w.procs0[pid])
		w.comms[t1.ns][t1.comm] = true
	}
	gone := map[int][]int{} // parent -> its children that ended
	for pid, l := range w.last {
		if _, alive := procs1[pid]; !alive && !w.ended[pid] {
			gone[l.ppid] = append(gone[l.ppid], pid)
		}
	}
	for ppid, kids := range gone {
		var used uint64
		for _, k := range kids {
			used += w.last[k].ticks() - min(w.procs0[k].ticks(), w.last[k].ticks())
		}
		if p1, in := procs1[ppid]; in && p1.reaped-min(w.procs0[ppid].reaped, p1.reaped) >= used/2 && used > 0 {
			continue
		}
		for _, k := range kids {
			add(w.last[k].ns, w.last[k], w.procs0[k])
		}
	}
	for idx, c := range w.credit {
		user[idx] += c[0]
		sys[idx] += c[1]
	}
	var out []account.Role
	for i, s := range w.scope {
		var ran []account.Share
		for _, cpu := range slices.Sorted(maps.Keys(w.on[i])) {
			if t := w.on[i][cpu]; t > 0 && window > 0 {
				ran = append(ran, account.Share{CPU: cpu, Pct: 100 * float64(t) / account.TicksPerSecond / window})
			}
		}
		if user[i]+sys[i] == 0 && len(ran) == 0 {
			continue
		}
		r := account.Role{Name: s.where, Kind: s.kind, UserS: user[i], SystemS: sys[i], RanOn: ran}
		if window > 0 {
			r.CPUPct = 100 * (user[i] + sys[i]) / window
		}
		for _, c := range slices.Sorted(maps.Keys(w.comms[i])) {
			if c != "" {
				r.Commands = append(r.Commands, c)
			}
		}
		out = append(out, r)
	}
	return out
}

// endWindows stops the samplers of the windows still open (a lab going away).
func (l *Lab) endWindows() {
	l.acctMu.Lock()
	ws := slices.Collect(maps.Keys(l.windows))
	l.acctMu.Unlock()
	for _, w := range ws {
		w.end()
	}
}

// execStarted tells the open windows of a command the lab started in a pod's namespace.
func (l *Lab) execStarted(ns string, pid int) {
	l.acctMu.Lock()
	defer l.acctMu.Unlock()
	for w := range l.windows {
		w.started(ns, pid)
	}
}

// execEnded credits a command that ended to the open windows watching it.
func (l *Lab) execEnded(pid int, ps *os.ProcessState) {
	if ps == nil {
		return
	}
	ru, _ := ps.SysUsage().(*syscall.Rusage)
	l.acctMu.Lock()
	defer l.acctMu.Unlock()
	for w := range l.windows {
		w.finished(pid, ru)
	}
}
