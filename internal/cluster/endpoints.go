package cluster

import (
	"context"
	"time"
)

// EndpointTracker is what a backend that can tell when a Service's endpoints change offers (the
// lab, which is its own endpoint controller and proxy; a cluster, through its pods and
// EndpointSlices); a scenario asks for it with a type assertion and reports the case as
// unsupported where the backend lacks it.
type EndpointTracker interface {
	// TrackEndpoints records, from now until Stop, the changes of the named Service's
	// endpoints: when a pod it selects is ready to serve or begins its deletion, and when the
	// control plane holds a new endpoint set.
	TrackEndpoints(ctx context.Context, service string) (EndpointTrack, error)
}

// EndpointTrack is the record of one Service's endpoint changes (see EndpointTracker).
type EndpointTrack interface {
	// Events returns what was seen since the track began, in the order seen.
	Events() []EndpointEvent
	// Stop ends the track.
	Stop()
}

// Kinds of EndpointEvent.
const (
	// EndpointPodReady: a pod the Service selects is ready to serve (an endpoint to add); on
	// a cluster, its Ready condition became true.
	EndpointPodReady = "pod-ready"
	// EndpointPodDeleting: the deletion of a pod the Service selects began (an endpoint to
	// remove); on a cluster, the pod got its deletion timestamp.
	EndpointPodDeleting = "pod-deleting"
	// EndpointsSet: the control plane holds a new endpoint set for the Service: the lab has
	// programmed it in one node's data plane (Node), a cluster's EndpointSlices list it (Node
	// ""; every node's proxy then programs it on its own, out of sight).
	EndpointsSet = "endpoints"
)

// EndpointEvent is one change seen by an EndpointTrack.
type EndpointEvent struct {
	Kind string
	// At is when the backend saw it, on this host's clock (a watch's receipt on a cluster).
	At time.Time
	// IP is the pod's address (pod events).
	IP string
	// Endpoints are the Service's endpoint addresses after the change, sorted (EndpointsSet).
	Endpoints []string
	// Node is the node whose data plane holds Endpoints; "" when the set is the cluster's.
	Node string
}
