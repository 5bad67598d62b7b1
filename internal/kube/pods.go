package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/image"
)

// fatalWaiting are container waiting reasons that will not resolve by themselves soon:
// CreatePods fails at once instead of waiting out its timeout.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
	"RunContainerError": true,
}

// PodLabel carries the pod's name as the scenario knows it: the pod itself, or the one
// replica of a server Deployment (whose pod name the Deployment generates).
const PodLabel = "cnibench.io/pod"

// ExternalLabel marks a pod that stands for a client outside the cluster
// (cluster.PodSpec.External): a host-network pod, on the nodes' network as an external
// machine is; a real cluster has no machine outside its nodes that cnibench could start
// processes on.
const ExternalLabel = "cnibench.io/external"

// podObject builds the pod for spec: pinned to spec.Node with nodeName, one container
// "main" with the tools image sleeping forever.
func (c *Cluster) podObject(spec cluster.PodSpec) *corev1.Pod {
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ManagedBy] = ManagedByValue
	labels[RunLabel] = LabelValue(c.cfg.RunID)
	labels[PodLabel] = spec.Name
	if spec.External {
		labels[ExternalLabel] = "true"
	}
	hostNetwork := spec.HostNetwork || spec.External
	grace := int64(1)
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: c.ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      spec.Node,
			HostNetwork:                   hostNetwork,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           c.cfg.Image,
				Command:         idleCommand,
				ImagePullPolicy: corev1.PullIfNotPresent,
				SecurityContext: &corev1.SecurityContext{Privileged: &no},
				Ports:           containerPorts(spec.Ports),
			}},
		},
	}
	if hostNetwork {
		p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	if spec.AnswerPort > 0 {
		answering(&p.Spec.Containers[0], spec.AnswerPort)
	}
	p.Spec.Containers[0].Resources = cpuResources(spec.CPU)
	if c.cfg.TolerateTaints {
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	return p
}

// idleCommand is what a pod's container runs while the scenario execs its tools in it: a
// shell that waits for ever and exits at SIGTERM (a process 1 without a handler, as busybox
// sleep, would ignore it and hold the pod's deletion for the grace period).
var idleCommand = []string{busybox, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"}

// burstableRequestDiv: a Burstable pod's CPU request is its limit over this.
const burstableRequestDiv = 10

// guaranteedMemory is the memory request and limit of a pod asking for exclusive CPUs: a pod
// is Guaranteed only when every resource of every container has requests equal to limits.
var guaranteedMemory = resource.MustParse("256Mi")

// cpuResources are the container resources of a CPU request (cluster.CPU): a limit makes a
// Burstable pod whose CPU request is a tenth of its limit (Kubernetes would set the request
// to the limit, and then five pods of 1000m would not fit a 2-CPU node, where seed 002 ran
// them on CPUs shared beyond their requests); Exclusive makes it Guaranteed with whole CPUs
// (requests = limits for CPU and memory), which a kubelet with the static CPU manager policy
// gives CPUs of their own.
func cpuResources(req cluster.CPU) corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	switch {
	case req.Exclusive:
		cpu := *resource.NewQuantity(int64(req.CPUs()), resource.DecimalSI)
		r.Limits = corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: guaranteedMemory}
		r.Requests = corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: guaranteedMemory}
	case req.LimitMilli > 0:
		r.Limits = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(req.LimitMilli), resource.DecimalSI)}
		r.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(max(req.LimitMilli/burstableRequestDiv, 1)), resource.DecimalSI)}
	}
	return r
}

