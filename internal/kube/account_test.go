package kube

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
)

// TestAccountOverExec opens an accounting window on the fake cluster (every pod is this host,
// read through the pods/exec WebSocket): the two nodes' CPUs are read and known for one
// machine's (one kernel), a command the trial runs in the client's pod, pinned to a CPU, is
// credited with the CPU it burnt there and comes back with its own output and exit code, the
// server's long-running process is its pod's role, and the backend's own reads are not.
func TestAccountOverExec(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t)
	if _, err := c.Account(ctx, cluster.AccountPath{Client: "nobody"}); err == nil || !strings.Contains(err.Error(), "no pod of the trial") {
		t.Errorf("window on an unknown pod: %v", err)
	}
	// A server burning CPU, started before the window.
	srv, err := c.Start(ctx, "server", []string{busybox, "sh", "-c", "while :; do :; done"}, cluster.Ready{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	w, err := c.Account(ctx, cluster.AccountPath{Client: "client", Server: "server", Trace: cluster.TraceHops})
	if err != nil {
		t.Fatal(err)
	}
	// The client's tool: 0.3-0.5 s of CPU in a shell loop here (user time, whatever the
	// steal), its own output and exit code.
	spin := `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo out; echo err >&2; exit 3`
	start := time.Now()
	res, err := c.Exec(ctx, "client", cluster.Pin(1, []string{busybox, "sh", "-c", spin}))
	if err != nil {
		t.Fatal(err)
	}
	ran := time.Since(start).Seconds()
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("accounted exec: stdout %q stderr %q exit %d, want the command's own", res.Stdout, res.Stderr, res.ExitCode)
	}
	// The command ended before the window's end edge, which cannot see it: its shell's report
	// is what credits it (the client's pod, argv[0]'s name).
	credit := w.(*acctWindow).credit["client"]
	if on := w.(*acctWindow).creditOn["client"]; credit[0] < 0.2 || on[1] < credit[0] || len(on) != 1 || !w.(*acctWindow).comms["client"]["busybox"] {
		t.Errorf("credited %.2f s user, %.2f s system to the client (%v, by CPU %v), want the loop's 0.2 s or more on CPU 1", credit[0], credit[1], w.(*acctWindow).comms, on)
	}
	// The backend's own reads in the window are not the client's.
	if _, err := c.NodeCPU(ctx, "worker-a"); err != nil {
		t.Fatal(err)
	}
	if w.(*acctWindow).credit["client"] != credit {
		t.Errorf("NodeCPU's read was credited to the client")
	}
	a, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const machine = "worker-a+worker-b"
	if len(a.Hosts) != 1 || a.Hosts[0].Name != machine || len(a.Hosts[0].CPUs) == 0 {
		t.Fatalf("hosts %+v, want the CPUs of %s, one machine", a.Hosts, machine)
	}
	if !slices.ContainsFunc(a.Notes, func(n string) bool { return strings.Contains(n, "run on one kernel") }) {
		t.Errorf("notes %q: want the nodes known for one machine", a.Notes)
	}
	if a.WindowS < ran {
		t.Errorf("window %.2f s, shorter than the command it held (%.2f s)", a.WindowS, ran)
	}
	roles := map[string]account.Role{}
	for _, r := range a.Roles {
		roles[r.Name] = r
	}
	cl, sv := roles["client"], roles["server"]
	// Every process of this host is every fake pod's: the roles hold more than the two
	// commands, never less.
	if cl.Host != machine || cl.Kind != "pod" || cl.UserS < credit[0] || !slices.Contains(cl.Commands, "busybox") {
		t.Errorf("client role %+v: want %s's, with busybox's CPU time (it ran %.2f s)", cl, machine, ran)
	}
	if sv.Host != machine || sv.UserS+sv.SystemS < 0.5*a.WindowS || len(sv.RanOn) == 0 {
		t.Errorf("server role %+v: want %s's, with the spinning server's time (window %.2f s) on its CPUs", sv, machine, a.WindowS)
	}
	if !slices.ContainsFunc(a.Notes, func(n string) bool { return strings.Contains(n, "not traced") }) {
		t.Errorf("notes %q: want why the window was not traced", a.Notes)
	}
	// Closed: a command is no longer wrapped.
	res, err = c.Exec(ctx, "client", []string{busybox, "sh", "-c", "echo err >&2"})
	if err != nil || string(res.Stderr) != "err\n" {
		t.Errorf("exec after the window: %q %v", res.Stderr, err)
	}
	if len(c.windows) != 0 {
		t.Errorf("%d windows left open", len(c.windows))
	}
}

