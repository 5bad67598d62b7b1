package lab

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/nf"
)

// The lab's chains: pods that reach each other only through the chain's network functions,
// whose namespaces go with the pods; a bpf file system a chain mounted (and a killed run left)
// is unmounted by Clean.
func TestChainPodsAndTeardown(t *testing.T) {
	l := upLab(t, Config{Dataplane: "bare", Nodes: 1})
	ctx := context.Background()
	ports := []cluster.ServicePort{{Port: 5201, Protocol: "tcp"}}
	c, s, _, err := l.Chain(ctx, cluster.ChainSpec{Client: "client", Server: "server", NF: "route-iptables", Length: 3, Rules: 10, Ports: ports})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(t, l, c.Name, s.IP, 100); err == nil {
		t.Fatal("ICMP went through the chain, whose rules allow only TCP 5201")
	}
	// Three NFs routed: the server is three hops away.
	cns, _ := l.PodNS("client")
	srv, err := l.Start(ctx, s.Name, []string{"iperf3", "-s", "-1"}, cluster.Ready{TCPPort: 5201})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if out, err := nsenter(t, cns, "iperf3", "-c", s.IP, "-t", "1"); err != nil {
		t.Fatalf("iperf3 through the chain: %v\n%s", err, out)
	}
	var nfs []string
	for _, ns := range Namespaces(l.Prefix()) {
		if strings.HasPrefix(ns, l.Prefix()+"-nf") {
			nfs = append(nfs, ns)
		}
	}
	if len(nfs) != 3 {
		t.Fatalf("want 3 NF namespaces, have %v", nfs)
	}
	if _, _, _, err := l.Chain(ctx, cluster.ChainSpec{Client: "c2", Server: "s2", NF: "no-such-kind", Length: 1, Rules: 10, Ports: ports}); !errors.Is(err, cluster.ErrBadInput) {
		t.Errorf("unknown kind: want bad input, got %v", err)
	}
	if err := l.DeletePods(ctx, []string{"client", "server"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range Namespaces(l.Prefix()) {
		if strings.HasPrefix(ns, l.Prefix()+"-nf") {
			t.Errorf("NF namespace %s left after its pods were deleted", ns)
		}
	}

	// A bpf file system under the lab's state (as a chain of an eBPF kind mounts it, here
	// left by a "killed" run) is found and unmounted by Clean.
	dir := filepath.Join(l.StateDir(), "bpf9")
	if err := nf.MountBPF(dir); err != nil {
		t.Fatal(err)
	}
	if left := Leftovers(l.Prefix()); !containsPrefix(left, "mount "+dir) {
		t.Errorf("leftovers do not name the bpf mount: %v", left)
	}
	if err := Clean(l.Prefix()); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(StateRoot, l.Prefix()); len(m) > 0 {
		t.Errorf("mounts left after Clean: %v", m)
	}
}

func containsPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