// answering makes the container answer on port (cluster.PodSpec.AnswerPort): `cnibench answer`
// from the tools image as its command (every connection answered with the address it was
// reached at, in a goroutine of its own: the change scenario's prober opens a thousand a
// second, which busybox nc, forking for each, could not answer), the port declared and probed
// for readiness, so that the pod is Ready, and an endpoint, only once it answers.
func answering(ct *corev1.Container, port int) {
	ct.Command = []string{image.SelfPath, "answer", "--port", strconv.Itoa(port)}
	if !slices.ContainsFunc(ct.Ports, func(p corev1.ContainerPort) bool {
		return int(p.ContainerPort) == port && p.Protocol != corev1.ProtocolUDP
	}) {
		ct.Ports = append(ct.Ports, corev1.ContainerPort{Name: "answer", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
	}
	ct.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
}

// containerPorts declares the spec's ports on the container (protocol upper-cased, as the API
// spells it; "" is TCP); nil for none.
func containerPorts(ports []cluster.ContainerPort) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, p := range ports {
		out = append(out, corev1.ContainerPort{Name: p.Name, ContainerPort: int32(p.Port), Protocol: corev1.Protocol(strings.ToUpper(p.Protocol))})
	}
	return out
}

// podPorts reads the declared ports of the pod's container back (protocol lower-cased, TCP
// when the API left it empty); nil for none.
func podPorts(p *corev1.Pod) []cluster.ContainerPort {
	var out []cluster.ContainerPort
	for _, ct := range p.Spec.Containers {
		if ct.Name != ContainerName {
			continue
		}
		for _, cp := range ct.Ports {
			proto := strings.ToLower(string(cp.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			out = append(out, cluster.ContainerPort{Name: cp.Name, Port: int(cp.ContainerPort), Protocol: proto})
		}
	}
	return out
}

// deploymentObject wraps the pod of a server spec in a Deployment of one replica (the pod
// template keeps the nodeName pin; a Deployment's pods must restart Always).
func (c *Cluster) deploymentObject(spec cluster.PodSpec) *appsv1.Deployment {
	p := c.podObject(spec)
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: c.ns, Labels: map[string]string{
			ManagedBy: ManagedByValue, RunLabel: LabelValue(c.cfg.RunID), PodLabel: spec.Name}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{PodLabel: spec.Name}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels}, Spec: p.Spec},
		},
	}
}

func (c *Cluster) hasNode(name string) bool {
	for _, n := range c.nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// createWorkers is how many create or delete calls CreatePods and DeletePods have in flight.
const createWorkers = 16

// CreatePods implements cluster.Cluster: creates each pod on its spec's node (a server as a
// Deployment of one replica) and waits until every one is Running with an IP (at most
// podTimeout plus 100 ms per pod; at once on an image pull or crash loop failure). Specs
// without a node (silent pods) go round-robin over the run's kwok fake nodes when it has
// some, else over its nodes. Every pod is created (in parallel), then all are awaited
// together: a list of the namespace per poll, not a get per pod. Pods that do not come up,
// and the others of the batch, are deleted again.
func (c *Cluster) CreatePods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	return c.createPods(ctx, specs, nil)
}

