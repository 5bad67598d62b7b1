package kube

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
)

// fastProbe shortens the probe's waits for the test.
func fastProbe(t *testing.T) {
	t.Helper()
	saved := []time.Duration{baselineWait, policySettle, policyWait, probeRetryEvery}
	baselineWait, policySettle, policyWait, probeRetryEvery = 200*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() {
		baselineWait, policySettle, policyWait, probeRetryEvery = saved[0], saved[1], saved[2], saved[3]
	})
}

// fakeCNI is a policyProber simulating a pod network: with baseline false nothing connects;
// with enforces, a connection to a pod selected by a NetworkPolicy of policyTypes [Ingress]
// and no ingress rules is refused, after lag more successful attempts.
type fakeCNI struct {
	t        *testing.T
	cs       *fake.Clientset
	ns       string
	baseline bool
	enforces bool
	lag      int
	execErr  error             // Connect fails with this
	onConn   func(attempt int) // called on every Connect
	served   []string          // pods Serve was called for
	attempts int               // Connect calls
	seen     []networkingv1.NetworkPolicy
	mu       sync.Mutex
}

func (f *fakeCNI) Serve(ctx context.Context, pod string, port int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if port != 8081 {
		f.t.Errorf("serving on port %d", port)
	}
	f.served = append(f.served, pod)
	return nil
}

func (f *fakeCNI) Connect(ctx context.Context, client, ip string, port int) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.onConn != nil {
		f.onConn(f.attempts)
	}
	if f.execErr != nil {
		return false, "", f.execErr
	}
	server, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, probeServerPod, metav1.GetOptions{})
	if err != nil {
		f.t.Errorf("server pod: %v", err)
		return false, "", err
	}
	cl, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, client, metav1.GetOptions{})
	if err != nil {
		f.t.Errorf("client pod: %v", err)
		return false, "", err
	}
	if client != probeClientPod || ip != server.Status.PodIP || port != 8081 {
		f.t.Errorf("connect from %s to %s:%d, want %s to %s:8081", client, ip, port, probeClientPod, server.Status.PodIP)
	}
	if server.Spec.NodeName != "worker-a" || cl.Spec.NodeName != "worker-b" || server.Spec.HostNetwork || cl.Spec.HostNetwork {
		f.t.Errorf("server on %s (host network %v), client on %s (host network %v)", server.Spec.NodeName, server.Spec.HostNetwork, cl.Spec.NodeName, cl.Spec.HostNetwork)
	}
	if !f.baseline {
		return false, "nc: timed out", nil
	}
	pols, err := f.cs.NetworkingV1().NetworkPolicies(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "", err
	}
	for _, p := range pols.Items {
		f.seen = append(f.seen, p)
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			f.t.Errorf("policy selector: %v", err)
			continue
		}
		if sel.Matches(labels.Set(cl.Labels)) {
			f.t.Errorf("policy %s selects the client pod too (labels %v)", p.Name, cl.Labels)
		}
		denies := sel.Matches(labels.Set(server.Labels)) && len(p.Spec.Ingress) == 0 &&
			reflect.DeepEqual(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress})
		if denies && f.enforces {
			if f.lag > 0 {
				f.lag--
				continue
			}
			return false, "nc: can't connect to remote host (" + ip + "): Connection refused", nil
		}
	}
	return true, "", nil
}

// probeCluster is a run on worker-a and worker-b whose probe pods come up (as the kubelet
// would report them).
func probeCluster(t *testing.T, cfg Config) (*Cluster, *fake.Clientset) {
	t.Helper()
	cs := twoNodes()
	c := newCluster(t, cs, cfg)
	go setStatus(t, cs, c.Namespace(), probeServerPod, running("10.244.0.7"))
	go setStatus(t, cs, c.Namespace(), probeClientPod, running("10.244.1.9"))
	return c, cs
}

// checkCleanedUp fails unless the probe's pods and policy are gone.
func checkCleanedUp(t *testing.T, c *Cluster, cs *fake.Clientset) {
	t.Helper()
	ctx := context.Background()
	for _, pod := range []string{probeServerPod, probeClientPod} {
		if _, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod %s left behind: %v", pod, err)
		}
	}
	if pols, _ := cs.NetworkingV1().NetworkPolicies(c.Namespace()).List(ctx, metav1.ListOptions{}); len(pols.Items) != 0 {
		t.Errorf("NetworkPolicies left behind: %v", pols.Items)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pods) != 0 {
		t.Errorf("pods still registered: %v", c.pods)
	}
}

