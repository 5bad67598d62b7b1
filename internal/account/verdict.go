package account

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Verdict names what limited a case, from its accounting: the bottleneck in one line, and
// what else a reader should know (drops, steal, retransmits).
type Verdict struct {
	Bottleneck string   `json:"bottleneck"`
	Findings   []string `json:"findings,omitempty"`
}

// Thresholds of the verdict.
const (
	// SaturatedPct is the share of a CPU, busy or stolen by the hypervisor (what left it no
	// idle time), at which it is the bottleneck; below WaitingPct busy on every CPU a case
	// waited more than it worked.
	SaturatedPct = 85
	WaitingPct   = 60
	// StealPct is the steal share worth a finding (and the bottleneck when no CPU saturated).
	StealPct = 10
	// DropShare is the share of a hop's packets that, dropped, makes a finding (and at least
	// one packet).
	DropShare = 0.001
	// ranOnPct is how much of a CPU a role must have used to be named as running there.
	ranOnPct = 10
	// OutsidePct is how much of a CPU's user and system time, beyond what the run's roles
	// used there, makes a finding: work of processes outside the run.
	OutsidePct = 10
)

// lossCounters are the kernel counters of dropped packets a verdict reports where they moved,
// with what they mean.
var lossCounters = []struct{ name, says string }{
	{"UdpRcvbufErrors", "UDP datagrams dropped for a full receive buffer"},
	{"UdpSndbufErrors", "UDP datagrams dropped for a full send buffer"},
	{"UdpInErrors", "UDP datagrams dropped on receive"},
	{"TcpExtTCPBacklogDrop", "TCP segments dropped for a full socket backlog"},
	{"TcpExtTCPRcvQDrop", "TCP segments dropped for a full receive queue"},
	{"TcpExtListenDrops", "connections dropped at listen"},
	{"IpInDiscards", "IP packets discarded on receive"},
	{"IpOutDiscards", "IP packets discarded on send"},
	{"IpReasmFails", "IP reassemblies failed"},
}

// retransCounters are what a verdict adds about TCP recovery: a finding, never the bottleneck
// (on one host most retransmits are spurious, set off by reordering, not by loss).
var retransCounters = []struct{ name, says string }{
	{"TcpRetransSegs", "TCP segments retransmitted"},
	{"TcpExtTCPSACKReorder", "reorderings detected by SACK"},
	{"TcpExtTCPDSACKRecv", "retransmits the receiver reported as needless (D-SACK)"},
}

// Judge gives the verdict of an accounting (a case's mean over its trials, or one trial's).
// The bottleneck is, in this order: the CPUs at SaturatedPct or more (busy or stolen: no idle
// time left); else dropped packets;
// else steal; else "no CPU saturated", naming the busiest one (a request/response case waits
// on round trips, not on a CPU).
func Judge(a *Trial) Verdict {
	if a == nil || len(a.Hosts) == 0 {
		return Verdict{}
	}
	var v Verdict
	type hc struct {
		host string
		cpu  CPU
	}
	var all []hc
	for _, h := range a.Hosts {
		for _, c := range h.CPUs {
			all = append(all, hc{h.Name, c})
		}
	}
	if len(all) == 0 {
		return Verdict{}
	}
	multi := len(a.Hosts) > 1
	name := func(x hc) string {
		if multi {
			return fmt.Sprintf("%s CPU %d", x.host, x.cpu.CPU)
		}
		return fmt.Sprintf("CPU %d", x.cpu.CPU)
	}
	var saturated []string
	for _, x := range all {
		if x.cpu.BusyPct()+x.cpu.StealPct >= SaturatedPct {
			saturated = append(saturated, name(x)+" "+a.describeCPU(x.host, x.cpu))
		}
	}
	var drops []string
	for _, h := range a.Hops {
		through := max(h.RxPackets, h.TxPackets)
		if d := h.Drops(); d >= 1 && d >= DropShare*through {
			drops = append(drops, fmt.Sprintf("drops at %s %s: %s (%.2g %% of its packets)", h.Where, h.Dev, dropParts(h), 100*d/max(through, 1)))
		}
	}
	for _, x := range all {
		if x.cpu.Dropped >= 1 {
			drops = append(drops, fmt.Sprintf("%s dropped %.0f packets for a full backlog (softnet_stat)", name(x), x.cpu.Dropped))
		}
	}
	for _, k := range a.Kernel {
		for _, lc := range lossCounters {
			if n := k.Counters[lc.name]; n >= 1 {
				drops = append(drops, fmt.Sprintf("%s: %.0f %s (%s)", k.Where, n, lc.says, lc.name))
			}
		}
	}
	var retrans []string
	for _, k := range a.Kernel {
		var parts []string
		for _, rc := range retransCounters {
			if n := k.Counters[rc.name]; n >= 1 {
				parts = append(parts, fmt.Sprintf("%.0f %s (%s)", n, rc.says, rc.name))
			}
		}
		if len(parts) > 0 {
			retrans = append(retrans, k.Where+": "+strings.Join(parts, ", "))
		}
	}
	var steal []string
	for _, x := range all {
		if o := a.outside(x.host, x.cpu); o >= OutsidePct {
			steal = append(steal, fmt.Sprintf("%s: %.0f %% of its time went to processes outside the run (user and system time beyond what the run's pods, network functions and nodes used there)", name(x), o))
		}
	}
	for _, x := range all {
		if x.cpu.StealPct >= StealPct {
			steal = append(steal, fmt.Sprintf("steal %.0f %% on %s: the hypervisor ran something else there", x.cpu.StealPct, name(x)))
		}
	}
	switch {
	case len(saturated) > 0:
		v.Bottleneck = strings.Join(saturated, "; ")
		v.Findings = append(drops, steal...)
	case len(drops) > 0:
		v.Bottleneck, v.Findings = drops[0], append(drops[1:], steal...)
	case len(steal) > 0:
		v.Bottleneck, v.Findings = steal[0], steal[1:]
	default:
		busiest := slices.MaxFunc(all, func(p, q hc) int { return cmp.Compare(p.cpu.BusyPct(), q.cpu.BusyPct()) })
		v.Bottleneck = fmt.Sprintf("no CPU saturated (busiest: %s %s)", name(busiest), a.describeCPU(busiest.host, busiest.cpu))
		if busiest.cpu.BusyPct() < WaitingPct {
			v.Bottleneck += ": the rate is bound by waiting (round trips, pacing), not by a CPU"
		}
	}
	v.Findings = append(v.Findings, retrans...)
	v.Findings = append(v.Findings, a.slowestHops()...)
	return v
}