// createPods is CreatePods with mod (nil: none) changing each plain pod's object before it is
// created (not a server's Deployment).
func (c *Cluster) createPods(ctx context.Context, specs []cluster.PodSpec, mod func(cluster.PodSpec, *corev1.Pod)) ([]cluster.Pod, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errors.New("cluster closed")
	}
	specs = slices.Clone(specs)
	for i := range specs {
		s := &specs[i]
		switch {
		case s.Node == "" && s.Silent && len(c.fake) > 0:
			s.Node = c.fake[i%len(c.fake)]
		case s.Node == "":
			s.Node = c.nodes[i%len(c.nodes)].Name
		case !c.hasNode(s.Node) && !(s.Silent && c.isFake(s.Node)):
			return nil, fmt.Errorf("node %q is not one of this run's nodes (%s)", s.Node, c.nodeList())
		}
		for _, p := range s.Ports {
			if p.Port < 1 || p.Port > 65535 || !slices.Contains([]string{"", "tcp", "udp", "sctp"}, p.Protocol) {
				return nil, fmt.Errorf("pod %s: container port %q %d/%s (want 1-65535 and tcp, udp or sctp)", s.Name, p.Name, p.Port, p.Protocol)
			}
		}
		if err := s.CPU.Check(); err != nil {
			return nil, fmt.Errorf("pod %s: %w", s.Name, err)
		}
		if s.AnswerPort != 0 && (s.Silent || s.HostNetwork || s.External || s.AnswerPort < 1 || s.AnswerPort > 65535) {
			return nil, fmt.Errorf("pod %s: answer port %d: wants 1-65535 in a pod on the pod network that runs (not silent, host-network or external)", s.Name, s.AnswerPort)
		}
	}
	if first, rest := c.kwokFirst(specs); len(first) > 0 && len(rest) > 0 {
		return c.createInTwo(ctx, specs, first, rest, mod)
	}
	created := make([]bool, len(specs))
	err := cluster.Parallel(ctx, len(specs), createWorkers, func(i int) error {
		if err := c.createObject(ctx, specs[i], mod); err != nil {
			return fmt.Errorf("create pod %s on %s: %w", specs[i].Name, specs[i].Node, err)
		}
		created[i] = true
		return nil
	})
	var out []cluster.Pod
	if err == nil {
		out, err = c.awaitPods(ctx, specs)
	}
	if err != nil {
		_ = undoCreated(ctx, created, func(i int) string { return specs[i].Name }, func(ctx context.Context, names []string) error {
			defer c.forget(names)
			// Wait until they are gone: the next case may create pods of the same names.
			return c.deletePods(ctx, names, true)
		})
		if len(specs) == 1 {
			return nil, fmt.Errorf("pod %s on %s: %w", specs[0].Name, specs[0].Node, err)
		}
		return nil, fmt.Errorf("%d pods: %w", len(specs), err)
	}
	c.mu.Lock()
	for _, p := range out {
		c.pods[p.Name] = p
		if c.isFake(p.Node) {
			c.warm[p.Node] = true
		}
	}
	c.mu.Unlock()
	c.learnPodMTU(ctx, out, specs)
	return out, nil
}

func (c *Cluster) createObject(ctx context.Context, spec cluster.PodSpec, mod func(cluster.PodSpec, *corev1.Pod)) error {
	if spec.Server {
		c.mu.Lock()
		c.servers[spec.Name] = true
		c.mu.Unlock()
		_, err := c.cs.AppsV1().Deployments(c.ns).Create(ctx, c.deploymentObject(spec), metav1.CreateOptions{})
		return err
	}
	p := c.podObject(spec)
	if spec.Silent && c.isFake(spec.Node) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, fakeToleration)
	}
	if mod != nil {
		mod(spec, p)
	}
	_, err := c.cs.CoreV1().Pods(c.ns).Create(ctx, p, metav1.CreateOptions{})
	return err
}

// awaitPods waits until the pod of every spec (found by PodLabel) is Running with an IP:
// at most podTimeout plus 100 ms per pod, and at once fails on a pod that will not get there.
func (c *Cluster) awaitPods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	want := map[string]int{}
	for i, s := range specs {
		want[s.Name] = i
	}
	out := make([]cluster.Pod, len(specs))
	var last map[string]*corev1.Pod
	timeout := podTimeout + time.Duration(len(specs))*100*time.Millisecond
	err := poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		list, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		last = map[string]*corev1.Pod{}
		for i := range list.Items {
			p := &list.Items[i]
			name := p.Labels[PodLabel]
			if _, ok := want[name]; !ok || p.DeletionTimestamp != nil {
				continue
			}
			last[name] = p
		}
		up := 0
		for name, i := range want {
			p := last[name]
			if p == nil {
				continue
			}
			ok, err := podUp(p)
			if err != nil {
				return false, fmt.Errorf("pod %s: %w", name, err)
			}
			if ok {
				up++
				out[i] = cluster.Pod{Name: name, Node: p.Spec.NodeName, IP: p.Status.PodIP, HostNetwork: p.Spec.HostNetwork,
					External: p.Labels[ExternalLabel] == "true", Labels: maps.Clone(p.Labels), Ports: podPorts(p)}
				c.mu.Lock()
				c.real[name] = p.Name
				c.mu.Unlock()
			}
		}
		return up == len(want), nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		var down []string
		for name := range want {
			if p := last[name]; p == nil || out[want[name]].IP == "" {
				down = append(down, name)
			}
		}
		sort.Strings(down)
		err = fmt.Errorf("%d of %d pods not running after %s; %s: %s", len(down), len(want), timeout, down[0], c.describe(ctx, last[down[0]]))
	}
	return out, err
}

