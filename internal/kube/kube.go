// Package kube is the kube backend: cluster.Cluster on a real Kubernetes cluster through
// client-go. Every run gets its own namespace ("cnibench-" and a random suffix, labelled
// app.kubernetes.io/managed-by=cnibench and cnibench.io/run=<run id>, and open to host-network
// pods under Pod Security Admission); pods are pinned to nodes with spec.nodeName (no
// scheduler), commands run through the pods/exec subresource, and Close deletes the namespace
// with everything in it.
package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/image"
	"github.com/cnibench/cnibench/internal/names"
)

const (
	// ManagedBy is the label every object this backend creates carries (value ManagedByValue);
	// Clean deletes the namespaces that have it.
	ManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedBy's value.
	ManagedByValue = "cnibench"
	// RunLabel records the run id on the run's namespace and pods.
	RunLabel = "cnibench.io/run"
	// DefaultImage is the tools image pods run when Config.Image is empty.
	DefaultImage = "cnibench/tools:latest"
	// PodSecurityEnforce is the Pod Security Admission label the run namespace sets to
	// "privileged": the node-to-node baseline needs host-network pods, which the "baseline" and
	// "restricted" levels (a cluster's default, on some clusters) reject.
	PodSecurityEnforce = "pod-security.kubernetes.io/enforce"
	// NamespacePrefix starts every run namespace's name.
	NamespacePrefix = "cnibench-"
	// ContainerName is the name of the one container of every pod.
	ContainerName = "main"
)

// Timeouts; variables so tests can shorten them.
var (
	podTimeout       = 120 * time.Second // pod Running with an IP; pod gone after delete
	namespaceTimeout = 120 * time.Second // namespace gone after Close
	readyTimeout     = 30 * time.Second  // server listening after Start
	// A wait looks first at once, then after pollFirst, each look half as far again from
	// the last, up to pollInterval apart: pods start and go in a second or two here, and a
	// wait of minutes (a thousand pods) settles at two lists a second.
	pollFirst    = 50 * time.Millisecond
	pollInterval = 500 * time.Millisecond
)

// Config describes a kube backend.
type Config struct {
	Kubeconfig     string   // --kubeconfig; "" = $KUBECONFIG, then ~/.kube/config (then in-cluster)
	RunID          string   // recorded as a label value (sanitized to a valid label value)
	Nodes          []string // --nodes A,B; empty = choose automatically
	Image          string   // tools image, default DefaultImage
	TolerateTaints bool     // use tainted nodes and tolerate every taint
	PodMTU         int      // pod MTU if known (0 = unknown); reported in Facts as PodMTU
	FakeNodes      int      // kwok fake nodes for silent pods (0 = none)
	Kwok           string   // the kwok binary (default: "kwok" from PATH)
}

// Cluster is a run on a Kubernetes cluster; it implements cluster.Cluster.
type Cluster struct {
	cfg   Config
	cs    kubernetes.Interface
	rc    *rest.Config   // nil: Exec and Start fail
	core  rest.Interface // REST client of core/v1 built from rc (for pods/exec)
	ns    string
	nodes []cluster.Node
	info  map[string]any // environment facts read by New (readFacts), for Facts

	fake []string        // kwok fake nodes of this run (Config.FakeNodes)
	kwok *kwokProcess    // the kwok controller managing them
	warm map[string]bool // fake nodes kwok has given a pod IP (their IP pool exists), under mu

	probeMu sync.Mutex   // one NetworkPolicy enforcement probe at a time
	prober  policyProber // nil: ncProber (tests set a fake)
	policy  policyState  // the probe's cached result, under mu
	mu      sync.Mutex
	pods    map[string]cluster.Pod
	real    map[string]string   // scenario pod name -> pod name, for Deployment replicas
	podMTU  int                 // measured in the first pod (learnPodMTU)
	servers map[string]bool     // pods created as Deployments
	chains  map[string][]string // a chain's client and server -> every pod of the chain (Chain)
	procs   map[*process]bool
	// windows are the open accounting windows (account.go), under acctMu.
	acctMu  sync.Mutex
	windows map[*acctWindow]bool
	seq     int // log file sequence for Start
	closed  bool

	stopBeat func()        // stops the namespace's heartbeat
	beatDone chan struct{} // closed when it has stopped
}

var _ cluster.Cluster = (*Cluster)(nil)

// LoadConfig loads a REST config: the explicit kubeconfig path, else $KUBECONFIG, else
// ~/.kube/config, else the in-cluster service account.
func LoadConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.UserAgent = "cnibench"
	// Start and NodeCPU poll through exec; keep client-side throttling out of the measurements.
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

// New loads the kubeconfig, chooses the nodes and creates the run namespace.
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	rc, err := LoadConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return NewWithClient(ctx, cs, rc, cfg)
}

