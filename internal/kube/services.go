package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibench/cnibench/internal/cluster"
)

// serviceObject is a ClusterIP Service over the run's pods matching spec.Selector.
func (c *Cluster) serviceObject(spec cluster.ServiceSpec) *corev1.Service {
	sel := maps.Clone(spec.Selector)
	sel[RunLabel] = LabelValue(c.cfg.RunID)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: c.ns, Labels: map[string]string{ManagedBy: ManagedByValue, RunLabel: LabelValue(c.cfg.RunID)}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: sel},
	}
	for _, p := range spec.Ports {
		target := p.TargetPort
		if target == 0 {
			target = p.Port
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.Name, Port: int32(p.Port),
			TargetPort: intstr.FromInt32(int32(target)), Protocol: corev1.Protocol(strings.ToUpper(p.Protocol))})
	}
	return svc
}

// CreateService implements cluster.Cluster: a real Service, returned once its EndpointSlices
// list every pod of this run that matches the selector as ready. (kube-proxy programs it on its
// own schedule after that; its sync is usually well under a second.)
func (c *Cluster) CreateService(ctx context.Context, spec cluster.ServiceSpec) (cluster.Service, error) {
	if len(spec.Ports) == 0 {
		return cluster.Service{}, fmt.Errorf("service %s: no ports", spec.Name)
	}
	want := 0
	c.mu.Lock()
	for _, p := range c.pods {
		if !p.HostNetwork && cluster.Selects(spec.Selector, p.Labels) {
			want++
		}
	}
	c.mu.Unlock()
	created, err := c.cs.CoreV1().Services(c.ns).Create(ctx, c.serviceObject(spec), metav1.CreateOptions{})
	if err != nil {
		return cluster.Service{}, fmt.Errorf("create service %s: %w", spec.Name, err)
	}
	var eps []string
	err = poll(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		list, err := c.cs.DiscoveryV1().EndpointSlices(c.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + spec.Name})
		if err != nil {
			return false, err
		}
		eps = readyAddresses(list.Items)
		return len(eps) >= want, nil
	})
	if err != nil {
		_ = c.DeleteService(context.WithoutCancel(ctx), spec.Name)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%d of %d endpoints ready after %s", len(eps), want, podTimeout)
		}
		return cluster.Service{}, fmt.Errorf("service %s: %w", spec.Name, err)
	}
	if err := c.awaitProxy(ctx, created.Spec.ClusterIP, spec.Ports); err != nil {
		_ = c.DeleteService(context.WithoutCancel(ctx), spec.Name)
		return cluster.Service{}, fmt.Errorf("service %s: %w", spec.Name, err)
	}
	return cluster.Service{Name: spec.Name, ClusterIP: created.Spec.ClusterIP, Ports: spec.Ports, Endpoints: eps}, nil
}

// awaitProxy waits until the Service proxy (kube-proxy, or the CNI's replacement) has
// programmed the ClusterIP, seen from a pod of the run: a TCP connect is answered (accepted,
// or refused by the endpoint when nothing listens yet) instead of timing out. Traffic sent
// before would leave a conntrack entry without NAT that later packets of that flow keep
// following: a connection opened too early never reaches the Service (seen with iperf3).
func (c *Cluster) awaitProxy(ctx context.Context, ip string, ports []cluster.ServicePort) error {
	port := 0
	for _, p := range ports {
		if p.Protocol == "tcp" {
			port = p.Port
			break
		}
	}
	c.mu.Lock()
	var from string
	for _, p := range c.pods {
		if !p.HostNetwork && !c.isFake(p.Node) {
			from = p.Name
			break
		}
	}
	c.mu.Unlock()
	if port == 0 || from == "" || c.rc == nil {
		return nil // nothing to probe with: trust the EndpointSlices
	}
	var last string
	err := poll(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		res, err := c.Exec(ctx, from, []string{busybox, "nc", "-w", "1", ip, fmt.Sprint(port)})
		if err != nil {
			return false, err
		}
		last = strings.TrimSpace(string(res.Stderr))
		return res.ExitCode == 0 || strings.Contains(last, "refused"), nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("ClusterIP %s:%d not answering from pod %s after %s (%s): is a Service proxy running?", ip, port, from, podTimeout, last)
	}
	return err
}

// readyAddresses are the distinct ready endpoint addresses of a Service's slices.
func readyAddresses(slices []discoveryv1.EndpointSlice) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if !seen[a] {
					seen[a] = true
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// DeleteService implements cluster.Cluster.
func (c *Cluster) DeleteService(ctx context.Context, name string) error {
	err := c.cs.CoreV1().Services(c.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s: %w", name, err)
	}
	return nil
}
