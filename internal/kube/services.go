package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibench/cnibench/internal/cluster"
)

// serviceObject is a ClusterIP Service over the run's pods matching spec.Selector, or a
// NodePort Service (its NodePorts as asked, 0 = the API server allocates one) with its
// externalTrafficPolicy.
func (c *Cluster) serviceObject(spec cluster.ServiceSpec) *corev1.Service {
	sel := maps.Clone(spec.Selector)
	sel[RunLabel] = LabelValue(c.cfg.RunID)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: c.ns, Labels: map[string]string{ManagedBy: ManagedByValue, RunLabel: LabelValue(c.cfg.RunID)}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: sel, ClusterIP: spec.ClusterIP},
	}
	for _, p := range spec.Ports {
		target := p.TargetPort
		if target == 0 {
			target = p.Port
		}
		sp := corev1.ServicePort{Name: p.Name, Port: int32(p.Port),
			TargetPort: intstr.FromInt32(int32(target)), Protocol: corev1.Protocol(strings.ToUpper(p.Protocol))}
		if spec.NodePort {
			sp.NodePort = int32(p.NodePort)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, sp)
	}
	if spec.NodePort {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		if spec.ExternalLocal {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
	return svc
}

// nodePortTaken tells whether the API server refused a Service because a NodePort it asked
// for is allocated to another (the allocator's "provided port is already allocated").
func nodePortTaken(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Reason != metav1.StatusReasonInvalid || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if strings.HasSuffix(c.Field, ".nodePort") && strings.Contains(c.Message, "already allocated") {
			return true
		}
	}
	return false
}

// CreateServices implements cluster.Cluster. It creates every Service (in parallel, through
// the client's QPS and burst of LoadConfig), then waits until each one's EndpointSlices list as
// many ready addresses as the run has pods (not host-network) matching its selector: one List of
// the run's EndpointSlices per poll for the whole batch, grouped by the kubernetes.io/service-name
// label (the EndpointSlice controller copies the Service's labels, the run's among them, onto
// its slices). The wait lasts at most podTimeout plus 100 ms per Service: the controller
// manager writes slices at its own client rate (20 per second by default).
//
// Then, for each Service that has at least one matching pod on a real node, it waits until
// the ClusterIP answers from a pod of the run (awaitProxy; up to createWorkers execs at a
// time). A Service whose pods all sit on kwok fake nodes is not probed: those pods exist only
// in the API (kwok makes up their IPs, no node routes them), so a connection to its ClusterIP
// times out and the probe could never succeed. Nothing is lost against seed 001: its silent
// pods did not answer either, they only load the data plane. For those Services the call
// returns once the EndpointSlices are complete, and kube-proxy programs them on its own
// schedule. On an error the Services created by this call are deleted again. A batch whose
// specs all say NoWait returns once the API server accepted them (no endpoints listed).
func (c *Cluster) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errors.New("cluster closed")
	}
	if err := checkServiceSpecs(specs); err != nil {
		return nil, err
	}
	// What each Service must list: the run's pod-network pods its selector picks now.
	want := make([]int, len(specs))
	probe := make([]bool, len(specs))
	c.mu.Lock()
	for i, s := range specs {
		for _, p := range c.pods {
			if !p.HostNetwork && cluster.Selects(s.Selector, p.Labels) {
				want[i]++
				if !c.isFake(p.Node) {
					probe[i] = true
				}
			}
		}
	}
	c.mu.Unlock()

	ips := make([]string, len(specs))
	ports := make([][]cluster.ServicePort, len(specs))
	created := make([]bool, len(specs))
	err := cluster.Parallel(ctx, len(specs), createWorkers, func(i int) error {
		svc, err := c.cs.CoreV1().Services(c.ns).Create(ctx, c.serviceObject(specs[i]), metav1.CreateOptions{})
		if nodePortTaken(err) {
			return &serviceError{specs[i].Name, fmt.Errorf("create: %w: %w", cluster.ErrNodePortTaken, err)}
		}
		if err != nil {
			return &serviceError{specs[i].Name, fmt.Errorf("create: %w", err)}
		}
		created[i] = true
		ips[i] = svc.Spec.ClusterIP
		ports[i] = slices.Clone(specs[i].Ports)
		for j := range ports[i] {
			if specs[i].NodePort && j < len(svc.Spec.Ports) {
				ports[i][j].NodePort = int(svc.Spec.Ports[j].NodePort)
			}
		}
		return nil
	})
	eps := make([][]string, len(specs))
	wait := slices.ContainsFunc(specs, func(s cluster.ServiceSpec) bool { return !s.NoWait })
	if err == nil && wait {
		eps, err = c.awaitEndpoints(ctx, specs, want)
	}
	if err == nil {
		err = cluster.Parallel(ctx, len(specs), createWorkers, func(i int) error {
			if !probe[i] || specs[i].NoWait {
				return nil
			}
			if err := c.awaitProxy(ctx, ips[i], specs[i].Ports, eps[i]); err != nil {
				return &serviceError{specs[i].Name, err}
			}
			return nil
		})
	}
	if err != nil {
		_ = undoCreated(ctx, created, func(i int) string { return specs[i].Name }, c.DeleteServices)
		return nil, batchError(specs, err)
	}
	out := make([]cluster.Service, len(specs))
	for i, s := range specs {
		out[i] = cluster.Service{Name: s.Name, ClusterIP: ips[i], Ports: ports[i], Endpoints: eps[i]}
	}
	return out, nil
}