// learnPodMTU reads the pod MTU (eth0's) in the first pod-network pod that runs a container,
// once, unless Config.PodMTU gave it: the UDP payload is sized to it and the run records it.
func (c *Cluster) learnPodMTU(ctx context.Context, pods []cluster.Pod, specs []cluster.PodSpec) {
	c.mu.Lock()
	known := c.cfg.PodMTU > 0 || c.podMTU > 0
	c.mu.Unlock()
	if known || c.rc == nil {
		return
	}
	for i, p := range pods {
		if p.HostNetwork || (specs[i].Silent && c.isFake(p.Node)) {
			continue
		}
		res, err := c.execPlain(ctx, p.Name, []string{busybox, "cat", "/sys/class/net/eth0/mtu"})
		if err != nil || res.ExitCode != 0 {
			return
		}
		if mtu, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); err == nil && mtu > 0 {
			c.mu.Lock()
			c.podMTU = mtu
			c.mu.Unlock()
		}
		return
	}
}

// podName is the name of the pod the scenario calls name (a server's replica has a
// generated name).
func (c *Cluster) podName(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.real[name]; ok {
		return r
	}
	return name
}

// sysctlForbidden is the status reason of a pod whose sysctls the kubelet does not allow.
const sysctlForbidden = "SysctlForbidden"

// podUp reports whether the pod is Running with an IP, or an error if it will not get there.
func podUp(p *corev1.Pod) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		if r := p.Status.Reason; r == "OutOfcpu" || r == "OutOfmemory" {
			// The kubelet's admission: the node has not the resources the pod requests.
			return false, cluster.Unsupported("node %s cannot give pod %s what it requests (%s)", p.Spec.NodeName, p.Name, strings.TrimSpace(r+": "+p.Status.Message))
		}
		if p.Status.Reason == sysctlForbidden {
			// The kubelet refused the pod's sysctls: a setting of this cluster, not a failure.
			return false, cluster.Unsupported("the kubelet of %s forbids the pod's sysctls (%s); allow them with the kubelet's --allowed-unsafe-sysctls (allowedUnsafeSysctls in its configuration)", p.Spec.NodeName, strings.TrimSpace(p.Status.Message))
		}
		msg := fmt.Sprintf("pod phase %s", p.Status.Phase)
		if p.Status.Reason != "" || p.Status.Message != "" {
			msg += ": " + strings.TrimSpace(p.Status.Reason+" "+p.Status.Message)
		}
		if t := containerTerminated(p); t != "" {
			msg += "; " + t
		}
		return false, errors.New(msg)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
			return false, fmt.Errorf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil {
			return false, fmt.Errorf("container %s terminated: %s", cs.Name, containerTerminated(p))
		}
	}
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
}

func containerTerminated(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return strings.TrimSpace(fmt.Sprintf("exit code %d %s %s", t.ExitCode, t.Reason, t.Message))
		}
	}
	return ""
}