// NewWithClient is New with a given clientset (tests pass a fake one). rc is used for exec
// only; with rc nil, Exec, Start and NodeCPU return an error.
func NewWithClient(ctx context.Context, cs kubernetes.Interface, rc *rest.Config, cfg Config) (*Cluster, error) {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	c := &Cluster{cfg: cfg, cs: cs, pods: map[string]cluster.Pod{}, real: map[string]string{}, servers: map[string]bool{}, procs: map[*process]bool{}, chains: map[string][]string{}, warm: map[string]bool{}}
	if rc != nil {
		c.rc = rest.CopyConfig(rc)
		core, err := corev1client.NewForConfig(c.rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes core/v1 client: %w", err)
		}
		c.core = core.RESTClient()
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	chosen, err := selectNodes(nodes.Items, cfg.Nodes, cfg.TolerateTaints)
	if err != nil {
		return nil, err
	}
	for _, n := range chosen {
		c.nodes = append(c.nodes, cluster.Node{Name: n.Name, IP: nodeIP(n)})
	}
	// The environment record of the run: versions, node kernels and CPUs, CNI, kube-proxy mode.
	if c.info, err = c.readFacts(ctx); err != nil {
		return nil, fmt.Errorf("cluster facts: %w", err)
	}
	if c.ns, err = createNamespace(ctx, cs, cfg.RunID); err != nil {
		return nil, err
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stopBeat, c.beatDone = stop, make(chan struct{})
	go heartbeat(bctx, cs, c.ns, c.beatDone)
	if cfg.FakeNodes > 0 {
		if err := c.startFakeNodes(ctx); err != nil {
			return nil, errors.Join(err, c.Close(context.WithoutCancel(ctx)))
		}
	}
	return c, nil
}

// Namespace is the run namespace.
func (c *Cluster) Namespace() string { return c.ns }

// Nodes implements cluster.Cluster: the chosen nodes, in order (sorted by name when chosen
// automatically, as given otherwise).
func (c *Cluster) Nodes(ctx context.Context) ([]cluster.Node, error) {
	return append([]cluster.Node(nil), c.nodes...), nil
}

// Facts implements cluster.Cluster: the cluster's own data plane ("cluster"), the pod MTU
// (Config.PodMTU, else the one learnt in the first pod), and in Details the run's namespace,
// nodes and image, the environment facts read by New (readFacts), the NetworkPolicy probe's
// outcome once it ran and the kwok fake nodes.
func (c *Cluster) Facts() cluster.Facts {
	nodes := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = n.Name
	}
	f := cluster.Facts{Backend: backendName, Dataplane: clusterDataplane, Name: "namespace " + c.ns, TempDir: "/tmp", Self: image.SelfPath} // a pod's /tmp goes with it
	d := map[string]any{"namespace": c.ns, "nodes": nodes, "image": c.cfg.Image}
	for k, v := range c.info {
		d[k] = v
	}
	delete(d, "pod_mtu") // typed: f.PodMTU
	c.mu.Lock()
	if c.cfg.PodMTU > 0 {
		f.PodMTU = c.cfg.PodMTU
	} else if c.podMTU > 0 {
		f.PodMTU = c.podMTU
		d["pod_mtu_source"] = "eth0 of the first pod"
	}
	if c.policy.probed {
		d["networkpolicy_enforced"] = c.policy.enforced
		d["networkpolicy_probe"] = c.policy.detail
	}
	c.mu.Unlock()
	if len(c.fake) > 0 {
		d["fake_nodes"] = len(c.fake)
		d["fake_node_controller"] = "kwok"
	}
	f.Details = d
	return f
}

// ConcurrentFixtures implements cluster.ConcurrentFixtures: fixtures' objects are the API
// server's, created, deleted and waited for in parallel calls (CreatePods, DeletePods), and
// Cluster's own state is guarded by its lock.
func (c *Cluster) ConcurrentFixtures() bool { return true }

// Close implements cluster.Cluster: deletes the run namespace (foreground propagation) and
// waits until it is gone or no pod is left in it: what runs is gone then (processes stopped, host ports
// free). The namespace object itself goes a few seconds later, when the namespace controller
// has finished (5.2 s more on the project's test cluster, per run); Clean leaves a namespace
// that is being deleted alone. Idempotent.
func (c *Cluster) Close(ctx context.Context) (err error) {
	c.mu.Lock()
	c.closed = true
	for p := range c.procs {
		p.markGone()
	}
	c.procs = map[*process]bool{}
	c.pods = map[string]cluster.Pod{}
	stop := c.stopBeat
	c.stopBeat = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
		<-c.beatDone
	}
	if c.ns == "" {
		return nil
	}
	if err := deleteNamespace(ctx, c.cs, c.ns); err != nil {
		return errors.Join(err, c.stopFakeNodes(ctx))
	}
	// With fake nodes, kwok finishes the deletion of the pods on them: it stops last.
	defer func() {
		if ferr := c.stopFakeNodes(context.WithoutCancel(ctx)); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}()
	left := 0
	err = poll(ctx, namespaceTimeout, func(ctx context.Context) (bool, error) {
		if _, err := c.cs.CoreV1().Namespaces().Get(ctx, c.ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, nil
		}
		list, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		left = len(list.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s being deleted: %d pods still in it after %s: %w", c.ns, left, namespaceTimeout, err)
	}
	return nil
}

// Clean deletes the namespaces labelled ManagedBy=cnibench whose run is over (see liveOwner),
// or all of them with force, and returns their names, sorted, and one line per namespace it
// left alone. It does not wait for them to finish terminating.
func Clean(ctx context.Context, cs kubernetes.Interface, force bool) (deleted, skipped []string, err error) {
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: ManagedBy + "=" + ManagedByValue})
	if err != nil {
		return nil, nil, fmt.Errorf("list namespaces: %w", err)
	}
	var errs []error
	now := time.Now()
	for _, ns := range list.Items {
		if ns.Labels[ManagedBy] != ManagedByValue { // the fake clientset may not filter
			continue
		}
		if ns.DeletionTimestamp != nil {
			skipped = append(skipped, ns.Name+": being deleted already")
			continue
		}
		if live, who := liveOwner(ns, now); live && !force {
			skipped = append(skipped, fmt.Sprintf("%s: %s, still running (--force deletes it anyway)", ns.Name, who))
			continue
		}
		if err := deleteNamespace(ctx, cs, ns.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, ns.Name)
	}
	sort.Strings(deleted)
	sort.Strings(skipped)
	return deleted, skipped, errors.Join(errs...)
}

