package kube

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/owner"
)

func TestMain(m *testing.M) {
	pollInterval = 10 * time.Millisecond
	readyPoll = 10 * time.Millisecond
	// The fake exec server's wsstream logs every closed connection.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

type nodeOpt func(*corev1.Node)

func notReady(n *corev1.Node)    { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node)    { n.Spec.Unschedulable = true }
func noCondition(n *corev1.Node) { n.Status.Conditions = nil }
func taint(k string, e corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: e}) }
}

func node(name, ip string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeExternalIP, Address: "203.0.113.9"},
				{Type: corev1.NodeInternalIP, Address: ip},
			},
			NodeInfo: corev1.NodeSystemInfo{KernelVersion: "6.1.0", ContainerRuntimeVersion: "containerd://2.0.0"},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// twoNodes is a cluster with two usable nodes (given in reverse order).
func twoNodes() *fake.Clientset {
	return fake.NewClientset(node("worker-b", "10.0.0.2"), node("worker-a", "10.0.0.1"))
}

func newCluster(t *testing.T, cs *fake.Clientset, cfg Config) *Cluster {
	t.Helper()
	c, err := NewWithClient(context.Background(), cs, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestNamespaceLifecycle(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c, err := NewWithClient(ctx, cs, nil, Config{RunID: "2026-01-02T03:04:05Z/p2p run"})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, c.Namespace(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ns.Name, "cnibench-") || len(ns.Name) != len("cnibench-")+5 {
		t.Errorf("namespace name %q", ns.Name)
	}
	want := map[string]string{ManagedBy: "cnibench", RunLabel: "2026-01-02T03-04-05Z-p2p-run", PodSecurityEnforce: "privileged"}
	if !reflect.DeepEqual(ns.Labels, want) {
		t.Errorf("labels %v, want %v", ns.Labels, want)
	}
	if b := c.Facts().Backend; b != "kube" {
		t.Errorf("backend %q", b)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, c.Namespace(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace still there after Close: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Two runs get different namespaces.
	c1, c2 := newCluster(t, cs, Config{}), newCluster(t, cs, Config{})
	if c1.Namespace() == c2.Namespace() {
		t.Errorf("two runs share namespace %s", c1.Namespace())
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" // 64 characters; cut to 63 ends in '-'
	for in, want := range map[string]string{
		"":                 "",
		"run-1":            "run-1",
		"2026-01-02T03:04": "2026-01-02T03-04",
		"/x y/":            "x-y",
		"--a_b.c--":        "a_b.c",
		"ünï":              "n",
		long:               strings.Repeat("a", 62),
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNodeSelection(t *testing.T) {
	ctx := context.Background()
	nodes := func() *fake.Clientset {
		return fake.NewClientset(
			node("n5-ok", "10.0.0.5"),
			node("n1-ok", "10.0.0.1"),
			node("n2-notready", "10.0.0.2", notReady),
			node("n3-cordoned", "10.0.0.3", cordoned),
			node("n4-noschedule", "10.0.0.4", taint("node-role.kubernetes.io/control-plane", corev1.TaintEffectNoSchedule)),
			node("n6-noexecute", "10.0.0.6", taint("dedicated", corev1.TaintEffectNoExecute)),
			node("n7-prefer", "10.0.0.7", taint("soft", corev1.TaintEffectPreferNoSchedule)),
			node("n8-nocondition", "10.0.0.8", noCondition),
		)
	}
	names := func(c *Cluster) []string {
		ns, err := c.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return out
	}

	c := newCluster(t, nodes(), Config{})
	if got, want := names(c), []string{"n1-ok", "n5-ok", "n7-prefer"}; !slices.Equal(got, want) {
		t.Errorf("automatic: %v, want %v", got, want)
	}
	if ns, _ := c.Nodes(ctx); ns[0].IP != "10.0.0.1" {
		t.Errorf("node IP %q, want the InternalIP 10.0.0.1", ns[0].IP)
	}
	c = newCluster(t, nodes(), Config{TolerateTaints: true})
	if got, want := names(c), []string{"n1-ok", "n4-noschedule", "n5-ok", "n6-noexecute", "n7-prefer"}; !slices.Equal(got, want) {
		t.Errorf("tolerating taints: %v, want %v", got, want)
	}
	c = newCluster(t, nodes(), Config{Nodes: []string{"n5-ok", "n1-ok"}})
	if got, want := names(c), []string{"n5-ok", "n1-ok"}; !slices.Equal(got, want) {
		t.Errorf("explicit: %v, want %v (given order)", got, want)
	}
	// Pinning with nodeName bypasses cordons and NoSchedule: explicit nodes may have them.
	c = newCluster(t, nodes(), Config{Nodes: []string{"n3-cordoned", "n4-noschedule"}})
	if got := names(c); len(got) != 2 {
		t.Errorf("explicit cordoned/NoSchedule nodes: %v", got)
	}
	c = newCluster(t, nodes(), Config{Nodes: []string{"n6-noexecute"}, TolerateTaints: true})
	if got := names(c); len(got) != 1 {
		t.Errorf("explicit NoExecute node with TolerateTaints: %v", got)
	}

	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Nodes: []string{"n1-ok", "nope"}}, []string{`"nope"`, "not found"}},
		{Config{Nodes: []string{"n2-notready"}}, []string{`"n2-notready"`, "not Ready"}},
		{Config{Nodes: []string{"n8-nocondition"}}, []string{`"n8-nocondition"`, "not Ready"}},
		{Config{Nodes: []string{"n6-noexecute"}}, []string{`"n6-noexecute"`, "dedicated:NoExecute", "--tolerate-taints"}},
		{Config{Nodes: []string{"n1-ok", "n1-ok"}}, []string{`"n1-ok"`, "twice"}},
	} {
		cs := nodes()
		_, err := NewWithClient(ctx, cs, nil, tc.cfg)
		if err == nil {
			t.Errorf("%v: no error", tc.cfg.Nodes)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not mention %s", tc.cfg.Nodes, err, w)
			}
		}
		if nss, _ := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); len(nss.Items) != 0 {
			t.Errorf("%v: namespace created despite the error", tc.cfg.Nodes)
		}
	}

	none := fake.NewClientset(node("a", "10.0.0.1", notReady), node("b", "10.0.0.2", taint("x", corev1.TaintEffectNoSchedule)))
	_, err := NewWithClient(ctx, none, nil, Config{})
	if err == nil || !strings.Contains(err.Error(), "a: not Ready") || !strings.Contains(err.Error(), "b: taint x:NoSchedule") {
		t.Errorf("no usable node: %v", err)
	}
	if _, err := NewWithClient(ctx, fake.NewClientset(), nil, Config{}); err == nil {
		t.Error("empty cluster: no error")
	}
}

// markRunning waits for the pod to appear and gives it status (as the kubelet would).
func setStatus(t *testing.T, cs *fake.Clientset, ns, name string, status corev1.PodStatus) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			p.Status = status
			if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("pod %s/%s never created", ns, name)
}

func running(ip string) corev1.PodStatus {
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}
}

