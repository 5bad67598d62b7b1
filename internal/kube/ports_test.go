package kube

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Declared ports become the container's ports (protocol upper-cased) on pods and on server
// Deployments, and come back on the returned pod.
func TestPodContainerPorts(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{})
	ports := []cluster.ContainerPort{{Name: "http", Port: 8080, Protocol: "tcp"}, {Name: "dns", Port: 53, Protocol: "udp"}, {Port: 9000}}
	want := []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		{ContainerPort: 9000},
	}
	go setStatus(t, cs, c.Namespace(), "web", running("10.244.0.4"))
	p, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "web", Node: "worker-a", Ports: ports})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.Spec.Containers[0].Ports; !reflect.DeepEqual(got, want) {
		t.Errorf("container ports %+v, want %+v", got, want)
	}
	wantPod := []cluster.ContainerPort{{Name: "http", Port: 8080, Protocol: "tcp"}, {Name: "dns", Port: 53, Protocol: "udp"}, {Port: 9000, Protocol: "tcp"}}
	if !reflect.DeepEqual(p.Ports, wantPod) {
		t.Errorf("pod ports %+v, want %+v", p.Ports, wantPod)
	}
	if d := c.deploymentObject(cluster.PodSpec{Name: "srv", Node: "worker-b", Server: true, Ports: ports}); !reflect.DeepEqual(d.Spec.Template.Spec.Containers[0].Ports, want) {
		t.Errorf("deployment container ports %+v", d.Spec.Template.Spec.Containers[0].Ports)
	}
	for _, bad := range []cluster.ContainerPort{{Port: 0}, {Port: 70000}, {Port: 80, Protocol: "TCP"}, {Port: 80, Protocol: "icmp"}} {
		if _, err := cluster.CreatePod(ctx, c, cluster.PodSpec{Name: "bad", Node: "worker-a", Ports: []cluster.ContainerPort{bad}}); err == nil {
			t.Errorf("port %+v accepted", bad)
		}
	}
	if _, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "bad", metav1.GetOptions{}); err == nil {
		t.Error("a pod with a bad port was created")
	}
}

// CPU requests: a limit alone makes a Burstable container (a CPU limit, no memory limit); an
// exclusive request a Guaranteed one with whole CPUs; a bad one is refused before anything is
// created.
func TestCPUResources(t *testing.T) {
	if r := cpuResources(cluster.CPU{}); r.Limits != nil || r.Requests != nil {
		t.Errorf("no request: %+v", r)
	}
	r := cpuResources(cluster.CPU{LimitMilli: 200})
	if q, rq := r.Limits[corev1.ResourceCPU], r.Requests[corev1.ResourceCPU]; q.MilliValue() != 200 || len(r.Limits) != 1 || rq.MilliValue() != 20 || len(r.Requests) != 1 {
		t.Errorf("200m limit: %+v", r)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: cpuResources(cluster.CPU{LimitMilli: 2000, Exclusive: true})}}}}
	if qos := qosClass(pod); qos != corev1.PodQOSGuaranteed {
		t.Errorf("exclusive: QoS %s, want Guaranteed", qos)
	}
	if q := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.Value() != 2 || q.MilliValue() != 2000 {
		t.Errorf("exclusive 2000m: cpu request %s", q.String())
	}
	pod.Spec.Containers[0].Resources = cpuResources(cluster.CPU{LimitMilli: 500})
	if qos := qosClass(pod); qos != corev1.PodQOSBurstable {
		t.Errorf("limit: QoS %s, want Burstable", qos)
	}
	c := newCluster(t, twoNodes(), Config{})
	_, err := c.CreatePods(context.Background(), []cluster.PodSpec{{Name: "vnf", Node: "worker-a", CPU: cluster.CPU{LimitMilli: 1500, Exclusive: true}}})
	if !errors.Is(err, cluster.ErrBadInput) || !strings.Contains(err.Error(), "whole CPUs") {
		t.Errorf("exclusive 1500m: %v", err)
	}
}

// qosClass is the QoS class Kubernetes gives a pod of one container (the rules of
// k8s.io/kubernetes/pkg/apis/core/v1/helper/qos, for the resources cpuResources sets).
func qosClass(p *corev1.Pod) corev1.PodQOSClass {
	r := p.Spec.Containers[0].Resources
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		l, okL := r.Limits[name]
		q, okR := r.Requests[name]
		if !okL || (okR && q.Cmp(l) != 0) {
			return corev1.PodQOSBurstable
		}
	}
	return corev1.PodQOSGuaranteed
}
