// Package account says where a trial's CPU time and packets went: per CPU (user, system,
// softirq, irq, steal and idle shares, network softirqs, backlog drops), per role (the
// processes of each pod, network function and node: their CPU time and the CPUs that ran
// them), per hop (every device of the path: packets, bytes and drops each way, qdisc drops) and
// the kernel's own counters that explain loss and retransmits (nstat's). It owns the schema of
// those figures (results.jsonl's "accounting", summary.json's per case), the parsers of the
// /proc files they come from, their aggregation over a case's trials and the verdict that
// names a case's bottleneck. Backends sample; this package only reads and judges.
package account

import (
	"cmp"
	"math"
	"slices"
)

// Trial is what one trial's window accounted: the CPUs of each host (the lab's one host, or
// each node of a cluster that could be read), the roles' processes, the hops of the path and
// the kernel counters of each namespace. Counts are deltas over the window; a case's summary
// holds the same shape with each figure the mean over its trials.
type Trial struct {
	WindowS float64  `json:"window_s"`
	Hosts   []Host   `json:"hosts,omitempty"`
	Roles   []Role   `json:"roles,omitempty"`
	Hops    []Hop    `json:"hops,omitempty"`
	Kernel  []Kernel `json:"kernel,omitempty"`
	// Latency is the time sampled TCP segments took from each point of the path to the next
	// (--trace hops; none when the trial was not traced).
	Latency []HopLatency `json:"latency,omitempty"`
	// Traced is how many sampled segments were stamped at two points or more.
	Traced float64 `json:"traced_segments,omitempty"`
	// Trials is how many trials a case's figures are the mean of (0 in a trial's own record).
	Trials int `json:"trials,omitempty"`
	// SamplerS is how long the accounting's own sampler worked during the window (the wall
	// time of its looks: an upper bound of the CPU it took from the trial).
	SamplerS float64 `json:"sampler_s,omitempty"`
	// SamplerLooks is how many looks that was (4 a second, unless doctor --account-cost
	// --account-amplify asked for more).
	SamplerLooks int `json:"sampler_looks,omitempty"`
	// Notes say what could not be accounted and why (a namespace gone, a file unreadable).
	Notes []string `json:"notes,omitempty"`
}

// Host is one machine's CPUs over the window: the lab's host (its nodes share one kernel) or
// a cluster node.
type Host struct {
	Name string `json:"name"`
	CPUs []CPU  `json:"cpus"`
	// CtxSwitchesPerS is the machine's context switches per second (/proc/stat ctxt; the
	// kernel keeps no per-CPU count without schedstats).
	CtxSwitchesPerS float64 `json:"ctx_switches_per_s"`
}

// CPU is one CPU's shares of the window (they add up to 100) and its network counters.
type CPU struct {
	CPU        int     `json:"cpu"`
	UserPct    float64 `json:"user_pct"` // user and nice
	SystemPct  float64 `json:"system_pct"`
	IRQPct     float64 `json:"irq_pct"`
	SoftIRQPct float64 `json:"softirq_pct"`
	StealPct   float64 `json:"steal_pct"`
	IdlePct    float64 `json:"idle_pct"` // idle and iowait
	// NetRx and NetTx are the NET_RX and NET_TX softirqs run on the CPU (/proc/softirqs).
	NetRx float64 `json:"net_rx"`
	NetTx float64 `json:"net_tx"`
	// Processed, Dropped and Squeezed are /proc/net/softnet_stat's: packets the CPU's backlog
	// took, packets dropped because its backlog was full, and times its receive work ran out
	// of budget or time with work left.
	Processed float64 `json:"softnet_processed"`
	Dropped   float64 `json:"softnet_dropped"`
	Squeezed  float64 `json:"softnet_squeezed"`
}

// BusyPct is the share of the window the CPU worked for this machine (steal and idle left out).
func (c CPU) BusyPct() float64 { return c.UserPct + c.SystemPct + c.IRQPct + c.SoftIRQPct }

// Role is the processes of one pod, network function or node over the window.
type Role struct {
	Name string `json:"name"`
	// Kind is what the role is: "pod", "nf" (a network function's namespace), "node" (a node's
	// own processes: host-network servers, switches), "self" (cnibench's own threads: the
	// network functions it runs in-process, the nodes' agents, the accounting's sampler).
	Kind string `json:"kind"`
	// Host is the machine its processes ran on, where a trial spans several (a cluster's
	// nodes); "" on the lab's one host.
	Host string `json:"host,omitempty"`
	// Commands are the distinct command names of its processes (iperf3, netserver).
	Commands []string `json:"commands,omitempty"`
	UserS    float64  `json:"user_s"`
	SystemS  float64  `json:"system_s"`
	// CPUPct is its CPU time over the window in percent of one CPU.
	CPUPct float64 `json:"cpu_pct"`
	// RanOn is where its CPU time went, per CPU in percent of that CPU over the window:
	// sampled, each thread's time since the last look put on the CPU it was on then (exact for
	// a thread pinned to one CPU; the last moments of a thread that ends are not seen). On a
	// cluster, read at the window's end only: each thread's time in the window on the CPU it
	// was last on, and nothing for a command that ended in the window (its time is known,
	// not where it ran).
	RanOn []Share `json:"ran_on,omitempty"`
}

