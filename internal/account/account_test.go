package account

import (
	"os"
	"strings"
	"testing"
	"time"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The files under testdata/ were recorded on a machine of this kind (2 CPUs, kernel 6.18).
func TestParseStatRecorded(t *testing.T) {
	st, err := ParseStat(read(t, "proc-stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.CPUs) != 2 {
		t.Fatalf("CPUs %v, want 0 and 1", st.CPUs)
	}
	var sum CPUTimes
	for _, c := range st.CPUs {
		sum.User += c.User
		sum.System += c.System
		sum.Idle += c.Idle
	}
	// The aggregate line is the sum of the CPUs' lines (the kernel sums nanoseconds and rounds
	// each line to ticks, so they may differ by a tick per CPU).
	near := func(a, b uint64) bool { return a+2 >= b && b+2 >= a }
	if !near(sum.User, st.All.User) || !near(sum.System, st.All.System) || !near(sum.Idle, st.All.Idle) {
		t.Errorf("cpu line %+v is not the sum of the CPUs' (user %d system %d idle %d)", st.All, sum.User, sum.System, sum.Idle)
	}
	if st.Ctxt == 0 {
		t.Error("ctxt not read")
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3 4 5 6 7 x\n", "cpu 1 2 3 4 5 6 7 8\ncpuX 1 2 3 4 5 6 7 8\n"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestHostDeltaRecorded(t *testing.T) {
	t0 := time.Unix(100, 0)
	a, err := ParseHost(t0, read(t, "proc-stat.txt"), read(t, "softirqs.txt"), read(t, "softnet_stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseHost(t0.Add(time.Second), read(t, "proc-stat-2.txt"), read(t, "softirqs.txt"), read(t, "softnet_stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	h := HostDelta("host", a, b, nil)
	if len(h.CPUs) != 2 || h.CPUs[0].CPU != 0 || h.CPUs[1].CPU != 1 {
		t.Fatalf("CPUs %+v", h.CPUs)
	}
	for _, c := range h.CPUs {
		sum := c.UserPct + c.SystemPct + c.IRQPct + c.SoftIRQPct + c.StealPct + c.IdlePct
		if sum < 99.9 || sum > 100.1 {
			t.Errorf("CPU %d shares add up to %.2f, want 100", c.CPU, sum)
		}
	}
	if h.CtxSwitchesPerS <= 0 {
		t.Errorf("context switches per second %v", h.CtxSwitchesPerS)
	}
	// Only the CPUs asked for.
	if h := HostDelta("host", a, b, []int{1}); len(h.CPUs) != 1 || h.CPUs[0].CPU != 1 {
		t.Errorf("cpus [1]: %+v", h.CPUs)
	}
}

func TestParseSoftirqsAndSoftnet(t *testing.T) {
	rx, tx, err := ParseSoftirqs(read(t, "softirqs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Recorded: NET_RX 6017 6978, NET_TX 5 1.
	if rx[0] != 6017 || rx[1] != 6978 || tx[0] != 5 || tx[1] != 1 {
		t.Errorf("rx %v tx %v", rx, tx)
	}
	sn, err := ParseSoftnet(read(t, "softnet_stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Recorded: processed 0x0c on CPU 0, 0x32f7 with one squeeze on CPU 1 (the 13th column
	// is the CPU).
	if sn[0].Processed != 0x0c || sn[1].Processed != 0x32f7 || sn[1].Squeezed != 1 || sn[0].Dropped != 0 {
		t.Errorf("softnet %+v", sn)
	}
	// A kernel without the CPU column: rows are CPUs in order.
	old, err := ParseSoftnet([]byte("00000010 00000002 00000000\n00000020 00000000 00000003\n"))
	if err != nil || old[0].Dropped != 2 || old[1].Squeezed != 3 || old[1].Processed != 0x20 {
		t.Errorf("three-column softnet: %+v %v", old, err)
	}
	for _, bad := range []string{"CPU0\nNET_RX: 1 2\n", "X Y\n", "    CPU0 CPU1\nNET_RX: 1 x\n"} {
		if _, _, err := ParseSoftirqs([]byte(bad)); err == nil {
			t.Errorf("ParseSoftirqs(%q) accepted", bad)
		}
	}
	if _, err := ParseSoftnet([]byte("zz 0 0\n")); err == nil {
		t.Error("ParseSoftnet accepted a row that is not hexadecimal")
	}
}

func TestParseNstatRecorded(t *testing.T) {
	n, err := ParseNstat(read(t, "snmp.txt"), read(t, "netstat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"TcpRetransSegs", "UdpRcvbufErrors", "TcpExtTCPBacklogDrop", "IpExtInNoRoutes", "IpInDiscards"} {
		if _, ok := n[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}
	// Every counter a verdict reads is one the kernel has.
	for _, k := range KernelCounters {
		if _, ok := n[k]; !ok {
			t.Errorf("KernelCounters names %s, which /proc/net/snmp and netstat do not have", k)
		}
	}
	// Tcp MaxConn is -1, a gauge: left out, not an error.
	if _, ok := n["TcpMaxConn"]; ok {
		t.Error("TcpMaxConn (-1) read as a counter")
	}
	a := map[string]uint64{"TcpRetransSegs": 5, "UdpRcvbufErrors": 7, "TcpInSegs": 1}
	b := map[string]uint64{"TcpRetransSegs": 9, "UdpRcvbufErrors": 7, "TcpInSegs": 100}
	if d := KernelDelta(a, b); len(d) != 1 || d["TcpRetransSegs"] != 4 {
		t.Errorf("KernelDelta %v: want only TcpRetransSegs 4 (what moved, of the listed counters)", d)
	}
	if _, err := ParseNstat([]byte("Tcp: A B\nUdp: 1 2\n")); err == nil {
		t.Error("mismatched header and values accepted")
	}
}

func TestParseProcStat(t *testing.T) {
	ps, err := ParseProcStat(read(t, "pid-stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if ps.Comm != "cat" || ps.State != 'R' || ps.PID == 0 || ps.PPID == 0 {
		t.Errorf("recorded: %+v", ps)
	}
	// A command with spaces and parentheses: the fields start after the last ")".
	line := "42 (a) b (c)) S 7 42 42 0 -1 4194560 10 0 0 0 150 25 3 4 20 0 2 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	ps, err = ParseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if ps.Comm != "a) b (c)" || ps.PID != 42 || ps.PPID != 7 || ps.UTime != 150 || ps.STime != 25 || ps.CUTime != 3 || ps.CSTime != 4 || ps.Processor != 1 || ps.Ticks() != 182 {
		t.Errorf("%+v", ps)
	}
	for _, bad := range []string{"", "42 no parens", "x (c) S 1", "42 (c) S 1 2 3"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q) accepted", bad)
		}
	}
}

func TestMergeMeans(t *testing.T) {
	t1 := &Trial{WindowS: 2, Hosts: []Host{{Name: "host", CPUs: []CPU{{CPU: 1, SoftIRQPct: 40}, {CPU: 0, UserPct: 10}}}},
		Roles: []Role{{Name: "client", Kind: "pod", Commands: []string{"iperf3"}, CPUPct: 50, RanOn: []Share{{CPU: 0, Pct: 50}}}},
		Hops:  []Hop{{Where: "server", Dev: "eth0", Order: 400, RxPackets: 10}, {Where: "client", Dev: "eth0", Order: 0, TxPackets: 10}},
		Notes: []string{"n"}}
	t2 := &Trial{WindowS: 4, Hosts: []Host{{Name: "host", CPUs: []CPU{{CPU: 0, UserPct: 30}, {CPU: 1, SoftIRQPct: 60}}}},
		Roles:  []Role{{Name: "client", Kind: "pod", Commands: []string{"iperf3"}, CPUPct: 70, RanOn: []Share{{CPU: 0, Pct: 70}}}},
		Kernel: []Kernel{{Where: "client", Counters: map[string]float64{"TcpRetransSegs": 8}}},
		Notes:  []string{"n"}}
	m := Merge([]*Trial{t1, nil, t2})
	if m.Trials != 2 || m.WindowS != 3 {
		t.Fatalf("trials %d window %v", m.Trials, m.WindowS)
	}
	c := m.Hosts[0].CPUs
	if c[0].CPU != 0 || c[0].UserPct != 20 || c[1].SoftIRQPct != 50 {
		t.Errorf("cpus %+v", c)
	}
	if r := m.Roles[0]; r.CPUPct != 60 || len(r.RanOn) != 1 || r.RanOn[0].Pct != 60 || len(r.Commands) != 1 {
		t.Errorf("role %+v", r)
	}
	// A hop one trial did not see counts as zero there; hops come in path order.
	if m.Hops[0].Where != "client" || m.Hops[0].TxPackets != 5 || m.Hops[1].RxPackets != 5 {
		t.Errorf("hops %+v", m.Hops)
	}
	if m.Kernel[0].Counters["TcpRetransSegs"] != 4 || len(m.Notes) != 1 {
		t.Errorf("kernel %+v notes %v", m.Kernel, m.Notes)
	}
	// Hop latencies: the mean over the trials that saw a step; its packets count as none
	// where a trial did not.
	l1 := &Trial{Traced: 100, Latency: []HopLatency{{Start: "c", From: "c", To: "s", Packets: 100, P50US: 10, P99US: 30, AtUS: 0}}}
	l2 := &Trial{Traced: 50, Latency: []HopLatency{{Start: "c", From: "c", To: "s", Packets: 50, P50US: 20, P99US: 50},
		{Start: "s", From: "s", To: "c", Packets: 40, P50US: 5, P99US: 7}}}
	ml := Merge([]*Trial{l1, l2})
	if ml.Traced != 75 || len(ml.Latency) != 2 || ml.Latency[0].P50US != 15 || ml.Latency[0].P99US != 40 || ml.Latency[0].Packets != 75 ||
		ml.Latency[1].P50US != 5 || ml.Latency[1].Packets != 20 {
		t.Errorf("merged latency %+v (traced %v)", ml.Latency, ml.Traced)
	}
	if Merge(nil) != nil || Merge([]*Trial{nil}) != nil {
		t.Error("Merge of nothing is not nil")
	}
}

func TestJudge(t *testing.T) {
	busy := func(cpu int, user, sys, sirq float64) CPU {
		return CPU{CPU: cpu, UserPct: user, SystemPct: sys, SoftIRQPct: sirq, IdlePct: 100 - user - sys - sirq, NetRx: 100}
	}
	client := Role{Name: "client", Commands: []string{"iperf3"}, CPUPct: 60, RanOn: []Share{{CPU: 0, Pct: 60}}}
	cases := []struct {
		name      string
		a         *Trial
		want      []string // in the bottleneck
		findings  []string // in some finding
		wantEmpty bool
	}{
		{name: "saturated sender CPU",
			a:    &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(0, 10, 30, 58), busy(1, 5, 10, 5)}}}, Roles: []Role{client}},
			want: []string{"CPU 0 at 98 %", "58 % softirq", "client (iperf3) 60 %", "receiving packets in softirq"}},
		{name: "drops at a hop",
			a: &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(0, 10, 20, 10)}}},
				Hops: []Hop{{Where: "node0", Dev: "veth1", TxPackets: 1000, QdiscDrops: 50}}},
			want: []string{"drops at node0 veth1", "50 qdisc drops", "5 %"}},
		{name: "steal",
			a:    &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{{CPU: 0, UserPct: 20, StealPct: 25, IdlePct: 55}}}}},
			want: []string{"steal 25 % on CPU 0"}},
		{name: "a saturated CPU the hypervisor took a share of",
			a:        &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{{CPU: 1, UserPct: 78, SystemPct: 3, StealPct: 19}}}}},
			want:     []string{"CPU 1 at 81 %", "and 19 % stolen by the hypervisor"},
			findings: []string{"steal 19 % on CPU 1"}},
		{name: "traced: the slowest step",
			a: &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(0, 5, 20, 10)}}}, Latency: []HopLatency{
				{Start: "client eth0 egress", From: "client eth0 egress", To: "node0 veth1 ingress", P50US: 10, MeanUS: 4000, P99US: 9000},
				{Start: "client eth0 egress", From: "node0 veth1 ingress", To: "server eth0 ingress", P50US: 20, MeanUS: 20, P99US: 40}}},
			want:     []string{"no CPU saturated"},
			findings: []string{"traced from client eth0 egress: most time from client eth0 egress to node0 veth1 ingress, mean 4000.0 us of 4020.0 us over all 2 steps (P50 10.0 us, P99 9000.0 us)"}},
		{name: "round trips",
			a:    &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(0, 5, 20, 10), busy(1, 5, 10, 5)}}}},
			want: []string{"no CPU saturated", "CPU 0 at 35 %"}},
		{name: "processes outside the run",
			a:        &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(0, 80, 15, 3)}}}, Roles: []Role{client}},
			want:     []string{"processes outside the run 35 %"},
			findings: []string{"CPU 0: 35 % of its time went to processes outside the run"}},
		{name: "udp overflow with a saturated receiver",
			a: &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(1, 10, 80, 8)}}},
				Kernel: []Kernel{{Where: "server", Counters: map[string]float64{"UdpRcvbufErrors": 1234}}}},
			want:     []string{"CPU 1 at 98 %"},
			findings: []string{"server: 1234 UDP datagrams dropped for a full receive buffer"}},
		{name: "backlog drops", a: &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{{CPU: 0, IdlePct: 90, SystemPct: 10, Dropped: 7}}}}},
			want: []string{"CPU 0 dropped 7 packets for a full backlog"}},
		{name: "a few drops among many packets are noise",
			a: &Trial{Hosts: []Host{{Name: "host", CPUs: []CPU{busy(0, 5, 5, 5)}}},
				Hops: []Hop{{Where: "fabric", Dev: "n0", RxPackets: 1e6, RxDropped: 3}}},
			want: []string{"no CPU saturated"}},
		{name: "nothing accounted", a: &Trial{}, wantEmpty: true},
		// A cluster: roles belong to the node they ran on, CPU 0 of one node is not CPU 0 of the
		// other.
		{name: "two nodes: the role on its own node only",
			a: &Trial{Hosts: []Host{{Name: "node-a", CPUs: []CPU{busy(0, 30, 40, 25)}}, {Name: "node-b", CPUs: []CPU{busy(0, 30, 40, 25)}}},
				Roles: []Role{{Name: "client", Host: "node-a", Commands: []string{"iperf3"}, CPUPct: 90, RanOn: []Share{{CPU: 0, Pct: 90}}}}},
			want:     []string{"node-a CPU 0 at 95 % (40 % system, 30 % user, 25 % softirq) running client (iperf3) 90 %", "node-b CPU 0 at 95 %", "running processes outside the run 70 %"},
			findings: []string{"node-b CPU 0: 70 % of its time went to processes outside the run"}},
		// A command whose time is known but not where it ran may have run on any CPU of its node:
		// no work is called outside the run on its account.
		{name: "unplaced time is not outside the run",
			a: &Trial{Hosts: []Host{{Name: "node-a", CPUs: []CPU{busy(0, 30, 40, 25), busy(1, 2, 2, 2)}}},
				Roles: []Role{{Name: "client", Host: "node-a", Commands: []string{"iperf3"}, CPUPct: 65}}},
			want: []string{"CPU 0 at 95 %"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Judge(c.a)
			if c.wantEmpty {
				if v.Bottleneck != "" {
					t.Fatalf("verdict %q from nothing", v.Bottleneck)
				}
				return
			}
			for _, w := range c.want {
				if !strings.Contains(v.Bottleneck, w) {
					t.Errorf("bottleneck %q lacks %q", v.Bottleneck, w)
				}
			}
			for _, w := range c.findings {
				if !strings.Contains(strings.Join(v.Findings, "\n"), w) {
					t.Errorf("findings %q lack %q", v.Findings, w)
				}
			}
			if c.name == "unplaced time is not outside the run" && strings.Contains(v.Bottleneck+strings.Join(v.Findings, ""), "outside") {
				t.Errorf("verdict %q %q calls the client's unplaced time outside the run", v.Bottleneck, v.Findings)
			}
		})
	}
}

