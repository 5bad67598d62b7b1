package kube

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/result"
)

// backendName is the kube backend's name (--backend kube, the case label "backend").
const backendName = "kube"

// clusterDataplane is the dataplane of every pod case on a real cluster: the cluster's own
// CNI, kube-proxy and policy engine.
const clusterDataplane = "cluster"

// The kube backend's options (--NAME on the command line).
const (
	optKubeconfig     = "kubeconfig"
	optImage          = "image"
	optNodes          = "nodes"
	optFakeNodes      = "fake-nodes"
	optKwok           = "kwok"
	optTolerateTaints = "tolerate-taints"
)

// maxFakeNodes is the most kwok fake nodes a run may ask for.
const maxFakeNodes = 1000

func init() { cluster.RegisterBackend(&backend{}) }

// backend is the kube backend of cluster's registry: its options, how planned cases map onto
// a real cluster, the kubeconfig check before a run and the creation of a Cluster.
type backend struct {
	mu  sync.Mutex
	cfg Config // set by Configure
}

var _ cluster.Backend = (*backend)(nil)

// Name implements cluster.Backend.
func (*backend) Name() string { return backendName }

// Summary implements cluster.Backend.
func (*backend) Summary() string {
	return "a real Kubernetes cluster through a kubeconfig"
}

// Options implements cluster.Backend.
func (*backend) Options() []cluster.Option { return options() }

func options() []cluster.Option {
	return []cluster.Option{
		{Name: optKubeconfig, Help: "kube backend: kubeconfig (default $KUBECONFIG, then ~/.kube/config)"},
		{Name: optImage, Default: DefaultImage, Help: "kube backend: tools image (build it with 'cnibench image build')"},
		{Name: optNodes, CaseKey: true, Help: "kube backend: the nodes to use, A,B (default: two Ready, schedulable nodes)"},
		{Name: optFakeNodes, Default: "0", Help: "kube backend: put silent pods on N kwok fake nodes, run for the run's lifetime and removed after"},
		{Name: optKwok, Help: "kube backend: the kwok binary for --fake-nodes (default: kwok on PATH)"},
		{Name: optTolerateTaints, Bool: true, Default: "false", Help: "kube backend: also use tainted nodes, tolerating their taints"},
	}
}

// Configure implements cluster.Backend: --nodes names the nodes (a number is the lab's node
// count and rejected), --fake-nodes is 0..maxFakeNodes and needs the kwok binary when above 0.
func (b *backend) Configure(opts map[string]string, runID string) error {
	cfg, err := configure(opts, runID)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.cfg = cfg
	b.mu.Unlock()
	return nil
}

// configure turns the option values into a Config; errors are cluster.ErrBadInput.
func configure(opts map[string]string, runID string) (Config, error) {
	known := map[string]bool{}
	for _, o := range options() {
		known[o.Name] = true
	}
	var unknown []string
	for name := range opts {
		if !known[name] {
			unknown = append(unknown, "--"+name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, cluster.BadInput("%s: not an option of the kube backend", strings.Join(unknown, ", "))
	}

	cfg := Config{RunID: runID, Image: DefaultImage, Kubeconfig: opts[optKubeconfig], Kwok: opts[optKwok]}
	if nodes, ok := opts[optNodes]; ok {
		if _, err := strconv.Atoi(strings.Split(nodes, ",")[0]); err == nil {
			return Config{}, cluster.BadInput("--nodes %s: on the kube backend --nodes names the nodes to use (A,B); the node count is a lab setting", nodes)
		}
		cfg.Nodes = cluster.ParseList(nodes)
	}
	if v, ok := opts[optFakeNodes]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 0) // as the int flag it was parsed
		if err != nil {
			return Config{}, cluster.BadInput("--fake-nodes %s: give 0..%d fake nodes", v, maxFakeNodes)
		}
		if n < 0 || n > maxFakeNodes {
			return Config{}, cluster.BadInput("--fake-nodes %d: give 0..%d fake nodes", n, maxFakeNodes)
		}
		cfg.FakeNodes = int(n)
	}
	if cfg.FakeNodes > 0 {
		if _, err := KwokBinary(cfg.Kwok); err != nil {
			return Config{}, cluster.BadInput("%s", err)
		}
	}
	if v, ok := opts[optImage]; ok {
		cfg.Image = v // "" is DefaultImage again (NewWithClient)
	}
	if v, ok := opts[optTolerateTaints]; ok {
		t, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, cluster.BadInput("--tolerate-taints %s: give true or false", v)
		}
		cfg.TolerateTaints = t
	}
	return cfg, nil
}

