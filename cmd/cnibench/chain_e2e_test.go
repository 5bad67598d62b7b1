package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/result"
)

// A run of chains killed with SIGKILL cannot tear its network functions down: `lab clean` then
// removes everything they left — namespaces and the NF processes in them (OVS's daemons,
// testpmd), the bpf file systems the eBPF kinds pinned to, what a kind keeps outside (DPDK's
// runtime directory) — and nothing of the run is left; a paused NF (dpdk's testpmd, stopped
// between its chain's trials) goes too.
func TestChainKillClean(t *testing.T) {
	needRoot(t)
	for _, kinds := range [][]string{{"ebpf-tc", "ovs-userspace", "userspace-afxdp", "dpdk"}} {
		t.Run(strings.Join(kinds, ","), func(t *testing.T) {
			work := t.TempDir()
			out := filepath.Join(t.TempDir(), "killed")
			p := startCnb(t, runOpts{dir: work}, "run", "--scenario", "chain", "--nf", strings.Join(kinds, ","), "--chain-length", "2",
				"--protocol", "tcp", "--repeat", "3", "--duration", "2", "--warmup", "0", "--max-steal=-1", "--out", out)
			waitTrials(t, p, out, 1, 3*time.Minute)
			prefixes := p.waitPrefixes(len(kinds), 30*time.Second)
			inodes := p.Inodes()
			for _, pre := range prefixes {
				inodes = mergeInodes(inodes, netnsInodes(pre))
			}
			var before []string
			for _, pre := range prefixes {
				before = append(before, lab.Leftovers(pre)...)
			}
			running := procsIn(inodes)
			if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(10 * time.Second); code != 128+int(syscall.SIGKILL) {
				t.Fatalf("exit code %d after SIGKILL", code)
			}
			// What the killed run left must include NF namespaces, the NF processes and the
			// bpf file systems: what only lab clean can find.
			want := []string{"-nf"}
			if slices.Contains(kinds, "ebpf-tc") {
				want = append(want, "mount "+lab.StateRoot)
			}
			for _, w := range want {
				if !slices.ContainsFunc(before, func(l string) bool { return strings.Contains(l, w) }) {
					t.Errorf("nothing with %q among what the run had standing: %v", w, before)
				}
			}
			var procs []string
			if slices.Contains(kinds, "ovs-userspace") {
				procs = append(procs, "(ovs-vswitchd)", "(ovsdb-server)")
			}
			if slices.Contains(kinds, "dpdk") {
				procs = append(procs, "(dpdk-testpmd)")
			}
			for _, w := range procs {
				if !slices.ContainsFunc(running, func(l string) bool { return strings.Contains(l, w) }) {
					t.Errorf("no %s among the processes in the run's namespaces: %v", w, running)
				}
			}
			t.Logf("standing when killed: %v; processes in its namespaces: %v", before, running)
			cleanKilled(t, work, prefixes)
			for _, pre := range prefixes {
				if left := lab.Leftovers(pre); len(left) > 0 {
					t.Errorf("lab %s still has %v", pre, left)
				}
				if m, _ := filepath.Glob("/var/run/dpdk/" + pre + "*"); len(m) > 0 {
					t.Errorf("DPDK runtime directories left: %v", m)
				}
				if _, err := os.Stat(filepath.Join(lab.StateRoot, pre)); !os.IsNotExist(err) {
					t.Errorf("state directory of %s remains (%v)", pre, err)
				}
			}
			if ps := procsIn(inodes); len(ps) > 0 {
				t.Errorf("processes still in the run's namespaces: %v", ps)
			}
		})
	}
}

// A plan of chains runs to the end on the lab: every case is measured, each chain is compared
// round by round with the bare veth pair, with the first kind and with its own shortest chain,
// the report has a column per kind, and nothing of the run is left.
func TestChainRun(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	planFile := filepath.Join(dir, "chains.yaml")
	plan := "- scenario: baseline\n  dataplane: bare\n  protocol: tcp\n" +
		"- scenario: chain\n  nf: [route-iptables, ebpf-tc]\n  chain-length: [1, 2]\n  protocol: tcp\n"
	if err := os.WriteFile(planFile, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	r := runCnb(t, runOpts{}, "run", "--plan", planFile, "--repeat", "2", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	if r.code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", r.code, r.stderr)
	}
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Results) != 5 {
		t.Fatalf("%d cases, want 5", len(s.Results))
	}
	for _, c := range s.Results {
		if c.Status != "ok" || c.Metrics["throughput_bps"].N != 2 || c.Metrics["throughput_bps"].Mean <= 0 {
			t.Errorf("%s: %s (%s), throughput %+v", c.Case.ID, c.Status, c.Reason, c.Metrics["throughput_bps"])
		}
	}
	kinds := map[string]int{}
	for _, c := range s.Comparisons {
		kinds[c.Kind+" "+c.Reference]++
	}
	for want, n := range map[string]int{
		"baseline baseline/bare/intra/tcp":                            4,
		"nf chain/bare/intra/tcp/nf=route-iptables/len=1/rules=10":    1,
		"nf chain/bare/intra/tcp/nf=route-iptables/len=2/rules=10":    1,
		"scale chain/bare/intra/tcp/nf=route-iptables/len=1/rules=10": 1,
		"scale chain/bare/intra/tcp/nf=ebpf-tc/len=1/rules=10":        1,
	} {
		if kinds[want] != n {
			t.Errorf("%d comparisons %q, want %d (all: %v)", kinds[want], want, n, kinds)
		}
	}
	page, err := os.ReadFile(filepath.Join(out, reportHTMLFile))
	if err != nil || !strings.Contains(string(page), "bare nf=ebpf-tc") {
		t.Errorf("report.html has no column for nf=ebpf-tc (%v)", err)
	}
	checkRunClean(t, r, s)
}
