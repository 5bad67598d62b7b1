package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnibench/cnibench/internal/cluster"
)

// allowPolicies are n policies allowing TCP 8080 into app=web from app=client.
func allowPolicies(n int, ns string) []networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	var out []networkingv1.NetworkPolicy
	for i := 0; i < n; i++ {
		out = append(out, networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("allow-%d", i), Namespace: ns, Labels: map[string]string{"set": "load"}},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp}},
				}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			},
		})
	}
	return out
}

// runPolicies lists the run namespace's NetworkPolicies by name.
func runPolicies(t *testing.T, cs *fake.Clientset, ns string) map[string]networkingv1.NetworkPolicy {
	t.Helper()
	list, err := cs.NetworkingV1().NetworkPolicies(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]networkingv1.NetworkPolicy{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out
}

// On a CNI that does not enforce NetworkPolicy the case is skipped with the probe's reason;
// the probe runs once per cluster.
func TestCreateNetworkPoliciesNotEnforced(t *testing.T) {
	fastProbe(t)
	ctx := context.Background()
	c, cs := probeCluster(t, Config{RunID: "r1"})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: false}
	c.prober = cni
	err := c.CreateNetworkPolicies(ctx, allowPolicies(3, ""))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), NotEnforcedDetail) {
		t.Fatalf("err %v, want ErrUnsupported with %q", err, NotEnforcedDetail)
	}
	if len(cni.seen) == 0 {
		t.Error("the probe did not run")
	}
	if creates, deletes := policyActions(cs); creates != 1 || deletes != 1 {
		t.Errorf("NetworkPolicy created %d and deleted %d times: want only the probe's", creates, deletes)
	}
	checkCleanedUp(t, c, cs)
	attempts := cni.attempts
	err = c.CreateNetworkPolicies(ctx, allowPolicies(1, c.Namespace()))
	if !errors.Is(err, cluster.ErrUnsupported) {
		t.Errorf("second call: %v", err)
	}
	if cni.attempts != attempts {
		t.Errorf("probed again: %d connection attempts after %d", cni.attempts, attempts)
	}
	if info := c.Facts().Record(); info["networkpolicy_enforced"] != false || info["networkpolicy_probe"] != NotEnforcedDetail {
		t.Errorf("info %v", info)
	}
}

// On an enforcing CNI the policies are created in the run namespace with the run's labels,
// after one probe; DeleteNetworkPolicies removes them.
func TestCreateNetworkPoliciesEnforced(t *testing.T) {
	fastProbe(t)
	ctx := context.Background()
	c, cs := probeCluster(t, Config{RunID: "r1"})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: true}
	c.prober = cni
	pols := append(allowPolicies(40, ""), allowPolicies(1, c.Namespace())...)
	pols[40].Name = "own-namespace"
	if err := c.CreateNetworkPolicies(ctx, pols); err != nil {
		t.Fatal(err)
	}
	if cni.attempts == 0 {
		t.Error("no probe before the first policies")
	}
	got := runPolicies(t, cs, c.Namespace())
	if len(got) != len(pols) {
		t.Fatalf("%d policies in the run namespace, want %d", len(got), len(pols))
	}
	for _, want := range pols {
		p, ok := got[want.Name]
		if !ok {
			t.Errorf("policy %s missing", want.Name)
			continue
		}
		if wl := map[string]string{"set": "load", ManagedBy: ManagedByValue, RunLabel: "r1"}; !reflect.DeepEqual(p.Labels, wl) {
			t.Errorf("policy %s labels %v, want %v", p.Name, p.Labels, wl)
		}
		if !reflect.DeepEqual(p.Spec, want.Spec) {
			t.Errorf("policy %s spec %+v, want %+v", p.Name, p.Spec, want.Spec)
		}
	}
	if pols[0].Namespace != "" || len(pols[0].Labels) != 1 {
		t.Errorf("the caller's policy changed: %+v", pols[0].ObjectMeta)
	}
	attempts := cni.attempts
	if err := c.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "later"}}}); err != nil {
		t.Fatal(err)
	}
	if cni.attempts != attempts {
		t.Error("probed again for the second batch")
	}
	if info := c.Facts().Record(); info["networkpolicy_enforced"] != true {
		t.Errorf("info %v", info)
	}
	names := []string{"later", "never-created"}
	for _, p := range pols {
		names = append(names, p.Name)
	}
	if err := c.DeleteNetworkPolicies(ctx, names); err != nil {
		t.Fatal(err)
	}
	if left := runPolicies(t, cs, c.Namespace()); len(left) != 0 {
		t.Errorf("%d policies left after DeleteNetworkPolicies", len(left))
	}
	if c.Programmed(ctx) != nil {
		t.Error("Programmed: a client-go backend cannot see node rules")
	}
}

