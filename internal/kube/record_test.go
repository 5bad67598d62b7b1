package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// recordNamespace is where TestRecordProxyServices puts its Services.
const recordNamespace = "cnbrec"

// TestRecordProxyServices sets up the Services whose kube-proxy rules are recorded in
// internal/engine/proxy/testdata/real (see the README there), on the cluster of
// CNIBENCH_RECORD_KUBECONFIG (a held harness cluster): in namespace cnbrec, Service "web"
// (TCP port "http" 80 -> targetPort 8080) over two pods, one per node, and Service "dns" (UDP
// port "dns" 53) without endpoints. It returns once web's EndpointSlices list both pods as
// ready, prints the addresses as JSON, and leaves everything in place for the recording (the
// cluster's teardown removes it; CNIBENCH_RECORD_CLEAN=1 deletes the namespace instead).
// CNIBENCH_RECORD_SET=nodeport adds the NodePort Services of the *-nodeport recordings.
func TestRecordProxyServices(t *testing.T) {
	kc := os.Getenv("CNIBENCH_RECORD_KUBECONFIG")
	if kc == "" {
		t.Skip("CNIBENCH_RECORD_KUBECONFIG=KUBECONFIG creates the Services recorded in internal/engine/proxy/testdata/real")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc, err := LoadConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("CNIBENCH_RECORD_CLEAN") == "1" {
		if err := deleteNamespace(ctx, cs, recordNamespace); err != nil {
			t.Fatal(err)
		}
		return
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		if n.Labels[FakeNodeLabel] == "" {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	if len(names) < 2 {
		t.Fatalf("nodes %v: want two", names)
	}
	labels := map[string]string{ManagedBy: ManagedByValue}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: recordNamespace, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	grace, no := int64(1), false
	for i, node := range names[:2] {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Labels: map[string]string{"app": "web", "idx": fmt.Sprint(i)}},
			Spec: corev1.PodSpec{
				NodeName: node, TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
				Containers: []corev1.Container{{Name: ContainerName, Image: DefaultImage, ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"/bin/busybox", "sleep", "infinity"},
					Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}},
			},
		}
		if _, err := cs.CoreV1().Pods(recordNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svcs := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "dns"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{"app": "dns"},
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP}}}},
	}
	if os.Getenv("CNIBENCH_RECORD_SET") == "nodeport" {
		// NodePort Services over the same pods: externalTrafficPolicy Cluster over both, Local
		// over both, and Local over web-1 only (node1's pod: node0 has no local endpoint).
		np := func(name string, nodePort int32, etp corev1.ServiceExternalTrafficPolicy, sel map[string]string) *corev1.Service {
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
				Selector: sel, ExternalTrafficPolicy: etp,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: nodePort, Protocol: corev1.ProtocolTCP}}}}
		}
		svcs = append(svcs,
			np("np-cluster", 30080, corev1.ServiceExternalTrafficPolicyCluster, map[string]string{"app": "web"}),
			np("np-local", 30081, corev1.ServiceExternalTrafficPolicyLocal, map[string]string{"app": "web"}),
			np("np-local-remote", 30082, corev1.ServiceExternalTrafficPolicyLocal, map[string]string{"app": "web", "idx": "1"}))
	}
	out := map[string]any{}
	for _, s := range svcs {
		c, err := cs.CoreV1().Services(recordNamespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out["service/"+c.Name] = c.Spec.ClusterIP
	}
	err = poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(recordNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if up, err := podUp(&p); err != nil || !up {
				return false, err
			}
			out["pod/"+p.Name] = p.Status.PodIP + " on " + p.Spec.NodeName
		}
		sl, err := cs.DiscoveryV1().EndpointSlices(recordNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err
		}
		eps := readyAddresses(sl.Items)
		sort.Strings(eps)
		out["endpoints/web"] = eps
		return len(pods.Items) == 2 && len(eps) == 2, nil
	})
	if err != nil {
		t.Fatalf("pods or endpoints not ready: %v (%v)", err, out)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}
