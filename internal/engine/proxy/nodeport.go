package proxy

// hasNodePorts says whether any of svcs has a NodePort. The renderings add their NodePort
// objects (KUBE-NODEPORTS; nodeport-ips, service-nodeports, ...) only then, so that a
// ClusterIP-only rendering stays what it was before NodePorts existed here; kube-proxy
// declares them always, empty.
func hasNodePorts(svcs []Service) bool {
	for _, s := range svcs {
		if s.NodePort != 0 {
			return true
		}
	}
	return false
}

// nodePortFate is what becomes, on one node, of NodePort traffic that no rule
// short-circuits.
type nodePortFate int

const (
	// nodePortServed: an endpoint takes it.
	nodePortServed nodePortFate = iota
	// nodePortDropped: externalTrafficPolicy Local and no endpoint on this node. Traffic
	// from pods and from the node itself still reaches the Service's other endpoints (the
	// external chain short-circuits it); the rest is dropped, as kube-proxy does (the
	// client's load balancer is expected to stop sending it here: health check NodePort).
	nodePortDropped
	// nodePortRejected: the Service has no endpoints at all; rejected, so clients fail at
	// once.
	nodePortRejected
)

// nodePort is how one node serves a Service's NodePort: kube-proxy's CategorizeEndpoints
// and the hasEndpoints / hasExternalEndpoints decisions of its proxiers, the one owner of
// "which endpoints serve this node" for both renderings.
//
// Both write it the same way, as kube-proxy does. externalTrafficPolicy Cluster: mark for
// masquerade (the endpoint may be on another node, whose reply must come back through this
// one) and balance over all endpoints. Local: traffic from pods (the cluster CIDR) is
// treated as if it came back in from an external load balancer and goes to any endpoint; so
// does traffic from the node itself, masqueraded (its source is one of the node's own
// addresses, possibly the very one it connected to); the rest goes to the local endpoints, keeping the client's
// address, or, if there are none, falls through to the drop.
type nodePort struct {
	fate nodePortFate
	// local are the endpoints on the node, by address, for externalTrafficPolicy Local
	// (the KUBE-SVL- / local- chain); nil for Cluster, which balances over all endpoints.
	local []Endpoint
}

// ExternalEndpoints are the endpoints that serve s's NodePort on node: with
// externalTrafficPolicy Local the node's own (none: the traffic is dropped), with Cluster all,
// sorted. (kube-proxy's Local also sends traffic from pods and from the node to any endpoint;
// engines that follow it use nodePortOn.)
func (s Service) ExternalEndpoints(node string) []Endpoint {
	if np := s.nodePortOn(node); s.ExternalLocal {
		return np.local
	}
	return s.sortedEndpoints()
}

// nodePortOn says how node serves s's NodePort. An endpoint is local when its Node is node;
// with node "" none is.
func (s Service) nodePortOn(node string) nodePort {
	var np nodePort
	if s.ExternalLocal {
		for _, e := range s.sortedEndpoints() {
			if node != "" && e.Node == node {
				np.local = append(np.local, e)
			}
		}
	}
	switch {
	case len(s.Endpoints) == 0:
		np.fate = nodePortRejected
	case s.ExternalLocal && len(np.local) == 0:
		np.fate = nodePortDropped
	}
	return np
}
