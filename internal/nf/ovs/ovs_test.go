package ovs

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

func TestOVSUserspace(t *testing.T) { nftest.Check(t, kind{}) }

// hostState lists what Open vSwitch would leave on the host outside an NF's directory.
func hostState() []string {
	var out []string
	for _, dir := range []string{"/var/run/openvswitch", "/run/openvswitch", "/etc/openvswitch", "/var/log/openvswitch", "/var/lib/openvswitch"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			fi, err := e.Info()
			if err == nil {
				out = append(out, filepath.Join(dir, e.Name())+" "+fi.ModTime().String())
			}
		}
	}
	return out
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// After Close no process of the NF is left (by PID, and in its namespace, which still exists),
// and its directory with the database and sockets is gone.
func TestCloseLeavesNothing(t *testing.T) {
	before := hostState()
	r := &nftest.Recorder{Kind: kind{}}
	ch := nftest.Build(t, r, 1, 10)
	started, _ := r.Started()
	if len(started) != 1 {
		t.Fatalf("started %d instances", len(started))
	}
	in := started[0].(*instance)
	ns := ch.Spec.NFName(1)
	pids := in.PIDs()
	if len(pids) != 2 {
		t.Fatalf("daemons: %v", pids)
	}
	inNS := netns.PIDs(ns)
	slices.Sort(inNS)
	slices.Sort(pids)
	if !slices.Equal(inNS, pids) {
		t.Fatalf("processes in %s: %v, want the daemons %v", ns, inNS, pids)
	}
	for _, f := range []string{DBFile, DBSocket, Bridge + ".mgmt", "ovs-vswitchd.pid", "ovsdb-server.ctl"} {
		if _, err := os.Stat(filepath.Join(in.Dir(), f)); err != nil {
			t.Errorf("while running: %v", err)
		}
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("PID %d still exists after Close", pid)
		}
	}
	if left := netns.PIDs(ns); len(left) != 0 {
		t.Errorf("processes left in %s: %v", ns, left)
	}
	if _, err := os.Stat(in.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Close (%v)", in.Dir(), err)
	}
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if after := hostState(); !slices.Equal(before, after) {
		t.Errorf("host Open vSwitch state changed:\nbefore %v\nafter  %v", before, after)
	}
}

// A cnibench killed mid-run leaves the daemons to netns.KillAll (lab clean) and Pdeathsig; then
// nothing is left outside the NF's directory, and Close still succeeds.
func TestKilledLeavesNothingOutside(t *testing.T) {
	before := hostState()
	r := &nftest.Recorder{Kind: kind{}}
	ch := nftest.Build(t, r, 1, 10)
	started, _ := r.Started()
	in := started[0].(*instance)
	ns := ch.Spec.NFName(1)
	if err := netns.KillAll(ns); err != nil {
		t.Fatal(err)
	}
	if err := netns.Delete(ns); err != nil {
		t.Fatal(err)
	}
	in.Exited()
	for _, pid := range in.PIDs() {
		if !gone(pid) {
			t.Errorf("daemon PID %d still exists", pid)
		}
	}
	if after := hostState(); !slices.Equal(before, after) {
		t.Errorf("host Open vSwitch state changed:\nbefore %v\nafter  %v", before, after)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(in.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Close (%v)", in.Dir(), err)
	}
}

func TestRenderOrderARPAndDefaultDrop(t *testing.T) {
	flow := nf.Flow{Client: netip.MustParseAddr("10.250.0.1"), Server: netip.MustParseAddr("10.250.0.2"),
		Ports: []nf.Port{{Proto: nf.TCP, Port: 5201}, {Proto: nf.UDP, Port: 5202}}}
	rs, err := nf.Build(flow, 6)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(Render(rs))), "\n")
	want := []string{
		"table=0,priority=65535,arp,actions=resubmit(,253)",
		"table=0,priority=65001,tcp,nw_src=198.18.0.1/32,nw_dst=10.250.0.2/32,tp_dst=5201,actions=drop",
		"table=0,priority=65000,udp,nw_src=198.18.0.2/32,nw_dst=10.250.0.2/32,tp_dst=5202,actions=drop",
		"table=0,priority=64999,tcp,nw_src=10.250.0.1/32,nw_dst=10.250.0.2/32,tp_dst=5201,actions=resubmit(,253)",
		"table=0,priority=64998,tcp,nw_src=10.250.0.2/32,nw_dst=10.250.0.1/32,tp_src=5201,actions=resubmit(,253)",
		"table=0,priority=64997,udp,nw_src=10.250.0.1/32,nw_dst=10.250.0.2/32,tp_dst=5202,actions=resubmit(,253)",
		"table=0,priority=64996,udp,nw_src=10.250.0.2/32,nw_dst=10.250.0.1/32,tp_src=5202,actions=resubmit(,253)",
		"table=0,priority=0,actions=drop",
		"table=253,priority=1,in_port=1,actions=output:2",
		"table=253,priority=1,in_port=2,actions=output:1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("render:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Wildcards and other protocols.
	wild := nf.RuleSet{Rules: []nf.Rule{
		{Src: netip.MustParsePrefix("0.0.0.0/0"), Dst: netip.MustParsePrefix("10.1.2.3/8"), Proto: 1, Allow: true},
		{Src: netip.MustParsePrefix("0.0.0.0/0"), Dst: netip.MustParsePrefix("0.0.0.0/0"), Proto: 1, DstPort: 7},
	}}
	got = strings.Split(strings.TrimSpace(string(Render(wild))), "\n")
	if got[1] != "table=0,priority=65001,ip,nw_proto=1,nw_dst=10.0.0.0/8,actions=resubmit(,253)" || len(got) != 5 {
		t.Fatalf("render of wildcard rules:\n%s", strings.Join(got, "\n"))
	}
}