// slowestHops says, per start of the traced segments (--trace hops), which step between two
// points took the most of the way, by their means (means add up along the way, percentiles do
// not: a step with a low P50 and a long tail can add the most).
func (a *Trial) slowestHops() []string {
	var out []string
	byStart := map[string][]HopLatency{}
	var starts []string
	for _, l := range a.Latency {
		if byStart[l.Start] == nil {
			starts = append(starts, l.Start)
		}
		byStart[l.Start] = append(byStart[l.Start], l)
	}
	for _, s := range starts {
		ls := byStart[s]
		total := 0.0
		for _, l := range ls {
			total += l.MeanUS
		}
		m := slices.MaxFunc(ls, func(p, q HopLatency) int { return cmp.Compare(p.MeanUS, q.MeanUS) })
		if total <= 0 {
			continue
		}
		out = append(out, fmt.Sprintf("traced from %s: most time from %s to %s, mean %.1f us of %.1f us over all %d steps (P50 %.1f us, P99 %.1f us)",
			s, m.From, m.To, m.MeanUS, total, len(ls), m.P50US, m.P99US))
	}
	return out
}

// outside is the share of host's CPU c's user and system time that the trial's roles did not
// use (0 when no role was accounted: then nothing tells the run's time from others'). A role's
// time not put on any CPU (a command that ended where no sampler saw it) may have been on this
// one: it counts as the run's here too, so what is left is surely others'.
func (a *Trial) outside(host string, c CPU) float64 {
	if len(a.Roles) == 0 {
		return 0
	}
	in := 0.0
	for _, r := range a.Roles {
		if !r.on(host) {
			continue
		}
		placed := 0.0
		for _, s := range r.RanOn {
			placed += s.Pct
			if s.CPU == c.CPU {
				in += s.Pct
			}
		}
		in += max(r.CPUPct-placed, 0)
	}
	return max(c.UserPct+c.SystemPct-in, 0)
}

// on says whether the role's processes ran on host ("" on either side: the one host).
func (r Role) on(host string) bool { return r.Host == "" || host == "" || r.Host == host }

// describeCPU says how busy host's CPU c was, with what, and which roles ran there.
func (a *Trial) describeCPU(host string, c CPU) string {
	parts := []string{fmt.Sprintf("at %.0f %%", c.BusyPct())}
	type share struct {
		what string
		pct  float64
	}
	sh := []share{{"softirq", c.SoftIRQPct}, {"system", c.SystemPct}, {"user", c.UserPct}, {"irq", c.IRQPct}}
	slices.SortStableFunc(sh, func(x, y share) int { return cmp.Compare(y.pct, x.pct) })
	var what []string
	for _, s := range sh {
		if s.pct >= 1 {
			what = append(what, fmt.Sprintf("%.0f %% %s", s.pct, s.what))
		}
	}
	if len(what) > 0 {
		parts = append(parts, "("+strings.Join(what, ", ")+")")
	}
	if c.StealPct >= 1 {
		parts = append(parts, fmt.Sprintf("and %.0f %% stolen by the hypervisor", c.StealPct))
	}
	rs := a.rolesOn(host, c.CPU)
	if o := a.outside(host, c); o >= OutsidePct {
		rs = append(rs, fmt.Sprintf("processes outside the run %.0f %%", o))
	}
	if len(rs) > 0 {
		parts = append(parts, "running "+strings.Join(rs, ", "))
	}
	if c.SoftIRQPct >= 30 && c.NetRx > 0 {
		parts = append(parts, "and receiving packets in softirq")
	}
	return strings.Join(parts, " ")
}

