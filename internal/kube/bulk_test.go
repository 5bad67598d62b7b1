package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/scenario"
)

// replicaSet plays the Deployment controller and the kubelet for the fake clientset: once the
// Deployment exists, it creates its pod (generated name, the template's labels and spec) and
// marks it Running.
func replicaSet(t *testing.T, cs *fake.Clientset, ns, name, podName, ip string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns, Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec, Status: running(ip)}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("deployment %s/%s never created", ns, name)
}

// A server is a Deployment of one replica pinned to its node; the scenario keeps calling it by
// its own name, and deleting it removes the Deployment and the replica.
func TestServerDeployment(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r1"})
	go replicaSet(t, cs, c.Namespace(), "server", "server-7d9f8-x2b4q", "10.244.1.9")
	p, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "server", Node: "worker-b", Server: true, Labels: map[string]string{"role": "server"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "server" || p.IP != "10.244.1.9" || p.Node != "worker-b" {
		t.Errorf("pod %+v", p)
	}
	if got := c.podName("server"); got != "server-7d9f8-x2b4q" {
		t.Errorf("exec target %q, want the replica's name", got)
	}
	d, err := cs.AppsV1().Deployments(c.Namespace()).Get(ctx, "server", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Spec.Template.Spec.NodeName != "worker-b" || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways ||
		d.Spec.Selector.MatchLabels[PodLabel] != "server" || d.Spec.Template.Labels["role"] != "server" || d.Labels[ManagedBy] != ManagedByValue {
		t.Errorf("deployment %+v", d.Spec)
	}
	// Play the API server and the garbage collector of a foreground deletion: the
	// Deployment gets a deletion timestamp and a finalizer, the replica goes, and only then
	// (here 100 ms later) the Deployment. A server of the same name created before then is
	// refused ("object is being deleted"), so DeletePod must wait for the Deployment too.
	deps := appsv1.SchemeGroupVersion.WithResource("deployments")
	cs.PrependReactor("delete", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := cs.Tracker().Get(deps, a.GetNamespace(), a.(k8stesting.DeleteAction).GetName())
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		now := metav1.Now()
		d.DeletionTimestamp, d.Finalizers = &now, []string{metav1.FinalizerDeleteDependents}
		return true, nil, cs.Tracker().Update(deps, d, a.GetNamespace())
	})
	go func() {
		for {
			if d, err := cs.AppsV1().Deployments(c.Namespace()).Get(ctx, "server", metav1.GetOptions{}); err == nil && d.DeletionTimestamp != nil {
				_ = cs.CoreV1().Pods(c.Namespace()).Delete(ctx, "server-7d9f8-x2b4q", metav1.DeleteOptions{})
				time.Sleep(100 * time.Millisecond)
				_ = cs.Tracker().Delete(deps, c.Namespace(), "server")
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	if err := cluster.DeletePod(ctx, c, "server"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments(c.Namespace()).Get(ctx, "server", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment after DeletePod: %v", err)
	}
	if _, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "server-7d9f8-x2b4q", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("replica after DeletePod: %v", err)
	}
}

// runAll marks every pod of the namespace Running as it appears, until stop is closed.
func runAll(cs *fake.Clientset, ns string, stop chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		list, _ := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for i := range list.Items {
			p := &list.Items[i]
			if p.Status.Phase != corev1.PodRunning {
				p.Status = running(fmt.Sprintf("10.244.9.%d", i+1))
				_, _ = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
		}
	}
}

func podsLeft(cs *fake.Clientset, ns string) int {
	list, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	return len(list.Items)
}

// Silent pods without a node go round-robin over the run's nodes; DeletePods removes them all.
func TestCreatePodsSpreadAndDelete(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r1"})
	stop := make(chan struct{})
	defer close(stop)
	go runAll(cs, c.Namespace(), stop)
	pods, err := c.CreatePods(ctx, scenario.SilentPods(5, "silent", map[string]string{"app": "silent"}))
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	var names []string
	for i, p := range pods {
		if p.Name != fmt.Sprintf("silent%d", i) || p.IP == "" || p.Labels["app"] != "silent" {
			t.Errorf("pod %d: %+v", i, p)
		}
		perNode[p.Node]++
		names = append(names, p.Name)
	}
	if perNode["worker-a"] != 3 || perNode["worker-b"] != 2 {
		t.Errorf("spread %v, want 3 on worker-a and 2 on worker-b (round-robin in node order)", perNode)
	}
	if err := c.DeletePods(ctx, names); err != nil {
		t.Fatal(err)
	}
	if n := podsLeft(cs, c.Namespace()); n != 0 {
		t.Errorf("%d pods left after DeletePods", n)
	}
}

// Silent pods on kwok fake nodes: the first pod of each fake node is created and Running
// before any other (kwok makes a node's IP pool on first use without a lock), once per run;
// the pods come back in the order asked for.
func TestCreatePodsWarmsFakeNodes(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r1"})
	c.fake = []string{"fake-0", "fake-1", "fake-2"}
	stop := make(chan struct{})
	defer close(stop)
	go runAll(cs, c.Namespace(), stop)
	var mu sync.Mutex
	var running []int // pods Running in the namespace when each pod was created
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		list, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		n := 0
		for _, p := range list.(*corev1.PodList).Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		mu.Lock()
		running = append(running, n)
		mu.Unlock()
		return false, nil, nil
	})
	pods, err := c.CreatePods(ctx, scenario.SilentPods(12, "silent", nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pods {
		if p.Name != fmt.Sprintf("silent%d", i) || p.Node != c.fake[i%3] || p.IP == "" {
			t.Errorf("pod %d: %+v", i, p)
		}
	}
	mu.Lock()
	got := slices.Clone(running)
	running = running[:0]
	mu.Unlock()
	if len(got) != 12 || slices.Max(got[:3]) > 2 || slices.Min(got[3:]) < 3 {
		t.Errorf("pods Running at each create %v: want the first three (one per fake node) Running before the other nine are created", got)
	}
	// The nodes are warm now: a second batch is not split.
	more := scenario.SilentPods(3, "more", nil)
	for i := range more {
		more[i].Node = c.fake[i]
	}
	if first, _ := c.kwokFirst(more); len(first) != 0 {
		t.Errorf("after the first batch, %d pods would still go first", len(first))
	}
	if _, err := c.CreatePods(ctx, more); err != nil {
		t.Fatal(err)
	}
}

// A pod that will not run fails the whole batch at once, and the batch's pods are deleted.
func TestCreatePodsFailureCleansUp(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r1"})
	go setStatus(t, cs, c.Namespace(), "silent1", status("ErrImagePull", "no such image"))
	_, err := c.CreatePods(ctx, scenario.SilentPods(3, "silent", nil))
	if err == nil || !strings.Contains(err.Error(), "silent1") || !strings.Contains(err.Error(), "ErrImagePull") {
		t.Fatalf("err %v, want silent1's ErrImagePull", err)
	}
	if n := podsLeft(cs, c.Namespace()); n != 0 {
		t.Errorf("%d pods left after a failed CreatePods", n)
	}
}

// Fake nodes carry kwok's annotation and taint and the labels Clean and kwok's selector use;
// silent pods on them tolerate the taint; CleanFakeNodes deletes them (with force while their run's
// namespace stands) and never a real node.
func TestFakeNodes(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r1"})
	n := c.fakeNodeObject(3)
	if n.Name != c.Namespace()+"-fake-3" || n.Labels[FakeNodeLabel] != c.Namespace() || n.Labels[ManagedBy] != ManagedByValue ||
		n.Annotations[kwokAnnotation] != "fake" || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != kwokAnnotation {
		t.Errorf("fake node %+v", n.ObjectMeta)
	}
	if q := n.Status.Allocatable[corev1.ResourcePods]; q.Value() != fakeNodePods {
		t.Errorf("pods capacity %v", q.Value())
	}
	// As if startFakeNodes had made two.
	for i := 0; i < 2; i++ {
		fn, err := cs.CoreV1().Nodes().Create(ctx, c.fakeNodeObject(i), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.fake = append(c.fake, fn.Name)
	}
	stop := make(chan struct{})
	defer close(stop)
	go runAll(cs, c.Namespace(), stop)
	specs := append(scenario.SilentPods(4, "silent", nil), cluster.PodSpec{Name: "client", Node: "worker-a"})
	pods, err := c.CreatePods(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods[:4] {
		obj, _ := cs.CoreV1().Pods(c.Namespace()).Get(ctx, p.Name, metav1.GetOptions{})
		if !c.isFake(p.Node) || !slices.Contains(obj.Spec.Tolerations, fakeToleration) {
			t.Errorf("silent pod %s on %s, tolerations %v: want a fake node and kwok's toleration", p.Name, p.Node, obj.Spec.Tolerations)
		}
	}
	if pods[4].Node != "worker-a" {
		t.Errorf("a measuring pod went to %s", pods[4].Node)
	}
	// The run's namespace stands: its fake nodes are the run's, kube clean leaves them alone.
	if names, err := CleanFakeNodes(ctx, cs, false); err != nil || len(names) != 0 {
		t.Fatalf("CleanFakeNodes deleted %v (%v) of a run whose namespace stands", names, err)
	}
	names, err := CleanFakeNodes(ctx, cs, true)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{c.Namespace() + "-fake-0", c.Namespace() + "-fake-1"}; !slices.Equal(names, want) {
		t.Errorf("CleanFakeNodes deleted %v, want %v", names, want)
	}
	list, _ := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if len(list.Items) != 2 {
		t.Errorf("%d nodes left, want the 2 real ones", len(list.Items))
	}
	c.fake = nil
}

func TestKwokBinaryMissing(t *testing.T) {
	_, err := KwokBinary("/nonexistent/kwok")
	if err == nil || !strings.Contains(err.Error(), "--kwok") {
		t.Errorf("err %v", err)
	}
}
