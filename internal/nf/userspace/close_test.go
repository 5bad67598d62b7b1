package userspace

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

// pinnedThreads counts this process's threads allowed on cpu only.
func pinnedThreads(t *testing.T, cpu int) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == strconv.Itoa(cpu) {
				n++
			}
		}
	}
	return n
}

// xdpAttached tells for each of the NF's interfaces whether an XDP program is attached.
func xdpAttached(t *testing.T, env nf.Env) []bool {
	t.Helper()
	h, err := netns.Netlink(env.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var out []bool
	for _, dev := range []string{env.In, env.Out} {
		lk, err := h.LinkByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		x := lk.Attrs().Xdp
		out = append(out, x != nil && x.Attached)
	}
	return out
}

func peerChecksums(t *testing.T, env nf.Env) []bool {
	t.Helper()
	var out []bool
	for _, ep := range []nf.Endpoint{env.InPeer, env.OutPeer} {
		on, err := nf.FeatureOn(ep, nf.TxChecksum)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, on)
	}
	return out
}

// TestCloseLeavesNothing starts each kind with its threads pinned, closes it while traffic
// flows, and checks that Close is prompt and idempotent and that no goroutine, pinned thread,
// XDP program or peer setting is left.
func TestCloseLeavesNothing(t *testing.T) {
	for _, name := range []string{"userspace", "userspace-afxdp"} {
		t.Run(name, func(t *testing.T) {
			cpu := runtime.NumCPU() - 1
			rec := &nftest.Recorder{Kind: nftest.Kind(t, name), CPU: &cpu}
			baseG, baseT := runtime.NumGoroutine(), pinnedThreads(t, cpu)
			ch := nftest.Build(t, rec, 1, 10)
			insts, envs := rec.Started()
			env, inst := envs[0], insts[0]
			afxdp := name == "userspace-afxdp"

			if got := nftest.SendUDP(ch, 5202, 5, 300*time.Millisecond); got == 0 {
				t.Fatal("no datagram arrived through the NF")
			}
			if runtime.NumCPU() > 1 {
				if n := pinnedThreads(t, cpu) - baseT; n != 2 {
					t.Fatalf("%d threads pinned to CPU %d, want the 2 forwarding threads", n, cpu)
				}
			}
			if got := xdpAttached(t, env); got[0] != afxdp || got[1] != afxdp {
				t.Fatalf("XDP attached on in/out: %v", got)
			}
			if got := peerChecksums(t, env); got[0] == afxdp || got[1] == afxdp {
				t.Fatalf("peers' transmit checksum offload on: %v", got)
			}

			// Traffic while Close runs: datagrams from the client, as fast as they go.
			var conn net.Conn
			if err := netns.Do(ch.Spec.Client, func() (err error) {
				conn, err = net.Dial("udp4", net.JoinHostPort(ch.ServerIP.String(), "5202"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := make([]byte, 64)
				for {
					select {
					case <-stop:
						return
					default:
						_, _ = conn.Write(msg)
					}
				}
			}()
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			err := inst.Close()
			took := time.Since(start)
			close(stop)
			wg.Wait()
			conn.Close()
			if err != nil {
				t.Fatalf("close: %v", err)
			}
			t.Logf("Close took %v under load", took)
			if took > time.Second {
				t.Fatalf("Close took %v", took)
			}
			if err := inst.Close(); err != nil {
				t.Fatalf("second close: %v", err)
			}
			if !netnstest.Eventually(2*time.Second, func() bool { return runtime.NumGoroutine() <= baseG }) {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines after Close, %d before Start:\n%s", runtime.NumGoroutine(), baseG, buf[:runtime.Stack(buf, true)])
			}
			if !netnstest.Eventually(2*time.Second, func() bool { return pinnedThreads(t, cpu) == baseT }) {
				tasks, _ := filepath.Glob("/proc/self/task/*")
				for _, d := range tasks {
					st, _ := os.ReadFile(d + "/status")
					if strings.Contains(string(st), "Cpus_allowed_list:\t"+strconv.Itoa(cpu)+"\n") {
						stack, _ := os.ReadFile(d + "/stack")
						wchan, _ := os.ReadFile(d + "/wchan")
						t.Logf("%s %s %s", d, wchan, stack)
					}
				}
				t.Fatalf("%d threads pinned to CPU %d after Close, %d before", pinnedThreads(t, cpu), cpu, baseT)
			}
			if got := xdpAttached(t, env); got[0] || got[1] {
				t.Fatalf("XDP still attached on in/out after Close: %v", got)
			}
			if got := peerChecksums(t, env); !got[0] || !got[1] {
				t.Fatalf("peers' transmit checksum offload not restored: %v", got)
			}
		})
	}
}