// policyActions counts the fake's create and delete actions on NetworkPolicies.
func policyActions(cs *fake.Clientset) (creates, deletes int) {
	for _, a := range cs.Actions() {
		if a.GetResource().Resource != "networkpolicies" {
			continue
		}
		switch a.GetVerb() {
		case "create":
			creates++
		case "delete":
			deletes++
		}
	}
	return creates, deletes
}

func TestProbePolicyEnforced(t *testing.T) {
	fastProbe(t)
	c, cs := probeCluster(t, Config{RunID: "run 1"})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: true, lag: 2}
	enforced, detail, err := c.probePolicy(context.Background(), cni)
	if err != nil {
		t.Fatal(err)
	}
	if !enforced || !strings.Contains(detail, "blocked") || !strings.Contains(detail, "Connection refused") {
		t.Errorf("enforced %v, detail %q", enforced, detail)
	}
	if !reflect.DeepEqual(cni.served, []string{probeServerPod}) {
		t.Errorf("served in %v", cni.served)
	}
	// One baseline attempt, two through the policy before it took effect, one refused.
	if cni.attempts != 4 {
		t.Errorf("%d connection attempts, want 4", cni.attempts)
	}
	if len(cni.seen) == 0 {
		t.Fatal("no NetworkPolicy while probing")
	}
	p := cni.seen[0]
	if p.Name != probePolicyName || p.Namespace != c.Namespace() {
		t.Errorf("policy %s/%s", p.Namespace, p.Name)
	}
	if want := map[string]string{ProbeLabel: probeServerRole}; !reflect.DeepEqual(p.Spec.PodSelector.MatchLabels, want) || len(p.Spec.PodSelector.MatchExpressions) != 0 {
		t.Errorf("podSelector %+v, want matchLabels %v", p.Spec.PodSelector, want)
	}
	if !reflect.DeepEqual(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || p.Spec.Ingress != nil || p.Spec.Egress != nil {
		t.Errorf("policy spec %+v, want policyTypes [Ingress] and no rules", p.Spec)
	}
	if want := map[string]string{ManagedBy: ManagedByValue, RunLabel: "run-1"}; !reflect.DeepEqual(p.Labels, want) {
		t.Errorf("policy labels %v, want %v", p.Labels, want)
	}
	if creates, deletes := policyActions(cs); creates != 1 || deletes != 1 {
		t.Errorf("NetworkPolicy created %d and deleted %d times", creates, deletes)
	}
	checkCleanedUp(t, c, cs)
}

func TestProbePolicyNotEnforced(t *testing.T) {
	fastProbe(t)
	c, cs := probeCluster(t, Config{})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: false}
	start := time.Now()
	enforced, detail, err := c.probePolicy(context.Background(), cni)
	if err != nil {
		t.Fatal(err)
	}
	if enforced || detail != NotEnforcedDetail {
		t.Errorf("enforced %v, detail %q", enforced, detail)
	}
	if d := time.Since(start); d < policySettle+policyWait {
		t.Errorf("gave up after %s, before settle+wait %s", d, policySettle+policyWait)
	}
	if cni.attempts < 3 {
		t.Errorf("%d connection attempts: no retries", cni.attempts)
	}
	if len(cni.seen) == 0 {
		t.Error("no NetworkPolicy while probing")
	}
	if creates, deletes := policyActions(cs); creates != 1 || deletes != 1 {
		t.Errorf("NetworkPolicy created %d and deleted %d times", creates, deletes)
	}
	checkCleanedUp(t, c, cs)
}

func TestProbePolicyBaselineBroken(t *testing.T) {
	fastProbe(t)
	c, cs := probeCluster(t, Config{})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: false}
	enforced, _, err := c.probePolicy(context.Background(), cni)
	if err == nil || enforced {
		t.Fatalf("enforced %v, error %v", enforced, err)
	}
	for _, w := range []string{"baseline broken", probeClientPod, "10.244.0.7:8081", "worker-a", "worker-b", "timed out"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %s", err, w)
		}
	}
	if cni.attempts < 2 {
		t.Errorf("baseline tried %d times, want retries", cni.attempts)
	}
	if creates, _ := policyActions(cs); creates != 0 {
		t.Errorf("NetworkPolicy created %d times with a broken baseline", creates)
	}
	checkCleanedUp(t, c, cs)
}

