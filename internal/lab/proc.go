package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/procs"
)

// proc is a long-running process in a pod.
type proc struct {
	lab  *Lab
	pod  string
	cmd  *exec.Cmd
	out  *cluster.LockedBuffer
	done chan struct{}
	once sync.Once
}

func (p *proc) Output() []byte { return p.out.Bytes() }

// LocalOutput marks the output as this program's memory (cluster.LocalOutput).
func (p *proc) LocalOutput() {}

var _ cluster.LocalOutput = (*proc)(nil)

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stopGrace is how long Stop waits after SIGTERM before it kills the process group.
const stopGrace = 2 * time.Second

// Stop sends SIGTERM to the process group, SIGKILL after 2 s, and waits.
func (p *proc) Stop() error {
	p.once.Do(func() {
		procs.Stop(p.cmd.Process.Pid, p.done, stopGrace)
		p.lab.mu.Lock()
		delete(p.lab.procs, p)
		p.lab.mu.Unlock()
	})
	return nil
}

// Exec implements cluster.Cluster.
func (l *Lab) Exec(ctx context.Context, podName string, argv []string) (cluster.ExecResult, error) {
	p, err := l.pod(podName)
	if err != nil {
		return cluster.ExecResult{}, err
	}
	if len(argv) == 0 {
		return cluster.ExecResult{}, errors.New("empty command")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = procs.Attr()
	cmd.Cancel = func() error { return procs.Kill(cmd.Process.Pid) }
	if err := l.startProc(p, cmd); err != nil {
		return cluster.ExecResult{}, fmt.Errorf("start %s in pod %s: %w", argv[0], podName, err)
	}
	l.execStarted(p.ns, cmd.Process.Pid)
	err = cmd.Wait()
	l.execEnded(cmd.Process.Pid, cmd.ProcessState)
	res := cluster.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: cmd.ProcessState.ExitCode()}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return res, err
	}
	return res, nil
}

// Start implements cluster.Cluster.
func (l *Lab) Start(ctx context.Context, podName string, argv []string, ready cluster.Ready) (cluster.Process, error) {
	p, err := l.pod(podName)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	out := &cluster.LockedBuffer{}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group so Stop reaches children; die with cnibench if it is killed.
	cmd.SysProcAttr = procs.Attr()
	if err := l.startProc(p, cmd); err != nil {
		return nil, fmt.Errorf("start %s in pod %s: %w", argv[0], podName, err)
	}
	pr := &proc{lab: l, pod: podName, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(pr.done) }()
	l.mu.Lock()
	l.procs[pr] = true
	l.mu.Unlock()
	if ready.TCPPort == 0 {
		return pr, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pr.exited() {
			_ = pr.Stop()
			return nil, fmt.Errorf("%s exited in pod %s: %s", argv[0], podName, strings.TrimSpace(string(out.Bytes())))
		}
		if listening(cmd.Process.Pid, ready.TCPPort) {
			return pr, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = pr.Stop()
			return nil, fmt.Errorf("%s in pod %s not listening on TCP %d after 10 s", argv[0], podName, ready.TCPPort)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listening reports whether a socket listens on a TCP port in the netns of pid.
func listening(pid, port int) bool {
	var text []byte
	for _, f := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		text = append(text, b...)
	}
	return cluster.ListeningPorts(text)[port]
}

// stopProcs stops the lab's processes of one pod ("" = all).
func (l *Lab) stopProcs(pod string) {
	l.mu.Lock()
	var ps []*proc
	for p := range l.procs {
		if pod == "" || p.pod == pod {
			ps = append(ps, p)
		}
	}
	l.mu.Unlock()
	for _, p := range ps {
		_ = p.Stop()
	}
}

// SelfEnv names a cnibench executable for lab pods to run (tests set it to a binary they
// built); without it pods run the running executable when that is cnibench.
const SelfEnv = "CNIBENCH_SELF"

// SelfExecutable is the cnibench executable lab pods run ("" when there is none: a test
// binary is not cnibench).
func SelfExecutable() string {
	if p := os.Getenv(SelfEnv); p != "" {
		return p
	}
	exe, err := os.Executable()
	if err != nil || !strings.HasPrefix(filepath.Base(exe), "cnibench") || strings.HasSuffix(exe, ".test") {
		return ""
	}
	return exe
}

// startPod starts cmd in pod p's network namespace and its node's cgroup.
func (l *Lab) startPod(p *pod, cmd *exec.Cmd) error {
	n, err := l.node(p.Node)
	if err != nil {
		return err
	}
	if cg := l.nodeCgroup(n); cg != "" {
		f, err := os.Open(cg)
		if err != nil {
			return err
		}
		defer f.Close()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
	}
	if dirs := l.cpuCgroups(p); len(dirs) > 0 {
		return startGated(cmd, dirs, func(c *exec.Cmd) error { return startInNS(p.ns, c) })
	}
	return startInNS(p.ns, cmd)
}

// startProc starts cmd in pod p: in its namespace, and in its node's cgroup unless it is an
// external client.
func (l *Lab) startProc(p *pod, cmd *exec.Cmd) error {
	if p.External {
		return startInNS(p.ns, cmd)
	}
	return l.startPod(p, cmd)
}

// SignalIdleChildren implements cluster.IdleChildSignaler: the process's children are host
// processes.
func (p *proc) SignalIdleChildren(sig syscall.Signal, quiet time.Duration) (int, error) {
	sent, err := procs.SignalIdleChildren(p.cmd.Process.Pid, sig, quiet)
	return len(sent), err
}
