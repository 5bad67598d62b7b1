package kube

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/image"
)

// An answering pod runs the tools image's `cnibench answer` as its container's command, its
// port declared once and probed for readiness.
func TestAnswerPod(t *testing.T) {
	c := newCluster(t, twoNodes(), Config{})
	p := c.podObject(cluster.PodSpec{Name: "ep1", Node: "worker-a", AnswerPort: 8080, Ports: []cluster.ContainerPort{{Name: "answer", Port: 8080, Protocol: "tcp"}}})
	ct := p.Spec.Containers[0]
	want := []string{image.SelfPath, "answer", "--port", "8080"}
	if !slices.Equal(ct.Command, want) {
		t.Errorf("command %q, want %q", ct.Command, want)
	}
	if len(ct.Ports) != 1 || ct.ReadinessProbe == nil || ct.ReadinessProbe.TCPSocket.Port.IntValue() != 8080 || ct.ReadinessProbe.PeriodSeconds != 1 {
		t.Errorf("ports %+v, readiness %+v", ct.Ports, ct.ReadinessProbe)
	}
	if p := c.podObject(cluster.PodSpec{Name: "ep2", Node: "worker-a", AnswerPort: 9000}); len(p.Spec.Containers[0].Ports) != 1 || p.Spec.Containers[0].Ports[0].ContainerPort != 9000 {
		t.Errorf("undeclared answer port: %+v", p.Spec.Containers[0].Ports)
	}
	if _, err := c.CreatePods(context.Background(), []cluster.PodSpec{{Name: "x", Node: "worker-a", Silent: true, AnswerPort: 8080}}); err == nil || !strings.Contains(err.Error(), "answer port") {
		t.Errorf("a silent answering pod: %v", err)
	}
}

// waitEvents polls the track until it has n events.
func waitEvents(t *testing.T, tr cluster.EndpointTrack, n int) []cluster.EndpointEvent {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs := tr.Events()
		if len(evs) >= n || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The track sees, from when it starts: a pod the Service selects turning Ready with an
// address, the Service's EndpointSlices listing it (the union of their ready addresses), the
// pod's deletion beginning and the slices dropping it; pods the Service does not select, and
// a slice update that leaves the set as it was, are not events. Stop ends the watches.
func TestTrackEndpoints(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{})
	ns := c.Namespace()
	svc := c.serviceObject(cluster.ServiceSpec{Name: "web", Selector: map[string]string{"role": "endpoint"}, Ports: []cluster.ServicePort{{Port: 80, Protocol: "tcp"}}})
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, uid, ip string, ready bool, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Labels: labels}, Status: corev1.PodStatus{PodIP: ip}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		return p
	}
	sel := map[string]string{"role": "endpoint", RunLabel: LabelValue(c.cfg.RunID)}
	slice := func(name string, addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4}
		yes := true
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
		}
		return s
	}
	// Before the track: one ready endpoint.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod("ep0", "u0", "10.244.1.2", true, sel), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("web-a", "10.244.1.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.TrackEndpoints(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	steps := []func() error{
		func() error { // not selected: no event
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod("other", "u9", "10.244.1.9", true, map[string]string{"role": "client"}), metav1.CreateOptions{})
			return err
		},
		func() error { // created not ready, then ready
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod("ep1", "u1", "", false, sel), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Pods(ns).Update(ctx, pod("ep1", "u1", "10.244.1.3", true, sel), metav1.UpdateOptions{})
			return err
		},
		func() error { // a second slice lists it
			_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("web-b", "10.244.1.3"), metav1.CreateOptions{})
			return err
		},
		func() error { // the same set again
			_, err := cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice("web-b", "10.244.1.3"), metav1.UpdateOptions{})
			return err
		},
		func() error { // deletion begins
			p := pod("ep1", "u1", "10.244.1.3", true, sel)
			now := metav1.Now()
			p.DeletionTimestamp = &now
			_, err := cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			return err
		},
		func() error {
			return cs.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-b", metav1.DeleteOptions{})
		},
		func() error { return cs.CoreV1().Pods(ns).Delete(ctx, "ep1", metav1.DeleteOptions{}) },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond) // the watches deliver in order per kind, not across kinds
	}
	evs := waitEvents(t, tr, 4)
	tr.Stop()
	tr.Stop()
	var got []string
	for _, e := range evs {
		got = append(got, e.Kind+" "+e.IP+" "+strings.Join(e.Endpoints, ",")+" "+e.Node)
		if e.At.Before(start) || e.At.After(time.Now()) {
			t.Errorf("event %+v stamped outside the test", e)
		}
	}
	want := []string{
		"pod-ready 10.244.1.3  ",
		"endpoints  10.244.1.2,10.244.1.3 ",
		"pod-deleting 10.244.1.3  ",
		"endpoints  10.244.1.2 ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
	if _, err := c.TrackEndpoints(ctx, "nope"); err == nil {
		t.Error("a track of a Service that does not exist")
	}
}
