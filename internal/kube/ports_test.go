package kube

import (
	"context"
	"reflect"
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
