package kube

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cnibench/cnibench/internal/cluster"
)

var _ cluster.EndpointTracker = (*Cluster)(nil)

// TrackEndpoints implements cluster.EndpointTracker with two watches in the run's namespace,
// both established before it returns: the pods the Service selects (a pod's Ready condition
// turning true with an address, and its deletion timestamp appearing) and the Service's
// EndpointSlices (label kubernetes.io/service-name), whose ready addresses are the endpoint
// set the cluster's proxies program. Each event is stamped when this host receives it: the
// controllers and the proxies get the same objects from the same API server. A watch that
// ends is resumed from the last version seen; when that is too old, the state is listed again
// and what changed meanwhile is stamped when it is noticed.
func (c *Cluster) TrackEndpoints(ctx context.Context, service string) (cluster.EndpointTrack, error) {
	svc, err := c.cs.CoreV1().Services(c.ns).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", service, err)
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, fmt.Errorf("service %s has no selector: its endpoints are not the cluster's to follow", service)
	}
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	podSel := labels.SelectorFromSet(svc.Spec.Selector)
	t := &kubeTrack{cancel: cancel, podSel: podSel, service: service, pods: map[string]trackedPod{}, slices: map[string][]string{}}
	podOpts := metav1.ListOptions{LabelSelector: podSel.String()}
	sliceOpts := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service}
	pods := watched{
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			l, err := c.cs.CoreV1().Pods(c.ns).List(ctx, podOpts)
			if err != nil {
				return nil, "", err
			}
			return asObjects(l.Items), l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.cs.CoreV1().Pods(c.ns).Watch(ctx, resumeAt(podOpts, rv))
		},
		sync:   t.syncPods,
		handle: t.pod,
	}
	eps := watched{
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			l, err := c.cs.DiscoveryV1().EndpointSlices(c.ns).List(ctx, sliceOpts)
			if err != nil {
				return nil, "", err
			}
			return asObjects(l.Items), l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.cs.DiscoveryV1().EndpointSlices(c.ns).Watch(ctx, resumeAt(sliceOpts, rv))
		},
		sync:   t.syncSlices,
		handle: t.slice,
	}
	for _, w := range []watched{pods, eps} {
		wi, rv, err := w.start(ctx, false)
		if err != nil {
			cancel()
			t.wg.Wait()
			return nil, fmt.Errorf("service %s: watch its endpoints: %w", service, err)
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			w.run(tctx, wi, rv)
		}()
	}
	return t, nil
}

// watched is one kind of object a track follows: how to list and watch it, what to make of a
// listing (sync; quiet: the state it starts from, no events) and of one watch event.
type watched struct {
	list   func(ctx context.Context) ([]runtime.Object, string, error)
	watch  func(ctx context.Context, rv string) (watch.Interface, error)
	sync   func(objs []runtime.Object, at time.Time, quiet bool)
	handle func(typ watch.EventType, obj runtime.Object, at time.Time)
}

// start lists the objects, syncs the track with them and watches from the listing's version.
func (w watched) start(ctx context.Context, loud bool) (watch.Interface, string, error) {
	objs, rv, err := w.list(ctx)
	if err != nil {
		return nil, "", err
	}
	w.sync(objs, time.Now(), !loud)
	wi, err := w.watch(ctx, rv)
	return wi, rv, err
}

// run consumes the watch until ctx ends, resuming it from the last version seen when it ends
// and listing again when that version is gone.
func (w watched) run(ctx context.Context, wi watch.Interface, rv string) {
	for {
		relist := w.consume(ctx, wi, &rv)
		wi.Stop()
		for ctx.Err() == nil {
			var err error
			if relist {
				wi, rv, err = w.start(ctx, true)
			} else {
				wi, err = w.watch(ctx, rv)
			}
			if err == nil {
				break
			}
			relist = true
			select {
			case <-ctx.Done():
			case <-time.After(pollInterval):
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// consume takes the watch's events in until it ends or ctx does; true when the watch ended
// with an error (the version it started from is gone, say).
func (w watched) consume(ctx context.Context, wi watch.Interface, rv *string) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return false
			}
			at := time.Now()
			if ev.Type == watch.Error {
				return true
			}
			if m, err := metaRV(ev.Object); err == nil && m != "" {
				*rv = m
			}
			if ev.Type != watch.Bookmark {
				w.handle(ev.Type, ev.Object, at)
			}
		}
	}
}

func metaRV(obj runtime.Object) (string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("%T has no metadata", obj)
	}
	return m.GetResourceVersion(), nil
}

