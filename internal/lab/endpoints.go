package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/connprobe"
)

// The lab is its own endpoint controller, as Kubernetes' EndpointSlice controller and a node's
// proxy are together: a pod that a Service's selector picks becomes one of its endpoints when
// the pod is created, and leaves when the pod is deleted, whenever that happens (before this,
// a Service kept the endpoints it was created with).
//
//   - CreatePods attaches the pods, then adds each to the Services that select it and
//     programs the Services again in every node, once for the call (pods made before their
//     Services, as p2s makes its 10,000 silent pods, change nothing: no Service selects them
//     yet).
//   - DeletePods first takes the pods out of their Services and programs them again, once for
//     the call, while the pods still serve: a deleted pod serves through its termination grace
//     period, and a Service's proxy stops sending new connections to it within that period (a
//     pod's preStop hook is made for it). Then the pods go. As kube-proxy does, the lab then
//     deletes the UDP conntrack entries of connections that the proxy translated to a removed
//     endpoint (a UDP flow would otherwise keep its translation while its packets come);
//     TCP connections are left alone, as kube-proxy leaves them.
//
// How each proxy engine programs the change is its own: the iptables and nftables engines
// render every Service and apply the whole rendering again (kube-proxy's full resync: one
// iptables-restore, one nft transaction per node), the eBPF engines replace the Service
// table's entries in place. A Service's endpoint track (TrackEndpoints) records when a pod is
// ready or begins its deletion and when each node's data plane was programmed with the new set.

// endpointCandidate says whether a pod can be a Service endpoint: it has an address on the
// pod network.
func endpointCandidate(p *pod) bool {
	return p != nil && !p.HostNetwork && !p.External && p.IP != ""
}

// followCreated adds the created pods to the endpoints of the Services whose selector picks
// them and programs the Services again when one changed.
func (l *Lab) followCreated(made []cluster.Pod) error {
	l.mu.Lock()
	var pods []*pod
	for _, m := range made {
		if p := l.pods[m.Name]; endpointCandidate(p) {
			pods = append(pods, p)
		}
	}
	changed := false
	for _, s := range l.services {
		for _, p := range pods {
			if !cluster.Selects(s.spec.Selector, p.Labels) {
				continue
			}
			if i, found := slices.BinarySearch(s.eps, p.IP); !found {
				s.eps = slices.Insert(slices.Clone(s.eps), i, p.IP)
				changed = true
			}
		}
	}
	for tr := range l.tracks {
		for _, p := range pods {
			if sel := tr.selector(l); cluster.Selects(sel, p.Labels) {
				tr.add(cluster.EndpointEvent{Kind: cluster.EndpointPodReady, At: p.readyAt, IP: p.IP})
			}
		}
	}
	l.mu.Unlock()
	if !changed {
		return nil
	}
	return l.programServices()
}

// removedEndpoint is an endpoint taken out of a Service.
type removedEndpoint struct {
	svc *service
	ip  string
}

// followDeleted takes the pods about to be deleted out of their Services' endpoints and, when
// one changed, programs the Services again and deletes the UDP conntrack entries translated to
// the removed endpoints. at is when the deletion began.
func (l *Lab) followDeleted(names []string, at time.Time) error {
	l.mu.Lock()
	var gone []removedEndpoint
	for _, name := range names {
		p := l.pods[name]
		if !endpointCandidate(p) {
			continue
		}
		for _, s := range l.services {
			if i, found := slices.BinarySearch(s.eps, p.IP); found {
				s.eps = slices.Delete(slices.Clone(s.eps), i, i+1)
				gone = append(gone, removedEndpoint{s, p.IP})
			}
		}
		for tr := range l.tracks {
			if cluster.Selects(tr.selector(l), p.Labels) {
				tr.add(cluster.EndpointEvent{Kind: cluster.EndpointPodDeleting, At: at, IP: p.IP})
			}
		}
	}
	l.mu.Unlock()
	if len(gone) == 0 {
		return nil
	}
	return errors.Join(l.programServices(), l.forgetUDP(gone))
}