func TestCreatePod(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r1", Image: "example.com/tools:v1", TolerateTaints: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond) // CreatePod has to wait
		setStatus(t, cs, c.Namespace(), "server", running("10.244.1.7"))
	}()
	spec := cluster.PodSpec{Name: "server", Node: "worker-b", Labels: map[string]string{"app": "cnibench", "role": "server"}, HostNetwork: true}
	p, err := cluster.CreatePod(ctx, c, spec)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{"app": "cnibench", "role": "server", ManagedBy: "cnibench", RunLabel: "r1", PodLabel: "server"}
	want := cluster.Pod{Name: "server", Node: "worker-b", IP: "10.244.1.7", HostNetwork: true, Labels: wantLabels}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("pod %+v, want %+v", p, want)
	}
	if len(spec.Labels) != 2 {
		t.Errorf("CreatePod changed the caller's labels: %v", spec.Labels)
	}
	obj, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "server", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Spec.NodeName != "worker-b" || !obj.Spec.HostNetwork || !reflect.DeepEqual(obj.Labels, wantLabels) {
		t.Errorf("pod object: nodeName %q hostNetwork %v labels %v", obj.Spec.NodeName, obj.Spec.HostNetwork, obj.Labels)
	}
	if len(obj.Spec.Containers) != 1 {
		t.Fatalf("containers: %+v", obj.Spec.Containers)
	}
	ct := obj.Spec.Containers[0]
	if ct.Name != "main" || ct.Image != "example.com/tools:v1" || ct.ImagePullPolicy != corev1.PullIfNotPresent ||
		!slices.Equal(ct.Command, idleCommand) {
		t.Errorf("container %+v", ct)
	}
	if g := obj.Spec.TerminationGracePeriodSeconds; g == nil || *g != 1 {
		t.Errorf("terminationGracePeriodSeconds %v", g)
	}
	if tol := obj.Spec.Tolerations; len(tol) != 1 || tol[0].Operator != corev1.TolerationOpExists || tol[0].Key != "" {
		t.Errorf("tolerations %+v, want one tolerating everything", tol)
	}

	// Default image, no tolerations, pod network.
	c2 := newCluster(t, cs, Config{})
	go setStatus(t, cs, c2.Namespace(), "client", running("10.244.0.5"))
	p2, err := cluster.CreatePod(ctx, c2, cluster.PodSpec{Name: "client", Node: "worker-a"})
	if err != nil {
		t.Fatal(err)
	}
	obj2, _ := cs.CoreV1().Pods(c2.Namespace()).Get(ctx, "client", metav1.GetOptions{})
	if obj2.Spec.Containers[0].Image != DefaultImage || obj2.Spec.Tolerations != nil || obj2.Spec.HostNetwork || p2.IP != "10.244.0.5" {
		t.Errorf("default pod: image %q tolerations %v hostNetwork %v ip %q", obj2.Spec.Containers[0].Image, obj2.Spec.Tolerations, obj2.Spec.HostNetwork, p2.IP)
	}

	if _, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "x", Node: "elsewhere"}); err == nil || !strings.Contains(err.Error(), `"elsewhere"`) {
		t.Errorf("unknown node: %v", err)
	}

	// NodeCPU needs a pod of the run on the node; without a REST config it can't exec.
	if _, err := c.NodeCPU(ctx, "worker-a"); err == nil || !strings.Contains(err.Error(), "no pod") {
		t.Errorf("NodeCPU on a node without pods: %v", err)
	}
	if _, err := c.NodeCPU(ctx, "worker-b"); err == nil || !strings.Contains(err.Error(), "REST config") {
		t.Errorf("NodeCPU without REST config: %v", err)
	}

	if err := cluster.DeletePod(ctx, c, "server"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "server", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there after DeletePod: %v", err)
	}
	if _, err := c.NodeCPU(ctx, "worker-b"); err == nil || !strings.Contains(err.Error(), "no pod") {
		t.Errorf("NodeCPU after the node's pod was deleted: %v", err)
	}
	if err := cluster.DeletePod(ctx, c, "server"); err != nil {
		t.Errorf("deleting a deleted pod: %v", err)
	}
}

