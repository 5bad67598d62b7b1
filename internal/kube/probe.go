package kube

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
)

const (
	// ProbeLabel marks the policy probe's pods; the probe's NetworkPolicy selects
	// ProbeLabel=probeServerRole.
	ProbeLabel = "cnibench.io/probe"
	// NotEnforcedDetail is ProbePolicyEnforcement's detail when the client still connects
	// through a deny-all-ingress NetworkPolicy.
	NotEnforcedDetail = "NetworkPolicy not enforced by this cluster's CNI"

	probeServerPod  = "policy-probe-server"
	probeClientPod  = "policy-probe-client"
	probePolicyName = "policy-probe-deny-ingress"
	probeServerRole = "policy-server"
	probeClientRole = "policy-client"
)

// Probe timing; variables so tests can shorten them.
var (
	probePort        = 8081
	baselineWait     = 10 * time.Second // the client must reach the server within this (fresh pods)
	policySettle     = 3 * time.Second  // policies take effect asynchronously: first check after this
	policyWait       = 10 * time.Second // then keep checking this long for the connection to fail
	probeRetryEvery  = time.Second
	ncConnectTimeout = 2                // seconds: nc -w
	connectExecLimit = 15 * time.Second // one connection attempt, exec included
	probeCleanupTime = 3 * time.Minute
)

// policyProber is what the probe does in pods: serve TCP in the server pod and try to connect
// from the client pod. ncProber does it with busybox nc through Start and Exec; tests
// simulate a CNI that enforces policies, one that does not, and a broken pod network.
type policyProber interface {
	// Serve starts a TCP responder on port in the pod and returns once it listens; it is
	// stopped when the pod is deleted.
	Serve(ctx context.Context, pod string, port int) error
	// Connect tries one connection from the client pod to ip:port. connected false comes
	// with why (refused, timed out, ...); err means the attempt itself failed (exec broken).
	Connect(ctx context.Context, client, ip string, port int) (connected bool, why string, err error)
}

// ncProber is the real policyProber: busybox nc in the tools image.
type ncProber struct{ c *Cluster }

// Serve runs `nc -ll -p PORT -e /bin/busybox echo ok`: busybox nc has no -k; -ll with -e
// keeps listening, answering every connection with "ok".
func (p ncProber) Serve(ctx context.Context, pod string, port int) error {
	argv := []string{busybox, "nc", "-ll", "-p", strconv.Itoa(port), "-e", busybox, "echo", "ok"}
	_, err := p.c.Start(ctx, pod, argv, cluster.Ready{TCPPort: port})
	return err
}

// Connect runs `nc -w 2 IP PORT` (stdin empty) in the client pod: connected means it
// exited 0 having read the server's "ok".
func (p ncProber) Connect(ctx context.Context, client, ip string, port int) (bool, string, error) {
	ectx, cancel := context.WithTimeout(ctx, connectExecLimit)
	defer cancel()
	res, err := p.c.execPlain(ectx, client, []string{busybox, "nc", "-w", strconv.Itoa(ncConnectTimeout), ip, strconv.Itoa(port)})
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return false, fmt.Sprintf("no answer within %s", connectExecLimit), nil
		}
		return false, "", err
	}
	out := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode == 0 && out == "ok" {
		return true, "", nil
	}
	why := strings.TrimSpace(string(res.Stderr))
	if why == "" {
		why = fmt.Sprintf("nc exited %d with output %q", res.ExitCode, out)
	}
	return false, why, nil
}

// ProbePolicyEnforcement proves whether the cluster's CNI enforces NetworkPolicy. In the run
// namespace it creates a server pod on the first node answering TCP on port 8081 and a client
// pod (on the second node if there is one), checks that the client connects (else an error:
// the baseline is broken, nothing can be concluded), then creates a NetworkPolicy selecting
// the server pod with policyTypes [Ingress] and no rules (deny all ingress). After 3 s, and
// for up to 10 s more, it checks again: once the connection fails the policy is enforced;
// if it never fails, enforced is false with detail NotEnforcedDetail.
//
// The probe pods and the policy are always deleted; a failure to delete them is returned as
// an error (joined to the probe's own, if any) alongside the result.
func (c *Cluster) ProbePolicyEnforcement(ctx context.Context) (enforced bool, detail string, err error) {
	return c.probePolicy(ctx, ncProber{c})
}