// More rules than one table holds continue in the next tables; the semantics stay those of
// RuleSet.Verdict, which an evaluation of the rendered table (OpenFlow's: highest priority
// first, resubmit to another table) shows on packets of every kind.
func TestRenderMatchesVerdict(t *testing.T) {
	flow := nf.Flow{Client: netip.MustParseAddr("10.250.0.1"), Server: netip.MustParseAddr("10.250.0.2"),
		Ports: []nf.Port{{Proto: nf.TCP, Port: 5201}, {Proto: nf.UDP, Port: 5202}}}
	for _, n := range []int{4, 1000, PerTable + 7, nf.MaxRules - 1} {
		rs, err := nf.Build(flow, n)
		if err != nil {
			t.Fatal(err)
		}
		// A rule in the second table that would allow a filler source: first match must still win.
		rs.Rules = append(rs.Rules, nf.Rule{Src: netip.MustParsePrefix("198.18.0.0/15"), Dst: netip.MustParsePrefix("10.250.0.2/32"), Proto: nf.TCP, DstPort: 5201, Allow: true})
		tables := parseFlows(t, Render(rs))
		if want := (len(rs.Rules)+PerTable-1)/PerTable + 1; len(tables) != want {
			t.Fatalf("%d rules: %d tables, want %d", len(rs.Rules), len(tables), want)
		}
		c, s := flow.Client, flow.Server
		filler := netip.MustParseAddr("198.18.0.1")
		late := netip.MustParseAddr("198.19.255.200") // no filler has it: the appended allow rule decides
		pkts := []nf.Packet{
			{Src: c, Dst: s, Proto: nf.TCP, SrcPort: 40000, DstPort: 5201},
			{Src: s, Dst: c, Proto: nf.TCP, SrcPort: 5201, DstPort: 40000},
			{Src: c, Dst: s, Proto: nf.UDP, SrcPort: 40000, DstPort: 5202},
			{Src: c, Dst: s, Proto: nf.UDP, SrcPort: 40000, DstPort: 5201},
			{Src: c, Dst: s, Proto: nf.TCP, SrcPort: 40000, DstPort: 5299},
			{Src: filler, Dst: s, Proto: nf.TCP, SrcPort: 1, DstPort: 5201},
			{Src: late, Dst: s, Proto: nf.TCP, SrcPort: 1, DstPort: 5201},
			{Src: c, Dst: s, Proto: 1},
		}
		for _, p := range pkts {
			if got, want := evalFlows(tables, p), rs.Verdict(p); got != want {
				t.Errorf("%d rules, %+v: table says allow=%v, Verdict %v", len(rs.Rules), p, got, want)
			}
		}
		if !evalARP(tables) {
			t.Errorf("%d rules: ARP does not pass", len(rs.Rules))
		}
	}
}