func TestCreatePodFailsEarly(t *testing.T) {
	ctx := context.Background()
	for reason, status := range map[string]corev1.PodStatus{
		"ErrImagePull": {Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "pull access denied for cnibench/tools"}}}}},
		"ImagePullBackOff": {Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}},
		"OutOfcpu": {Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Pod was rejected: Node didn't have enough resource: cpu"},
		"exit code 127": {Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 127, Reason: "Error"}}}}},
	} {
		cs := twoNodes()
		c := newCluster(t, cs, Config{})
		go setStatus(t, cs, c.Namespace(), "server", status)
		start := time.Now()
		_, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "server", Node: "worker-a"})
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: error %v", reason, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %s, want an early failure", reason, d)
		}
		if _, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "server", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: failed pod not deleted: %v", reason, err)
		}
	}
	cs := twoNodes()
	c := newCluster(t, cs, Config{})
	go setStatus(t, cs, c.Namespace(), "server", status("ErrImagePull", "rpc error: not found"))
	if _, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "server", Node: "worker-a"}); err == nil || !strings.Contains(err.Error(), "rpc error: not found") {
		t.Errorf("ErrImagePull message missing: %v", err)
	}
}

func status(reason, msg string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}
}

func TestCreatePodTimeout(t *testing.T) {
	defer func(d time.Duration) { podTimeout = d }(podTimeout)
	podTimeout = 300 * time.Millisecond
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{})
	_, err := cs.CoreV1().Events(c.Namespace()).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "server.1", Namespace: c.Namespace()},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "server", Namespace: c.Namespace()},
		Type:           corev1.EventTypeWarning, Reason: "FailedCreatePodSandBox",
		Message: "plugin type=\"calico\" failed (add): connection refused",
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go setStatus(t, cs, c.Namespace(), "server", status("ContainerCreating", ""))
	_, err = cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "server", Node: "worker-a"})
	for _, w := range []string{"not running after", "ContainerCreating", "FailedCreatePodSandBox", "calico"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("timeout error %v does not mention %s", err, w)
		}
	}
}