// kubeTrack is a Service's endpoint track on a cluster.
type kubeTrack struct {
	podSel  labels.Selector // the Service's pods
	service string          // the Service's name, its EndpointSlices' label
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once

	mu     sync.Mutex
	events []cluster.EndpointEvent
	pods   map[string]trackedPod // by pod UID
	slices map[string][]string   // slice name -> its ready addresses
	set    []string              // the endpoint set last recorded
}

// trackedPod is what a track knows of a pod.
type trackedPod struct {
	ip              string
	ready, deleting bool
}

func (t *kubeTrack) Events() []cluster.EndpointEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.events)
}

func (t *kubeTrack) Stop() {
	t.once.Do(func() {
		t.cancel()
		t.wg.Wait()
	})
}

// podReady says whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pod takes one pod event in.
func (t *kubeTrack) pod(typ watch.EventType, obj runtime.Object, at time.Time) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !t.podSel.Matches(labels.Set(p.Labels)) { // (the watch selects them already)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.podLocked(p, typ == watch.Deleted, at, false)
}

// podLocked updates what the track knows of p and records what changed (nothing when quiet).
func (t *kubeTrack) podLocked(p *corev1.Pod, gone bool, at time.Time, quiet bool) {
	uid := string(p.UID)
	old := t.pods[uid]
	cur := trackedPod{ip: p.Status.PodIP, ready: podReady(p) && p.Status.PodIP != "", deleting: gone || p.DeletionTimestamp != nil}
	if cur.ip == "" {
		cur.ip = old.ip
	}
	if !quiet && cur.ready && !old.ready && !cur.deleting {
		t.events = append(t.events, cluster.EndpointEvent{Kind: cluster.EndpointPodReady, At: at, IP: cur.ip})
	}
	if !quiet && cur.deleting && !old.deleting {
		t.events = append(t.events, cluster.EndpointEvent{Kind: cluster.EndpointPodDeleting, At: at, IP: cur.ip})
	}
	if gone {
		delete(t.pods, uid)
		return
	}
	t.pods[uid] = cur
}

// syncPods takes a listing of the pods in: each listed pod as an update, each known pod not
// listed as gone.
func (t *kubeTrack) syncPods(objs []runtime.Object, at time.Time, quiet bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && t.podSel.Matches(labels.Set(p.Labels)) {
			seen[string(p.UID)] = true
			t.podLocked(p, false, at, quiet)
		}
	}
	for uid, old := range t.pods {
		if !seen[uid] {
			t.podLocked(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Status: corev1.PodStatus{PodIP: old.ip}}, true, at, quiet)
		}
	}
}

// slice takes one EndpointSlice event in.
func (t *kubeTrack) slice(typ watch.EventType, obj runtime.Object, at time.Time) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] != t.service {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if typ == watch.Deleted {
		delete(t.slices, s.Name)
	} else {
		t.slices[s.Name] = readyAddresses([]discoveryv1.EndpointSlice{*s})
	}
	t.setLocked(at, false)
}

// syncSlices takes a listing of the Service's EndpointSlices in.
func (t *kubeTrack) syncSlices(objs []runtime.Object, at time.Time, quiet bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slices = map[string][]string{}
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok && s.Labels[discoveryv1.LabelServiceName] == t.service {
			t.slices[s.Name] = readyAddresses([]discoveryv1.EndpointSlice{*s})
		}
	}
	t.setLocked(at, quiet)
}

// setLocked records the endpoint set when it changed.
func (t *kubeTrack) setLocked(at time.Time, quiet bool) {
	seen := map[string]bool{}
	set := []string{}
	for _, addrs := range t.slices {
		for _, a := range addrs {
			if !seen[a] {
				seen[a] = true
				set = append(set, a)
			}
		}
	}
	sort.Strings(set)
	if slices.Equal(set, t.set) && t.set != nil {
		return
	}
	t.set = set
	if !quiet {
		t.events = append(t.events, cluster.EndpointEvent{Kind: cluster.EndpointsSet, At: at, Endpoints: slices.Clone(set)})
	}
}

// asObjects are a list's items as the objects a watch delivers.
func asObjects[E any, P interface {
	*E
	runtime.Object
}](items []E) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = P(&items[i])
	}
	return out
}

// resumeAt is a watch's options resuming at resource version rv, with bookmarks.
func resumeAt(o metav1.ListOptions, rv string) metav1.ListOptions {
	o.ResourceVersion, o.AllowWatchBookmarks = rv, true
	return o
}
