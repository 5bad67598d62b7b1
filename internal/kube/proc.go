package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
)

// busybox is the tools image's multi-call binary; helper commands name it explicitly so they
// do not depend on PATH.
const busybox = "/bin/busybox"

// startScript starts "$@" in the background with stdin from /dev/null and stdout and stderr
// in the file $1, and prints its PID. It is a constant: the log path and the argv arrive as
// positional parameters (separate exec arguments), so nothing in them is interpreted.
const startScript = `log=$1; shift; exec "$@" </dev/null >"$log" 2>&1 & echo $!`

// startArgv is the exec argv that starts argv in the background logging to logPath.
func startArgv(logPath string, argv []string) []string {
	return append([]string{busybox, "sh", "-c", startScript, "sh", logPath}, argv...)
}

var readyPoll = 200 * time.Millisecond

// process is a server started in a pod with Start; it implements cluster.Process.
type process struct {
	c     *Cluster
	pod   string
	pid   int
	log   string
	argv0 string

	once    sync.Once
	stopErr error

	mu    sync.Mutex
	out   []byte
	final bool // out is final: stopped, or the pod is gone
}

// Start implements cluster.Cluster: starts argv in the background in the pod (see
// startScript) and, with ready.TCPPort, waits up to 30 s until something listens on that port
// in the pod's network namespace. The port must be free before the start (a host-network pod
// sees the node's sockets).
func (c *Cluster) Start(ctx context.Context, pod string, argv []string, ready cluster.Ready) (cluster.Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	if ready.TCPPort > 0 {
		ports, err := c.listening(ctx, pod)
		if err != nil {
			return nil, err
		}
		if ports[ready.TCPPort] {
			return nil, fmt.Errorf("TCP port %d already in use in pod %s before starting %s", ready.TCPPort, pod, argv[0])
		}
	}
	c.mu.Lock()
	c.seq++
	logPath := fmt.Sprintf("/tmp/cnb-%d.log", c.seq)
	c.mu.Unlock()
	res, err := c.execPlain(ctx, pod, startArgv(logPath, argv))
	if err != nil {
		return nil, fmt.Errorf("start %s in pod %s: %w", argv[0], pod, err)
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if res.ExitCode != 0 || perr != nil || pid <= 0 {
		return nil, fmt.Errorf("start %s in pod %s: exit %d, output %q %q", argv[0], pod, res.ExitCode, res.Stdout, res.Stderr)
	}
	p := &process{c: c, pod: pod, pid: pid, log: logPath, argv0: argv[0]}
	c.mu.Lock()
	c.procs[p] = true
	c.mu.Unlock()
	if ready.TCPPort == 0 {
		return p, nil
	}
	fail := func(format string, args ...any) (cluster.Process, error) {
		err := fmt.Errorf(format, args...)
		_ = p.Stop()
		if tail := logTail(p.Output(), 20); tail != "" {
			err = fmt.Errorf("%w: %s", err, tail)
		}
		return nil, err
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		ports, err := c.listening(ctx, pod)
		if err != nil {
			return fail("%s in pod %s: %v", argv[0], pod, err)
		}
		if ports[ready.TCPPort] {
			return p, nil
		}
		alive, err := p.alive(ctx)
		if err != nil {
			return fail("%s in pod %s: %v", argv[0], pod, err)
		}
		if !alive {
			return fail("%s exited in pod %s", argv[0], pod)
		}
		if time.Now().After(deadline) {
			return fail("%s in pod %s not listening on TCP %d after %s", argv[0], pod, ready.TCPPort, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return fail("%s in pod %s: %v", argv[0], pod, ctx.Err())
		case <-time.After(readyPoll):
		}
	}
}

// listening returns the TCP ports in LISTEN state in the pod's network namespace.
func (c *Cluster) listening(ctx context.Context, pod string) (map[int]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// tcp6 is missing on a kernel without IPv6: cat then exits 1 but prints tcp.
	res, err := c.execPlain(ctx, pod, []string{busybox, "cat", "/proc/net/tcp", "/proc/net/tcp6"})
	if err != nil {
		return nil, fmt.Errorf("read /proc/net/tcp: %w", err)
	}
	if len(res.Stdout) == 0 {
		return nil, fmt.Errorf("read /proc/net/tcp: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return cluster.ListeningPorts(res.Stdout), nil
}

// alive reports whether the process still runs. Its parent exits at once, so it is reparented
// to the container's PID 1 (sleep), which never reaps: a dead server stays a zombie and
// `kill -0` would still succeed. Hence /proc/PID/stat's state.
func (p *process) alive(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	res, err := p.c.execPlain(ctx, p.pod, []string{busybox, "cat", fmt.Sprintf("/proc/%d/stat", p.pid)})
	if err != nil {
		return false, err
	}
	if res.ExitCode != 0 {
		return false, nil
	}
	st, ok := procState(res.Stdout)
	return ok && st != "Z" && st != "X" && st != "x", nil
}

// idleScript sends signal $2 (a number) to each child of PID $1 that stayed asleep, without
// running once, for $3 seconds, and prints how many it signalled: procs.SignalIdleChildren's
// rule, run in the pod (its processes are not the host's). A constant: the arguments arrive as
// positional parameters.
const idleScript = `p=$1; sig=$2; q=$3; bb=/bin/busybox
snap() { for c in $($bb cat /proc/$p/task/$p/children 2>/dev/null); do
  $bb awk -v c=$c '/^State:/ {s=$2} /ctxt_switches:/ {n+=$2} END {if (s=="S") print c ":" n}' /proc/$c/status 2>/dev/null
done; }
a=$(snap); n=0
if [ -n "$a" ]; then
  $bb sleep $q; b=" $(echo $(snap)) "
  for x in $a; do case "$b" in *" $x "*) $bb kill -$sig ${x%%:*} 2>/dev/null && n=$((n+1));; esac; done
fi
echo $n`

// SignalIdleChildren implements cluster.IdleChildSignaler in the pod (idleScript).
func (p *process) SignalIdleChildren(sig syscall.Signal, quiet time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := p.c.execPlain(ctx, p.pod, []string{busybox, "sh", "-c", idleScript, "sh",
		strconv.Itoa(p.pid), strconv.Itoa(int(sig)), strconv.FormatFloat(quiet.Seconds(), 'f', 3, 64)})
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil || res.ExitCode != 0 {
		return 0, fmt.Errorf("signal idle children of %s in pod %s: exit %d, output %q %q", p.argv0, p.pod, res.ExitCode, res.Stdout, res.Stderr)
	}
	return n, nil
}

// procState is the state field of /proc/PID/stat text (the field after the command name in
// parentheses, which may itself contain spaces and parentheses).
func procState(b []byte) (string, bool) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}

// Stop implements cluster.Process: SIGTERM, SIGKILL if still running after 2 s, and waits
// until the process is gone; keeps the final output for Output.
func (p *process) Stop() error {
	p.once.Do(func() {
		p.stopErr = p.stop()
		p.c.mu.Lock()
		delete(p.c.procs, p)
		p.c.mu.Unlock()
	})
	return p.stopErr
}

func (p *process) stop() error {
	p.mu.Lock()
	final := p.final
	p.mu.Unlock()
	if final {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pid := strconv.Itoa(p.pid)
	if _, err := p.c.execPlain(ctx, p.pod, []string{busybox, "kill", pid}); err != nil {
		if p.c.podGone(ctx, p.pod) {
			p.markGone()
			return nil
		}
		return fmt.Errorf("stop %s in pod %s: %w", p.argv0, p.pod, err)
	}
	if !p.waitDead(ctx, 2*time.Second) {
		if _, err := p.c.execPlain(ctx, p.pod, []string{busybox, "kill", "-9", pid}); err != nil {
			return fmt.Errorf("stop %s in pod %s: %w", p.argv0, p.pod, err)
		}
		if !p.waitDead(ctx, 5*time.Second) {
			return fmt.Errorf("stop %s in pod %s: PID %d still running after SIGKILL", p.argv0, p.pod, p.pid)
		}
	}
	p.Output()
	p.markGone()
	return nil
}

// waitDead polls until the process is gone or d passes.
func (p *process) waitDead(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		alive, err := p.alive(ctx)
		if err == nil && !alive {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// markGone freezes the output: the process is stopped or its pod is gone.
func (p *process) markGone() {
	p.mu.Lock()
	p.final = true
	p.mu.Unlock()
}

// Output implements cluster.Process: the log file's contents (the last ones read once the
// process is stopped or its pod deleted).
func (p *process) Output() []byte {
	p.mu.Lock()
	if p.final {
		defer p.mu.Unlock()
		return append([]byte(nil), p.out...)
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.c.execPlain(ctx, p.pod, []string{busybox, "cat", p.log})
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && res.ExitCode == 0 && !p.final {
		p.out = res.Stdout
	}
	return append([]byte(nil), p.out...)
}

// logTail is the last n lines of b, trimmed.
func logTail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// stopProcs stops the processes started in a pod.
func (c *Cluster) stopProcs(pod string) {
	c.mu.Lock()
	var ps []*process
	for p := range c.procs {
		if p.pod == pod {
			ps = append(ps, p)
		}
	}
	c.mu.Unlock()
	for _, p := range ps {
		_ = p.Stop()
	}
}

func (c *Cluster) podGone(ctx context.Context, name string) bool {
	_, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, c.podName(name), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// NodeCPU implements cluster.Cluster: /proc/stat read in a pod of this run on the node
// (/proc/stat is not namespaced, so any pod sees the node's counters).
func (c *Cluster) NodeCPU(ctx context.Context, node string) (cluster.CPUSample, error) {
	c.mu.Lock()
	var pods []string
	for _, p := range c.pods {
		if p.Node == node {
			pods = append(pods, p.Name)
		}
	}
	c.mu.Unlock()
	if len(pods) == 0 {
		return cluster.CPUSample{}, fmt.Errorf("no pod of this run on node %s to read /proc/stat in", node)
	}
	sort.Strings(pods)
	var errs []error
	for _, pod := range pods {
		res, err := c.execPlain(ctx, pod, []string{busybox, "cat", "/proc/stat"})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("cat /proc/stat exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		if err == nil {
			return cluster.ParseProcStat(res.Stdout)
		}
		if ctx.Err() != nil {
			return cluster.CPUSample{}, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("pod %s: %w", pod, err))
	}
	return cluster.CPUSample{}, fmt.Errorf("node %s CPU: %w", node, errors.Join(errs...))
}