// describe summarises why a pod is not up: its phase, container states and latest warning
// event (a CNI failure shows up as a FailedCreatePodSandBox event).
func (c *Cluster) describe(ctx context.Context, p *corev1.Pod) string {
	if p == nil {
		return "pod never observed"
	}
	parts := []string{"phase " + string(p.Status.Phase)}
	if p.Status.PodIP == "" {
		parts = append(parts, "no pod IP")
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, strings.TrimSpace(fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, w.Message)))
		}
	}
	if len(p.Status.Conditions) == 0 && len(p.Status.ContainerStatuses) == 0 {
		parts = append(parts, "no status from the kubelet of "+p.Spec.NodeName+" yet")
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && (cond.Reason != "" || cond.Message != "") {
			parts = append(parts, strings.TrimSpace(fmt.Sprintf("%s: %s %s", cond.Type, cond.Reason, cond.Message)))
		}
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if n, err := c.cs.CoreV1().Nodes().Get(ectx, p.Spec.NodeName, metav1.GetOptions{}); err == nil && !nodeReady(*n) {
		parts = append(parts, "node "+n.Name+" is not Ready")
	}
	evs, err := c.cs.CoreV1().Events(c.ns).List(ectx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err == nil {
		var warn []corev1.Event
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == p.Name && (e.InvolvedObject.UID == "" || e.InvolvedObject.UID == p.UID) && e.Type == corev1.EventTypeWarning {
				warn = append(warn, e)
			}
		}
		sort.SliceStable(warn, func(i, j int) bool { return eventTime(warn[i]).Before(eventTime(warn[j])) })
		if len(warn) > 0 {
			e := warn[len(warn)-1]
			parts = append(parts, fmt.Sprintf("last warning event: %s: %s", e.Reason, strings.TrimSpace(e.Message)))
		}
	}
	return strings.Join(parts, "; ")
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// DeletePods implements cluster.Cluster: stops the pods' processes started with Start,
// deletes the pods (or their Deployments) and waits until they are gone.
//
// Pods are deleted with a 1 s grace period rather than 0: with 0 the API server removes the
// object at once (a forced deletion) while the kubelet stops the containers later, so "gone"
// would not mean stopped, and a host-network server could still hold its port when the next
// pod starts. With 1 s the object disappears only once the kubelet has stopped the pod.
func (c *Cluster) DeletePods(ctx context.Context, names []string) error {
	names = c.withChains(names)
	for _, n := range names {
		c.stopProcs(n)
	}
	err := c.deletePods(ctx, names, true)
	c.forget(names)
	return err
}

func (c *Cluster) forget(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		delete(c.pods, n)
		delete(c.real, n)
		delete(c.servers, n)
		delete(c.chains, n)
	}
}

// deletePods deletes the pods (servers: their Deployments) and, with wait, waits until no pod
// with their PodLabel and none of their Deployments is left.
func (c *Cluster) deletePods(ctx context.Context, names []string, wait bool) error {
	grace := int64(1)
	fg := metav1.DeletePropagationForeground
	err := cluster.Parallel(ctx, len(names), createWorkers, func(i int) error {
		c.mu.Lock()
		server, pod := c.servers[names[i]], names[i]
		if r, ok := c.real[pod]; ok {
			pod = r
		}
		c.mu.Unlock()
		var err error
		if server {
			// The garbage collector deletes the ReplicaSet, then the replica (foreground):
			// deleting the replica directly would make the ReplicaSet, still there, replace it.
			err = c.cs.AppsV1().Deployments(c.ns).Delete(ctx, names[i], metav1.DeleteOptions{PropagationPolicy: &fg})
		} else {
			err = c.cs.CoreV1().Pods(c.ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", names[i], err)
		}
		return nil
	})
	if err != nil || !wait {
		return err
	}
	gone := map[string]bool{}
	deployments := false
	for _, n := range names {
		gone[n] = true
		c.mu.Lock()
		deployments = deployments || c.servers[n]
		c.mu.Unlock()
	}
	var left []string
	err = poll(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		list, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left = left[:0]
		for _, p := range list.Items {
			if gone[p.Labels[PodLabel]] {
				left = append(left, p.Name)
			}
		}
		if len(left) > 0 || !deployments {
			return len(left) == 0, nil
		}
		// A Deployment deleted in the foreground outlives its pods (its finalizer goes
		// after the ReplicaSet's): a server of the same name created before it is gone
		// would be refused ("object is being deleted").
		deps, err := c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range deps.Items {
			if gone[d.Name] {
				left = append(left, "deployment/"+d.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods not gone after delete (%s): %w", strings.Join(left, ", "), err)
	}
	return nil
}

func (c *Cluster) nodeList() string {
	var names []string
	for _, n := range c.nodes {
		names = append(names, n.Name)
	}
	return strings.Join(names, ", ")
}