func TestParseNetDevRecorded(t *testing.T) {
	devs, err := ParseNetDev(read(t, "net-dev.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Recorded in a lab node's namespace: a long veth name runs into its first counter's column.
	v := devs["veth849855bc"]
	if len(devs) != 4 || v.RxBytes != 276465430592 || v.RxPackets != 6832762 || v.TxBytes != 273327522 || v.TxPackets != 4132344 {
		t.Errorf("devices %+v", devs)
	}
	if e := devs["eth0"]; e.RxPackets != 35 || e.TxPackets != 11 || e.RxBytes != 2786 || e.TxBytes != 866 {
		t.Errorf("eth0 %+v", e)
	}
	later := v
	later.RxPackets += 10
	later.TxDropped += 2
	later.TxBytes -= 1 // a counter that went back counts 0
	h := DevDelta("node0", "veth849855bc", "veth", 3, v, later)
	if h.RxPackets != 10 || h.TxDropped != 2 || h.TxBytes != 0 || h.Order != 3 || h.Where != "node0" || h.Drops() != 2 {
		t.Errorf("delta %+v", h)
	}
	for _, bad := range []string{"", "h1\nh2\n  eth0: 1 2 3\n", "h1\nh2\n  eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "h1\nh2\n  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x\n"} {
		if _, err := ParseNetDev([]byte(bad)); err == nil {
			t.Errorf("ParseNetDev(%q) accepted", bad)
		}
	}
}
