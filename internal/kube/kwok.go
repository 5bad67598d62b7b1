package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Fake nodes: with Config.FakeNodes, silent pods go to nodes that exist only in the API,
// simulated by a kwok controller (sigs.k8s.io/kwok) that cnibench runs for the run's lifetime:
// the modern form of seed 001's K8shaper (a patched virtual-kubelet). The pods are real API
// objects with IPs, so whatever watches pods (the CNI's policy agent, kube-proxy's endpoint
// slices) sees and programs them; no container runs.
const (
	// FakeNodeLabel marks this run's fake nodes (value: the run namespace); kwok manages only
	// nodes with it.
	FakeNodeLabel = "cnibench.io/fake-node"
	// kwokAnnotation and kwokTaint are kwok's conventions for fake nodes: the taint keeps
	// every other workload off them.
	kwokAnnotation = "kwok.x-k8s.io/node"
	// fakeNodePods is the pod capacity a fake node advertises.
	fakeNodePods = 1000
)

var fakeToleration = corev1.Toleration{Key: kwokAnnotation, Operator: corev1.TolerationOpEqual, Value: "fake", Effect: corev1.TaintEffectNoSchedule}

// fakeNodeTimeout bounds the wait for kwok to make the fake nodes Ready.
var fakeNodeTimeout = 60 * time.Second

// kwokProcess is the kwok controller cnibench started.
type kwokProcess struct {
	cmd  *exec.Cmd
	log  *os.File
	conf string     // its configuration file (kwokStages)
	done chan error // Wait's result
}

func (c *Cluster) isFake(node string) bool { return slices.Contains(c.fake, node) }

// kwokFirst splits specs (their nodes chosen) into the first pod of each fake node kwok has
// not given a pod IP yet and the rest. kwok (v0.8.0) makes a node's IP pool on first use
// without a lock (a load, then a store): pods of one node rendered in parallel can each make
// a pool and get the same first IP (the test cluster saw 999 distinct IPs for 1,000 pods).
// Pods created and Running one per node first make every pool before the rest need it.
func (c *Cluster) kwokFirst(specs []cluster.PodSpec) (first, rest []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for i, s := range specs {
		if c.isFake(s.Node) && !c.warm[s.Node] && !seen[s.Node] {
			seen[s.Node] = true
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	return first, rest
}

// createInTwo creates the pods of specs at first, then (once they are Running) those at rest,
// and returns them in the order of specs; when the second batch fails the first is deleted.
func (c *Cluster) createInTwo(ctx context.Context, specs []cluster.PodSpec, first, rest []int, mod func(cluster.PodSpec, *corev1.Pod)) ([]cluster.Pod, error) {
	pick := func(idx []int) []cluster.PodSpec {
		var out []cluster.PodSpec
		for _, i := range idx {
			out = append(out, specs[i])
		}
		return out
	}
	a, err := c.createPods(ctx, pick(first), mod)
	if err != nil {
		return nil, err
	}
	b, err := c.createPods(ctx, pick(rest), mod)
	if err != nil {
		var names []string
		for _, p := range a {
			names = append(names, p.Name)
		}
		_ = c.DeletePods(ctx, names)
		return nil, err
	}
	out := make([]cluster.Pod, len(specs))
	for k, i := range first {
		out[i] = a[k]
	}
	for k, i := range rest {
		out[i] = b[k]
	}
	return out, nil
}

// kubeconfigPath is the kubeconfig file kwok is given: the explicit one, else the first
// $KUBECONFIG entry that exists, else ~/.kube/config.
func kubeconfigPath(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	for _, p := range filepath.SplitList(os.Getenv("KUBECONFIG")) {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if _, err := os.Stat(clientcmd.RecommendedHomeFile); err == nil {
		return clientcmd.RecommendedHomeFile, nil
	}
	return "", errors.New("--fake-nodes runs kwok, which needs a kubeconfig file: give --kubeconfig FILE")
}

// KwokBinary resolves the kwok binary: path if given, else "kwok" on PATH.
func KwokBinary(path string) (string, error) {
	if path == "" {
		path = "kwok"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("--fake-nodes needs the kwok binary (sigs.k8s.io/kwok/cmd/kwok v0.8): %q not found: install it (go install sigs.k8s.io/kwok/cmd/kwok@v0.8.0) or give --kwok PATH", path)
	}
	return p, nil
}

// fakeNodeObject is fake node i of the run: labelled for kwok's selector and for Clean,
// tainted so that only pods tolerating it (silent pods) land there.
func (c *Cluster) fakeNodeObject(i int) *corev1.Node {
	name := fmt.Sprintf("%s-fake-%d", c.ns, i)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(fakeNodePods, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				ManagedBy: ManagedByValue, RunLabel: LabelValue(c.cfg.RunID), FakeNodeLabel: c.ns,
				"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": runtime.GOARCH,
			},
			Annotations: map[string]string{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: fakeToleration.Key, Value: fakeToleration.Value, Effect: fakeToleration.Effect}}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res,
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "fake", OperatingSystem: "linux", Architecture: runtime.GOARCH}},
	}
}

