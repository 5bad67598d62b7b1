package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cnibench/cnibench/internal/cluster"
)

// fatalWaiting are container waiting reasons that will not resolve by themselves soon:
// CreatePod fails at once instead of waiting out its timeout.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
	"RunContainerError": true,
}

// podObject builds the pod for spec: pinned to spec.Node with nodeName, one container
// "main" with the tools image sleeping forever.
func (c *Cluster) podObject(spec cluster.PodSpec) *corev1.Pod {
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ManagedBy] = ManagedByValue
	labels[RunLabel] = LabelValue(c.cfg.RunID)
	grace := int64(1)
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: c.ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      spec.Node,
			HostNetwork:                   spec.HostNetwork,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           c.cfg.Image,
				Command:         []string{"/bin/busybox", "sleep", "infinity"},
				ImagePullPolicy: corev1.PullIfNotPresent,
				SecurityContext: &corev1.SecurityContext{Privileged: &no},
			}},
		},
	}
	if spec.HostNetwork {
		p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	if c.cfg.TolerateTaints {
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	return p
}

func (c *Cluster) hasNode(name string) bool {
	for _, n := range c.nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// CreatePod implements cluster.Cluster: creates the pod on spec.Node and waits until it is
// Running with an IP (at most 2 minutes; at once on an image pull or crash loop failure).
// A pod that does not come up is deleted again.
func (c *Cluster) CreatePod(ctx context.Context, spec cluster.PodSpec) (cluster.Pod, error) {
	if !c.hasNode(spec.Node) {
		return cluster.Pod{}, fmt.Errorf("node %q is not one of this run's nodes (%s)", spec.Node, c.nodeList())
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return cluster.Pod{}, errors.New("cluster closed")
	}
	created, err := c.cs.CoreV1().Pods(c.ns).Create(ctx, c.podObject(spec), metav1.CreateOptions{})
	if err != nil {
		return cluster.Pod{}, fmt.Errorf("create pod %s on %s: %w", spec.Name, spec.Node, err)
	}
	var last *corev1.Pod
	err = poll(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, spec.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return podUp(p)
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("not running after %s: %s", podTimeout, c.describe(ctx, last))
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.deletePod(dctx, spec.Name, created.UID, false)
		return cluster.Pod{}, fmt.Errorf("pod %s on %s: %w", spec.Name, spec.Node, err)
	}
	out := cluster.Pod{Name: last.Name, Node: last.Spec.NodeName, IP: last.Status.PodIP, HostNetwork: last.Spec.HostNetwork, Labels: maps.Clone(last.Labels)}
	c.mu.Lock()
	c.pods[out.Name] = out
	c.mu.Unlock()
	return out, nil
}

// podUp reports whether the pod is Running with an IP, or an error if it will not get there.
func podUp(p *corev1.Pod) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
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
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
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

// DeletePod implements cluster.Cluster: stops the pod's processes started with Start,
// deletes the pod and waits until it is gone.
//
// The pod is deleted with a 1 s grace period rather than 0: with 0 the API server removes the
// object at once (a forced deletion) while the kubelet stops the containers later, so "gone"
// would not mean stopped, and a host-network server could still hold its port when the next
// pod starts. With 1 s the object disappears only once the kubelet has stopped the pod.
func (c *Cluster) DeletePod(ctx context.Context, name string) error {
	c.stopProcs(name)
	c.mu.Lock()
	delete(c.pods, name)
	c.mu.Unlock()
	return c.deletePod(ctx, name, "", true)
}

// deletePod deletes a pod (uid "" = whatever pod has the name) and, with wait, waits until
// the object is gone.
func (c *Cluster) deletePod(ctx context.Context, name string, uid types.UID, wait bool) error {
	grace := int64(1)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := c.cs.CoreV1().Pods(c.ns).Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	if !wait {
		return nil
	}
	err = poll(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return uid != "" && p.UID != uid, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s not gone after delete: %w", name, err)
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
