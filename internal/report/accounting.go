package report

import (
	"fmt"
	"strings"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/result"
)

// cpuParts are the shares a CPU's bar is stacked from, in order, with their colours.
var cpuParts = []struct {
	name, colour string
	pct          func(account.CPU) float64
}{
	{"user", "#4c78a8", func(c account.CPU) float64 { return c.UserPct }},
	{"system", "#f58518", func(c account.CPU) float64 { return c.SystemPct }},
	{"softirq", "#e45756", func(c account.CPU) float64 { return c.SoftIRQPct }},
	{"irq", "#b279a2", func(c account.CPU) float64 { return c.IRQPct }},
	{"steal", "#9d755d", func(c account.CPU) float64 { return c.StealPct }},
	{"idle", "#e8e8e8", func(c account.CPU) float64 { return c.IdlePct }},
}

// accounting writes, for every case whose trials were accounted, the verdict (what limited
// it), a stacked bar per CPU (user, system, softirq, irq, steal, idle: the means over its
// trials), the roles' CPU time and the hop table (the devices of the path, in order, with
// what passed them per trial).
func (p *page) accounting(id string, s result.Summary) {
	var rs []result.CaseResult
	for _, r := range s.Results {
		if r.Accounting != nil && len(r.Accounting.Hosts) > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	p.f(`<section id="%s" class="accounting"><h2>Where the CPU time and the packets went</h2>`, id)
	p.s(`<p>Per case, the mean over its measured trials of what the trial window accounted: each CPU's shares (from /proc/stat at the window's edges), the run's processes by pod, network function and node (their CPU time, and on which CPU it went: sampled every 250 ms), every device that carried packets in path order from the client (packets, bytes and drops per trial, qdisc drops included) and the kernel counters that explain loss. The verdict names what limited the case.</p>`)
	p.s(`<p class="legend">`)
	for _, part := range cpuParts {
		p.f(`<span><i style="background:%s"></i>%s</span>`, part.colour, part.name)
	}
	p.s(`</p>`)
	for _, r := range rs {
		a := r.Accounting
		p.f(`<div class="acct" data-case="%s"><h3>%s</h3>`, esc(r.Case.ID), esc(r.Case.ID))
		if v := r.Verdict; v != nil {
			p.f(`<p class="verdict"><b>Limited by:</b> %s</p>`, esc(v.Bottleneck))
			if len(v.Findings) > 0 {
				p.s(`<ul class="findings">`)
				for _, f := range v.Findings {
					p.f(`<li>%s</li>`, esc(f))
				}
				p.s(`</ul>`)
			}
		}
		if c := beyondCeiling(r, s); c != "" {
			p.f(`<p class="ceiling">%s</p>`, esc(c))
		}
		p.f(`<figure class="cpubars" data-case="%s">`, esc(r.Case.ID))
		for _, h := range a.Hosts {
			for _, c := range h.CPUs {
				label := fmt.Sprintf("CPU %d", c.CPU)
				if len(a.Hosts) > 1 {
					label = h.Name + " " + label
				}
				var tip []string
				for _, part := range cpuParts {
					tip = append(tip, fmt.Sprintf("%s %.1f %%", part.name, part.pct(c)))
				}
				tip = append(tip, fmt.Sprintf("NET_RX softirqs %.0f, NET_TX %.0f, backlog drops %.0f, squeezed %.0f", c.NetRx, c.NetTx, c.Dropped, c.Squeezed))
				p.f(`<div class="cpubar" data-cpu="%d" title="%s"><span class="lbl">%s</span><span class="bar">`, c.CPU, esc(label+": "+strings.Join(tip, ", ")), esc(label))
				for _, part := range cpuParts {
					if v := part.pct(c); v > 0 {
						p.f(`<span class="seg" data-part="%s" style="width:%.2f%%;background:%s"></span>`, part.name, v, part.colour)
					}
				}
				p.f(`</span><span class="busy">%.0f %% busy</span></div>`, c.BusyPct())
			}
		}
		p.s(`</figure>`)
		if len(a.Roles) > 0 {
			p.s(`<table class="roles"><thead><tr><th>role</th><th>commands</th><th>CPU % of one CPU</th><th>user s</th><th>system s</th><th>on CPUs</th></tr></thead><tbody>`)
			for _, ro := range a.Roles {
				var on []string
				for _, sh := range ro.RanOn {
					on = append(on, fmt.Sprintf("%d: %.0f %%", sh.CPU, sh.Pct))
				}
				kind := ro.Kind
				if ro.Host != "" {
					kind += " on " + ro.Host // a cluster's node: its CPUs are that node's
				}
				p.f(`<tr><td>%s (%s)</td><td>%s</td><td data-v="%g">%.1f</td><td data-v="%g">%.3f</td><td data-v="%g">%.3f</td><td>%s</td></tr>`,
					esc(ro.Name), esc(kind), esc(strings.Join(ro.Commands, ", ")), ro.CPUPct, ro.CPUPct, ro.UserS, ro.UserS, ro.SystemS, ro.SystemS, esc(strings.Join(on, ", ")))
			}
			p.s(`</tbody></table>`)
		}
		path, off := pathHops(a.Hops)
		if len(path) > 0 {
			p.f(`<table class="hops" data-case="%s"><thead><tr><th>where</th><th>device</th><th>kind</th><th>rx packets</th><th>rx bytes</th><th>tx packets</th><th>tx bytes</th><th>dropped rx/tx/qdisc</th></tr></thead><tbody>`, esc(r.Case.ID))
			for _, h := range path {
				cls := ""
				if h.Drops() >= 1 {
					cls = ` class="drops"`
				}
				p.f(`<tr%s><td>%s</td><td>%s</td><td>%s</td><td data-v="%g">%s</td><td data-v="%g">%s</td><td data-v="%g">%s</td><td data-v="%g">%s</td><td data-v="%g">%.0f / %.0f / %.0f</td></tr>`,
					cls, esc(h.Where), esc(h.Dev), esc(h.Kind), h.RxPackets, num(h.RxPackets), h.RxBytes, num(h.RxBytes), h.TxPackets, num(h.TxPackets), h.TxBytes, num(h.TxBytes),
					h.Drops(), h.RxDropped+h.RxErrors, h.TxDropped+h.TxErrors, h.QdiscDrops)
			}
			p.s(`</tbody></table>`)
			if off > 0 {
				p.f(`<p class="note">%d other devices carried under 1 %% of the path's packets each (neighbour probes, ARP): not shown.</p>`, off)
			}
		}
		if len(a.Latency) > 0 {
			p.f(`<table class="latency" data-case="%s"><thead><tr><th>segments from</th><th>from</th><th>to</th><th>sampled segments</th><th>P50 µs</th><th>P99 µs</th><th>mean µs</th><th>at µs</th></tr></thead><tbody>`, esc(r.Case.ID))
			for _, l := range a.Latency {
				p.f(`<tr><td>%s</td><td>%s</td><td>%s</td><td data-v="%g">%s</td><td data-v="%g">%.1f</td><td data-v="%g">%.1f</td><td data-v="%g">%.1f</td><td data-v="%g">%.1f</td></tr>`,
					esc(l.Start), esc(l.From), esc(l.To), l.Packets, num(l.Packets), l.P50US, l.P50US, l.P99US, l.P99US, l.MeanUS, l.MeanUS, l.AtUS, l.AtUS)
			}
			p.s(`</tbody></table>`)
			p.f(`<p class="note">--trace hops: %s TCP segments per trial sampled and stamped at each device hook they passed (tc, at egress before the qdisc); a row is the time from one hook to the next that stamped the same segment, "at" how far along the way from its first stamp.</p>`, num(a.Traced))
		}
		for _, k := range a.Kernel {
			var parts []string
			for _, name := range account.KernelCounters {
				if v, ok := k.Counters[name]; ok {
					parts = append(parts, fmt.Sprintf("%s %s", name, num(v)))
				}
			}
			p.f(`<p class="kernel"><b>%s</b> kernel counters per trial: %s</p>`, esc(k.Where), esc(strings.Join(parts, ", ")))
		}
		for _, n := range a.Notes {
			p.f(`<p class="note">%s</p>`, esc(n))
		}
		p.s(`</div>`)
	}
	p.s(`</section>`)
}

// beyondCeiling says, for a case measured better than its baseline (a pod path faster than
// the bare veth pair it adds hops to: its own ceiling), by how much, and where the two cases'
// accountings differ, so the reader sees next to the ratio what made the difference; "" for
// any other case.
func beyondCeiling(r result.CaseResult, s result.Summary) string {
	var base *result.CaseResult
	for i, c := range s.Results {
		if c.Case.ID == r.Case.BaselineID() {
			base = &s.Results[i]
		}
	}
	for _, c := range s.Comparisons {
		if c.Kind != result.KindBaseline || c.Case != r.Case.ID || !c.Differs() || (c.Ratio > 1) != HigherIsBetter(c.Metric) {
			continue
		}
		text := fmt.Sprintf("better than its baseline %s (%s), which should be its ceiling", c.Reference, Ratio(c.RatioSummary))
		if base == nil || base.Accounting == nil || r.Accounting == nil {
			return text + "; neither case was accounted to say why"
		}
		if diff := account.Contrast(r.Accounting, base.Accounting); len(diff) > 0 {
			return text + "; the accounting differs (this case vs the baseline) in " + strings.Join(diff, "; ")
		}
		return text + "; the accounting shows no difference beyond its thresholds: the rounds' noise (compare the interval with the host's noise floor, cnibench doctor --noise)"
	}
	return ""
}

// pathHops are the hops that carried at least 1 % of the busiest hop's packets, or dropped
// any; off is how many others there were (a device off the path sees a neighbour probe).
func pathHops(hs []account.Hop) (path []account.Hop, off int) {
	most := 0.0
	for _, h := range hs {
		most = max(most, h.RxPackets+h.TxPackets)
	}
	for _, h := range hs {
		if h.RxPackets+h.TxPackets >= most/100 || h.Drops() >= 1 {
			path = append(path, h)
		} else {
			off++
		}
	}
	return path, off
}
