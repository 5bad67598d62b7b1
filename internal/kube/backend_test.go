package kube

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/result"
)

func TestBackendRegistered(t *testing.T) {
	b, err := cluster.BackendNamed("kube")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*backend); !ok || b.Name() != "kube" {
		t.Fatalf("backend kube is %T named %q", b, b.Name())
	}
	if b.Summary() == "" {
		t.Error("no summary")
	}
	if got := b.Dataplanes(); !reflect.DeepEqual(got, []string{"cluster"}) {
		t.Errorf("dataplanes %v, want [cluster]", got)
	}
	type opt struct {
		def              string
		boolean, caseKey bool
	}
	want := map[string]opt{
		"kubeconfig":      {},
		"image":           {def: DefaultImage},
		"nodes":           {caseKey: true},
		"fake-nodes":      {def: "0"},
		"kwok":            {},
		"tolerate-taints": {def: "false", boolean: true},
	}
	got := map[string]opt{}
	for _, o := range b.Options() {
		if !strings.HasPrefix(o.Help, "kube backend: ") {
			t.Errorf("--%s help %q", o.Name, o.Help)
		}
		got[o.Name] = opt{o.Default, o.Bool, o.CaseKey}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options %+v, want %+v", got, want)
	}
}

// fakeKwok is an executable file standing in for the kwok binary.
func fakeKwok(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kwok")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigure(t *testing.T) {
	kwok := fakeKwok(t)
	b := &backend{}
	if err := b.Configure(nil, "run-1"); err != nil {
		t.Fatal(err)
	}
	if got, want := b.config(), (Config{RunID: "run-1", Image: DefaultImage}); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	opts := map[string]string{"kubeconfig": "/etc/kube.conf", "image": "tools:1", "nodes": "worker-a, worker-b",
		"fake-nodes": "10", "kwok": kwok, "tolerate-taints": "true"}
	if err := b.Configure(opts, "run-2"); err != nil {
		t.Fatal(err)
	}
	want := Config{Kubeconfig: "/etc/kube.conf", RunID: "run-2", Nodes: []string{"worker-a", "worker-b"}, Image: "tools:1",
		TolerateTaints: true, FakeNodes: 10, Kwok: kwok}
	if got := b.config(); !reflect.DeepEqual(got, want) {
		t.Errorf("config %+v, want %+v", got, want)
	}
	// A second Configure starts from the defaults again.
	if err := b.Configure(map[string]string{"fake-nodes": "0", "kwok": "/nonexistent/kwok"}, "run-3"); err != nil {
		t.Errorf("--kwok without fake nodes is not checked: %v", err)
	}
	if got, want := b.config(), (Config{RunID: "run-3", Image: DefaultImage, Kwok: "/nonexistent/kwok"}); !reflect.DeepEqual(got, want) {
		t.Errorf("reconfigured: %+v, want %+v", got, want)
	}
	// Names that start with no digit are node names, even when a later one does.
	if err := b.Configure(map[string]string{"nodes": "node-1,2"}, "r"); err != nil {
		t.Error(err)
	} else if got := b.config().Nodes; !reflect.DeepEqual(got, []string{"node-1", "2"}) {
		t.Errorf("nodes %v", got)
	}
}

func TestConfigureErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts map[string]string
		want string // the whole message, or with a trailing "*" its start
	}{
		{"node count", map[string]string{"nodes": "3"},
			"--nodes 3: on the kube backend --nodes names the nodes to use (A,B); the node count is a lab setting"},
		{"node count list", map[string]string{"nodes": "2,worker-b"},
			"--nodes 2,worker-b: on the kube backend --nodes names the nodes to use (A,B); the node count is a lab setting"},
		{"too many fake nodes", map[string]string{"fake-nodes": "5000"}, "--fake-nodes 5000: give 0..1000 fake nodes"},
		{"negative fake nodes", map[string]string{"fake-nodes": "-1"}, "--fake-nodes -1: give 0..1000 fake nodes"},
		{"fake nodes not a number", map[string]string{"fake-nodes": "ten"}, "--fake-nodes ten: give 0..1000 fake nodes"},
		{"kwok missing", map[string]string{"fake-nodes": "2", "kwok": "/nonexistent/kwok"},
			`--fake-nodes needs the kwok binary (sigs.k8s.io/kwok/cmd/kwok v0.8): "/nonexistent/kwok" not found: install it (go install sigs.k8s.io/kwok/cmd/kwok@v0.8.0) or give --kwok PATH`},
		{"tolerate-taints not a bool", map[string]string{"tolerate-taints": "maybe"}, "--tolerate-taints maybe: give true or false"},
		{"lab option", map[string]string{"mtu": "1500", "dataplane": "flannel"}, "--dataplane, --mtu: not an option of the kube backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &backend{}
			err := b.Configure(tc.opts, "run")
			if err == nil {
				t.Fatalf("Configure(%v) accepted", tc.opts)
			}
			if !errors.Is(err, cluster.ErrBadInput) {
				t.Errorf("%v is not ErrBadInput", err)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n  %s\nwant\n  %s", err, tc.want)
			}
			if got := b.config(); !reflect.DeepEqual(got, Config{}) {
				t.Errorf("a failed Configure set %+v", got)
			}
		})
	}
}

