package main

// End-to-end tests of the cnibench CLI: they build the binary once, run it as a user would and
// check what it prints, what it writes and what it leaves on the host.
//
// Every lab a test causes is removed by the test (lab down --prefix, never lab clean unless the
// only labs on the host are the test's own), and TestMain fails if any cnb* network namespace or
// /run/cnibench/cnb* directory created while the tests ran is still there at the end.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/csv"
	"fmt"
	"github.com/cnibench/cnibench/internal/netns"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/result"
)

var (
	binPath string // the cnibench binary under test (in a 0755 directory)
	binDir  string

	// ourPrefixes records every lab prefix the tests caused, for TestMain's report.
	ourPrefixes sync.Map
)

const cmdTimeout = 3 * time.Minute

func TestMain(m *testing.M) { os.Exit(e2eMain(m)) }

func e2eMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cnibench-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Readable by the unprivileged user of the not-root cases.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	binDir, binPath = dir, filepath.Join(dir, "cnibench")
	build := exec.Command("go", "build", "-o", binPath, "-ldflags", "-X main.version=test", ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building cnibench:", err)
		return 1
	}
	nsBefore, stateBefore := cnbEntries(netns.Dir), cnbEntries(lab.StateRoot)

	code := m.Run()

	// Labs of other processes running at the same time come and go: give them a moment.
	var left []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		left = left[:0]
		for _, n := range cnbEntries(netns.Dir) {
			if !slices.Contains(nsBefore, n) {
				left = append(left, netns.Path(n)+origin(n))
			}
		}
		for _, n := range cnbEntries(lab.StateRoot) {
			if !slices.Contains(stateBefore, n) {
				left = append(left, filepath.Join(lab.StateRoot, n)+origin(n))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: created while the e2e tests ran and still present:\n  %s\n", strings.Join(left, "\n  "))
		// Remove what is ours (only: other labs are not these tests' to remove).
		ourPrefixes.Range(func(k, _ any) bool {
			if pre := k.(string); len(lab.Leftovers(pre)) > 0 {
				out, err := exec.Command(binPath, "lab", "down", "--prefix", pre).CombinedOutput()
				fmt.Fprintf(os.Stderr, "removing lab %s: %s%v\n", pre, out, err)
			}
			return true
		})
		return 1
	}
	return code
}

// cnbEntries lists the names starting with "cnb" in dir.
func cnbEntries(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "cnb") {
			out = append(out, e.Name())
		}
	}
	return out
}

func origin(name string) string {
	p, _, _ := strings.Cut(name, "-")
	if _, ok := ourPrefixes.Load(p); ok {
		return " (lab of these tests)"
	}
	return " (origin unknown: not a lab these tests saw)"
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

// ---------------------------------------------------------------------------------------------
// Running the binary

// cnbProc is one cnibench process. While it runs, a watcher notes its children (the iperf3 and
// netperf processes it starts inside lab namespaces), and through them its lab prefixes.
type cnbProc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr string // file paths
	done           chan struct{}
	code           int

	mu       sync.Mutex
	prefixes map[string]bool
	children map[int]procID
	inodes   map[uint64]string // netns inode -> name, of the namespaces its children ran in
}

type runOpts struct {
	dir    string // working directory (default: a fresh temp dir)
	nobody bool   // run as uid/gid 65534 through setpriv
	// timeout for runCnb (default cmdTimeout)
	timeout time.Duration
}

// startCnb starts the binary. Cleanup kills it (by PID) if it still runs and removes the labs
// it was seen to use.
func startCnb(t *testing.T, o runOpts, args ...string) *cnbProc {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	logs := t.TempDir()
	p := &cnbProc{t: t, stdout: filepath.Join(logs, "stdout"), stderr: filepath.Join(logs, "stderr"), done: make(chan struct{}),
		prefixes: map[string]bool{}, children: map[int]procID{}, inodes: map[uint64]string{}}
	argv := append([]string{binPath}, args...)
	if o.nobody {
		argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, argv...)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = o.dir
	p.cmd.Env = append(os.Environ(), "LC_ALL=C")
	outF, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = outF, errF
	if err := p.cmd.Start(); err != nil {
		outF.Close()
		errF.Close()
		t.Fatalf("start %v: %v", argv, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		outF.Close()
		errF.Close()
		close(p.done)
	}()
	if os.Geteuid() == 0 {
		go p.watch()
	}
	t.Cleanup(func() {
		if !p.exited() {
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("cnibench pid %d did not die after SIGKILL", p.cmd.Process.Pid)
			}
		}
		for _, pre := range p.Prefixes() {
			downLab(t, pre)
		}
	})
	return p
}

func (p *cnbProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its exit code (128+signal if killed).
func (p *cnbProc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		p.t.Fatalf("%v did not exit within %v (killed)\nstderr:\n%s", p.cmd.Args, timeout, p.Stderr())
		return -1
	}
}

func (p *cnbProc) Stdout() string { b, _ := os.ReadFile(p.stdout); return string(b) }
func (p *cnbProc) Stderr() string { b, _ := os.ReadFile(p.stderr); return string(b) }

// Prefixes returns the lab prefixes the process was seen to use.
func (p *cnbProc) Prefixes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for k := range p.prefixes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (p *cnbProc) addPrefix(pre string) {
	p.mu.Lock()
	p.prefixes[pre] = true
	p.mu.Unlock()
	ourPrefixes.Store(pre, true)
}

// Children returns the child processes seen so far.
func (p *cnbProc) Children() map[int]procID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.children)
}

// Inodes returns the netns inodes (-> names) its children were seen in.
func (p *cnbProc) Inodes() map[uint64]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.inodes)
}