// TestParseReading parses an edge's reading made of recorded /proc files.
func TestParseReading(t *testing.T) {
	rd := func(name string) string {
		b, err := os.ReadFile("../account/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	self := "4242 (sh) S 1 4242 4242 0 -1 4194560 10 0 0 0 1 1 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	child := "4243 (cat) R 4242 4242 4242 0 -1 4194560 10 0 0 0 1 1 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	server := "7 (iperf3) S 1 7 7 0 -1 4194560 10 0 0 0 250 150 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	out := "4242\n"
	for _, f := range []string{"proc-stat.txt", "softirqs.txt", "softnet_stat.txt", "net-dev.txt", "snmp.txt", "netstat.txt"} {
		out += acctSep + "\n" + rd(f)
	}
	out += acctSep + "\n" + self + child + server + acctSep + "\n" + self + child + server + acctSep + "\nv1\nuser 10\nsystem 20\n1000000000 2000000000\n"
	r := parseReading(time.Unix(100, 0), []byte(out))
	if r.err != nil || r.hostErr != nil {
		t.Fatal(r.err, r.hostErr)
	}
	if !r.cg.ok || r.cg.user != 0.1 || r.cg.sys != 0.2 || len(r.cg.perCPU) != 2 {
		t.Errorf("cgroup %+v", r.cg)
	}
	if r.self != 4242 || len(r.procs) != 3 || !r.mine(r.procs[4243]) || r.mine(r.procs[7]) || r.procs[7].UTime != 250 {
		t.Errorf("reading %+v", r)
	}
	if r.devs["eth0"].RxPackets != 35 || len(r.nstat) == 0 || len(r.host.Stat.CPUs) != 2 {
		t.Errorf("devices %+v, nstat %d counters, CPUs %d", r.devs, len(r.nstat), len(r.host.Stat.CPUs))
	}
	if r := parseReading(time.Now(), []byte("4242\n"+acctSep+"\nshort")); r.err == nil {
		t.Error("a cut reading parsed")
	}
}

// TestParseCgroupCPU parses the cgroup part of a reading as this host's cgroup v1 cpuacct and
// its unified hierarchy gave them (recorded 2026-12-02).
func TestParseCgroupCPU(t *testing.T) {
	v1 := parseCgroupCPU("v1\nuser 833962\nsystem 1283511\n10955942631277 10218792803375 \n")
	if !v1.ok || v1.user != 8339.62 || v1.sys != 12835.11 || len(v1.perCPU) != 2 || v1.perCPU[0] != 10955.942631277 || v1.perCPU[1] != 10218.792803375 {
		t.Errorf("v1: %+v", v1)
	}
	v2 := parseCgroupCPU("v2\nusage_usec 20403863766\nuser_usec 8036017498\nsystem_usec 12367846267\nnr_periods 0\n")
	if !v2.ok || v2.user != 8036.017498 || v2.sys != 12367.846267 || v2.perCPU != nil {
		t.Errorf("v2: %+v", v2)
	}
	for _, bad := range []string{"", "v1\nuser 1\nsystem 2\n", "v2\nusage_usec 1\n", "v3\nuser 1\nsystem 2\n1 2\n", "v1\nuser 1\nsystem 2\n1 x\n"} {
		if c := parseCgroupCPU(bad); c.ok {
			t.Errorf("parseCgroupCPU(%q) = %+v, want not ok", bad, c)
		}
	}
}