func TestProbePolicyFailures(t *testing.T) {
	fastProbe(t)

	// The connection attempt itself fails: an error, and everything is deleted.
	c, cs := probeCluster(t, Config{})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, execErr: errors.New("exec: upgrade failed")}
	if _, _, err := c.probePolicy(context.Background(), cni); err == nil || !strings.Contains(err.Error(), "upgrade failed") {
		t.Errorf("exec failure: %v", err)
	}
	checkCleanedUp(t, c, cs)

	// Cancelled after the policy was created: still cleaned up.
	c, cs = probeCluster(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cni = &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, onConn: func(n int) {
		if n == 2 {
			cancel()
		}
	}}
	if _, _, err := c.probePolicy(ctx, cni); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled probe: %v", err)
	}
	if creates, deletes := policyActions(cs); creates != 1 || deletes != 1 {
		t.Errorf("NetworkPolicy created %d and deleted %d times", creates, deletes)
	}
	checkCleanedUp(t, c, cs)

	// A server pod that does not come up: an error, nothing left.
	defer func(d time.Duration) { podTimeout = d }(podTimeout)
	podTimeout = 200 * time.Millisecond
	cs = twoNodes()
	c = newCluster(t, cs, Config{})
	cni = &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true}
	if _, _, err := c.probePolicy(context.Background(), cni); err == nil || !strings.Contains(err.Error(), probeServerPod) {
		t.Errorf("server pod not running: %v", err)
	}
	if cni.attempts != 0 || len(cni.served) != 0 {
		t.Errorf("probed without pods: %d attempts, served %v", cni.attempts, cni.served)
	}
	checkCleanedUp(t, c, cs)

	// Without a REST config the real prober cannot start the server.
	c, cs = probeCluster(t, Config{})
	if _, _, err := c.ProbePolicyEnforcement(context.Background()); err == nil || !strings.Contains(err.Error(), "REST config") {
		t.Errorf("without REST config: %v", err)
	}
	checkCleanedUp(t, c, cs)
}

// TestProbePolicyOverExec runs the real prober's busybox nc commands on this host through
// the fake exec server: the server answers, the client connects, and (nothing here enforces
// NetworkPolicy) the probe reports it not enforced, then stops the server.
func TestProbePolicyOverExec(t *testing.T) {
	fastProbe(t)
	lc := localCluster(t) // skips without /bin/busybox
	port := freePort(t)
	defer func(p int) { probePort = p }(probePort)
	probePort = port

	cs := twoNodes()
	c, err := NewWithClient(context.Background(), cs, lc.rc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	go setStatus(t, cs, c.Namespace(), probeServerPod, running("127.0.0.1"))
	go setStatus(t, cs, c.Namespace(), probeClientPod, running("127.0.0.1"))
	enforced, detail, err := c.ProbePolicyEnforcement(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if enforced || detail != NotEnforcedDetail {
		t.Errorf("enforced %v, detail %q", enforced, detail)
	}
	if dials(port) {
		t.Errorf("probe server still listening on %d", port)
	}
	checkCleanedUp(t, c, cs)

	// The nc client: an answer is a connection; a closed port is not, with nc's reason.
	pr := ncProber{lc}
	if ok, why, err := pr.Connect(context.Background(), "client", "127.0.0.1", port); err != nil || ok || !strings.Contains(why, "refused") {
		t.Errorf("closed port: connected %v, why %q, error %v", ok, why, err)
	}
	if err := pr.Serve(context.Background(), "server", port); err != nil {
		t.Fatal(err)
	}
	if ok, why, err := pr.Connect(context.Background(), "client", "127.0.0.1", port); err != nil || !ok {
		t.Errorf("open port: connected %v, why %q, error %v", ok, why, err)
	}
	if ok, _, err := pr.Connect(context.Background(), "client", "127.0.0.1", port); err != nil || !ok {
		t.Errorf("second connection (server keeps listening): connected %v, error %v", ok, err)
	}
	lc.stopProcs("server")
	if dials(port) {
		t.Errorf("server still listening on %d", port)
	}
}

var _ policyProber = ncProber{}