// watch polls /proc for the process's children and the lab namespaces they run in.
func (p *cnbProc) watch() {
	pid := p.cmd.Process.Pid
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		var names map[uint64]string
		for _, child := range childrenOf(pid) {
			id, ok := identity(child)
			if !ok {
				continue
			}
			ino, err := inodeOf(fmt.Sprintf("/proc/%d/ns/net", child))
			if err != nil {
				continue
			}
			if names == nil {
				names = netnsInodes("")
			}
			name, inLab := names[ino]
			// The preflight's doctor runs its probes in a scratch namespace: not a lab.
			if strings.HasPrefix(name, "cnbdoc") && strings.HasSuffix(name, "-scratch") {
				inLab = false
			}
			p.mu.Lock()
			p.children[child] = id
			if inLab {
				p.inodes[ino] = name
			}
			p.mu.Unlock()
			if pre, _, _ := strings.Cut(name, "-"); inLab && lab.ValidPrefix(pre) == nil {
				p.addPrefix(pre)
			}
		}
	}
}

// waitPrefixes waits until the watcher has seen n labs of the process (a run builds one per
// case and keeps them standing while it runs its rounds) and returns their prefixes.
func (p *cnbProc) waitPrefixes(n int, timeout time.Duration) []string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if pre := p.Prefixes(); len(pre) == n {
			return pre
		} else if len(pre) > n {
			p.t.Fatalf("process uses %d labs, want %d: %v", len(pre), n, pre)
		}
		if time.Now().After(deadline) || p.exited() {
			p.t.Fatalf("no lab process of %v seen within %v\nstderr:\n%s", p.cmd.Args, timeout, p.Stderr())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

type res struct {
	code           int
	stdout, stderr string
	prefixes       []string
}

// runCnb runs the binary to completion.
func runCnb(t *testing.T, o runOpts, args ...string) res {
	t.Helper()
	p := startCnb(t, o, args...)
	if o.timeout == 0 {
		o.timeout = cmdTimeout
	}
	code := p.wait(o.timeout)
	return res{code: code, stdout: p.Stdout(), stderr: p.Stderr(), prefixes: p.Prefixes()}
}

// downLab removes a lab of these tests with `lab down --prefix` (never `lab clean`, which
// would remove every lab on the host), if anything of it is left.
func downLab(t *testing.T, prefix string) {
	t.Helper()
	ourPrefixes.Store(prefix, true)
	if os.Geteuid() != 0 || len(lab.Leftovers(prefix)) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, "lab", "down", "--prefix", prefix).CombinedOutput()
	if err != nil {
		t.Errorf("cleanup: lab down --prefix %s: %v: %s", prefix, err, out)
	}
	if left := lab.Leftovers(prefix); len(left) > 0 {
		t.Errorf("cleanup: lab %s still has %v", prefix, left)
	}
}

// ---------------------------------------------------------------------------------------------
// Host inspection

// procID identifies a process beyond its PID (which the kernel reuses): comm and start time.
type procID struct {
	comm  string
	start string
}

