package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// p2p-policies: pod to pod with many silent pods and NetworkPolicies (seed 001 §5.2.1,
// §5.4.3): "several network policies are installed that only allow Clientpod and Serverpod to
// send and receive traffic with each other and with other newly created pods". Each silent pod
// gets two policies (one ingress, one egress: only the client and the server), and the
// measuring pair gets two (ingress and egress: only each other and the silent pods). Before
// the trials, a pod no policy admits must fail to reach the server: a case only counts when
// the policies are really enforced.
type p2pPolicies struct{}

func init() { Register(p2pPolicies{}) }

func (p2pPolicies) Name() string { return "p2p-policies" }

func (p2pPolicies) Info() Info {
	return Info{
		Summary:           "pod to pod under silent pods and NetworkPolicies (seed 001 §5.2.1, §5.4.3)",
		DefaultDataplanes: []string{"calico"},
		Placements:        []string{"intra", "inter"},
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
		Params:            append([]string{"pods", "policies", "policy"}, workloadParams...),
		Check:             func(c result.Case) error { return errors.Join(checkPolicies(c), checkWorkload(c)) },
		Exclusive:         func(result.Case) bool { return true },
	}
}

// checkPolicies: each silent pod takes two policies.
func checkPolicies(c result.Case) error {
	if c.Policies > 2*c.Pods {
		return fmt.Errorf("%d policies need at least %d silent pods (two policies per silent pod): raise pods or lower policies", c.Policies, (c.Policies+1)/2)
	}
	return nil
}

// silentLabel numbers silent pods, so each pod's policies select it alone.
const silentLabel = "cnibench.io/silent"

// pairPolicies are the measuring pair's two policies.
func pairPolicies() []networkingv1.NetworkPolicy {
	pair := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "server"}}}}
	peers := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "server", "silent"}}}}}}
	return []networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "pair-ingress"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: pair,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pair-egress"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: pair,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: peers}}}},
	}
}

// silentPolicyPods are n silent pods numbered by silentLabel, for silentPolicies.
func silentPolicyPods(n int, prefix string) []cluster.PodSpec {
	specs := SilentPods(n, prefix, nil)
	for i := range specs {
		specs[i].Labels = map[string]string{"app": "cnibench", "role": "silent", silentLabel: strconv.Itoa(i)}
	}
	return specs
}

// standingPolicies makes n policies standing over (n+1)/2 silent pods (seed 001's load: two
// per silent pod), the pods first; it returns what it made (also on error) and how long the
// policies took to program.
func standingPolicies(ctx context.Context, cl cluster.Cluster, n int, prefix string) (pods, pols []string, programMS float64, err error) {
	if n <= 0 {
		return nil, nil, 0, nil
	}
	made, err := cl.CreatePods(ctx, silentPolicyPods((n+1)/2, prefix))
	for _, p := range made {
		pods = append(pods, p.Name)
	}
	if err != nil {
		return pods, nil, 0, fmt.Errorf("%d silent pods: %w", (n+1)/2, err)
	}
	all := silentPolicies(n)
	start := time.Now()
	if err := cl.CreateNetworkPolicies(ctx, all); err != nil {
		return pods, nil, 0, fmt.Errorf("%d standing policies: %w", n, err)
	}
	for _, p := range all {
		pols = append(pols, p.Name)
	}
	return pods, pols, float64(time.Since(start).Microseconds()) / 1000, nil
}

// silentPolicies are n policies over silent pods: ingress and egress for pod 0, then pod 1, ...
func silentPolicies(n int) []networkingv1.NetworkPolicy {
	pair := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "server"}}}}}}
	out := make([]networkingv1.NetworkPolicy, 0, n)
	for i := 0; len(out) < n; i++ {
		sel := metav1.LabelSelector{MatchLabels: map[string]string{silentLabel: strconv.Itoa(i)}}
		out = append(out, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("silent%d-ingress", i)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: pair}}}})
		if len(out) < n {
			out = append(out, networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("silent%d-egress", i)},
				Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
					Egress: []networkingv1.NetworkPolicyEgressRule{{To: pair}}}})
		}
	}
	return out
}

