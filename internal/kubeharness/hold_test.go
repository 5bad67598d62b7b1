package kubeharness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/kube"
)

// TestHold keeps a harness cluster up for exploration: CNIBENCH_KUBE_HOLD=FILE writes the
// kubeconfig path to FILE and tears down once FILE is removed.
func TestHold(t *testing.T) {
	f := os.Getenv("CNIBENCH_KUBE_HOLD")
	if f == "" {
		t.Skip("CNIBENCH_KUBE_HOLD=FILE holds a cluster up for exploration")
	}
	h := upForTest(t, "iptables")
	if err := os.WriteFile(f, []byte(h.Kubeconfig+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(f); err != nil {
			return
		}
		time.Sleep(time.Second)
	}
}

// TestHeld runs the real-cluster checks against a held cluster (CNIBENCH_KUBE_HELD=its admin
// kubeconfig), for iterating on one without bringing a cluster up each time; pick them with
// -run 'TestHeld/NAME'.
func TestHeld(t *testing.T) {
	kc := os.Getenv("CNIBENCH_KUBE_HELD")
	if kc == "" {
		t.Skip("CNIBENCH_KUBE_HELD=KUBECONFIG runs the real-cluster checks on a held cluster")
	}
	h := &Harness{Kubeconfig: kc}
	bin := buildCLI(t)
	t.Run("fake-nodes", func(t *testing.T) { fakeNodesOnCluster(t, h) })
	t.Run("rbac", func(t *testing.T) { rbacOnCluster(t, h, bin) })
	t.Run("backend", func(t *testing.T) { backendOnCluster(t, h) })
	t.Run("cli-fake-nodes", func(t *testing.T) { cliFakeNodes(t, h, bin) })
	t.Run("cli-p2s", func(t *testing.T) { cliOnCluster(t, h, bin, "--scenario", "p2s") })
}

// TestHeldIperfService tries iperf3 through a real ClusterIP with flag variants (diagnosis).
func TestHeldIperfService(t *testing.T) {
	kc := os.Getenv("CNIBENCH_KUBE_HELD")
	if kc == "" {
		t.Skip("CNIBENCH_KUBE_HELD=KUBECONFIG")
	}
	ctx := context.Background()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: kc, RunID: "iperf-svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	c, err := cl.CreatePod(ctx, cluster.PodSpec{Name: "client", Node: "node0", Labels: map[string]string{"role": "client"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.CreatePod(ctx, cluster.PodSpec{Name: "server", Node: "node1", Labels: map[string]string{"role": "server"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cl.CreateService(ctx, cluster.ServiceSpec{Name: "server", Selector: map[string]string{"role": "server"},
		Ports: []cluster.ServicePort{{Name: "t", Port: 5201, Protocol: "tcp"}, {Name: "u", Port: 5201, Protocol: "udp"}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.Start(ctx, s.Name, []string{"iperf3", "-s", "-p", "5201"}, cluster.Ready{TCPPort: 5201})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	time.Sleep(2 * time.Second)
	for _, args := range [][]string{
		{"-c", s.IP, "-t", "2"},
		{"-c", svc.ClusterIP, "-t", "2"},
		{"-c", svc.ClusterIP, "-t", "2", "-N"},
		{"-c", svc.ClusterIP, "-t", "2", "-M", "1448"},
		{"-c", svc.ClusterIP, "-t", "2", "-Z"},
		{"-c", svc.ClusterIP, "-t", "2", "-u", "-b", "0"},
	} {
		tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		res, err := cl.Exec(tctx, c.Name, append([]string{"iperf3", "-p", "5201", "--connect-timeout", "3000"}, args...))
		cancel()
		out := string(res.Stdout)
		if len(out) > 300 {
			out = out[len(out)-300:]
		}
		t.Logf("%v: err %v exit %d\n%s\n%s", args, err, res.ExitCode, out, res.Stderr)
		time.Sleep(time.Second)
	}
}