// procStat returns the parent PID and the identity of a process.
func procStat(pid int) (int, procID, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, procID{}, false
	}
	s := string(b)
	l, r := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if l < 0 || r < l {
		return 0, procID{}, false
	}
	f := strings.Fields(s[r+1:]) // state ppid pgrp ... ; starttime is field 22 of the line
	if len(f) < 20 {
		return 0, procID{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid, procID{comm: s[l+1 : r], start: f[19]}, true
}

func identity(pid int) (procID, bool) {
	_, id, ok := procStat(pid)
	return id, ok
}

// alive reports whether the process with that PID is still the one identified and has not
// exited (a zombie waiting for its new parent to reap it has exited).
func alive(pid int, id procID) bool {
	now, ok := identity(pid)
	if !ok || now != id {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func childrenOf(parent int) []int {
	var out []int
	for _, pid := range pids() {
		if ppid, _, ok := procStat(pid); ok && ppid == parent {
			out = append(out, pid)
		}
	}
	return out
}

func inodeOf(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// netnsInodes maps the inodes of the named namespaces of a lab prefix ("" = every cnb* name)
// to their names.
func netnsInodes(prefix string) map[uint64]string {
	out := map[uint64]string{}
	names := cnbEntries(netns.Dir)
	if prefix != "" {
		names = lab.Namespaces(prefix)
	}
	for _, n := range names {
		if ino, err := inodeOf(netns.Path(n)); err == nil {
			out[ino] = n
		}
	}
	return out
}

// procsIn lists the processes (other than this one) whose network namespace is one of inodes.
func procsIn(inodes map[uint64]string) []string {
	var out []string
	for _, pid := range pids() {
		if pid == os.Getpid() {
			continue
		}
		ino, err := inodeOf(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			continue
		}
		if name, ok := inodes[ino]; ok {
			id, _ := identity(pid)
			out = append(out, fmt.Sprintf("pid %d (%s) in netns %s", pid, id.comm, name))
		}
	}
	return out
}

// hostState is what a command that fails on bad input must not change.
func hostState() []string {
	var out []string
	for _, d := range []string{netns.Dir, lab.StateRoot} {
		ents, err := os.ReadDir(d)
		if err != nil {
			out = append(out, d+": "+err.Error())
			continue
		}
		for _, e := range ents {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

func mergeInodes(ms ...map[uint64]string) map[uint64]string {
	out := map[uint64]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Results

func loadTrials(t *testing.T, dir string) []result.Trial {
	t.Helper()
	tr, err := result.LoadTrials(dir)
	if err != nil {
		t.Fatalf("load trials: %v", err)
	}
	return tr
}

// measured counts the non-warm-up trials with status ok in dir's results.jsonl.
func measured(dir string) int {
	tr, err := result.LoadTrials(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, x := range tr {
		if !x.Warmup && x.Status == "ok" {
			n++
		}
	}
	return n
}

// waitTrials waits until dir holds at least n measured trials.
func waitTrials(t *testing.T, p *cnbProc, dir string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for measured(dir) < n {
		if p.exited() {
			t.Fatalf("cnibench exited (code %d) before %d trials were recorded\nstderr:\n%s", p.code, n, p.Stderr())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d trials recorded in %s within %v\nstderr:\n%s", n, dir, timeout, p.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// summaryPrefixes returns the lab prefixes summary.json records (environment.dataplanes.*.prefix).
func summaryPrefixes(s result.Summary) []string {
	var out []string
	dps, _ := s.Environment["dataplanes"].(map[string]any)
	for _, v := range dps {
		if info, ok := v.(map[string]any); ok {
			if p, ok := info["prefix"].(string); ok {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkRunClean asserts that nothing is left of the labs a finished run used.
func checkRunClean(t *testing.T, r res, s result.Summary) {
	t.Helper()
	prefixes := append(slices.Clone(r.prefixes), summaryPrefixes(s)...)
	if len(prefixes) == 0 {
		t.Errorf("no lab prefix found for the run (watcher saw none, summary records none)")
	}
	for _, p := range prefixes {
		t.Cleanup(func() { downLab(t, p) })
		if left := lab.Leftovers(p); len(left) > 0 {
			t.Errorf("lab %s left behind after the run: %v", p, left)
		}
	}
	for _, p := range summaryPrefixes(s) {
		if !slices.Contains(r.prefixes, p) {
			t.Logf("note: summary prefix %s not seen by the watcher (seen: %v)", p, r.prefixes)
		}
	}
}

// caseTrials groups the measured trials (not warm-ups) by case id.
func caseTrials(tr []result.Trial) (measuredByCase map[string][]result.Trial, warmups map[string]int) {
	measuredByCase, warmups = map[string][]result.Trial{}, map[string]int{}
	for _, x := range tr {
		if x.Warmup {
			warmups[x.Case.ID]++
			continue
		}
		measuredByCase[x.Case.ID] = append(measuredByCase[x.Case.ID], x)
	}
	return measuredByCase, warmups
}

func randSuffix(n int) string {
	const a = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = a[int(b[i])%len(a)]
	}
	return string(b)
}

// ---------------------------------------------------------------------------------------------
// 1. Bad input

// usageProblems checks the contract for user mistakes: exit code 2, exactly one line on stderr
// starting with "cnibench: " and containing want, nothing on stdout, no stack trace.
func usageProblems(r res, want string) []string {
	var probs []string
	if r.code != 2 {
		probs = append(probs, fmt.Sprintf("exit code %d, want 2", r.code))
	}
	if !strings.HasSuffix(r.stderr, "\n") || strings.Count(r.stderr, "\n") != 1 {
		probs = append(probs, fmt.Sprintf("stderr is not exactly one line: %q", r.stderr))
	}
	if !strings.HasPrefix(r.stderr, "cnibench: ") {
		probs = append(probs, fmt.Sprintf("stderr does not start with \"cnibench: \": %q", r.stderr))
	}
	if !strings.Contains(r.stderr, want) {
		probs = append(probs, fmt.Sprintf("stderr %q does not contain %q", r.stderr, want))
	}
	for _, bad := range []string{"goroutine ", "panic:", ".go:"} {
		if strings.Contains(r.stderr, bad) {
			probs = append(probs, fmt.Sprintf("stack trace on stderr: %q", r.stderr))
			break
		}
	}
	if r.stdout != "" {
		probs = append(probs, fmt.Sprintf("stdout not empty: %q", r.stdout))
	}
	return probs
}

// badInputCase runs one bad command and checks the usage contract and that the host is
// unchanged. A difference in /run/netns or /run/cnibench may come from another process
// building or removing a lab meanwhile, so only a difference on each of three tries fails.
func badInputCase(t *testing.T, o runOpts, want string, args ...string) []string {
	t.Helper()
	var probs []string
	for try := 0; try < 3; try++ {
		probs = nil
		work := o.dir
		if work == "" {
			work = t.TempDir()
		}
		before := hostState()
		// A user mistake is reported at once: a run that started anyway is cut short.
		r := runCnb(t, runOpts{dir: work, nobody: o.nobody, timeout: 30 * time.Second}, args...)
		after := hostState()
		probs = append(probs, usageProblems(r, want)...)
		if ents, _ := os.ReadDir(work); len(ents) > 0 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			probs = append(probs, fmt.Sprintf("created %v in the working directory", names))
		}
		if len(r.prefixes) > 0 {
			probs = append(probs, fmt.Sprintf("started processes in labs %v", r.prefixes))
		}
		if !reflect.DeepEqual(before, after) {
			probs = append(probs, fmt.Sprintf("host state changed:\nbefore %v\nafter  %v", before, after))
			continue
		}
		break
	}
	return probs
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	badPlan := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badPlan, []byte("- scenario: p2p\n  protocol: [tcp, bogus]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"run", "--scenario", "nope"}, `unknown scenario "nope"`},
		{"unknown dataplane", []string{"run", "--scenario", "p2p", "--dataplane", "nope"}, `--dataplane: unknown dataplane "nope"`},
		{"unknown protocol", []string{"run", "--scenario", "p2p", "--dataplane", "flannel", "--protocol", "tcpp"}, `--protocol: unknown protocol "tcpp"`},
		{"malformed int", []string{"run", "--scenario", "baseline", "--repeat", "x"}, `--repeat: "x" is not an integer`},
		{"repeat 0", []string{"run", "--scenario", "baseline", "--repeat", "0"}, "--repeat: 0 out of range"},
		{"mtu 100", []string{"run", "--scenario", "baseline", "--mtu", "100"}, "--mtu: 100 out of range"},
		{"cpus 0,99", []string{"run", "--scenario", "baseline", "--cpus", "0,99"}, "--cpus: CPU 99"},
		{"flag without value", []string{"run", "--scenario", "baseline", "--repeat"}, "flag needs an argument: --repeat"},
		{"unknown flag", []string{"run", "--bogus"}, "unknown flag: --bogus"},
		{"unknown subcommand", []string{"frob"}, `unknown command "frob"`},
		// cobra's message goes on with "Did you mean this?" and "run" on further lines.
		{"misspelt subcommand", []string{"rn"}, `unknown command "rn"`},
		{"unknown lab subcommand", []string{"lab", "frob"}, `unknown command "frob" for "cnibench lab"`},
		{"image build without --out", []string{"image", "build"}, "--out FILE is required"},
		{"image build bad format", []string{"image", "build", "--out", "x.tar", "--format", "zip"}, `--format: unknown format "zip"`},
		{"mtu too small for the overlay", []string{"run", "--scenario", "p2p", "--dataplane", "flannel", "--mtu", "600"}, "leaves pods below 576 bytes"},
		{"param the scenario does not use", []string{"run", "--scenario", "baseline", "--services", "5"}, "--services: scenario baseline does not use services"},
		{"stray argument", []string{"run", "extra"}, `takes no arguments, got "extra"`},
		{"nothing to run", []string{"run"}, "nothing to run"},
		{"plan bad field", []string{"run", "--plan", badPlan}, badPlan + ": [0].protocol[1]: unknown protocol \"bogus\""},
		{"missing plan", []string{"run", "--plan", missing}, missing},
		{"backend nope", []string{"run", "--scenario", "baseline", "--backend", "nope"}, `--backend: unknown backend "nope"`},
		{"backend kube without a cluster", []string{"run", "--scenario", "baseline", "--backend", "kube", "--kubeconfig", "/nonexistent/kubeconfig"}, "--backend kube: load kubeconfig"},
		{"kube clean without a cluster", []string{"kube", "clean", "--kubeconfig", "/nonexistent/kubeconfig"}, "load kubeconfig"},
		{"fake nodes on the lab", []string{"run", "--scenario", "p2p", "--fake-nodes", "3"}, "--fake-nodes is a kube backend option: add --backend kube"},
		{"a node count on kube", []string{"run", "--scenario", "p2p", "--backend", "kube", "--nodes", "3"}, "on the kube backend --nodes names the nodes"},
		{"kwok missing", []string{"run", "--scenario", "p2p", "--backend", "kube", "--fake-nodes", "2", "--kwok", "/nonexistent/kwok"}, "install it"},
		{"too many fake nodes", []string{"run", "--scenario", "p2p", "--backend", "kube", "--fake-nodes", "5000"}, "give 0..1000 fake nodes"},
		{"report of no run", []string{"report", "/nonexistent/run"}, "has no summary.json"},
		{"output xml", []string{"run", "--scenario", "baseline", "--output", "xml"}, `--output: unknown format "xml"`},
		{"unknown trace", []string{"run", "--scenario", "baseline", "--trace", "packets"}, `--trace: unknown trace "packets" (valid: hops)`},
		{"trace without accounting", []string{"run", "--scenario", "baseline", "--trace", "hops", "--no-account"}, "--trace hops adds to each trial's accounting: drop --no-account"},
		{"two doctor measurements", []string{"doctor", "--noise", "--trace-cost"}, "--noise, --account-cost and --trace-cost: give one of them"},
		{"doctor steal check alone", []string{"doctor", "--max-steal", "3"}, "--max-steal needs --noise, --account-cost or --trace-cost"},
		{"doctor steal above all", []string{"doctor", "--trace-cost", "--max-steal", "120"}, "--max-steal: 120% is more than all of the CPU"},
		{"amplify without account-cost", []string{"doctor", "--trace-cost", "--account-amplify", "8"}, "--account-amplify needs --account-cost"},
		{"amplify out of range", []string{"doctor", "--account-cost", "--account-amplify", "1000"}, "--account-amplify 1000: give 1..250"},
		{"lab down bad prefix", []string{"lab", "down", "--prefix", "BAD"}, `invalid prefix "BAD"`},
		{"lab down no prefix", []string{"lab", "down"}, `invalid prefix ""`},
		{"resume nonexistent", []string{"run", "--resume", "/nonexistent"}, "/nonexistent is not a cnibench run directory"},
		{"unknown proxy", []string{"run", "--scenario", "p2s", "--proxy", "bogus"}, `--proxy: unknown proxy "bogus"`},
		{"proxy on kube", []string{"run", "--scenario", "p2s", "--backend", "kube", "--kubeconfig", "/nonexistent/kubeconfig", "--proxy", "nftables"}, "proxy and policy choose lab implementations"},
		{"policies without silent pods", []string{"run", "--scenario", "p2p-policies", "--pods", "1", "--policies", "5"}, "5 policies need at least 3 silent pods"},
		{"parts that do not combine", []string{"run", "--scenario", "p2s", "--dataplane", "antrea", "--proxy", "ebpf", "--protocol", "tcp"}, "not with attach ovs-userspace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "parts that do not combine" || c.name == "mtu too small for the overlay" || c.name == "policies without silent pods" {
				needRoot(t) // as another user the root check comes first
			}
			if probs := badInputCase(t, runOpts{}, c.want, c.args...); len(probs) > 0 {
				t.Errorf("cnibench %s:\n  %s", strings.Join(c.args, " "), strings.Join(probs, "\n  "))
			}
		})
	}

	t.Run("not root", func(t *testing.T) {
		needRoot(t)
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("setpriv not installed")
		}
		// A working directory the unprivileged user could write into, to prove it does not.
		work, err := os.MkdirTemp(binDir, "work-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(work, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"run", "--scenario", "baseline", "--dataplane", "bare", "--protocol", "tcp", "--repeat", "2", "--duration", "1", "--warmup", "0"},
			{"run", "--scenario", "p2p", "--dataplane", "flannel", "--placement", "inter", "--protocol", "tcp"},
			{"lab", "up", "--dataplane", "flannel"},
			{"lab", "down", "--prefix", "cnbe2enr"},
			{"lab", "clean"},
		} {
			t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
				if probs := badInputCase(t, runOpts{dir: work, nobody: true}, "root", args...); len(probs) > 0 {
					t.Errorf("cnibench %s as uid 65534:\n  %s", strings.Join(args, " "), strings.Join(probs, "\n  "))
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------------------------
// 2. A real run

func TestRunBaseline(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "baseline-run")
	// The steal check off: this test checks what a run records, trial by trial, and a burst
	// of hypervisor steal would add a re-run (the check itself is tested in internal/runner).
	r := runCnb(t, runOpts{}, "run", "--scenario", "baseline", "--dataplane", "bare", "--protocol", "tcp,udp",
		"--repeat", "2", "--duration", "1", "--warmup", "1", "--max-steal=-1", "--out", out)
	if r.code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", r.code, r.stderr)
	}
	ids := []string{"baseline/bare/intra/tcp", "baseline/bare/intra/udp"}

	// results.jsonl: per case one warm-up and trials 1 and 2, ok, with their raw output.
	tr := loadTrials(t, out)
	byCase, warm := caseTrials(tr)
	if len(byCase) != len(ids) {
		t.Errorf("cases in results.jsonl: %v, want %v", reflect.ValueOf(byCase).MapKeys(), ids)
	}
	for _, id := range ids {
		if warm[id] != 1 {
			t.Errorf("%s: %d warm-up trials, want 1", id, warm[id])
		}
		var nums []int
		for _, x := range byCase[id] {
			nums = append(nums, x.Trial)
			if x.Status != "ok" || x.Metrics["throughput_bps"] <= 0 {
				t.Errorf("%s trial %d: status %q, throughput %v, error %q", id, x.Trial, x.Status, x.Metrics["throughput_bps"], x.Error)
			}
			if x.DurationS != 1 || x.Run != "baseline-run" || x.Case.Backend != "lab" || x.Case.Tool != "iperf3" {
				t.Errorf("%s trial %d: duration %v run %q backend %q tool %q", id, x.Trial, x.DurationS, x.Run, x.Case.Backend, x.Case.Tool)
			}
			// Every lab trial is accounted: each CPU, the client and server processes, the
			// veth pair's two ends.
			if a := x.Accounting; a == nil || len(a.Hosts) != 1 || len(a.Hosts[0].CPUs) == 0 || len(a.Roles) < 2 || len(a.Hops) < 2 || len(a.Notes) > 0 {
				t.Errorf("%s trial %d: accounting %+v", id, x.Trial, a)
			}
		}
		sort.Ints(nums)
		if !reflect.DeepEqual(nums, []int{1, 2}) {
			t.Errorf("%s: measured trials %v, want [1 2]", id, nums)
		}
	}
	for _, x := range tr {
		if x.Raw == "" {
			t.Errorf("%s trial %d (warmup %v): no raw file recorded", x.Case.ID, x.Trial, x.Warmup)
			continue
		}
		if st, err := os.Stat(filepath.Join(out, x.Raw)); err != nil || st.Size() == 0 {
			t.Errorf("%s trial %d: raw file %s missing or empty (%v)", x.Case.ID, x.Trial, x.Raw, err)
		}
	}

	// summary.json
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if s.Run != "baseline-run" {
		t.Errorf("summary run %q, want baseline-run", s.Run)
	}
	if v := s.Environment["cnibench_version"]; v != "test" {
		t.Errorf("environment.cnibench_version = %v, want test (from -ldflags)", v)
	}
	if len(s.Results) != len(ids) {
		t.Errorf("summary has %d results, want %d", len(s.Results), len(ids))
	}
	for _, cr := range s.Results {
		m := cr.Metrics["throughput_bps"]
		if cr.Status != "ok" || m.N != 2 || !(m.TrimmedMean > 0) || !slices.Contains(ids, cr.Case.ID) {
			t.Errorf("summary %s: status %q (%s), throughput n=%d trimmed_mean=%v", cr.Case.ID, cr.Status, cr.Reason, m.N, m.TrimmedMean)
		}
		if cr.Accounting == nil || cr.Accounting.Trials != 2 || cr.Verdict == nil || cr.Verdict.Bottleneck == "" {
			t.Errorf("summary %s: accounting %+v verdict %+v: want the mean of 2 accounted trials and a verdict", cr.Case.ID, cr.Accounting, cr.Verdict)
		}
	}

	// summary.csv
	f, err := os.Open(filepath.Join(out, result.SummaryCSVFile))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatalf("summary.csv: %v", err)
	}
	if len(rows) < 1 || !reflect.DeepEqual(rows[0], result.CSVHeader) {
		t.Fatalf("summary.csv header %v, want %v", rows[:min(1, len(rows))], result.CSVHeader)
	}
	seen := map[string]bool{}
	for _, row := range rows[1:] {
		seen[row[1]+" "+row[18]] = true
	}
	for _, id := range ids {
		if !seen[id+" throughput_bps"] {
			t.Errorf("summary.csv has no throughput_bps row for %s", id)
		}
	}

	// The table: each case under the heading of its scenario and data plane, its row named by
	// the rest of its id (baseline/bare, then "  intra/tcp  24.00 Gbit/s ..."); colour, should
	// the environment force it, left out.
	table := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(r.stdout, "")
	for _, id := range ids {
		p := strings.SplitN(id, "/", 3)
		row := `(?m)^` + regexp.QuoteMeta(p[0]+"/"+p[1]) + `\n(  .*\n)*  ` + regexp.QuoteMeta(p[2]) + `\s+\d+\.\d+ Gbit/s`
		if !regexp.MustCompile(row).MatchString(table) {
			t.Errorf("table has no result row for %s:\n%s", id, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "results: "+out) {
		t.Errorf("stdout does not name the results directory:\n%s", r.stdout)
	}
	checkRunClean(t, r, s)
}

// ---------------------------------------------------------------------------------------------
// 3. The root namespace is never touched

var counters = regexp.MustCompile(`\[\d+:\d+\]|counter packets \d+ bytes \d+`)

// rootSnapshot captures the root namespace's network configuration. Packet counters change
// with any traffic and are blanked.
func rootSnapshot(t *testing.T) map[string]string {
	t.Helper()
	snap := map[string]string{}
	for _, argv := range [][]string{
		{"ip", "route"}, {"ip", "-6", "route"}, {"ip", "rule"}, {"ip", "addr"}, {"ip", "link"},
		{"iptables-save"}, {"iptables-legacy-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"},
	} {
		key := strings.Join(argv, " ")
		if _, err := exec.LookPath(argv[0]); err != nil {
			snap[key] = "(not installed)"
			continue
		}
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", key, err, out)
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			lines = append(lines, counters.ReplaceAllString(l, "[counters]"))
		}
		snap[key] = strings.Join(lines, "\n")
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding",
		"net/bridge/bridge-nf-call-iptables", "net/ipv4/conf/all/rp_filter"} {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			b = []byte("(absent)")
		}
		snap["sysctl "+k] = strings.TrimSpace(string(b))
	}
	return snap
}

func TestRootNamespaceUntouched(t *testing.T) {
	needRoot(t)
	before := rootSnapshot(t)
	out := filepath.Join(t.TempDir(), "p2p-run")
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	r := runCnb(t, runOpts{}, "run", "--scenario", "p2p", "--dataplane", "flannel", "--placement", "inter", "--protocol", "tcp",
		"--repeat", "2", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	if r.code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", r.code, r.stderr)
	}
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Results) != 1 || s.Results[0].Status != "ok" || s.Results[0].Metrics["throughput_bps"].N != 2 {
		t.Errorf("summary: %+v", s.Results)
	}
	after := rootSnapshot(t)
	keys := make([]string, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if before[k] != after[k] {
			t.Errorf("root namespace changed: %s\nbefore:\n%s\nafter:\n%s", k, before[k], after[k])
		}
	}
	checkRunClean(t, r, s)
}

// ---------------------------------------------------------------------------------------------
// 4. SIGKILL, lab clean, resume

// The steal check is off: a disturbed trial's re-run would look like a trial run twice.
var killArgs = []string{"run", "--scenario", "p2p", "--dataplane", "flannel", "--placement", "intra,inter", "--protocol", "tcp",
	"--repeat", "3", "--duration", "2", "--max-steal=-1"}

var killIDs = []string{"p2p/flannel/intra/tcp", "p2p/flannel/inter/tcp"}

func TestKillCleanResume(t *testing.T) {
	needRoot(t)
	work := t.TempDir()
	out := filepath.Join(t.TempDir(), "killed")
	p := startCnb(t, runOpts{dir: work}, append(slices.Clone(killArgs), "--out", out)...)
	waitTrials(t, p, out, 1, 2*time.Minute)
	prefixes := p.waitPrefixes(len(killIDs), 20*time.Second) // one lab per case, all standing
	inodes := p.Inodes()
	for _, pre := range prefixes {
		inodes = mergeInodes(inodes, netnsInodes(pre))
	}
	children := p.Children()

	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(10 * time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d after SIGKILL", code)
	}
	recorded := loadTrials(t, out)

	for _, pre := range prefixes {
		if len(lab.Namespaces(pre)) == 0 {
			t.Fatalf("no namespaces of lab %s left after SIGKILL: the leftover path is not exercised", pre)
		}
		if o, err := lab.Owner(pre); err != nil || o.Alive() || o.PID != p.cmd.Process.Pid {
			t.Errorf("owner of lab %s: %+v %v: want the killed run, dead", pre, o, err)
		}
		inodes = mergeInodes(inodes, netnsInodes(pre))
	}
	t.Logf("after SIGKILL: labs %v; processes in their namespaces: %v", prefixes, procsIn(inodes))

	cleanKilled(t, work, prefixes)
	for _, pre := range prefixes {
		if left := lab.Leftovers(pre); len(left) > 0 {
			t.Errorf("lab %s still has %v", pre, left)
		}
		if _, err := os.Stat(filepath.Join(lab.StateRoot, pre)); !os.IsNotExist(err) {
			t.Errorf("state directory %s remains (%v)", filepath.Join(lab.StateRoot, pre), err)
		}
	}
	if ps := procsIn(inodes); len(ps) > 0 {
		t.Errorf("processes still in the lab's namespaces: %v", ps)
	}
	for pid, id := range children {
		if alive(pid, id) {
			t.Errorf("child %d (%s) of the killed run survives", pid, id.comm)
		}
	}

	// Resume: the trials recorded before the kill are kept, the others run once.
	r := runCnb(t, runOpts{dir: work}, "run", "--resume", out)
	if r.code != 0 {
		t.Fatalf("resume: exit code %d\nstderr:\n%s", r.code, r.stderr)
	}
	// The resumed run writes its reports, with every case of the run in the HTML's table.
	if !strings.Contains(r.stdout, "report: "+filepath.Join(out, reportHTMLFile)) {
		t.Errorf("the resumed run did not say where its report is:\n%s", r.stdout)
	}
	if page, err := os.ReadFile(filepath.Join(out, reportHTMLFile)); err != nil {
		t.Errorf("no report after the resume: %v", err)
	} else {
		for _, id := range killIDs {
			if !strings.Contains(string(page), `<tr data-case="`+id+`"`) {
				t.Errorf("report.html after the resume has no row for %s", id)
			}
		}
	}
	final := loadTrials(t, out)
	for _, old := range recorded {
		if !slices.ContainsFunc(final, func(x result.Trial) bool { return reflect.DeepEqual(x, old) }) {
			t.Errorf("trial recorded before the kill changed or vanished: %s #%d (warmup %v) started %s", old.Case.ID, old.Trial, old.Warmup, old.Start)
		}
	}
	byCase, _ := caseTrials(final)
	for _, id := range killIDs {
		count := map[int]int{}
		for _, x := range byCase[id] {
			if x.Status == "ok" {
				count[x.Trial]++
			}
		}
		if !reflect.DeepEqual(count, map[int]int{1: 1, 2: 1, 3: 1}) {
			t.Errorf("%s: ok trials by number %v, want each of 1..3 exactly once", id, count)
		}
	}
	for _, old := range recorded {
		if old.Warmup {
			continue
		}
		for _, x := range byCase[old.Case.ID] {
			if x.Trial == old.Trial && x.Start != old.Start {
				t.Errorf("%s trial %d, recorded before the kill (start %s), was run again (start %s)", old.Case.ID, old.Trial, old.Start, x.Start)
			}
		}
	}
	s, err := result.ReadSummary(out)
	if err != nil {
		t.Fatalf("summary after resume: %v", err)
	}
	for _, id := range killIDs {
		i := slices.IndexFunc(s.Results, func(c result.CaseResult) bool { return c.Case.ID == id })
		if i < 0 {
			t.Errorf("summary has no %s", id)
			continue
		}
		if c := s.Results[i]; c.Status != "ok" || c.Metrics["throughput_bps"].N != 3 {
			t.Errorf("summary %s: status %q (%s), throughput n=%d", id, c.Status, c.Reason, c.Metrics["throughput_bps"].N)
		}
	}
	for _, prefix := range prefixes {
		if slices.Contains(r.prefixes, prefix) || slices.Contains(summaryPrefixes(s), prefix) {
			t.Errorf("resume reused the removed lab prefix %s", prefix)
		}
	}
	checkRunClean(t, r, s)
	if ents, _ := os.ReadDir(work); len(ents) > 0 {
		t.Errorf("working directory not empty: %v", ents)
	}
}

// cleanKilled removes the labs a killed run left with `lab clean`, which knows their owner is
// gone (a lab of a live owner it would skip) — only if the host has no other such lab (a lab of
// a live owner, or kept by lab up, it leaves alone); else with `lab down --prefix`.
func cleanKilled(t *testing.T, work string, prefixes []string) {
	t.Helper()
	ours := func(l string) bool {
		return slices.ContainsFunc(prefixes, func(pre string) bool {
			return strings.Contains(l, " "+pre+"-") || strings.HasSuffix(l, "/"+pre) || strings.Contains(l, "/"+pre+"/")
		})
	}
	// `lab clean` removes every lab whose owner is gone: run it only if the host has no other
	// such lab (a lab of a live owner, or kept by lab up, it leaves alone).
	pre := lab.Leftovers("")
	var others []string
	for _, l := range pre {
		if !ours(l) {
			if o, err := lab.Owner(strings.SplitN(l[strings.LastIndexAny(l, " /")+1:], "-", 2)[0]); err == nil && o.Live() {
				continue
			}
			others = append(others, l)
		}
	}
	if len(others) == 0 {
		r := runCnb(t, runOpts{dir: work}, "lab", "clean")
		if r.code != 0 {
			t.Fatalf("lab clean: exit code %d: %s", r.code, r.stderr)
		}
		for _, pre := range prefixes {
			if !strings.Contains(r.stdout, "removed netns "+pre+"-") || !strings.Contains(r.stdout, "objects removed") {
				t.Errorf("lab clean output does not report lab %s:\n%s", pre, r.stdout)
			}
		}
		for _, l := range lab.Leftovers("") {
			if slices.Contains(pre, l) && ours(l) {
				t.Errorf("lab clean left %s", l)
			}
		}
	} else {
		t.Logf("other dead labs on this host (%v): using 'lab down --prefix' instead of 'lab clean', which would remove them", others)
		for _, pre := range prefixes {
			r := runCnb(t, runOpts{dir: work}, "lab", "down", "--prefix", pre)
			if r.code != 0 || !strings.Contains(r.stdout, "lab "+pre+" removed") {
				t.Fatalf("lab down: exit code %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
		}
	}
}

// ---------------------------------------------------------------------------------------------
// 5. SIGINT

// SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal went away) all tear the labs down and keep
// the trials; SIGHUP used to kill the run and leave its labs.
func TestInterrupt(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { testSignal(t, sig) })
	}
}

func testSignal(t *testing.T, sig syscall.Signal) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "interrupted")
	p := startCnb(t, runOpts{}, append(slices.Clone(killArgs), "--out", out)...)
	waitTrials(t, p, out, 1, 2*time.Minute)
	prefixes := p.waitPrefixes(len(killIDs), 20*time.Second)
	inodes := p.Inodes()
	for _, pre := range prefixes {
		inodes = mergeInodes(inodes, netnsInodes(pre))
	}
	children := p.Children()
	n := measured(out)

	start := time.Now()
	if err := syscall.Kill(p.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case <-p.done:
		code = p.code
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15 s after %v\nstderr:\n%s", sig, p.Stderr())
	}
	t.Logf("exited %.1f s after %v", time.Since(start).Seconds(), sig)
	if code != 130 {
		t.Errorf("exit code %d after %v, want 130\nstderr:\n%s", code, sig, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), "--resume "+out) {
		t.Errorf("stderr does not tell how to resume (--resume %s):\n%s", out, p.Stderr())
	}
	for _, pre := range p.Prefixes() {
		if left := lab.Leftovers(pre); len(left) > 0 {
			t.Errorf("lab %s left after %v: %v", pre, sig, left)
		}
	}
	if ps := procsIn(inodes); len(ps) > 0 {
		t.Errorf("processes still in the lab's namespaces: %v", ps)
	}
	for pid, id := range children {
		if alive(pid, id) {
			t.Errorf("child %d (%s) survives the interrupted run", pid, id.comm)
		}
	}
	if got := measured(out); got < n {
		t.Errorf("trials recorded before %v lost: %d, had %d", sig, got, n)
	}
}

// A run whose stdout is a pipe nobody reads any more (`cnibench run ... | head -3`) is not
// killed by SIGPIPE half-way with its lab standing: it runs to the end, tears its lab down,
// records its trials and then says the table it could not print.
func TestClosedStdout(t *testing.T) {
	needRoot(t)
	out := filepath.Join(t.TempDir(), "piped")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first line
	// The steal check off (--max-steal=-1): the test checks what the run does, not the steal
	// policy (internal/runner tests it); a burst of steal once disturbed every trial of a CI run.
	cmd := exec.Command(binPath, "run", "--scenario", "p2p", "--dataplane", "flannel", "--placement", "intra", "--protocol", "rr",
		"--repeat", "1", "--duration", "1", "--warmup", "0", "--max-steal=-1", "--out", out)
	cmd.Stdout, cmd.Dir = w, t.TempDir()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	before := lab.Leftovers("")
	err = cmd.Run()
	w.Close()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("killed by %v (stderr %s)", ws.Signal(), stderr.String())
	}
	// Its summary table could not be printed: it says so, after the run ended.
	if err == nil || !strings.Contains(stderr.String(), "broken pipe") || !strings.Contains(stderr.String(), "done in") {
		t.Errorf("run with a closed stdout: %v (stderr %s)", err, stderr.String())
	}
	if got := measured(out); got != 1 {
		t.Errorf("%d trials recorded, want 1", got)
	}
	if left := lab.Leftovers(""); len(left) > len(before) {
		t.Errorf("left behind: %v (before: %v)", left, before)
	}
}

// ---------------------------------------------------------------------------------------------
// 6. list, doctor, version

// row finds the table row whose first column is name.
func row(table, name string) []string {
	sc := bufio.NewScanner(strings.NewReader(table))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

func TestInfoCommands(t *testing.T) {
	t.Run("version", func(t *testing.T) {
		r := runCnb(t, runOpts{}, "version")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "cnibench test (go") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
			t.Errorf("version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("list", func(t *testing.T) {
		r := runCnb(t, runOpts{}, "list")
		if r.code != 0 {
			t.Fatalf("exit code %d: %s", r.code, r.stderr)
		}
		for _, dp := range []string{"flannel", "calico", "cilium", "polycube", "antrea", "bare", "node2node", "p2p", "baseline", "vnf"} {
			if row(r.stdout, dp) == nil {
				t.Errorf("list has no row for %s:\n%s", dp, r.stdout)
			}
		}
		if f := row(r.stdout, "cilium"); !slices.Contains(f, "yes") {
			t.Errorf("cilium row %v: want RUNS HERE yes", f)
		}
		if f := row(r.stdout, "vnf"); !slices.Contains(f, "yes") {
			t.Errorf("vnf row %v: want yes", f)
		}
		if f := row(r.stdout, "userspace"); len(f) < 2 || f[1] != "yes" || !strings.Contains(strings.Join(f, " "), "pkt fwd") {
			t.Errorf("VNF kind row %v: want userspace, yes and what it is", f)
		}
		for _, k := range []struct{ name, what string }{{"kernel", "pkt knf"}, {"xdp", "pkt xfwd"}, {"ramp", "5 %"}, {"mlr", "MLRsearch"}, {"binary", "RFC 2544"}} {
			if f := row(r.stdout, k.name); len(f) < 2 || f[1] != "yes" || !strings.Contains(strings.Join(f, " "), k.what) {
				t.Errorf("VNF kind or search row %v: want %s, yes and %q", f, k.name, k.what)
			}
		}
		if f := row(r.stdout, "p2p"); !slices.Contains(f, "yes") {
			t.Errorf("p2p row %v: want yes", f)
		}
		if os.Geteuid() == 0 {
			for _, dp := range []string{"flannel", "calico", "antrea"} {
				if f := row(r.stdout, dp); len(f) < 6 || f[5] != "yes" {
					t.Errorf("%s row %v: want RUNS HERE yes on this host", dp, f)
				}
			}
		}
	})
	t.Run("list as nobody", func(t *testing.T) {
		needRoot(t)
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("setpriv not installed")
		}
		r := runCnb(t, runOpts{dir: binDir, nobody: true}, "list")
		if r.code != 0 || !strings.Contains(r.stdout, "not root") {
			t.Errorf("list as nobody: exit %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if f := row(r.stdout, "flannel"); len(f) < 6 || f[5] != "no" || !strings.Contains(strings.Join(f, " "), "needs root") {
			t.Errorf("flannel row as nobody %v: want no, needs root", f)
		}
	})
	t.Run("doctor", func(t *testing.T) {
		needRoot(t)
		before := cnbEntries(netns.Dir)
		r := runCnb(t, runOpts{}, "doctor")
		if r.code != 0 {
			t.Fatalf("doctor: exit code %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if f := row(r.stdout, "vxlan"); len(f) < 2 || f[1] != "ok" {
			t.Errorf("doctor vxlan row %v, want ok:\n%s", f, r.stdout)
		}
		if f := row(r.stdout, "root"); len(f) < 2 || f[1] != "ok" {
			t.Errorf("doctor root row %v, want ok", f)
		}
		for _, n := range cnbEntries(netns.Dir) {
			if strings.HasPrefix(n, "cnbdoc") && !slices.Contains(before, n) {
				t.Errorf("doctor left its scratch namespace %s", n)
			}
		}
	})
}

// ---------------------------------------------------------------------------------------------
// 7. lab up / lab down

func TestLabUpDown(t *testing.T) {
	needRoot(t)
	prefix := ""
	for i := 0; i < 10 && prefix == ""; i++ {
		if p := "cnbe2e" + randSuffix(3); len(lab.Leftovers(p)) == 0 {
			prefix = p
		}
	}
	t.Cleanup(func() { downLab(t, prefix) }) // registers the prefix for TestMain too
	ourPrefixes.Store(prefix, true)

	r := runCnb(t, runOpts{}, "lab", "up", "--dataplane", "calico", "--pods", "4", "--prefix", prefix)
	if r.code != 0 {
		t.Fatalf("lab up: exit code %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "lab "+prefix+" up: dataplane calico, 2 nodes, 4 pods") {
		t.Errorf("lab up output:\n%s", r.stdout)
	}
	want := []string{prefix + "-fab", prefix + "-n0", prefix + "-n1", prefix + "-p-pod0", prefix + "-p-pod1", prefix + "-p-pod2", prefix + "-p-pod3"}
	if got := lab.Namespaces(prefix); !reflect.DeepEqual(got, want) {
		t.Fatalf("namespaces after lab up: %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(lab.StateRoot, prefix)); err != nil {
		t.Errorf("state directory: %v", err)
	}

	// The lab works: pod0 (node0) reaches pod1 (node1).
	addr, err := exec.Command("nsenter", "--net="+netns.Path(prefix+"-p-pod1"), "ip", "-4", "-o", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		t.Fatalf("pod1 address: %v", err)
	}
	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/`).FindSubmatch(addr)
	if m == nil {
		t.Fatalf("pod1 has no IPv4 address: %s", addr)
	}
	if out, err := exec.Command("nsenter", "--net="+netns.Path(prefix+"-p-pod0"), "ping", "-c", "1", "-W", "2", string(m[1])).CombinedOutput(); err != nil {
		t.Errorf("ping pod0 -> pod1 (%s): %v\n%s", m[1], err, out)
	}

	// A second lab up with the same prefix is refused and changes nothing.
	r2 := runCnb(t, runOpts{}, "lab", "up", "--dataplane", "calico", "--pods", "4", "--prefix", prefix)
	if probs := usageProblems(r2, "is in use"); len(probs) > 0 {
		t.Errorf("second lab up: %v", probs)
	}
	if got := lab.Namespaces(prefix); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces after the refused lab up: %v", got)
	}

	r = runCnb(t, runOpts{}, "lab", "down", "--prefix", prefix)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("lab %s removed (%d namespaces)", prefix, len(want))) {
		t.Errorf("lab down: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if left := lab.Leftovers(prefix); len(left) > 0 {
		t.Errorf("after lab down: %v", left)
	}
}