// forgetUDP deletes, in every node, the conntrack entries of UDP connections that the proxy
// translated to a removed endpoint: to the Service's ClusterIP or one of its NodePorts, the
// reply coming from the endpoint (kube-proxy's conntrack cleanup for UDP endpoints).
func (l *Lab) forgetUDP(gone []removedEndpoint) error {
	var filters []netlink.CustomConntrackFilter
	for _, g := range gone {
		ep := net.ParseIP(g.ip)
		for _, p := range g.svc.spec.Ports {
			if p.Protocol != "udp" {
				continue
			}
			f := &netlink.ConntrackFilter{}
			if err := errors.Join(f.AddProtocol(17), f.AddIP(netlink.ConntrackOrigDstIP, net.ParseIP(g.svc.ip)),
				f.AddIP(netlink.ConntrackReplySrcIP, ep)); err != nil {
				return err
			}
			filters = append(filters, f)
			if p.NodePort != 0 {
				f := &netlink.ConntrackFilter{}
				if err := errors.Join(f.AddProtocol(17), f.AddPort(netlink.ConntrackOrigDstPort, uint16(p.NodePort)),
					f.AddIP(netlink.ConntrackReplySrcIP, ep)); err != nil {
					return err
				}
				filters = append(filters, f)
			}
		}
	}
	if len(filters) == 0 {
		return nil
	}
	var errs []error
	for _, n := range l.nodes {
		err := withHandle(n.ns, func(h *netlink.Handle) error {
			_, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.FAMILY_V4, filters...)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("delete UDP conntrack entries of removed endpoints in %s: %w", n.name, err))
		}
	}
	return errors.Join(errs...)
}

// answerIn opens a TCP port in the pod's namespace that answers every connection with the
// address it was reached at, one line, and closes it (cluster.PodSpec.AnswerPort).
func answerIn(ns string, port int) (net.Listener, error) {
	var ln net.Listener
	err := inNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("answer port %d: %w", port, err)
	}
	go func() { _ = connprobe.Answer(ln) }()
	return ln, nil
}

// closeAnswers closes every pod's answer listener.
func (l *Lab) closeAnswers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pods {
		if p.answer != nil {
			_ = p.answer.Close()
		}
	}
}

// endpointTrack is a Service's endpoint track (cluster.EndpointTrack).
type endpointTrack struct {
	service string
	mu      sync.Mutex
	events  []cluster.EndpointEvent
	last    map[string][]string // node -> the endpoint set last programmed there
}

var _ cluster.EndpointTracker = (*Lab)(nil)

// TrackEndpoints implements cluster.EndpointTracker: pod events as endpoint following sees
// them (ready: the pod attached and answering; deleting: the DeletePods call), and the
// endpoint set each node's data plane holds once its programming returned.
func (l *Lab) TrackEndpoints(ctx context.Context, service string) (cluster.EndpointTrack, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.services[service]
	if !ok {
		return nil, fmt.Errorf("no service %q in this lab", service)
	}
	tr := &endpointTrack{service: service, last: map[string][]string{}}
	for _, n := range l.nodes {
		tr.last[n.name] = slices.Clone(s.eps)
	}
	l.tracks[tr] = true
	return &trackHandle{l: l, tr: tr}, nil
}

// selector is the tracked Service's selector (nil once it is gone). Caller holds l.mu.
func (tr *endpointTrack) selector(l *Lab) map[string]string {
	if s := l.services[tr.service]; s != nil {
		return s.spec.Selector
	}
	return nil
}

func (tr *endpointTrack) add(ev cluster.EndpointEvent) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, ev)
}

// programmed records that node holds eps for the Service now, when that is new there.
func (tr *endpointTrack) programmed(node string, eps []string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if slices.Equal(tr.last[node], eps) {
		return
	}
	tr.last[node] = eps
	tr.events = append(tr.events, cluster.EndpointEvent{Kind: cluster.EndpointsSet, At: at, Endpoints: eps, Node: node})
}

// trackedEndpoints snapshots the endpoint set of every tracked Service (caller holds l.mu):
// what a programming starting now renders.
func (l *Lab) trackedEndpoints() map[*endpointTrack][]string {
	if len(l.tracks) == 0 {
		return nil
	}
	out := make(map[*endpointTrack][]string, len(l.tracks))
	for tr := range l.tracks {
		var eps []string
		if s := l.services[tr.service]; s != nil {
			eps = slices.Clone(s.eps)
		}
		out[tr] = eps
	}
	return out
}

// trackHandle is what TrackEndpoints returns.
type trackHandle struct {
	l    *Lab
	tr   *endpointTrack
	once sync.Once
}

func (h *trackHandle) Events() []cluster.EndpointEvent {
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	return slices.Clone(h.tr.events)
}

func (h *trackHandle) Stop() {
	h.once.Do(func() {
		h.l.mu.Lock()
		delete(h.l.tracks, h.tr)
		h.l.mu.Unlock()
	})
}