// CleanFakeNodes deletes the kwok fake nodes whose run is over: nodes labelled ManagedBy=cnibench
// and FakeNodeLabel (no other node is touched) whose run namespace (the label's value) is gone
// or being deleted, or all of them with force. It returns their names.
func CleanFakeNodes(ctx context.Context, cs kubernetes.Interface, force bool) ([]string, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ManagedBy + "=" + ManagedByValue})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var names []string
	var errs []error
	for _, n := range list.Items {
		ns := n.Labels[FakeNodeLabel]
		if n.Labels[ManagedBy] != ManagedByValue || ns == "" {
			continue // never a real node (the fake clientset may not filter)
		}
		if !force {
			got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil && got.DeletionTimestamp == nil {
				continue // its run's namespace stands: the run (or kube clean's verdict on it) decides
			}
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("fake node %s: namespace %s: %w", n.Name, ns, err))
				continue
			}
		}
		if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete fake node %s: %w", n.Name, err))
			continue
		}
		names = append(names, n.Name)
	}
	return names, errors.Join(errs...)
}

func deleteNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	fg := metav1.DeletePropagationForeground
	err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}

// createNamespace creates "cnibench-<random>" with the managed-by and run labels, retrying on
// a name collision.
func createNamespace(ctx context.Context, cs kubernetes.Interface, runID string) (string, error) {
	for attempt := 0; ; attempt++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:        NamespacePrefix + names.Random(names.Kube, 5),
			Labels:      map[string]string{ManagedBy: ManagedByValue, RunLabel: LabelValue(runID), PodSecurityEnforce: "privileged"},
			Annotations: ownerAnnotations(time.Now()),
		}}
		_, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err == nil {
			return ns.Name, nil
		}
		if !apierrors.IsAlreadyExists(err) || attempt >= 4 {
			return "", fmt.Errorf("create namespace %s: %w", ns.Name, err)
		}
	}
}

// LabelValue turns s into a valid label value: at most 63 characters of [A-Za-z0-9._-],
// starting and ending with a letter or digit (other characters become '-'; "" stays "").
func LabelValue(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(isAlnum(ch) || ch == '-' || ch == '_' || ch == '.') {
			b[i] = '-'
		}
	}
	trim := func(b []byte) []byte {
		return []byte(strings.TrimFunc(string(b), func(r rune) bool { return r > 0x7f || !isAlnum(byte(r)) }))
	}
	b = trim(b)
	if len(b) > 63 {
		b = trim(b[:63])
	}
	return string(b)
}

func isAlnum(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
}

// poll calls cond (first at once, then from pollFirst to pollInterval apart) until it returns
// true or an error, or timeout passes, or ctx ends.
func poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	return pollEvery(ctx, timeout, pollInterval, cond)
}

// pollEvery is poll with its own interval (the most between two looks).
func pollEvery(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := min(pollFirst, interval)
	for {
		done, err := cond(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*3/2, interval)
	}
}

// undoCreated deletes, after a failed batch, the objects whose create succeeded (created[i];
// name(i) names object i), within podTimeout even when ctx is done.
func undoCreated(ctx context.Context, created []bool, name func(int) string, del func(context.Context, []string) error) error {
	var names []string
	for i, ok := range created {
		if ok {
			names = append(names, name(i))
		}
	}
	if len(names) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), podTimeout)
	defer cancel()
	return del(dctx, names)
}
