package lab

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

// testPrefix returns a fresh prefix for the test family "cnbt".
func testPrefix() string {
	const a = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte("cnbt")
	for i := 0; i < 4; i++ {
		b = append(b, a[rand.Intn(len(a))])
	}
	return string(b)
}

// upLab builds a lab and registers its teardown, which also asserts nothing is left.
func upLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	needRoot(t)
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix()
	}
	l, err := Up(context.Background(), cfg)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("lab close: %v", err)
		}
		if left := Leftovers(cfg.Prefix); len(left) > 0 {
			t.Errorf("leftovers after close: %v", left)
		}
	})
	return l
}

func nsenter(t *testing.T, ns string, argv ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + nsPath(ns), "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

func nsenterStdin(t *testing.T, ns, stdin string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=" + nsPath(ns), "--"}, argv...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func ping(t *testing.T, l *Lab, from, to string, size int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	argv := []string{"ping", "-c", "3", "-i", "0.2", "-W", "1", "-M", "do", "-s", fmt.Sprint(size), to}
	res, err := l.Exec(ctx, from, argv)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("ping %s from %s: exit %d: %s%s", to, from, res.ExitCode, res.Stdout, res.Stderr)
	}
	return nil
}

func TestPodConnectivityPresets(t *testing.T) {
	for _, preset := range []string{"flannel", "flannel-hostgw", "calico", "calico-vxlan"} {
		t.Run(preset, func(t *testing.T) {
			l := upLab(t, Config{Dataplane: preset})
			ctx := context.Background()
			a, err := l.CreatePod(ctx, cluster.PodSpec{Name: "a", Node: "node0"})
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.CreatePod(ctx, cluster.PodSpec{Name: "b", Node: "node0"})
			if err != nil {
				t.Fatal(err)
			}
			c, err := l.CreatePod(ctx, cluster.PodSpec{Name: "c", Node: "node1"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("a=%s b=%s c=%s", a.IP, b.IP, c.IP)
			// Full-size packets with DF: proves the pod MTU fits the path.
			size := l.PodMTU() - 28
			if err := ping(t, l, "a", b.IP, size); err != nil {
				t.Errorf("intra: %v", err)
			}
			if err := ping(t, l, "a", c.IP, size); err != nil {
				t.Errorf("inter: %v", err)
			}
			if err := ping(t, l, "c", a.IP, size); err != nil {
				t.Errorf("inter back: %v", err)
			}
			ns, _ := l.PodNS("a")
			out, _ := nsenter(t, ns, "ip", "-o", "link", "show", "eth0")
			if !strings.Contains(out, fmt.Sprintf("mtu %d ", l.PodMTU())) {
				t.Errorf("pod eth0 MTU: want %d, got %s", l.PodMTU(), out)
			}
			if err := l.DeletePod(ctx, "b"); err != nil {
				t.Errorf("delete pod: %v", err)
			}
		})
	}
}
