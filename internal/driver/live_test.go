package driver

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// freePort returns a currently unused TCP port on loopback.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer runs d's server on a free port, waits until it accepts connections and
// stops it (by its PID) when the test ends.
func startServer(t *testing.T, d Driver) int {
	t.Helper()
	port := freePort(t)
	argv := d.ServerCommand(port)
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			// let the server finish with the probe connection before the real trial
			time.Sleep(200 * time.Millisecond)
			return port
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v does not listen on %s", argv, addr)
		}
	}
}

func TestLiveLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	for _, p := range Protocols() {
		t.Run(p, func(t *testing.T) {
			d, _ := For(p)
			server := map[string]string{"iperf3": "iperf3", "netperf": "netserver"}[d.Name()]
			for _, tool := range []string{d.Name(), server} {
				if _, err := exec.LookPath(tool); err != nil {
					t.Skipf("%s not in PATH", tool)
				}
			}
			s := Spec{Protocol: p, Target: "127.0.0.1", Port: startServer(t, d), DurationS: 1}
			if p == "crr" {
				s.DataPort = freePort(t)
			}
			argv := d.Command(s)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, runErr := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
			m, err := d.Parse(out, s)
			if err != nil {
				t.Fatalf("%v: %v (exit: %v)\n%s", argv, err, runErr, out)
			}
			key := "throughput_bps"
			if d.Name() == "netperf" {
				key = "transactions_per_s"
			}
			if m[key] <= 0 {
				t.Errorf("%v: %s = %v, want > 0 (metrics %v)", argv, key, m[key], m)
			}
			t.Logf("%v: %v", argv, m)
		})
	}
}