// config is the Config of the last Configure.
func (b *backend) config() Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg := b.cfg
	cfg.Nodes = append([]string(nil), cfg.Nodes...)
	return cfg
}

// Dataplanes implements cluster.Backend: a real cluster runs its own data plane.
func (*backend) Dataplanes() []string { return []string{clusterDataplane} }

// Resolve implements cluster.Backend: it maps planned cases onto a real cluster. Pod cases
// run on the cluster's own data plane (dataplane "cluster", no attach, overlay, proxy or
// policy labels, and no lab MTU or node count); baselines keep their names (bare is skipped there: a cluster offers no bare
// veth pair). Cases that become identical are planned once, in their first place. A case that
// names a proxy or policy engine is bad input: those choose lab implementations.
func (*backend) Resolve(cases []result.CaseSpec) ([]result.CaseSpec, error) {
	for _, cs := range cases {
		if cs.Case.NamesParts() {
			return nil, cluster.BadInput("case %s: proxy and policy choose lab implementations; a cluster runs its own (remove proxy/policy for --backend kube)", cs.Case.ID)
		}
		if m := cs.Case.MTU; m != 0 && m != result.DefaultMTU {
			return nil, cluster.BadInput("case %s: mtu %d is the lab's underlay MTU; a cluster has its own (remove mtu for --backend kube)", cs.Case.ID, m)
		}
		if n := cs.Case.Nodes; n != 0 && n != result.DefaultNodes {
			return nil, cluster.BadInput("case %s: nodes %d is the lab's node count; on a cluster name the nodes with --nodes A,B", cs.Case.ID, n)
		}
	}
	var out []result.CaseSpec
	seen := map[string]bool{}
	for _, cs := range cases {
		c := &cs.Case
		c.Backend = backendName
		c.MTU, c.Nodes = 0, 0 // a cluster has its own
		c.Sync = ""           // and its proxy syncs the way it does: the same case on the cluster
		if !c.IsBaseline() {
			c.Dataplane, c.Attach, c.Overlay, c.Proxy, c.Policy = clusterDataplane, "", "", "", ""
		}
		c.ID = c.MakeID()
		if !seen[c.ID] {
			seen[c.ID] = true
			out = append(out, cs)
		}
	}
	return out, nil
}

// Preflight implements cluster.Backend: the kubeconfig must load (the cluster itself is
// reached only when a cluster is created).
func (b *backend) Preflight(ctx context.Context, cases []result.CaseSpec) error {
	if _, err := LoadConfig(b.config().Kubeconfig); err != nil {
		return cluster.BadInput("--backend kube: %v (give --kubeconfig FILE)", err)
	}
	return nil
}

// Standing implements cluster.Backend: every namespace of a run is on one real data plane, so
// clusters are shared (one per key) and a loaded case has the data plane to itself.
func (*backend) Standing() cluster.Standing { return cluster.Standing{} }

// NewCluster implements cluster.Backend: every key gets a Cluster on the configured
// kubeconfig and nodes (the cluster's data plane is whatever it runs).
func (b *backend) NewCluster(ctx context.Context, k cluster.Key) (cluster.Cluster, error) {
	c, err := New(ctx, b.config())
	if err != nil {
		return nil, err
	}
	return c, nil
}
