package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/scenario"
)

// assignClusterIPs plays the API server's IP allocator: ip(name) is the ClusterIP of a new
// Service (the fake clientset leaves it empty).
func assignClusterIPs(cs *fake.Clientset, ip func(name string) string) {
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		svc.Spec.ClusterIP = ip(svc.Name)
		return false, nil, nil // the tracker stores the changed object
	})
}

// sliceController plays the EndpointSlice controller: once after starting, every Service of
// the namespace without slices gets one slice per ready pod its selector matches (labelled like
// the Service, plus kubernetes.io/service-name), and one more slice with a not-ready endpoint
// that must not count. It sleeps delay first, so callers have to wait for it.
func sliceController(cs *fake.Clientset, ns string, delay time.Duration, stop chan struct{}) {
	ctx := context.Background()
	select {
	case <-stop:
		return
	case <-time.After(delay):
	}
	done := map[string]bool{}
	no, yes := false, true
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		svcs, _ := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		pods, _ := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, svc := range svcs.Items {
			if done[svc.Name] {
				continue
			}
			done[svc.Name] = true
			lbl := maps.Clone(svc.Labels)
			lbl[discoveryv1.LabelServiceName] = svc.Name
			slice := func(k int, ep discoveryv1.Endpoint) {
				s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svc.Name, k), Namespace: ns, Labels: lbl},
					AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{ep}}
				_, _ = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{})
			}
			k := 0
			for _, p := range pods.Items {
				if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) && p.Status.PodIP != "" {
					node := p.Spec.NodeName
					slice(k, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
					k++
				}
			}
			slice(k, discoveryv1.Endpoint{Addresses: []string{"10.244.99.99"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}})
		}
	}
}

func servicesLeft(cs *fake.Clientset, ns string) []string {
	list, _ := cs.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	return names
}