type flowEntry struct {
	priority int
	match    map[string]string
	action   string
}

var lineRE = regexp.MustCompile(`^table=(\d+),priority=(\d+),(?:(.*),)?actions=(.*)$`)

func parseFlows(t *testing.T, b []byte) map[int][]flowEntry {
	tables := map[int][]flowEntry{}
	seen := map[[2]int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("bad flow %q", l)
		}
		tbl, _ := strconv.Atoi(m[1])
		prio, _ := strconv.Atoi(m[2])
		e := flowEntry{priority: prio, match: map[string]string{}, action: m[4]}
		if m[3] != "" {
			for _, f := range strings.Split(m[3], ",") {
				k, v, _ := strings.Cut(f, "=")
				e.match[k] = v
			}
		}
		if seen[[2]int{tbl, prio}] && tbl != FwdTable {
			t.Fatalf("table %d: two flows of priority %d", tbl, prio)
		}
		seen[[2]int{tbl, prio}] = true
		tables[tbl] = append(tables[tbl], e)
	}
	return tables
}

// evalFlows runs an IPv4 packet coming in on port 1 through the tables: true if it is output.
func evalFlows(tables map[int][]flowEntry, p nf.Packet) bool {
	return run(tables, func(m map[string]string) bool {
		for k, v := range m {
			if !fieldMatches(k, v, p) {
				return false
			}
		}
		return true
	})
}

func evalARP(tables map[int][]flowEntry) bool {
	return run(tables, func(m map[string]string) bool {
		_, arp := m["arp"]
		return arp || len(m) == 0 || (len(m) == 1 && m["in_port"] == "1")
	})
}

func run(tables map[int][]flowEntry, matches func(map[string]string) bool) bool {
	tbl := 0
	for hops := 0; hops < 300; hops++ {
		var best *flowEntry
		for i, e := range tables[tbl] {
			if matches(e.match) && (best == nil || e.priority > best.priority) {
				best = &tables[tbl][i]
			}
		}
		if best == nil || best.action == "drop" {
			return false
		}
		if best.action == "output:2" {
			return true
		}
		next, ok := strings.CutPrefix(best.action, "resubmit(,")
		n, err := strconv.Atoi(strings.TrimSuffix(next, ")"))
		if !ok || err != nil {
			return false
		}
		tbl = n
	}
	return false
}

func fieldMatches(k, v string, p nf.Packet) bool {
	switch k {
	case "tcp":
		return p.Proto == nf.TCP
	case "udp":
		return p.Proto == nf.UDP
	case "ip":
		return true
	case "arp":
		return false
	case "nw_proto":
		return v == strconv.Itoa(int(p.Proto))
	case "nw_src":
		return prefix(v).Contains(p.Src)
	case "nw_dst":
		return prefix(v).Contains(p.Dst)
	case "tp_src":
		return v == strconv.Itoa(int(p.SrcPort))
	case "tp_dst":
		return v == strconv.Itoa(int(p.DstPort))
	case "in_port":
		return v == "1"
	}
	panic("unknown field " + k)
}

// 10,000 rules (the sweep's top) load in seconds (one ovs-ofctl bundle) and are enforced.
func TestTenThousandRules(t *testing.T) {
	start := time.Now()
	ch := nftest.Build(t, kind{}, 1, 10000)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a chain of one NF with 10,000 rules took %v to build", took)
	} else {
		t.Logf("a chain of one NF with 10,000 rules built in %v", took)
	}
	nftest.Traffic(t, ch)
}

var prefixes = map[string]netip.Prefix{}

// prefix parses a flow's address match once.
func prefix(v string) netip.Prefix {
	p, ok := prefixes[v]
	if !ok {
		p = netip.MustParsePrefix(v)
		prefixes[v] = p
	}
	return p
}