// Another namespace, a missing or repeated name: an error before any probe or create. A
// failed create deletes the batch's policies.
func TestCreateNetworkPoliciesErrors(t *testing.T) {
	fastProbe(t)
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{})
	cni := &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: true}
	c.prober = cni
	foreign := allowPolicies(2, "")
	foreign[1].Namespace = "kube-system"
	err := c.CreateNetworkPolicies(ctx, foreign)
	if err == nil || !strings.Contains(err.Error(), `"kube-system"`) || errors.Is(err, cluster.ErrUnsupported) {
		t.Errorf("foreign namespace: %v", err)
	}
	twice := append(allowPolicies(2, ""), allowPolicies(1, "")...)
	if err := c.CreateNetworkPolicies(ctx, twice); err == nil || !strings.Contains(err.Error(), "allow-0") {
		t.Errorf("repeated name: %v", err)
	}
	if err := c.CreateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{{}}); err == nil {
		t.Error("policy without a name accepted")
	}
	if cni.attempts != 0 {
		t.Errorf("probed for invalid policies (%d attempts)", cni.attempts)
	}
	if creates, _ := policyActions(cs); creates != 0 {
		t.Errorf("%d NetworkPolicies created from invalid batches", creates)
	}

	// A rejected create. (Reactors go in before any goroutine uses the clientset.)
	cs = twoNodes()
	cs.PrependReactor("create", "networkpolicies", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*networkingv1.NetworkPolicy).Name == "allow-13" {
			return true, nil, apierrors.NewBadRequest("invalid port")
		}
		return false, nil, nil
	})
	c = newCluster(t, cs, Config{})
	c.prober = &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: true}
	go setStatus(t, cs, c.Namespace(), probeServerPod, running("10.244.0.7"))
	go setStatus(t, cs, c.Namespace(), probeClientPod, running("10.244.1.9"))
	err = c.CreateNetworkPolicies(ctx, allowPolicies(30, ""))
	if err == nil || !strings.Contains(err.Error(), "allow-13") || !strings.Contains(err.Error(), "invalid port") {
		t.Errorf("failed create: %v", err)
	}
	if left := runPolicies(t, cs, c.Namespace()); len(left) != 0 {
		t.Errorf("%d policies left after a failed create", len(left))
	}
}

// UpdateNetworkPolicies gives existing policies their new spec, keeping the run's labels; a
// name that does not exist is an error and changes nothing.
func TestUpdateNetworkPolicies(t *testing.T) {
	fastProbe(t)
	ctx := context.Background()
	c, cs := probeCluster(t, Config{RunID: "r1"})
	c.prober = &fakeCNI{t: t, cs: cs, ns: c.Namespace(), baseline: true, enforces: true}
	pols := allowPolicies(2, "")
	if err := c.CreateNetworkPolicies(ctx, pols); err != nil {
		t.Fatal(err)
	}
	edit := *pols[0].DeepCopy()
	edit.Labels = map[string]string{"edited": "yes"}
	edit.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.244.0.5/32"}}}}
	if err := c.UpdateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{edit}); err != nil {
		t.Fatal(err)
	}
	got := runPolicies(t, cs, c.Namespace())
	if p := got[edit.Name]; !reflect.DeepEqual(p.Spec, edit.Spec) {
		t.Errorf("updated spec %+v, want %+v", p.Spec, edit.Spec)
	}
	if wl := map[string]string{"set": "load", "edited": "yes", ManagedBy: ManagedByValue, RunLabel: "r1"}; !reflect.DeepEqual(got[edit.Name].Labels, wl) {
		t.Errorf("updated labels %v, want %v", got[edit.Name].Labels, wl)
	}
	if p := got[pols[1].Name]; !reflect.DeepEqual(p.Spec, pols[1].Spec) {
		t.Errorf("the other policy changed: %+v", p.Spec)
	}
	back := *pols[0].DeepCopy()
	missing := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "never-created"}}
	err := c.UpdateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{back, missing})
	if err == nil || !strings.Contains(err.Error(), "never-created") {
		t.Errorf("update of a missing policy: %v, want an error naming it", err)
	}
	if p := runPolicies(t, cs, c.Namespace())[edit.Name]; !reflect.DeepEqual(p.Spec, edit.Spec) {
		t.Errorf("a failed update changed %s: %+v", edit.Name, p.Spec)
	}
	other := *pols[1].DeepCopy()
	other.Namespace = "elsewhere"
	if err := c.UpdateNetworkPolicies(ctx, []networkingv1.NetworkPolicy{other}); err == nil {
		t.Error("a policy of another namespace was updated")
	}
}