// serviceRun is a run with two "web" pods and one "db" pod up, ClusterIPs assigned by name and
// the EndpointSlice controller running after delay. failCreate, if not "", is a Service whose
// create the API server rejects; onCreate are more reactors to Service creates (run first).
func serviceRun(t *testing.T, delay time.Duration, failCreate string, onCreate ...k8stesting.ReactionFunc) (*Cluster, *fake.Clientset, []cluster.Pod) {
	t.Helper()
	cs := twoNodes()
	for _, r := range onCreate {
		cs.PrependReactor("create", "services", r)
	}
	// Reactors go in before any goroutine uses the clientset: adding one is not thread-safe.
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if name := a.(k8stesting.CreateAction).GetObject().(*corev1.Service).Name; name == failCreate {
			return true, nil, apierrors.NewForbidden(corev1.Resource("services"), name, errors.New("quota exceeded"))
		}
		return false, nil, nil
	})
	c := newCluster(t, cs, Config{RunID: "svc run"})
	var n atomic.Int32
	assignClusterIPs(cs, func(string) string {
		k := n.Add(1)
		return fmt.Sprintf("10.96.%d.%d", k/250, k%250+1)
	})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go runAll(cs, c.Namespace(), stop)
	pods, err := c.CreatePods(context.Background(), []cluster.PodSpec{
		{Name: "web0", Node: "worker-a", Labels: map[string]string{"app": "web"}},
		{Name: "web1", Node: "worker-b", Labels: map[string]string{"app": "web"}},
		{Name: "db0", Node: "worker-b", Labels: map[string]string{"app": "db"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go sliceController(cs, c.Namespace(), delay, stop)
	return c, cs, pods
}

// CreateServices creates every Service, waits until each lists its pods as ready endpoints
// (one EndpointSlice list per poll for the batch) and returns them in the order asked.
func TestCreateServices(t *testing.T) {
	ctx := context.Background()
	c, cs, pods := serviceRun(t, 100*time.Millisecond, "")
	ip := map[string]string{}
	for _, p := range pods {
		ip[p.Name] = p.IP
	}
	const n = 60
	var specs []cluster.ServiceSpec
	for i := 0; i < n; i++ {
		sel := map[string]string{"app": []string{"web", "db", "none"}[i%3]}
		specs = append(specs, cluster.ServiceSpec{Name: fmt.Sprintf("svc-%02d", n-1-i), Selector: sel,
			Ports: []cluster.ServicePort{{Name: "http", Port: 80, TargetPort: 8080, Protocol: "tcp"}, {Name: "dns", Port: 53, Protocol: "udp"}}})
	}
	start := time.Now()
	svcs, err := c.CreateServices(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("returned after %s, before the EndpointSlices existed", d)
	}
	if len(svcs) != n {
		t.Fatalf("%d services, want %d", len(svcs), n)
	}
	web := []string{ip["web0"], ip["web1"]}
	slices.Sort(web)
	ips := map[string]bool{}
	for i, s := range svcs {
		want := map[int][]string{0: web, 1: {ip["db0"]}, 2: nil}[i%3]
		if s.Name != specs[i].Name || !reflect.DeepEqual(s.Ports, specs[i].Ports) || !reflect.DeepEqual(s.Endpoints, want) {
			t.Errorf("service %d: %+v, want name %s and endpoints %v", i, s, specs[i].Name, want)
		}
		if s.ClusterIP == "" || ips[s.ClusterIP] {
			t.Errorf("service %s: ClusterIP %q (empty or repeated)", s.Name, s.ClusterIP)
		}
		ips[s.ClusterIP] = true
	}
	obj, err := cs.CoreV1().Services(c.Namespace()).Get(ctx, specs[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"app": "web", RunLabel: "svc-run"}; !reflect.DeepEqual(obj.Spec.Selector, want) {
		t.Errorf("selector %v, want %v", obj.Spec.Selector, want)
	}
	if want := map[string]string{ManagedBy: ManagedByValue, RunLabel: "svc-run"}; !reflect.DeepEqual(obj.Labels, want) {
		t.Errorf("labels %v, want %v", obj.Labels, want)
	}
	if p := obj.Spec.Ports; len(p) != 2 || p[0].Protocol != corev1.ProtocolTCP || p[0].TargetPort.IntValue() != 8080 || p[1].Protocol != corev1.ProtocolUDP || p[1].TargetPort.IntValue() != 53 {
		t.Errorf("ports %+v", p)
	}
	if len(specs[0].Selector) != 1 {
		t.Errorf("the caller's selector changed: %v", specs[0].Selector)
	}
	// The wait lists the run's slices, never one Service's.
	lists := 0
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "endpointslices" && a.GetVerb() == "list" {
			lists++
			sel := a.(k8stesting.ListAction).GetListRestrictions().Labels.String()
			if sel != ManagedBy+"="+ManagedByValue+","+RunLabel+"=svc-run" {
				t.Errorf("endpointslice list with selector %q", sel)
			}
		}
	}
	if lists == 0 {
		t.Error("no endpointslice list")
	}

	// One Service goes the same way.
	s, err := cluster.CreateService(ctx, c, cluster.ServiceSpec{Name: "one", Selector: map[string]string{"app": "db"}, Ports: []cluster.ServicePort{{Port: 5432, Protocol: "tcp"}}})
	if err != nil || s.Name != "one" || s.ClusterIP == "" || !slices.Equal(s.Endpoints, []string{ip["db0"]}) {
		t.Errorf("CreateService: %+v, %v", s, err)
	}

	names := []string{"one", "not-there"}
	for _, s := range svcs {
		names = append(names, s.Name)
	}
	if err := c.DeleteServices(ctx, names); err != nil {
		t.Fatal(err)
	}
	if left := servicesLeft(cs, c.Namespace()); len(left) != 0 {
		t.Errorf("services left after DeleteServices: %v", left)
	}
	if err := cluster.DeleteService(ctx, c, "one"); err != nil {
		t.Errorf("deleting a deleted service: %v", err)
	}
}

// NoWait: the call returns once the API server accepted the Service, before its
// EndpointSlices exist (the slice controller here takes 2 s), listing no endpoints; no
// EndpointSlice is listed for it.
func TestCreateServicesNoWait(t *testing.T) {
	ctx := context.Background()
	c, cs, _ := serviceRun(t, 2*time.Second, "")
	start := time.Now()
	s, err := cluster.CreateService(ctx, c, cluster.ServiceSpec{Name: "quick", Selector: map[string]string{"app": "web"},
		Ports: []cluster.ServicePort{{Port: 80, TargetPort: 8080, Protocol: "tcp"}}, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("returned after %s: it waited for the endpoints", d)
	}
	if s.ClusterIP == "" || len(s.Endpoints) != 0 {
		t.Errorf("service %+v: want a ClusterIP and no endpoints listed", s)
	}
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "endpointslices" && a.GetVerb() == "list" {
			t.Error("endpointslices listed for a NoWait Service")
		}
	}
	if err := cluster.DeleteService(ctx, c, "quick"); err != nil {
		t.Fatal(err)
	}
}

// A failed create, endpoints that never come, or a cancelled context: an error naming the
// cause, and the Services already created are gone.
func TestCreateServicesFailureCleansUp(t *testing.T) {
	ctx := context.Background()
	specs := func(n int) []cluster.ServiceSpec {
		var out []cluster.ServiceSpec
		for i := 0; i < n; i++ {
			out = append(out, cluster.ServiceSpec{Name: fmt.Sprintf("svc-%d", i), Selector: map[string]string{"app": "web"},
				Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}}})
		}
		return out
	}

	c, cs, _ := serviceRun(t, 0, "svc-17")
	_, err := c.CreateServices(ctx, specs(40))
	if err == nil || !strings.Contains(err.Error(), "svc-17") || !strings.Contains(err.Error(), "quota exceeded") {
		t.Errorf("err %v, want svc-17's quota error", err)
	}
	if left := servicesLeft(cs, c.Namespace()); len(left) != 0 {
		t.Errorf("services left after a failed CreateServices: %v", left)
	}

	// No EndpointSlice controller: the wait times out and says which Services lack endpoints.
	defer func(d time.Duration) { podTimeout = d }(podTimeout)
	podTimeout = 200 * time.Millisecond
	c, cs, _ = serviceRun(t, time.Hour, "")
	_, err = c.CreateServices(ctx, specs(3))
	if err == nil || !strings.Contains(err.Error(), "3 of 3 services") || !strings.Contains(err.Error(), "svc-0 (0 of 2)") {
		t.Errorf("err %v, want the services without endpoints", err)
	}
	if left := servicesLeft(cs, c.Namespace()); len(left) != 0 {
		t.Errorf("services left after a timeout: %v", left)
	}
	_, err = cluster.CreateService(ctx, c, specs(1)[0])
	if err == nil || !strings.HasPrefix(err.Error(), "service svc-0: ") {
		t.Errorf("single service: %v", err)
	}

	// Rejected before anything is created.
	for _, bad := range [][]cluster.ServiceSpec{
		{{Name: "a", Ports: []cluster.ServicePort{{Port: 80}}}, {Name: "a", Ports: []cluster.ServicePort{{Port: 81}}}},
		{{Name: "noports"}},
		{{Name: "proto", Ports: []cluster.ServicePort{{Port: 80, Protocol: "icmp"}}}},
	} {
		if _, err := c.CreateServices(ctx, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if left := servicesLeft(cs, c.Namespace()); len(left) != 0 {
		t.Errorf("services created from bad specs: %v", left)
	}
}

// Only Services with an endpoint on a real node are probed through their ClusterIP (from a
// pod, over exec on this host): those whose pods all sit on kwok fake nodes cannot answer.
func TestCreateServicesProbesRealEndpointsOnly(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t) // pods "client" on worker-a, "server" on worker-b; exec runs here
	cs := c.cs.(*fake.Clientset)
	defer func(d time.Duration) { podTimeout = d }(podTimeout)
	podTimeout = 3 * time.Second
	c.fake = []string{c.Namespace() + "-fake-0"}
	defer func() { c.fake = nil }()
	// Nothing ever answers at 255.255.255.255 (Linux refuses a TCP connect to the broadcast
	// address with "Network is unreachable", whatever the host's routes and egress proxies
	// do); 127.0.0.1 on a closed port refuses at once, which counts as answered.
	closed := freePort(t)
	assignClusterIPs(cs, func(name string) string {
		if strings.HasPrefix(name, "real") {
			return "127.0.0.1"
		}
		return "255.255.255.255"
	})
	stop := make(chan struct{})
	defer close(stop)
	go runAll(cs, c.Namespace(), stop)
	if _, err := c.CreatePods(ctx, scenario.SilentPods(3, "silent", map[string]string{"app": "silent"})); err != nil {
		t.Fatal(err)
	}
	go sliceController(cs, c.Namespace(), 0, stop)
	svcs, err := c.CreateServices(ctx, []cluster.ServiceSpec{
		{Name: "kwok-0", Selector: map[string]string{"app": "silent"}, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}}},
		{Name: "real", Selector: map[string]string{PodLabel: "server"}, Ports: []cluster.ServicePort{{Port: closed, Protocol: "tcp"}}},
		{Name: "kwok-1", Selector: map[string]string{"app": "silent"}, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs[0].Endpoints) != 3 || len(svcs[1].Endpoints) != 1 {
		t.Errorf("endpoints %v and %v", svcs[0].Endpoints, svcs[1].Endpoints)
	}
	// The probe is real: a Service on a real node whose ClusterIP does not answer fails.
	_, err = cluster.CreateService(ctx, c, cluster.ServiceSpec{Name: "silent-real", Selector: map[string]string{PodLabel: "server"}, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}}})
	if err == nil || !strings.Contains(err.Error(), "255.255.255.255:80 not answering") {
		t.Errorf("unanswered ClusterIP: %v", err)
	}
	if slices.Contains(servicesLeft(cs, c.Namespace()), "silent-real") {
		t.Error("the failed Service was not deleted")
	}
}