// batchError says which Services an error of CreateServices is about: errors of one Service
// name it already; others (the endpoint wait, a cancelled context) get the name of a single
// Service or the size of the batch.
func batchError(specs []cluster.ServiceSpec, err error) error {
	var one *serviceError
	switch {
	case errors.As(err, &one):
		return err
	case len(specs) == 1:
		return fmt.Errorf("service %s: %w", specs[0].Name, err)
	}
	return fmt.Errorf("%d services: %w", len(specs), err)
}

// serviceError is an error about one Service.
type serviceError struct {
	name string
	err  error
}

func (e *serviceError) Error() string { return "service " + e.name + ": " + e.err.Error() }
func (e *serviceError) Unwrap() error { return e.err }

// checkServiceSpecs rejects what the API server would reject only after part of a batch
// exists: a Service without ports, an unknown protocol, a name given twice.
func checkServiceSpecs(specs []cluster.ServiceSpec) error {
	seen := map[string]bool{}
	for _, s := range specs {
		if s.Name == "" {
			return errors.New("service without a name")
		}
		if seen[s.Name] {
			return fmt.Errorf("service %s requested twice", s.Name)
		}
		seen[s.Name] = true
		if len(s.Ports) == 0 {
			return fmt.Errorf("service %s: no ports", s.Name)
		}
		for _, p := range s.Ports {
			switch p.Protocol {
			case "", "tcp", "udp", "sctp":
			default:
				return fmt.Errorf("service %s: port %d: protocol %q (want tcp, udp or sctp)", s.Name, p.Port, p.Protocol)
			}
		}
	}
	return nil
}