// startFakeNodes creates the run's fake nodes and starts kwok to manage them, and waits
// until they are Ready. On an error, whatever it made is removed again.
func (c *Cluster) startFakeNodes(ctx context.Context) (err error) {
	bin, err := KwokBinary(c.cfg.Kwok)
	if err != nil {
		return err
	}
	kc, err := kubeconfigPath(c.cfg.Kubeconfig)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stopFakeNodes(context.WithoutCancel(ctx)))
		}
	}()
	for i := 0; i < c.cfg.FakeNodes; i++ {
		n, err := c.cs.CoreV1().Nodes().Create(ctx, c.fakeNodeObject(i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create fake node: %w", err)
		}
		c.fake = append(c.fake, n.Name)
	}
	log, err := os.CreateTemp("", "cnibench-kwok-*.log")
	if err != nil {
		return err
	}
	k := &kwokProcess{log: log, done: make(chan error, 1)}
	// Our stages, whatever the user's ~/.kwok/kwok.yaml says.
	conf := log.Name() + ".yaml"
	if err := os.WriteFile(conf, []byte(kwokStages), 0o600); err != nil {
		_ = log.Close()
		_ = os.Remove(log.Name())
		return err
	}
	k.conf = conf
	k.cmd = exec.Command(bin, "--kubeconfig", kc, "--manage-nodes-with-label-selector", FakeNodeLabel+"="+c.ns, "--config", conf,
		"--node-lease-duration-seconds", "40")
	k.cmd.Stdout, k.cmd.Stderr = log, log
	// kwok dies with cnibench: the parent-death signal fires when the starting thread exits,
	// so the thread is locked and kept until kwok ends.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := k.cmd.Start(); err != nil {
			started <- err
			runtime.UnlockOSThread()
			return
		}
		started <- nil
		k.done <- k.cmd.Wait()
		// The thread stays locked: it exits with the goroutine, after kwok.
	}()
	if err := <-started; err != nil {
		_ = log.Close()
		_ = os.Remove(log.Name())
		_ = os.Remove(conf)
		return fmt.Errorf("start kwok: %w", err)
	}
	c.kwok = k
	// Ready when kwok has taken every fake node over.
	err = poll(ctx, fakeNodeTimeout, func(ctx context.Context) (bool, error) {
		select {
		case werr := <-k.done:
			k.done <- werr
			return false, fmt.Errorf("kwok exited: %v: %s", werr, k.tail())
		default:
		}
		list, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: FakeNodeLabel + "=" + c.ns})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range list.Items {
			if nodeReady(n) {
				ready++
			}
		}
		return ready == len(c.fake), nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("kwok did not make the %d fake nodes Ready in %s: %s", len(c.fake), fakeNodeTimeout, k.tail())
	}
	return err
}

// tail is the end of kwok's log, for errors.
func (k *kwokProcess) tail() string {
	b, _ := os.ReadFile(k.log.Name())
	return logTail(b, 5)
}

// stopFakeNodes deletes the run's fake nodes and stops kwok (SIGTERM, SIGKILL after 10 s).
// The run namespace goes first (Close): kwok completes the deletion of the pods on its nodes.
func (c *Cluster) stopFakeNodes(ctx context.Context) error {
	var errs []error
	for _, n := range c.fake {
		if err := c.cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete fake node %s: %w", n, err))
		}
	}
	c.fake = nil
	if k := c.kwok; k != nil {
		c.kwok = nil
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-k.done:
		case <-time.After(10 * time.Second):
			_ = k.cmd.Process.Kill()
			<-k.done
		}
		_ = k.log.Close()
		_ = os.Remove(k.log.Name())
		_ = os.Remove(k.conf)
	}
	return errors.Join(errs...)
}