// The ClusterIP probe goes from a pod that is no endpoint of the Service (from an endpoint it
// is hairpin traffic, which kube-router's bridge does not carry), the first by name, never
// from a host-network pod or one on a fake node; from an endpoint only when nothing else is
// there.
func TestProbePod(t *testing.T) {
	pods := map[string]cluster.Pod{
		"a-server": {Name: "a-server", IP: "10.244.1.2", Node: "n1"},
		"b-host":   {Name: "b-host", IP: "172.30.0.10", Node: "n0", HostNetwork: true},
		"c-kwok":   {Name: "c-kwok", IP: "10.244.9.2", Node: "fake-0"},
		"d-client": {Name: "d-client", IP: "10.244.0.2", Node: "n0"},
		"e-other":  {Name: "e-other", IP: "10.244.0.3", Node: "n0"},
	}
	fake := func(n string) bool { return n == "fake-0" }
	if got := probePod(pods, []string{"10.244.1.2"}, fake); got != "d-client" {
		t.Errorf("probe from %q, want d-client (not the endpoint a-server)", got)
	}
	delete(pods, "d-client")
	delete(pods, "e-other")
	if got := probePod(pods, []string{"10.244.1.2"}, fake); got != "a-server" {
		t.Errorf("only the endpoint left: probe from %q, want a-server", got)
	}
	if got := probePod(map[string]cluster.Pod{"h": {Name: "h", HostNetwork: true}}, nil, fake); got != "" {
		t.Errorf("no pod to probe from: %q", got)
	}
}