// awaitEndpoints waits until the EndpointSlices of every Service of specs list at least
// want[i] ready addresses, and returns them (sorted) per spec.
func (c *Cluster) awaitEndpoints(ctx context.Context, specs []cluster.ServiceSpec, want []int) ([][]string, error) {
	index := make(map[string]int, len(specs))
	for i, s := range specs {
		index[s.Name] = i
	}
	eps := make([][]string, len(specs))
	sel := ManagedBy + "=" + ManagedByValue + "," + RunLabel + "=" + LabelValue(c.cfg.RunID)
	timeout := podTimeout + time.Duration(len(specs))*100*time.Millisecond
	// A list of 10,000 slices is megabytes to send and decode: a big batch polls less often
	// (10,000 Services: every 2.5 s), which its controller-paced wait hardly notices.
	interval := pollInterval + time.Duration(len(specs))*200*time.Microsecond
	err := pollEvery(ctx, timeout, interval, func(ctx context.Context) (bool, error) {
		list, err := c.cs.DiscoveryV1().EndpointSlices(c.ns).List(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: "0"})
		if err != nil {
			return false, fmt.Errorf("list endpointslices: %w", err)
		}
		bySvc := make([][]discoveryv1.EndpointSlice, len(specs))
		for _, s := range list.Items {
			if i, ok := index[s.Labels[discoveryv1.LabelServiceName]]; ok {
				bySvc[i] = append(bySvc[i], s)
			}
		}
		done := true
		for i := range specs {
			eps[i] = readyAddresses(bySvc[i])
			if len(eps[i]) < want[i] {
				done = false
			}
		}
		return done, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		var short []string
		for i, s := range specs {
			if len(eps[i]) < want[i] {
				short = append(short, fmt.Sprintf("%s (%d of %d)", s.Name, len(eps[i]), want[i]))
			}
		}
		first := short
		if len(first) > 5 {
			first = append(first[:5:5], "...")
		}
		err = fmt.Errorf("%d of %d services without all their ready endpoints after %s: %s", len(short), len(specs), timeout, strings.Join(first, ", "))
	}
	if err != nil {
		return nil, err
	}
	for i := range eps {
		sort.Strings(eps[i])
	}
	return eps, nil
}

// probePod is the pod awaitProxy probes from: of the pods on real nodes and not on the host's
// network, the first by name that is no endpoint (eps: their addresses), else the first
// endpoint; "" when there is none.
func probePod(pods map[string]cluster.Pod, eps []string, fake func(node string) bool) string {
	var from, endpoint string
	for _, name := range slices.Sorted(maps.Keys(pods)) {
		p := pods[name]
		switch {
		case p.HostNetwork || fake(p.Node):
		case slices.Contains(eps, p.IP):
			if endpoint == "" {
				endpoint = p.Name
			}
		case from == "":
			from = p.Name
		}
	}
	if from == "" {
		return endpoint
	}
	return from
}

// awaitProxy waits until the Service proxy (kube-proxy, or the CNI's replacement) has
// programmed the ClusterIP, seen from a pod of the run: a TCP connect is answered (accepted,
// or refused by the endpoint when nothing listens yet) instead of timing out. Traffic sent
// before would leave a conntrack entry without NAT that later packets of that flow keep
// following: a connection opened too early never reaches the Service (seen with iperf3).
// The probe goes from a pod that is none of the Service's endpoints (eps: their addresses)
// where there is one, the first by name: from an endpoint it would be hairpin traffic, which
// some pod networks do not carry (kube-router's bridge has no hairpin mode) and which the
// hairpin scenario measures on its own.
func (c *Cluster) awaitProxy(ctx context.Context, ip string, ports []cluster.ServicePort, eps []string) error {
	port := 0
	for _, p := range ports {
		if p.Protocol == "tcp" {
			port = p.Port
			break
		}
	}
	c.mu.Lock()
	from := probePod(c.pods, eps, c.isFake)
	c.mu.Unlock()
	if port == 0 || from == "" || c.rc == nil {
		return nil // nothing to probe with: trust the EndpointSlices
	}
	var last string
	err := poll(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		res, err := c.execPlain(ctx, from, []string{busybox, "nc", "-w", "1", ip, fmt.Sprint(port)})
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

// DeleteServices implements cluster.Cluster: deletes the Services in parallel (one that does
// not exist is not an error). It does not wait: a Service is gone once the API server accepted
// the delete, and its EndpointSlices follow through the garbage collector.
func (c *Cluster) DeleteServices(ctx context.Context, names []string) error {
	return cluster.Parallel(ctx, len(names), createWorkers, func(i int) error {
		err := c.cs.CoreV1().Services(c.ns).Delete(ctx, names[i], metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete service %s: %w", names[i], err)
		}
		return nil
	})
}