// Share is a percentage on one CPU.
type Share struct {
	CPU int     `json:"cpu"`
	Pct float64 `json:"pct"`
}

// Hop is one device of the path with what passed it during the window.
type Hop struct {
	// Where is the namespace the device is in, by what it is: a pod's name, a node's, "fabric"
	// (the underlay), a network function's.
	Where string `json:"where"`
	Dev   string `json:"dev"`
	Kind  string `json:"kind"` // the link type: veth, bridge, vxlan, ...
	// Order is the hop's place along the path from the client (0) to the server.
	Order      int     `json:"order"`
	RxPackets  float64 `json:"rx_packets"`
	RxBytes    float64 `json:"rx_bytes"`
	RxDropped  float64 `json:"rx_dropped"`
	RxErrors   float64 `json:"rx_errors"`
	TxPackets  float64 `json:"tx_packets"`
	TxBytes    float64 `json:"tx_bytes"`
	TxDropped  float64 `json:"tx_dropped"`
	TxErrors   float64 `json:"tx_errors"`
	QdiscDrops float64 `json:"qdisc_drops"`
}

// Drops is every packet the hop dropped, either way and in its qdiscs.
func (h Hop) Drops() float64 {
	return h.RxDropped + h.RxErrors + h.TxDropped + h.TxErrors + h.QdiscDrops
}