func TestClean(t *testing.T) {
	ctx := context.Background()
	host, _ := os.Hostname()
	self := owner.Self("test")
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ns := func(name string, labels, ann map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}}
	}
	mine := map[string]string{ManagedBy: "cnibench"}
	run := func(host string, pid int, start uint64, beat time.Time) map[string]string {
		return map[string]string{OwnerHostAnnotation: host, OwnerPIDAnnotation: strconv.Itoa(pid),
			OwnerStartAnnotation: strconv.FormatUint(start, 10), HeartbeatAnnotation: beat.UTC().Format(time.RFC3339)}
	}
	fakeNode := func(name, ns string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ManagedBy: "cnibench", FakeNodeLabel: ns}}}
	}
	cs := fake.NewClientset(
		ns("cnibench-old01", map[string]string{ManagedBy: "cnibench", RunLabel: "r1"}, nil), // before owner annotations
		ns("cnibench-live1", mine, run(host, self.PID, self.Start, now.Add(-time.Hour))),    // this process: alive
		ns("cnibench-dead1", mine, run(host, ended.Process.Pid, self.Start, now)),           // ended here
		ns("cnibench-away1", mine, run(host+"-other", 1, 1, now.Add(-time.Minute))),         // elsewhere, fresh heartbeat
		ns("cnibench-away2", mine, run(host+"-other", 1, 1, now.Add(-10*time.Minute))),      // elsewhere, stale
		ns("cnibench-lookalike", nil, nil),
		terminating(ns("cnibench-term1", mine, run(host, ended.Process.Pid, self.Start, now))), // its run ended, its deletion under way
		ns("monitoring", map[string]string{ManagedBy: "Helm"}, nil),
		ns("default", nil, nil),
		fakeNode("cnibench-live1-fake-0", "cnibench-live1"),
		fakeNode("cnibench-gone1-fake-0", "cnibench-gone1"),
	)
	names, skipped, err := Clean(ctx, cs, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cnibench-away2", "cnibench-dead1", "cnibench-old01"}; !slices.Equal(names, want) {
		t.Errorf("Clean deleted %v, want %v", names, want)
	}
	if len(skipped) != 3 || !strings.HasPrefix(skipped[0], "cnibench-away1: run by pid 1 on "+host+"-other, heartbeat 1m") ||
		!strings.HasPrefix(skipped[1], "cnibench-live1: run by pid") || !strings.Contains(skipped[1], "still running") ||
		skipped[2] != "cnibench-term1: being deleted already" {
		t.Errorf("skipped %q", skipped)
	}
	left := func() []string {
		list, _ := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		var out []string
		for _, n := range list.Items {
			out = append(out, n.Name)
		}
		slices.Sort(out)
		return out
	}
	if want := []string{"cnibench-away1", "cnibench-live1", "cnibench-lookalike", "cnibench-term1", "default", "monitoring"}; !slices.Equal(left(), want) {
		t.Errorf("left %v, want %v", left(), want)
	}
	// Fake nodes of a standing run stay; those of a run whose namespace is gone go.
	if fn, err := CleanFakeNodes(ctx, cs, false); err != nil || !slices.Equal(fn, []string{"cnibench-gone1-fake-0"}) {
		t.Errorf("CleanFakeNodes = %v, %v", fn, err)
	}
	if names, skipped, err := Clean(ctx, cs, true); err != nil || len(skipped) != 1 || !slices.Equal(names, []string{"cnibench-away1", "cnibench-live1"}) {
		t.Errorf("forced Clean: %v %v %v", names, skipped, err)
	}
	if want := []string{"cnibench-lookalike", "cnibench-term1", "default", "monitoring"}; !slices.Equal(left(), want) {
		t.Errorf("left %v, want %v", left(), want)
	}
}