// rolesOn names the roles seen on host's CPU for at least ranOnPct of the window, busiest first.
func (a *Trial) rolesOn(host string, cpu int) []string {
	type on struct {
		name string
		pct  float64
	}
	var ons []on
	for _, r := range a.Roles {
		if !r.on(host) {
			continue
		}
		for _, s := range r.RanOn {
			if s.CPU == cpu && s.Pct >= ranOnPct {
				label := r.Name
				if len(r.Commands) > 0 && !slices.Equal(r.Commands, []string{r.Name}) {
					label += " (" + strings.Join(r.Commands, ", ") + ")"
				}
				ons = append(ons, on{fmt.Sprintf("%s %.0f %%", label, s.Pct), s.Pct})
			}
		}
	}
	slices.SortStableFunc(ons, func(x, y on) int { return cmp.Compare(y.pct, x.pct) })
	out := make([]string, len(ons))
	for i, o := range ons {
		out[i] = o.name
	}
	return out
}

// dropParts says where in a hop packets were dropped.
func dropParts(h Hop) string {
	var parts []string
	for _, p := range []struct {
		n    float64
		what string
	}{{h.RxDropped, "rx dropped"}, {h.RxErrors, "rx errors"}, {h.TxDropped, "tx dropped"}, {h.TxErrors, "tx errors"}, {h.QdiscDrops, "qdisc drops"}} {
		if p.n >= 0.5 {
			parts = append(parts, fmt.Sprintf("%.0f %s", p.n, p.what))
		}
	}
	return strings.Join(parts, ", ")
}

// Contrast says where two accountings differ enough to matter (a case's and its reference's:
// a pod path's and its bare baseline's), each line "what: this vs the reference": steal, the
// CPUs' busy and softirq shares, work outside the run, TCP retransmits and reordering, bytes
// per packet at the client's first device (how large the segments the stack handed down
// were), the roles' CPU. Nil when nothing differs by the thresholds (5 points of a share, 25 %
// of a count or size).
func Contrast(a, ref *Trial) []string {
	if a == nil || ref == nil {
		return nil
	}
	var out []string
	share := func(what string, x, y float64) {
		if x-y >= 5 || y-x >= 5 {
			out = append(out, fmt.Sprintf("%s: %.0f %% vs %.0f %%", what, x, y))
		}
	}
	count := func(what string, x, y float64) {
		if (x >= 1.25*y || y >= 1.25*x) && max(x, y) >= 10 {
			out = append(out, fmt.Sprintf("%s: %.3g vs %.3g", what, x, y))
		}
	}
	type hostCPU struct {
		host string
		CPU
	}
	cpus := func(t *Trial) map[string]hostCPU {
		m := map[string]hostCPU{}
		for _, h := range t.Hosts {
			for _, c := range h.CPUs {
				m[fmt.Sprintf("%s CPU %d", h.Name, c.CPU)] = hostCPU{h.Name, c}
			}
		}
		return m
	}
	ca, cr := cpus(a), cpus(ref)
	names := make([]string, 0, len(ca))
	for n := range ca {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		x, ok := cr[n]
		if !ok {
			continue
		}
		y := ca[n]
		label := strings.TrimPrefix(n, "host ")
		share(label+" steal", y.StealPct, x.StealPct)
		share(label+" busy", y.BusyPct(), x.BusyPct())
		share(label+" softirq", y.SoftIRQPct, x.SoftIRQPct)
		share(label+" outside the run", a.outside(y.host, y.CPU), ref.outside(x.host, x.CPU))
	}
	kern := func(t *Trial, name string) float64 {
		sum := 0.0
		for _, k := range t.Kernel {
			sum += k.Counters[name]
		}
		return sum
	}
	for _, k := range []struct{ name, what string }{
		{"TcpRetransSegs", "TCP segments retransmitted per trial"},
		{"TcpExtTCPSACKReorder", "reorderings seen by SACK per trial"},
		{"TcpExtTCPDSACKRecv", "needless retransmits reported by D-SACK per trial"},
		{"UdpRcvbufErrors", "UDP receive-buffer drops per trial"},
	} {
		count(k.what, kern(a, k.name), kern(ref, k.name))
	}
	first := func(t *Trial) (Hop, bool) {
		for _, h := range t.Hops {
			if h.TxPackets > 0 {
				return h, true
			}
		}
		return Hop{}, false
	}
	if x, ok1 := first(a); ok1 {
		if y, ok2 := first(ref); ok2 && x.TxPackets > 0 && y.TxPackets > 0 {
			count("bytes per packet leaving the client", x.TxBytes/x.TxPackets, y.TxBytes/y.TxPackets)
		}
	}
	role := map[string]Role{}
	for _, r := range ref.Roles {
		role[r.Name] = r
	}
	for _, r := range a.Roles {
		if y, ok := role[r.Name]; ok {
			share(r.Name+" CPU", r.CPUPct, y.CPUPct)
		}
	}
	return out
}