// planned is a case as the plan expands it for the kube backend (lab labels filled in).
func planned(scen, dp, placement, proto string, mod func(*result.Case)) result.CaseSpec {
	c := result.Case{Scenario: scen, Backend: "kube", Dataplane: dp, Placement: placement, Protocol: proto, Tool: "iperf3"}
	if scen != "baseline" {
		c.Attach, c.Overlay, c.Proxy, c.Policy = "bridge", "vxlan", "iptables", "iptables"
	}
	if mod != nil {
		mod(&c)
	}
	c.ID = c.MakeID()
	c.MTU, c.Nodes = 1500, 2
	return result.CaseSpec{Case: c, Repeat: 3, Duration: 5, CPUs: [2]int{0, 1}}
}

func TestResolve(t *testing.T) {
	b := &backend{}
	svc := func(c *result.Case) { c.Services = 100 }
	in := []result.CaseSpec{
		planned("p2p", "flannel", "inter", "tcp", nil),
		planned("baseline", "node2node", "inter", "tcp", nil),
		planned("p2p", "calico", "inter", "tcp", nil), // the same case on a cluster
		planned("baseline", "bare", "intra", "tcp", nil),
		planned("p2s", "flannel", "inter", "tcp", svc),
		planned("p2p", "flannel", "intra", "tcp", nil),
		planned("p2s", "calico", "inter", "tcp", svc), // the same case on a cluster
		planned("baseline", "node2node", "inter", "tcp", nil),
	}
	in[1].Case.Backend = "" // the label is the backend's to set
	out, err := b.Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, cs := range out {
		ids = append(ids, cs.Case.ID)
		c := cs.Case
		if c.Backend != "kube" {
			t.Errorf("%s: backend %q", c.ID, c.Backend)
		}
		if c.Attach != "" || c.Overlay != "" || c.Proxy != "" || c.Policy != "" {
			t.Errorf("%s: lab labels kept: %+v", c.ID, c)
		}
		if c.ID != c.MakeID() {
			t.Errorf("id %s, labels make %s", c.ID, c.MakeID())
		}
		if c.Scenario != "baseline" && c.Dataplane != "cluster" {
			t.Errorf("%s: dataplane %q", c.ID, c.Dataplane)
		}
		if cs.Repeat != 3 || cs.Duration != 5 || c.MTU != 0 || c.Nodes != 0 || c.Tool != "iperf3" {
			t.Errorf("%s: other settings changed: %+v", c.ID, cs)
		}
	}
	want := []string{"p2p/cluster/inter/tcp", "baseline/node2node/inter/tcp", "baseline/bare/intra/tcp",
		"p2s/cluster/inter/tcp/svc=100", "p2p/cluster/intra/tcp"}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("resolved\n  %v\nwant\n  %v", ids, want)
	}
	if in[0].Case.Dataplane != "flannel" || in[0].Case.Attach != "bridge" {
		t.Errorf("Resolve changed its input: %+v", in[0].Case)
	}
}

func TestResolveRejectsLabParts(t *testing.T) {
	b := &backend{}
	for _, part := range []string{"proxy", "policy"} {
		cs := planned("p2s", "flannel", "inter", "tcp", func(c *result.Case) { c.Services = 10; c.Proxy, c.Policy = "nftables", "nftables" })
		cs.Case.ID = cs.Case.WithParts(part)
		_, err := b.Resolve([]result.CaseSpec{planned("p2p", "flannel", "inter", "tcp", nil), cs})
		want := "case " + cs.Case.ID + ": proxy and policy choose lab implementations; a cluster runs its own (remove proxy/policy for --backend kube)"
		if err == nil || err.Error() != want || !errors.Is(err, cluster.ErrBadInput) {
			t.Errorf("%s given: %v, want ErrBadInput %q", part, err, want)
		}
	}
}

func TestPreflightKubeconfig(t *testing.T) {
	b := &backend{}
	missing := filepath.Join(t.TempDir(), "nonexistent", "kubeconfig")
	if err := b.Configure(map[string]string{"kubeconfig": missing}, "run"); err != nil {
		t.Fatal(err)
	}
	cases := []result.CaseSpec{planned("baseline", "node2node", "inter", "tcp", nil)}
	err := b.Preflight(context.Background(), cases)
	if err == nil {
		t.Fatal("Preflight accepted a missing kubeconfig")
	}
	if !errors.Is(err, cluster.ErrBadInput) {
		t.Errorf("%v is not ErrBadInput", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "--backend kube: load kubeconfig: ") || !strings.Contains(msg, missing) ||
		!strings.HasSuffix(msg, " (give --kubeconfig FILE)") {
		t.Errorf("message %q", msg)
	}
	// NewCluster fails the same way, before anything is created.
	if cl, err := b.NewCluster(context.Background(), cluster.Key{Backend: "kube", Dataplane: "cluster"}); err == nil || cl != nil {
		t.Errorf("NewCluster on a missing kubeconfig: %v, %v", cl, err)
	}

	// A kubeconfig that loads passes (the cluster itself is not contacted).
	good := filepath.Join(t.TempDir(), "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(good, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Configure(map[string]string{"kubeconfig": good}, "run"); err != nil {
		t.Fatal(err)
	}
	if err := b.Preflight(context.Background(), cases); err != nil {
		t.Errorf("Preflight with a valid kubeconfig: %v", err)
	}
}