// terminating marks a namespace as being deleted (as the API server does until the namespace
// controller has emptied it).
func terminating(n *corev1.Namespace) *corev1.Namespace {
	now := metav1.Now()
	n.DeletionTimestamp, n.Finalizers = &now, []string{"kubernetes"}
	return n
}

// Close waits for the run's pods to be gone, not for the namespace object: on a real cluster
// that stays a few seconds longer, until the namespace controller has finished (here, as
// there, the delete leaves it, being deleted).
func TestCloseWaitsForPodsNotNamespace(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "r"})
	ns := c.Namespace()
	cs.PrependReactor("delete", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		got, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", ns)
		if err != nil {
			return true, nil, err
		}
		return true, nil, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("namespaces"), terminating(got.(*corev1.Namespace)), "")
	})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const stops = 300 * time.Millisecond // the kubelet stopping the pod
	go func() {
		time.Sleep(stops)
		_ = cs.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{})
	}()
	start := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < stops {
		t.Errorf("Close returned after %s, before the pod was gone", el)
	}
	got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Errorf("namespace after Close: %v %v, want it there, being deleted", got, err)
	}
}

// A run's namespace names its owner and beats while the run goes; Close stops the beat.
func TestNamespaceOwnerAndHeartbeat(t *testing.T) {
	old := heartbeatEvery
	heartbeatEvery = 20 * time.Millisecond
	defer func() { heartbeatEvery = old }()
	ctx := context.Background()
	cs := twoNodes()
	c, err := NewWithClient(ctx, cs, nil, Config{RunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	get := func() *corev1.Namespace {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, c.Namespace(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	ns := get()
	if live, who := liveOwner(*ns, time.Now()); !live || !strings.Contains(who, strconv.Itoa(os.Getpid())) {
		t.Errorf("owner of a running run: %v %q (annotations %v)", live, who, ns.Annotations)
	}
	// Set an old heartbeat by hand: the goroutine must refresh it.
	ns.Annotations[HeartbeatAnnotation] = "2020-01-01T00:00:00Z"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for get().Annotations[HeartbeatAnnotation] == "2020-01-01T00:00:00Z" {
		if time.Now().After(deadline) {
			t.Fatal("heartbeat not refreshed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := c.beatDone
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = cs.CoreV1().Namespaces().Delete(ctx, c.Namespace(), metav1.DeleteOptions{})
	}()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Error("heartbeat still beating after Close")
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A real cluster has no bare veth pair: the kube Cluster does not offer cluster.BarePairer.
func TestBarePairUnsupported(t *testing.T) {
	var cl cluster.Cluster = newCluster(t, twoNodes(), Config{})
	if _, ok := cl.(cluster.BarePairer); ok {
		t.Error("kube Cluster implements cluster.BarePairer: the bare veth baseline exists only on the lab backend")
	}
}

func TestFacts(t *testing.T) {
	c := newCluster(t, twoNodes(), Config{PodMTU: 1450})
	f := c.Facts()
	if f.Backend != "kube" || f.Dataplane != "cluster" || f.PodMTU != 1450 {
		t.Errorf("facts %+v", f)
	}
	info := f.Record()
	if info["backend"] != "kube" || info["namespace"] != c.Namespace() || !reflect.DeepEqual(info["nodes"], []string{"worker-a", "worker-b"}) {
		t.Errorf("info %v", info)
	}
	if mtu, ok := info["pod_mtu"].(int); !ok || mtu != 1450 { // scenario.udpLen reads an int
		t.Errorf("pod_mtu %#v", info["pod_mtu"])
	}
	// The environment facts (readFacts) are part of the record.
	if k, ok := info["node_kernel"].(map[string]string); !ok || k["worker-a"] != "6.1.0" || k["worker-b"] != "6.1.0" {
		t.Errorf("node_kernel %#v", info["node_kernel"])
	}
	if _, ok := info["cni"]; !ok {
		t.Errorf("no cni fact in %v", info)
	}
	unknownMTU := newCluster(t, twoNodes(), Config{}).Facts()
	if _, ok := unknownMTU.Record()["pod_mtu"]; ok || unknownMTU.PodMTU != 0 {
		t.Error("pod_mtu reported while unknown")
	}
}

func TestExecWithoutRESTConfig(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, twoNodes(), Config{})
	if _, err := c.Exec(ctx, "server", []string{"true"}); err == nil {
		t.Error("Exec without REST config: no error")
	}
	if _, err := c.Start(ctx, "server", []string{"iperf3", "-s"}, cluster.Ready{TCPPort: 5201}); err == nil {
		t.Error("Start without REST config: no error")
	}
	if _, err := c.Start(ctx, "server", []string{"iperf3", "-s"}, cluster.Ready{}); err == nil {
		t.Error("Start without REST config and readiness: no error")
	}
	if _, err := c.Exec(ctx, "server", nil); err == nil {
		t.Error("empty argv: no error")
	}
}

func TestExecRequest(t *testing.T) {
	core, err := corev1client.NewForConfig(&rest.Config{Host: "https://api.example:6443"})
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"taskset", "-c", "1", "iperf3", "-c", "10.244.1.7", "--title", "a b; $(rm -rf /) `x` '\"", "*"}
	opts := execOptions(argv, false)
	if in := execOptions(argv, true); !in.Stdin || in.TTY {
		t.Errorf("exec options with stdin %+v", in)
	}
	if opts.Container != "main" || !opts.Stdout || !opts.Stderr || opts.Stdin || opts.TTY || !slices.Equal(opts.Command, argv) {
		t.Errorf("exec options %+v", opts)
	}
	argv[0] = "changed"
	if opts.Command[0] != "taskset" {
		t.Error("exec options alias the caller's argv")
	}
	u := execURL(core.RESTClient(), "cnibench-b2c4d", "client", opts)
	if u.Scheme != "https" || u.Host != "api.example:6443" || u.Path != "/api/v1/namespaces/cnibench-b2c4d/pods/client/exec" {
		t.Errorf("exec URL %s", u)
	}
	q := u.Query()
	if !slices.Equal(q["command"], opts.Command) {
		t.Errorf("command parameters %q, want %q", q["command"], opts.Command)
	}
	if q.Get("container") != "main" || q.Get("stdout") != "true" || q.Get("stderr") != "true" || q.Has("stdin") || q.Has("tty") {
		t.Errorf("exec query %v", q)
	}
}

func TestExitCode(t *testing.T) {
	if code, ok := exitCode(errors.Join(errors.New("x"), utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3})); !ok || code != 3 {
		t.Errorf("CodeExitError: %d %v", code, ok)
	}
	if code, ok := exitCode(&utilexec.CodeExitError{Err: errors.New("x"), Code: 1}); !ok || code != 1 {
		t.Errorf("*CodeExitError: %d %v", code, ok)
	}
	if _, ok := exitCode(errors.New("unable to upgrade connection")); ok {
		t.Error("plain error taken for an exit code")
	}
	if _, ok := exitCode(nil); ok {
		t.Error("nil taken for an exit code")
	}
}

func TestStartArgv(t *testing.T) {
	argv := []string{"echo", "a  b", "$(id)", ";", "`x`", "*", "'", `"`, "$1", ""}
	got := startArgv("/tmp/cnb-7.log", argv)
	want := append([]string{"/bin/busybox", "sh", "-c", startScript, "sh", "/tmp/cnb-7.log"}, argv...)
	if !slices.Equal(got, want) {
		t.Errorf("start argv %q", got)
	}
	// The script runs with real busybox (as in the tools image): nothing in argv is
	// interpreted, and the printed PID is the server's own.
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox here")
	}
	run := func(log string, argv ...string) int {
		t.Helper()
		a := startArgv(log, argv)
		a[0] = bb
		out, err := exec.Command(a[0], a[1:]...).Output()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("start printed %q", out)
		}
		return pid
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "echo.log")
	run(log, append([]string{bb}, argv...)...)
	deadline := time.Now().Add(5 * time.Second)
	var b []byte
	for time.Now().Before(deadline) {
		if b, _ = os.ReadFile(log); len(b) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := strings.Join(argv[1:], " ") + "\n"; string(b) != want {
		t.Errorf("log %q, want %q", b, want)
	}
	pid := run(filepath.Join(dir, "sleep.log"), bb, "sleep", "30")
	defer func() { _ = exec.Command("kill", strconv.Itoa(pid)).Run() }()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := procState(stat); !ok || st == "Z" {
		t.Errorf("started PID %d state %q", pid, st)
	}
	if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); !strings.Contains(string(cmd), "sleep\x0030") {
		t.Errorf("PID %d is %q, not the server", pid, cmd)
	}
}

// Facts().Record() is the environment record of the run: every fact the backend learns while
// it runs, under the keys Info gave them.
func TestFactsRecordLearnt(t *testing.T) {
	c := newCluster(t, twoNodes(), Config{Image: "tools:1"})
	c.mu.Lock()
	c.podMTU = 1400
	c.policy = policyState{probed: true, enforced: true, detail: "denied"}
	c.mu.Unlock()
	c.fake = []string{"f0", "f1", "f2"}
	f := c.Facts()
	if f.PodMTU != 1400 {
		t.Errorf("PodMTU %d, want the learnt 1400", f.PodMTU)
	}
	if _, ok := f.Details["pod_mtu"]; ok {
		t.Error("pod_mtu in Details: it is the typed PodMTU")
	}
	rec := f.Record()
	want := map[string]any{"backend": "kube", "dataplane": "cluster", "namespace": c.Namespace(),
		"nodes": []string{"worker-a", "worker-b"}, "image": "tools:1",
		"pod_mtu": 1400, "pod_mtu_source": "eth0 of the first pod",
		"networkpolicy_enforced": true, "networkpolicy_probe": "denied",
		"fake_nodes": 3, "fake_node_controller": "kwok"}
	for k, v := range want {
		if !reflect.DeepEqual(rec[k], v) {
			t.Errorf("%s = %#v, want %#v", k, rec[k], v)
		}
	}
	for k := range c.info { // the facts read by New
		if _, ok := rec[k]; !ok {
			t.Errorf("fact %s missing from the record", k)
		}
	}
	if len(rec) != len(want)+len(c.info) {
		t.Errorf("record has %d keys, want %d: %v", len(rec), len(want)+len(c.info), rec)
	}
}
