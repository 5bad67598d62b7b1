package kube

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnibench/cnibench/internal/cluster"
)

// A NodePort Service is a real Service of type NodePort with its externalTrafficPolicy; it
// comes back with the NodePorts the API server gave (ports of one number share one, as
// Kubernetes' allocator does); a NodePort another Service has is refused with an error
// wrapping cluster.ErrNodePortTaken, and nothing is left.
func TestNodePortServices(t *testing.T) {
	ctx := context.Background()
	taken := int32(30042)
	c, cs, _ := serviceRun(t, 10*time.Millisecond, "", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		if svc.Spec.Type != corev1.ServiceTypeNodePort {
			return false, nil, nil
		}
		next, byPort := int32(31000), map[int32]int32{}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort == taken {
				return true, nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), svc.Name,
					field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), p.NodePort, "provided port is already allocated")})
			}
			if np, ok := byPort[p.Port]; ok && p.NodePort == 0 {
				p.NodePort = np
			} else if p.NodePort == 0 {
				p.NodePort, next = next, next+1
			}
			byPort[p.Port] = p.NodePort
		}
		return false, nil, nil
	})
	specs := []cluster.ServiceSpec{
		{Name: "np-local", Selector: map[string]string{"app": "db"}, NodePort: true, ExternalLocal: true,
			Ports: []cluster.ServicePort{{Name: "t", Port: 5201, Protocol: "tcp"}, {Name: "u", Port: 5201, Protocol: "udp"}, {Name: "d", Port: 30007, Protocol: "tcp", NodePort: 30007}}},
		{Name: "np-cluster", Selector: map[string]string{"app": "db"}, NodePort: true, Ports: []cluster.ServicePort{{Port: 80, TargetPort: 8080, Protocol: "tcp"}}},
	}
	svcs, err := c.CreateServices(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{31000, 31000, 30007}, {31000}}
	for i, s := range svcs {
		var got []int
		for _, p := range s.Ports {
			got = append(got, p.NodePort)
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("%s: NodePorts %v, want %v", s.Name, got, want[i])
		}
		obj, err := cs.CoreV1().Services(c.Namespace()).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		etp := corev1.ServiceExternalTrafficPolicyCluster
		if specs[i].ExternalLocal {
			etp = corev1.ServiceExternalTrafficPolicyLocal
		}
		if obj.Spec.Type != corev1.ServiceTypeNodePort || obj.Spec.ExternalTrafficPolicy != etp {
			t.Errorf("%s: type %s, externalTrafficPolicy %s, want NodePort %s", s.Name, obj.Spec.Type, obj.Spec.ExternalTrafficPolicy, etp)
		}
	}
	if specs[0].Ports[0].NodePort != 0 {
		t.Errorf("the caller's ports changed: %+v", specs[0].Ports)
	}
	_, err = cluster.CreateService(ctx, c, cluster.ServiceSpec{Name: "np-taken", Selector: map[string]string{"app": "db"}, NodePort: true,
		Ports: []cluster.ServicePort{{Port: 30042, Protocol: "tcp", NodePort: 30042}}})
	if !errors.Is(err, cluster.ErrNodePortTaken) {
		t.Errorf("NodePort taken: %v, want ErrNodePortTaken", err)
	}
	if left := servicesLeft(cs, c.Namespace()); len(left) != 2 {
		t.Errorf("services %v, want np-local and np-cluster only", left)
	}
	// A ClusterIP Service stays one: no NodePort asked for, none reported.
	obj := c.serviceObject(cluster.ServiceSpec{Name: "plain", Selector: map[string]string{"app": "db"}, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp", NodePort: 30001}}})
	if obj.Spec.Type != corev1.ServiceTypeClusterIP || obj.Spec.Ports[0].NodePort != 0 || obj.Spec.ExternalTrafficPolicy != "" {
		t.Errorf("ClusterIP Service %+v", obj.Spec)
	}
}

// An external client is a host-network pod on the node asked for, marked as external; it is
// never a Service's expected endpoint.
func TestExternalClientPod(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{RunID: "ext"})
	stop := make(chan struct{})
	defer close(stop)
	go runAll(cs, c.Namespace(), stop)
	pods, err := c.CreatePods(ctx, []cluster.PodSpec{{Name: "client", Node: "worker-b", External: true, Labels: map[string]string{"role": "client"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := pods[0]; !p.External || !p.HostNetwork || p.Node != "worker-b" {
		t.Errorf("external client %+v, want a host-network pod on worker-b", p)
	}
	obj, err := cs.CoreV1().Pods(c.Namespace()).Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !obj.Spec.HostNetwork || obj.Labels[ExternalLabel] != "true" || obj.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("pod %+v", obj)
	}
}
