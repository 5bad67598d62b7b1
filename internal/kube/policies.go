package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
)

// policyState is the cached outcome of the enforcement probe CreateNetworkPolicies runs before
// a cluster's first policy.
type policyState struct {
	probed   bool
	enforced bool
	detail   string
}

// policyEnforcement runs the enforcement probe once per Cluster and caches its result. A
// probe that fails (broken baseline, pods that do not start) is not cached: the next call
// probes again.
func (c *Cluster) policyEnforcement(ctx context.Context) (bool, string, error) {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	c.mu.Lock()
	st := c.policy
	c.mu.Unlock()
	if st.probed {
		return st.enforced, st.detail, nil
	}
	pr := c.prober
	if pr == nil {
		pr = ncProber{c}
	}
	enforced, detail, err := c.probePolicy(ctx, pr)
	if err != nil {
		return false, "", err
	}
	c.mu.Lock()
	c.policy = policyState{probed: true, enforced: enforced, detail: detail}
	c.mu.Unlock()
	return enforced, detail, nil
}

// CreateNetworkPolicies implements cluster.Cluster. Before the first policy of the Cluster it
// runs ProbePolicyEnforcement once; when the CNI does not enforce NetworkPolicy the call
// returns an error wrapping cluster.ErrUnsupported whose reason starts with NotEnforcedDetail
// (the runner records the case as skipped). Otherwise it creates the policies (in parallel) in
// the run namespace, labelled with the run's ManagedBy and RunLabel labels; a policy's
// Namespace must be "" or the run namespace. On an error the policies created by this call are
// deleted again.
//
// The call returns when the API server has accepted every policy. A real cluster shows no
// moment at which a CNI has programmed a policy (nothing in the NetworkPolicy's status says
// so), and no fixed wait would be right: a few policies take effect within a second on usual
// CNIs, 10,000 may take far longer, so the call does not pretend to wait for it.
func (c *Cluster) CreateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return errors.New("cluster closed")
	}
	objs := make([]*networkingv1.NetworkPolicy, len(pols))
	seen := map[string]bool{}
	for i := range pols {
		p := pols[i].DeepCopy()
		switch {
		case p.Name == "":
			return fmt.Errorf("NetworkPolicy %d without a name", i)
		case seen[p.Name]:
			return fmt.Errorf("NetworkPolicy %s requested twice", p.Name)
		case !c.inRunNamespace(p.Namespace):
			return c.otherNamespace(p.Name, p.Namespace)
		}
		seen[p.Name] = true
		p.Namespace = c.ns
		p.ResourceVersion, p.UID = "", ""
		p.Labels = maps.Clone(p.Labels)
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[ManagedBy] = ManagedByValue
		p.Labels[RunLabel] = LabelValue(c.cfg.RunID)
		objs[i] = p
	}
	if len(objs) == 0 {
		return nil
	}
	enforced, _, err := c.policyEnforcement(ctx)
	if err != nil {
		return fmt.Errorf("NetworkPolicy enforcement probe: %w", err)
	}
	if !enforced {
		return cluster.Unsupported("%s (a deny-all-ingress NetworkPolicy did not stop a TCP connection between two pods of the run within %s)",
			NotEnforcedDetail, policySettle+policyWait)
	}
	created := make([]bool, len(objs))
	err = cluster.Parallel(ctx, len(objs), createWorkers, func(i int) error {
		if _, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Create(ctx, objs[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create NetworkPolicy %s: %w", objs[i].Name, err)
		}
		created[i] = true
		return nil
	})
	if err != nil {
		if derr := undoCreated(ctx, created, func(i int) string { return objs[i].Name }, c.DeleteNetworkPolicies); derr != nil {
			err = errors.Join(err, derr)
		}
		if len(objs) > 1 {
			err = fmt.Errorf("%d NetworkPolicies: %w", len(objs), err)
		}
		return err
	}
	return nil
}

// DeleteNetworkPolicies implements cluster.Cluster: deletes the run namespace's policies of
// these names in parallel (one that does not exist is not an error). Like
// CreateNetworkPolicies it returns once the API server accepted the deletes.
func (c *Cluster) DeleteNetworkPolicies(ctx context.Context, names []string) error {
	return cluster.Parallel(ctx, len(names), createWorkers, func(i int) error {
		err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Delete(ctx, names[i], metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete NetworkPolicy %s: %w", names[i], err)
		}
		return nil
	})
}

// inRunNamespace says whether a policy's namespace is the run's ("" means it).
func (c *Cluster) inRunNamespace(ns string) bool { return ns == "" || ns == c.ns }

// otherNamespace is the error for a policy in another namespace than the run's.
func (c *Cluster) otherNamespace(name, ns string) error {
	return fmt.Errorf("NetworkPolicy %s: namespace %q: the run's policies live in its namespace %s", name, ns, c.ns)
}

// UpdateNetworkPolicies implements cluster.Cluster: each policy of the run namespace with one
// of these names gets the new spec (and labels, beside the run's own), through a get and an
// update. Every policy is read first, so a name that does not exist changes nothing; an
// update that fails leaves those made before it. Like CreateNetworkPolicies it returns once
// the API server accepted the updates.
func (c *Cluster) UpdateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	objs := make([]*networkingv1.NetworkPolicy, len(pols))
	err := cluster.Parallel(ctx, len(pols), createWorkers, func(i int) error {
		p := pols[i]
		if !c.inRunNamespace(p.Namespace) {
			return c.otherNamespace(p.Name, p.Namespace)
		}
		cur, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("update NetworkPolicy %s: %w", p.Name, err)
		}
		obj := cur.DeepCopy()
		obj.Spec = *p.Spec.DeepCopy()
		for k, v := range p.Labels {
			if obj.Labels == nil {
				obj.Labels = map[string]string{}
			}
			obj.Labels[k] = v
		}
		objs[i] = obj
		return nil
	})
	if err != nil {
		return err
	}
	return cluster.Parallel(ctx, len(objs), createWorkers, func(i int) error {
		if _, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Update(ctx, objs[i], metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update NetworkPolicy %s: %w", objs[i].Name, err)
		}
		return nil
	})
}

// Programmed implements cluster.Cluster: nil. Through the Kubernetes API a client sees the
// Services and policies it created, not the rules kube-proxy and the CNI derived from them on
// each node (counting those would need a privileged agent on every node).
func (c *Cluster) Programmed(ctx context.Context) map[string]float64 { return nil }