func (p2pPolicies) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (_ Fixture, err error) {
	nPol := c.Policies
	if nPol == 0 {
		nPol = 2 * c.Pods // the seed's two per silent pod
	}
	if err := checkPolicies(c); err != nil {
		return nil, err
	}
	client, server, err := createPair(ctx, cl, opt, c.Placement, false)
	if err != nil {
		return nil, err
	}
	pods := []string{client.Name, server.Name}
	var pols []string
	defer func() {
		if err != nil {
			bg := context.WithoutCancel(ctx)
			err = errors.Join(err, cl.DeleteNetworkPolicies(bg, pols), cl.DeletePods(bg, pods))
		}
	}()
	// The pod no policy admits, on the client's node.
	outsider, err := cluster.CreatePod(ctx, cl, cluster.PodSpec{Name: "outsider", Node: client.Node, Labels: map[string]string{"app": "cnibench", "role": "outsider"}})
	if err != nil {
		return nil, err
	}
	pods = append(pods, outsider.Name)
	if c.Pods > 0 {
		silent, err := cl.CreatePods(ctx, silentPolicyPods(c.Pods, "silent"))
		if err != nil {
			return nil, fmt.Errorf("%d silent pods: %w", c.Pods, err)
		}
		for _, p := range silent {
			pods = append(pods, p.Name)
		}
	}
	all := append(pairPolicies(), silentPolicies(nPol)...)
	start := time.Now()
	if err := cl.CreateNetworkPolicies(ctx, all); err != nil {
		return nil, err
	}
	programMS := float64(time.Since(start).Microseconds()) / 1000
	for _, p := range all {
		pols = append(pols, p.Name)
	}
	f, err := startPair(ctx, cl, c, opt, client, server, pods)
	if err != nil {
		return nil, err
	}
	f.policies = pols
	f.setup = setupMetrics(ctx, cl, map[string]float64{"policies_program_ms": programMS, "policies_total": float64(len(all))})
	if err := denied(ctx, cl, outsider.Name, client.Name, server.IP, driver.ServerPort(f.drv.Name())); err != nil {
		_ = f.Close(context.WithoutCancel(ctx))
		pods, pols = nil, nil // closed with the fixture
		return nil, err
	}
	return f, nil
}

// denied checks enforcement with real connections: the client reaches the server's port, the
// outsider (admitted by no policy) does not. A real CNI applies policies asynchronously both
// ways (Cilium regenerates the endpoints they select; kube-router's controller rejects a new
// pod's traffic until its next sync has put the pod's address in the policies' ipsets), so
// each is tried until it holds, for up to denyWait.
func denied(ctx context.Context, cl cluster.Cluster, outsider, client, ip string, port int) error {
	try := func(pod string) (bool, string, error) {
		res, err := cl.Exec(ctx, pod, []string{"/bin/busybox", "nc", "-w", "2", ip, strconv.Itoa(port)})
		if err != nil {
			return false, "", err
		}
		return res.ExitCode == 0, strings.TrimSpace(string(res.Stderr)), nil
	}
	// until tries pod until it reaches the server (reach) or is refused (!reach); it returns
	// the last attempt's message when the time is up.
	until := func(pod string, reach bool) (bool, string, error) {
		deadline := time.Now().Add(denyWait)
		for {
			ok, msg, err := try(pod)
			if err != nil || ok == reach {
				return true, msg, err
			}
			if time.Now().After(deadline) {
				return false, msg, nil
			}
			select {
			case <-ctx.Done():
				return false, msg, ctx.Err()
			case <-time.After(denyRetry):
			}
		}
	}
	held, msg, err := until(client, true)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("policies block the client: %s:%d unreachable from the client for %s (%s)", ip, port, denyWait, msg)
	}
	if held, _, err = until(outsider, false); err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("policies not enforced: a pod no policy admits reached the server at %s:%d (still %s after the policies were created)", ip, port, denyWait)
	}
	return nil
}

// denyWait is how long the policies may take to stop the outsider; denyRetry the pause
// between its attempts.
var denyWait, denyRetry = 30 * time.Second, 500 * time.Millisecond
