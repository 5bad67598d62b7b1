package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

// killedOwnerEnv makes TestKilledLabOwner a lab owner to be killed; its value is
// "PREFIX DATAPLANE [PROXY]".
const killedOwnerEnv = "CNIBENCH_KILLED_OWNER"

// TestKilledLabOwner is the child of the tests that SIGKILL a run while its lab stands (it does
// nothing otherwise): it brings up a lab of the given data plane (and proxy) with a pod, a
// NodePort Service and a pod with CPU resources running a process, says "ready PREFIX" on stdout and waits to be killed (it cleans up by itself
// after a minute).
func TestKilledLabOwner(t *testing.T) {
	f := strings.Fields(os.Getenv(killedOwnerEnv))
	if len(f) < 2 {
		t.Skip("the child of the SIGKILL tests")
	}
	cfg := Config{Prefix: f[0], Dataplane: f[1]}
	if len(f) > 2 {
		cfg.Proxy = f[2]
	}
	ctx := context.Background()
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	sel := map[string]string{"app": "p"}
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "p", Node: "node0", Labels: sel}); err != nil {
		t.Fatal(err)
	}
	// A pod with CPU resources (cgroups of its own, and the shared pool's), running.
	cpu := cluster.CPU{LimitMilli: 1000}
	if _, cs := CPURoots(); cs != "" {
		if all, _ := hostCPUs(cs); len(all) > 1 {
			cpu.Exclusive = true
		}
	}
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "vnf", Node: "node0", CPU: cpu}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Start(ctx, "vnf", []string{"sleep", "60"}, cluster.Ready{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreateServices(ctx, []cluster.ServiceSpec{{Name: "s", Selector: sel, NodePort: true, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}}}}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ready %s\n", cfg.Prefix)
	time.Sleep(time.Minute)
}

// killedOwner is a child process owning a lab, to be SIGKILLed.
type killedOwner struct {
	cmd    *exec.Cmd
	ready  chan string
	waited bool
}

// startKilledOwner starts TestKilledLabOwner for a lab of prefix and waits until its lab
// stands; the test's cleanup kills it (if the test did not) and removes the lab.
func startKilledOwner(t *testing.T, prefix, dataplane, proxy string) *killedOwner {
	t.Helper()
	o := &killedOwner{cmd: exec.Command(os.Args[0], "-test.run=^TestKilledLabOwner$", "-test.count=1"), ready: make(chan string, 1)}
	o.cmd.Env = append(os.Environ(), killedOwnerEnv+"="+strings.TrimSpace(prefix+" "+dataplane+" "+proxy))
	o.cmd.Stderr = os.Stderr
	stdout, err := o.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Clean(prefix) })
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !o.waited {
			_ = o.cmd.Process.Kill()
			_ = o.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				o.ready <- strings.TrimPrefix(sc.Text(), "ready ")
			}
		}
		close(o.ready)
	}()
	select {
	case got, ok := <-o.ready:
		if !ok || got != prefix {
			t.Fatalf("child said %q (%v), want ready %s", got, ok, prefix)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child not ready after 30 s")
	}
	return o
}

// kill SIGKILLs the child and checks that it died of it.
func (o *killedOwner) kill(t *testing.T) {
	t.Helper()
	if err := o.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select { // its stdout read to the end before Wait closes it
	case <-drained(o.ready):
	case <-time.After(5 * time.Second):
	}
	err := o.cmd.Wait()
	o.waited = true
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed", err)
	}
}

// drained is closed once c is closed, whatever was sent on it meanwhile.
func drained(c <-chan string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range c {
		}
		close(done)
	}()
	return done
}