func (c *Cluster) probePolicy(ctx context.Context, pr policyProber) (enforced bool, detail string, err error) {
	if len(c.nodes) == 0 {
		return false, "", errors.New("policy probe: the run has no nodes")
	}
	serverNode, clientNode := c.nodes[0].Name, c.nodes[0].Name
	if len(c.nodes) > 1 {
		clientNode = c.nodes[1].Name
	}
	defer func() {
		if cerr := c.probeCleanup(ctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	server, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: probeServerPod, Node: serverNode, Labels: map[string]string{ProbeLabel: probeServerRole}})
	if err != nil {
		return false, "", fmt.Errorf("policy probe: %w", err)
	}
	client, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: probeClientPod, Node: clientNode, Labels: map[string]string{ProbeLabel: probeClientRole}})
	if err != nil {
		return false, "", fmt.Errorf("policy probe: %w", err)
	}
	if err := pr.Serve(ctx, server.Name, probePort); err != nil {
		return false, "", fmt.Errorf("policy probe: TCP server in pod %s: %w", server.Name, err)
	}
	path := fmt.Sprintf("pod %s (node %s) -> pod %s %s:%d (node %s)", client.Name, client.Node, server.Name, server.IP, probePort, server.Node)

	// Baseline: without any policy the client must get through.
	var why string
	deadline := time.Now().Add(baselineWait)
	for {
		ok, w, err := pr.Connect(ctx, client.Name, server.IP, probePort)
		if err != nil {
			return false, "", fmt.Errorf("policy probe: connect %s: %w", path, err)
		}
		if ok {
			break
		}
		why = w
		if time.Now().After(deadline) {
			return false, "", fmt.Errorf("policy probe: baseline broken: %s fails without any NetworkPolicy (%s)", path, why)
		}
		if err := sleepCtx(ctx, probeRetryEvery); err != nil {
			return false, "", err
		}
	}

	if _, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Create(ctx, c.denyIngressPolicy(), metav1.CreateOptions{}); err != nil {
		return false, "", fmt.Errorf("policy probe: create NetworkPolicy %s: %w", probePolicyName, err)
	}
	created := time.Now()
	if err := sleepCtx(ctx, policySettle); err != nil {
		return false, "", err
	}
	deadline = time.Now().Add(policyWait)
	for {
		ok, w, err := pr.Connect(ctx, client.Name, server.IP, probePort)
		if err != nil {
			return false, "", fmt.Errorf("policy probe: connect %s: %w", path, err)
		}
		if !ok {
			return true, fmt.Sprintf("a deny-all-ingress NetworkPolicy blocked %s within %.0f s (%s)", path, time.Since(created).Seconds(), w), nil
		}
		if time.Now().After(deadline) {
			return false, NotEnforcedDetail, nil
		}
		if err := sleepCtx(ctx, probeRetryEvery); err != nil {
			return false, "", err
		}
	}
}

// denyIngressPolicy selects the probe's server pod with policyTypes [Ingress] and no ingress
// rules: all ingress to it is denied.
func (c *Cluster) denyIngressPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: probePolicyName, Namespace: c.ns,
			Labels: map[string]string{ManagedBy: ManagedByValue, RunLabel: LabelValue(c.cfg.RunID)},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{ProbeLabel: probeServerRole}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// probeCleanup deletes the probe's policy and pods (whichever exist), even when ctx is
// already cancelled.
func (c *Cluster) probeCleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeCleanupTime)
	defer cancel()
	var errs []error
	err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Delete(ctx, probePolicyName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("policy probe cleanup: delete NetworkPolicy %s: %w", probePolicyName, err))
	}
	for _, pod := range []string{probeServerPod, probeClientPod} {
		if err := cluster.DeletePod(ctx, c, pod); err != nil {
			errs = append(errs, fmt.Errorf("policy probe cleanup: %w", err))
		}
	}
	return errors.Join(errs...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
