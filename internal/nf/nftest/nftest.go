// Package nftest proves a network-function kind does its job: it builds a real chain of
// network namespaces with the kind (needs root), sends traffic the rule set allows and traffic
// it denies, and fails unless the first arrives and the second is dropped. Every kind's test
// calls Check; everything is removed when the test ends, also when it fails.
package nftest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nf"
)

// Ports of the test flow: TCP allowedTCP and UDP allowedUDP pass; TCP deniedTCP and UDP
// deniedUDP (the allowed TCP port, over UDP) must not.
const (
	allowedTCP = 5201
	allowedUDP = 5202
	deniedTCP  = 5299
	deniedUDP  = 5201
)

// Ports is the test flow's ports.
var Ports = []nf.Port{{Proto: nf.TCP, Port: allowedTCP}, {Proto: nf.UDP, Port: allowedUDP}}

// StateRoot is where a test chain mounts its bpf file system (under the test prefix, so the
// suite's leftover check sees it if a test is killed).
const StateRoot = "/run/cnibench"

// NeedRoot skips a test that builds namespaces when not root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

// Build builds a chain of length n with rules rules of kind k between two new namespaces and
// removes everything when the test ends. A kind this host cannot run skips the test when
// CNIBENCH_REQUIRE_TOOLS is unset, and fails it otherwise.
func Build(t testing.TB, k nf.Kind, n, rules int) *nf.Chain {
	t.Helper()
	NeedRoot(t)
	if err := k.Usable(); err != nil {
		if os.Getenv("CNIBENCH_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s not usable on this host: %v", k.Name(), err)
		}
		t.Skipf("%s not usable on this host: %v", k.Name(), err)
	}
	prefix := netnstest.Prefix()
	client, server := prefix+"-c", prefix+"-s"
	state := filepath.Join(StateRoot, prefix)
	var ch *nf.Chain
	t.Cleanup(func() {
		if ch != nil {
			if err := ch.Close(); err != nil {
				t.Errorf("chain close: %v", err)
			}
		}
		for _, ns := range []string{client, server} {
			_ = netns.KillAll(ns)
			_ = netns.Delete(ns)
		}
		_ = nf.Unmount(filepath.Join(state, "bpf"))
		_ = os.RemoveAll(state)
		for i := 1; i <= n; i++ {
			if _, err := os.Stat(netns.Path(nfName(prefix, i))); err == nil {
				t.Errorf("NF namespace %s left behind", nfName(prefix, i))
			}
		}
	})
	for _, ns := range []string{client, server} {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	ch, err = nf.BuildChain(context.Background(), nf.ChainSpec{
		Kind: k, Length: n, Rules: rules, Ports: Ports, Client: client, Server: server,
		NFName: func(i int) string { return nfName(prefix, i) },
		Dir:    t.TempDir(), BPFDir: filepath.Join(state, "bpf"), MTU: 1500, CPU: -1,
	})
	if err != nil {
		t.Fatalf("build %s chain of %d: %v", k.Name(), n, err)
	}
	return ch
}

func nfName(prefix string, i int) string { return prefix + "-nf" + strconv.Itoa(i) }

// Check builds chains of kind k (one NF with 10 rules; two NFs with 1,000 rules) and proves
// for each that allowed TCP and UDP traffic arrives intact and denied TCP and UDP is dropped.
func Check(t *testing.T, k nf.Kind) {
	for _, c := range []struct{ n, rules int }{{1, 10}, {2, 1000}} {
		t.Run(fmt.Sprintf("len=%d/rules=%d", c.n, c.rules), func(t *testing.T) {
			ch := Build(t, k, c.n, c.rules)
			Traffic(t, ch)
		})
	}
}

// Traffic fails the test unless Verify passes on the chain.
func Traffic(t testing.TB, ch *nf.Chain) {
	t.Helper()
	if err := Verify(ch); err != nil {
		t.Fatal(err)
	}
}

