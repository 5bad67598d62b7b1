package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

// allowedCPUs is the Cpus_allowed_list of a process (pid 0: a new one run in pod), as a CPU
// list ("2-3").
func allowedCPUs(t *testing.T, l *Lab, pod string, pid int) string {
	t.Helper()
	var status []byte
	if pid != 0 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		status = b
	} else {
		res, err := l.Exec(context.Background(), pod, []string{"cat", "/proc/self/status"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("cat in %s: %v %s", pod, err, res.Stderr)
		}
		status = res.Stdout
	}
	cpus, err := cluster.AllowedCPUs(status)
	if err != nil {
		t.Fatal(err)
	}
	return cluster.FormatCPUList(cpus)
}

// cpuTime is a process's user+system time.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// Pod CPU resources: a limit is a CFS quota that really caps a busy loop; an exclusive pod
// runs on a CPU of its own and every other pod process (running or started later) moves off
// it; a request the host cannot meet is refused as unsupported; deleting the pod gives the CPU
// back; and nothing of it is left after the lab is closed.
func TestPodCPU(t *testing.T) {
	needRoot(t)
	cpuRoot, cpusetRoot := CPURoots()
	if cpuRoot == "" || cpusetRoot == "" {
		t.Skip("no cgroup v1 cpu and cpuset hierarchies on this host")
	}
	all, err := hostCPUs(cpusetRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Skip("exclusive CPUs need 2 CPUs")
	}
	l := upLab(t, Config{Dataplane: "flannel", Nodes: 1})
	ctx := context.Background()
	busy := []string{"sh", "-c", "while :; do :; done"}

	// A plain pod's busy loop, started before anything is exclusive: it may run anywhere.
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "plain", Node: "node0"}); err != nil {
		t.Fatal(err)
	}
	plain, err := l.Start(ctx, "plain", busy, cluster.Ready{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	plainPID := plain.(*proc).cmd.Process.Pid
	if got := allowedCPUs(t, l, "", plainPID); got != cluster.FormatCPUList(all) && got != fmt.Sprintf("%d-%d", all[0], all[len(all)-1]) {
		t.Errorf("plain pod before any exclusive grant runs on %s", got)
	}

	// 200m: the busy loop gets about a fifth of a CPU (at most 0.2 s a second, plus a period).
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "limited", Node: "node0", CPU: cluster.CPU{LimitMilli: 200}}); err != nil {
		t.Fatal(err)
	}
	lim, err := l.Start(ctx, "limited", busy, cluster.Ready{})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Stop()
	limPID := lim.(*proc).cmd.Process.Pid
	dir := filepath.Join(cpuRoot, l.Prefix()+"-limited")
	if q, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us")); strings.TrimSpace(string(q)) != "20000" {
		t.Errorf("cfs quota %q, want 20000 (200m of a 100 ms period)", q)
	}
	if procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); !strings.Contains(string(procs), strconv.Itoa(limPID)) {
		t.Errorf("pid %d not in %s: %q", limPID, dir, procs)
	}
	t0, w0 := cpuTime(t, limPID), time.Now()
	time.Sleep(2 * time.Second)
	used, wall := cpuTime(t, limPID)-t0, time.Since(w0)
	if limit := time.Duration(float64(wall)*0.2) + 150*time.Millisecond; used > limit || used < 50*time.Millisecond {
		t.Errorf("busy loop at 200m used %s of CPU in %s, want about a fifth (at most %s)", used, wall, limit)
	}
	if st, _ := os.ReadFile(filepath.Join(dir, "cpu.stat")); !strings.Contains(string(st), "nr_throttled") || strings.Contains(string(st), "nr_throttled 0\n") {
		t.Errorf("the limited pod was never throttled: %s", st)
	}

	// Exclusive: the highest CPU, and the plain pod's running loop moves off it.
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "vnf", Node: "node0", CPU: cluster.CPU{Exclusive: true}}); err != nil {
		t.Fatal(err)
	}
	top := all[len(all)-1]
	var rest []int
	for _, c := range all[:len(all)-1] {
		rest = append(rest, c)
	}
	if got := allowedCPUs(t, l, "vnf", 0); got != strconv.Itoa(top) {
		t.Errorf("exclusive pod runs on %s, want %d", got, top)
	}
	want := cluster.FormatCPUList(rest)
	if len(rest) > 1 {
		want = fmt.Sprintf("%d-%d", rest[0], rest[len(rest)-1])
	}
	if got := allowedCPUs(t, l, "", plainPID); got != want {
		t.Errorf("running plain pod process on %s after the grant, want %s", got, want)
	}
	if got := allowedCPUs(t, l, "plain", 0); got != want {
		t.Errorf("new plain pod process on %s, want %s", got, want)
	}

	// More exclusive CPUs than the host has left (CPU 0 stays shared): unsupported, and the
	// pod does not exist.
	_, err = l.CreatePod(ctx, cluster.PodSpec{Name: "greedy", Node: "node0", CPU: cluster.CPU{Exclusive: true, LimitMilli: 1000 * len(all)}})
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "CPU 0 stays shared") {
		t.Errorf("too many exclusive CPUs: %v", err)
	}
	if _, err := l.Pod("greedy"); err == nil {
		t.Error("the refused pod exists")
	}
	// Another lab on the host cannot have the CPU this one's pod holds.
	if len(all) == 2 {
		l2 := upLab(t, Config{Dataplane: "flannel", Nodes: 1})
		_, err := l2.CreatePod(ctx, cluster.PodSpec{Name: "vnf", Node: "node0", CPU: cluster.CPU{Exclusive: true}})
		if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "0 of them free") {
			t.Errorf("a second lab's exclusive pod while the first holds CPU %d: %v", top, err)
		}
	}
	for _, bad := range []cluster.PodSpec{
		{Name: "half", Node: "node0", CPU: cluster.CPU{Exclusive: true, LimitMilli: 1500}},
		{Name: "quiet", Node: "node0", Silent: true, CPU: cluster.CPU{LimitMilli: 100}},
	} {
		if _, err := l.CreatePod(ctx, bad); !errors.Is(err, cluster.ErrBadInput) {
			t.Errorf("%s: %v, want bad input", bad.Name, err)
		}
	}

	// Deleting the exclusive pod gives its CPU back to the shared pool and removes its cgroups.
	if err := l.DeletePods(ctx, []string{"vnf"}); err != nil {
		t.Fatal(err)
	}
	if got := allowedCPUs(t, l, "", plainPID); got != cluster.FormatCPUList(all) && got != fmt.Sprintf("%d-%d", all[0], top) {
		t.Errorf("plain pod process on %s after the exclusive pod went", got)
	}
	if _, err := os.Stat(filepath.Join(cpusetRoot, l.Prefix()+"-vnf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exclusive pod's cpuset is still there: %v", err)
	}
	left := strings.Join(Leftovers(l.Prefix()), " ")
	for _, d := range []string{filepath.Join(cpuRoot, l.Prefix()+"-limited"), filepath.Join(cpusetRoot, l.Prefix()+"-shared")} {
		if !strings.Contains(left, "cgroup "+d) {
			t.Errorf("leftovers %q do not name %s", left, d)
		}
	}
	// upLab's cleanup checks that Close leaves nothing (the limited pod's and the shared cgroups).
}