// HopLatency is the time sampled TCP segments took from one point of the path to the next: a
// point is a device's ingress or egress hook ("client eth0 egress"), and the next point is the
// one that stamped the same segment next. Segments are grouped by the point they were first
// stamped at (Start: the client's data one way, the server's acknowledgements the other).
type HopLatency struct {
	Start string `json:"start"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Packets is how many sampled segments went from From to To next.
	Packets float64 `json:"packets"`
	P50US   float64 `json:"p50_us"`
	P99US   float64 `json:"p99_us"`
	MeanUS  float64 `json:"mean_us"`
	// AtUS is the mean time from the segments' first stamp (at Start) to their stamp at From:
	// where along the way the hop is.
	AtUS float64 `json:"at_us"`
}

// figures are a hop latency's figures, for arithmetic on all of them (Merge).
func (l *HopLatency) figures() []*float64 {
	return []*float64{&l.Packets, &l.P50US, &l.P99US, &l.MeanUS, &l.AtUS}
}

// SortLatency orders hop latencies by their start, then along the way.
func SortLatency(ls []HopLatency) {
	slices.SortStableFunc(ls, func(a, b HopLatency) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.AtUS, b.AtUS), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
}

// Kernel is the kernel counters of one namespace that moved during the window (nstat names:
// TcpRetransSegs, UdpRcvbufErrors, TcpExtTCPBacklogDrop, ...).
type Kernel struct {
	Where    string             `json:"where"`
	Counters map[string]float64 `json:"counters"`
}

// Merge is the mean of trials' accounting, figure by figure: a CPU, role, hop or counter
// missing from a trial counts as zero there (it did nothing the trial could see), except a hop
// latency: its percentiles are the mean over the trials that saw it. Notes are kept once each.
func Merge(trials []*Trial) *Trial {
	var ts []*Trial
	for _, t := range trials {
		if t != nil {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	n := float64(len(ts))
	out := &Trial{Trials: len(ts)}
	hosts := map[string]*Host{}
	cpus := map[string]map[int]*CPU{}
	roles := map[string]*Role{}
	ranOn := map[string]map[int]float64{}
	hops := map[[3]string]*Hop{}
	kern := map[string]map[string]float64{}
	lats := map[[3]string]*HopLatency{}
	latN := map[[3]string]float64{}
	var hostOrder, roleOrder, kernOrder []string
	var hopOrder, latOrder [][3]string
	looks := 0.0
	for _, t := range ts {
		out.WindowS += t.WindowS / n
		out.SamplerS += t.SamplerS / n
		looks += float64(t.SamplerLooks) / n
		out.Traced += t.Traced / n
		for _, l := range t.Latency {
			k := [3]string{l.Start, l.From, l.To}
			if lats[k] == nil {
				lats[k] = &HopLatency{Start: l.Start, From: l.From, To: l.To}
				latOrder = append(latOrder, k)
			}
			addScaled(lats[k].figures(), l.figures(), 1)
			latN[k]++
		}
		for _, h := range t.Hosts {
			if hosts[h.Name] == nil {
				hosts[h.Name], cpus[h.Name] = &Host{Name: h.Name}, map[int]*CPU{}
				hostOrder = append(hostOrder, h.Name)
			}
			hosts[h.Name].CtxSwitchesPerS += h.CtxSwitchesPerS / n
			for _, c := range h.CPUs {
				m := cpus[h.Name][c.CPU]
				if m == nil {
					m = &CPU{CPU: c.CPU}
					cpus[h.Name][c.CPU] = m
				}
				addScaled(m.figures(), c.figures(), 1/n)
			}
		}
		for _, r := range t.Roles {
			m := roles[r.Name]
			if m == nil {
				m = &Role{Name: r.Name, Kind: r.Kind}
				roles[r.Name], ranOn[r.Name] = m, map[int]float64{}
				roleOrder = append(roleOrder, r.Name)
			}
			for _, c := range r.Commands {
				if !slices.Contains(m.Commands, c) {
					m.Commands = append(m.Commands, c)
				}
			}
			m.UserS += r.UserS / n
			m.SystemS += r.SystemS / n
			m.CPUPct += r.CPUPct / n
			for _, s := range r.RanOn {
				ranOn[r.Name][s.CPU] += s.Pct / n
			}
		}
		for _, h := range t.Hops {
			k := [3]string{h.Where, h.Dev}
			m := hops[k]
			if m == nil {
				m = &Hop{Where: h.Where, Dev: h.Dev, Kind: h.Kind, Order: h.Order}
				hops[k] = m
				hopOrder = append(hopOrder, k)
			}
			addScaled(m.figures(), h.figures(), 1/n)
		}
		for _, k := range t.Kernel {
			if kern[k.Where] == nil {
				kern[k.Where] = map[string]float64{}
				kernOrder = append(kernOrder, k.Where)
			}
			for name, v := range k.Counters {
				kern[k.Where][name] += v / n
			}
		}
		for _, note := range t.Notes {
			if !slices.Contains(out.Notes, note) {
				out.Notes = append(out.Notes, note)
			}
		}
	}
	for _, name := range hostOrder {
		h := hosts[name]
		for _, c := range cpus[name] {
			h.CPUs = append(h.CPUs, *c)
		}
		slices.SortFunc(h.CPUs, func(a, b CPU) int { return cmp.Compare(a.CPU, b.CPU) })
		out.Hosts = append(out.Hosts, *h)
	}
	for _, name := range roleOrder {
		r := roles[name]
		r.RanOn = shares(ranOn[name])
		out.Roles = append(out.Roles, *r)
	}
	for _, k := range hopOrder {
		out.Hops = append(out.Hops, *hops[k])
	}
	SortHops(out.Hops)
	for _, k := range latOrder {
		l := lats[k]
		for _, f := range l.figures() {
			*f /= latN[k]
		}
		l.Packets *= latN[k] / n // packets: a trial that did not see the hop saw none
		out.Latency = append(out.Latency, *l)
	}
	SortLatency(out.Latency)
	for _, w := range kernOrder {
		out.Kernel = append(out.Kernel, Kernel{Where: w, Counters: kern[w]})
	}
	out.SamplerLooks = int(math.Round(looks))
	return out
}

// figures are a CPU's figures, for arithmetic on all of them (Merge).
func (c *CPU) figures() []*float64 {
	return []*float64{&c.UserPct, &c.SystemPct, &c.IRQPct, &c.SoftIRQPct, &c.StealPct, &c.IdlePct,
		&c.NetRx, &c.NetTx, &c.Processed, &c.Dropped, &c.Squeezed}
}

// figures are a hop's counts, for arithmetic on all of them (Merge).
func (h *Hop) figures() []*float64 {
	return []*float64{&h.RxPackets, &h.RxBytes, &h.RxDropped, &h.RxErrors, &h.TxPackets, &h.TxBytes, &h.TxDropped, &h.TxErrors, &h.QdiscDrops}
}

// addScaled adds k times each of src to the same figure of dst.
func addScaled(dst, src []*float64, k float64) {
	for i := range dst {
		*dst[i] += *src[i] * k
	}
}

// shares turns per-CPU percentages into Shares in CPU order, without zeros.
func shares(m map[int]float64) []Share {
	var out []Share
	for c, p := range m {
		if p > 0 {
			out = append(out, Share{CPU: c, Pct: p})
		}
	}
	slices.SortFunc(out, func(a, b Share) int { return cmp.Compare(a.CPU, b.CPU) })
	return out
}

// SortHops orders hops along the path: by Order, then by namespace and device name.
func SortHops(hs []Hop) {
	slices.SortStableFunc(hs, func(a, b Hop) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Where, b.Where), cmp.Compare(a.Dev, b.Dev))
	})
}