// Verify checks a built chain: 1 MB over allowed TCP comes back intact and allowed UDP
// datagrams arrive; a TCP connection to a denied port (something listens there) neither
// connects nor is refused, and UDP datagrams to a denied port never arrive.
func Verify(ch *nf.Chain) error {
	kind := ch.Spec.Kind.Name()
	if err := EchoTCP(ch, allowedTCP, 1<<20, 10*time.Second); err != nil {
		return fmt.Errorf("allowed TCP %d through %s: %w", allowedTCP, kind, err)
	}
	if got := SendUDP(ch, allowedUDP, 20, time.Second); got == 0 {
		return fmt.Errorf("allowed UDP %d through %s: no datagram arrived", allowedUDP, kind)
	}
	if err := EchoTCP(ch, deniedTCP, 1000, 1500*time.Millisecond); err == nil {
		return fmt.Errorf("denied TCP %d went through %s", deniedTCP, kind)
	} else if !errors.Is(err, os.ErrDeadlineExceeded) && !isTimeout(err) {
		return fmt.Errorf("denied TCP %d: want a timeout (dropped), got %v (the packet reached the server)", deniedTCP, err)
	}
	if got := SendUDP(ch, deniedUDP, 20, time.Second); got != 0 {
		return fmt.Errorf("denied UDP %d went through %s: %d datagrams arrived", deniedUDP, kind, got)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// EchoTCP listens on port in the server's namespace, connects from the client's, sends size
// random bytes and reads them back, all within timeout.
func EchoTCP(ch *nf.Chain, port, size int, timeout time.Duration) error {
	var ln net.Listener
	if err := netns.Do(ch.Spec.Server, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(ch.ServerIP.String(), strconv.Itoa(port)))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		_, _ = io.Copy(c, c)
	}()
	var conn net.Conn
	if err := netns.Do(ch.Spec.Client, func() (err error) {
		conn, err = net.DialTimeout("tcp4", net.JoinHostPort(ch.ServerIP.String(), strconv.Itoa(port)), timeout)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	data := make([]byte, size)
	_, _ = rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		errc <- err
	}()
	back, err := io.ReadAll(conn)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("echo: sent %d bytes, got %d back (or different bytes)", len(data), len(back))
	}
	return nil
}

// SendUDP sends count datagrams from the client to port on the server and returns how many the
// server received within wait after the last one.
func SendUDP(ch *nf.Chain, port, count int, wait time.Duration) int {
	var pc net.PacketConn
	if err := netns.Do(ch.Spec.Server, func() (err error) {
		pc, err = net.ListenPacket("udp4", net.JoinHostPort(ch.ServerIP.String(), strconv.Itoa(port)))
		return err
	}); err != nil {
		return 0
	}
	defer pc.Close()
	var conn net.Conn
	if err := netns.Do(ch.Spec.Client, func() (err error) {
		conn, err = net.Dial("udp4", net.JoinHostPort(ch.ServerIP.String(), strconv.Itoa(port)))
		return err
	}); err != nil {
		return 0
	}
	defer conn.Close()
	got := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			_ = pc.SetReadDeadline(time.Now().Add(wait))
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got++
		}
	}()
	for i := 0; i < count; i++ {
		_, _ = conn.Write([]byte("cnibench nftest " + strconv.Itoa(i)))
		time.Sleep(5 * time.Millisecond)
	}
	<-done
	return got
}

// Kind returns the registered kind name, failing the test when there is none.
func Kind(t testing.TB, name string) nf.Kind {
	t.Helper()
	k, err := nf.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Recorder is a kind that keeps the instances it starts and their environments, so that a test
// can look inside an NF and close it itself. CPU, when set, replaces every NF's env.CPU.
type Recorder struct {
	nf.Kind
	CPU *int

	mu        sync.Mutex
	instances []nf.Instance
	envs      []nf.Env
}

// Start starts an NF of the kind and records it.
func (r *Recorder) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (nf.Instance, error) {
	if r.CPU != nil {
		env.CPU = *r.CPU
	}
	inst, err := r.Kind.Start(ctx, env, rules)
	if err == nil {
		r.mu.Lock()
		r.instances = append(r.instances, inst)
		r.envs = append(r.envs, env)
		r.mu.Unlock()
	}
	return inst, err
}

// Started returns the instances started so far and their environments, in order.
func (r *Recorder) Started() ([]nf.Instance, []nf.Env) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nf.Instance(nil), r.instances...), append([]nf.Env(nil), r.envs...)
}
