package kubeharness

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/iptsave"
	"github.com/cnibench/cnibench/internal/kube"
)

// chainOnCluster builds a service-function chain of two route-iptables pods between a client
// and a server pod on the real cluster and proves it: allowed TCP arrives, denied TCP (something
// listens there) is dropped, both NFs forwarded the allowed flow and the first dropped the
// denied one; a transparent kind is skipped with the reason (no Multus here); deleting the
// client deletes the whole chain. Then the CLI runs the chain scenario against the cluster.
func chainOnCluster(t *testing.T, h *Harness, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: h.Kubeconfig, RunID: "chain-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)

	_, _, _, err = cl.Chain(ctx, cluster.ChainSpec{Client: "tclient", Server: "tserver", NF: "ebpf-tc", Length: 1, Rules: 10,
		Ports: []cluster.ServicePort{{Port: 5201, Protocol: "tcp"}}})
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "Multus is not installed") {
		t.Errorf("a transparent kind on a cluster without Multus: %v, want unsupported naming Multus", err)
	}

	const allowed, denied = 5201, 5299
	client, server, ctl, err := cl.Chain(ctx, cluster.ChainSpec{Client: "client", Server: "server", NF: "route-iptables", Length: 2, Rules: 100,
		Ports: []cluster.ServicePort{{Port: allowed, Protocol: "tcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Resume(); err != nil {
		t.Fatal(err)
	}
	send := func(port int) (string, cluster.ExecResult) {
		t.Helper()
		p := strconv.Itoa(port)
		srv, err := cl.Start(ctx, server.Name, []string{"busybox", "nc", "-l", "-p", p}, cluster.Ready{TCPPort: port})
		if err != nil {
			t.Fatal(err)
		}
		res, err := cl.Exec(ctx, client.Name, []string{"sh", "-c", "echo through-" + p + " | busybox nc -w 3 " + server.IP + " " + p})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		_ = srv.Stop()
		return string(srv.Output()), res
	}
	if got, res := send(allowed); !strings.Contains(got, "through-5201") {
		t.Errorf("allowed TCP %d: the server got %q (client exit %d: %s)", allowed, got, res.ExitCode, res.Stderr)
	}
	if got, res := send(denied); strings.Contains(got, "through") || res.ExitCode == 0 {
		t.Errorf("denied TCP %d went through the chain: the server got %q, client exit %d", denied, got, res.ExitCode)
	}
	for i, pod := range []string{"client-nf1", "client-nf2"} {
		res, err := cl.Exec(ctx, pod, []string{"iptables-save", "-c", "-t", "filter"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("iptables-save in %s: %v %s", pod, err, res.Stderr)
		}
		if n, ok, err := iptsave.RulePackets(res.Stdout, "--dport 5201 -j ACCEPT"); err != nil || !ok || n == 0 {
			t.Errorf("%s forwarded no packet of the allowed flow (%d, rule found %v, %v):\n%s", pod, n, ok, err, res.Stdout)
		}
		drops, err := iptsave.ForwardDrops(res.Stdout)
		if err != nil {
			t.Fatal(err)
		}
		// The first NF dropped the setup check's pings and the denied SYNs; the second saw none.
		if i == 0 && drops < 3 || i == 1 && drops != 0 {
			t.Errorf("%s dropped %d packets", pod, drops)
		}
	}
	if err := cl.DeletePods(ctx, []string{client.Name}); err != nil {
		t.Fatal(err)
	}
	list, err := clientset(t, h.Kubeconfig).CoreV1().Pods(cl.Namespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		t.Errorf("pod %s left after the chain's client was deleted", p.Name)
	}

	sum := cliSummary(t, h, bin, false, "--scenario", "chain", "--nf", "route-iptables,xdp", "--chain-length", "1,2", "--protocol", "tcp,rr")
	for _, r := range sum.Results {
		want := "ok"
		if r.Case.NF == "xdp" {
			want = "skipped"
		}
		if r.Status != want {
			t.Errorf("%s: status %q (%s), want %s", r.Case.ID, r.Status, r.Reason, want)
		}
	}
}
