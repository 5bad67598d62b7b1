package scenario

import (
	"context"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// The paths between a pod and its nodes' own network that the peers measure besides pod to
// pod (Cilium's pod-to-host and host-to-pod, Kubernetes perf-tests' hairpin): a host-network
// endpoint is a pod on the node's network (the lab: the node's namespace).

// p2h: a pod to a server on the host network of its own node (intra) or of the other (inter).
type p2h struct{}

// h2p: a client on the host network of a node to a pod on the same node (intra) or the other
// (inter).
type h2p struct{}

// hairpin: a pod to a Service whose only endpoint is the pod itself. The connection leaves
// the pod for the Service's address and comes back to it: kube-proxy masquerades it (the
// KUBE-SEP chain's rule for the endpoint's own address) so that the reply returns through the
// node; eBPF load balancers translate the source to a service-loopback address or rewrite the
// connect() to the pod itself.
type hairpin struct{}

func init() {
	Register(p2h{})
	Register(h2p{})
	Register(hairpin{})
}

func (p2h) Name() string     { return "p2h" }
func (h2p) Name() string     { return "h2p" }
func (hairpin) Name() string { return "hairpin" }

// pathInfo is what the path scenarios share: every protocol a pair measures, parallel streams
// and message sizes.
func pathInfo(summary string, placements []string, params ...string) Info {
	return Info{
		Summary:           summary,
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        placements,
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
		Params:            append(params, workloadParams...),
		Check:             checkWorkload,
	}
}

func (p2h) Info() Info {
	i := pathInfo("pod to a host-network server, on the pod's node or the other (Cilium's pod-to-host)", []string{"intra", "inter"})
	// The server listens on the node's own ports.
	i.Exclusive = func(result.Case) bool { return true }
	return i
}

func (h2p) Info() Info {
	return pathInfo("host-network client to a pod, on its node or the other (Cilium's host-to-pod)", []string{"intra", "inter"})
}

func (hairpin) Info() Info {
	i := pathInfo("a pod to a Service whose only endpoint is itself (Kubernetes perf-tests' hairpin)", []string{"intra"}, "services", "proxy")
	i.Service = always
	return i
}

func (p2h) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	client, server, err := createPairOn(ctx, cl, opt, c.Placement, false, true)
	if err != nil {
		return nil, err
	}
	return startPair(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
}

func (h2p) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	client, server, err := createPairOn(ctx, cl, opt, c.Placement, true, false)
	if err != nil {
		return nil, err
	}
	return startPair(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
}

// Setup makes one pod, the server, which is also the client: its Service has it as the only
// endpoint.
func (hairpin) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	node, _, err := placeNodes(ctx, cl, "intra")
	if err != nil {
		return nil, err
	}
	pod, err := cluster.CreatePod(ctx, cl, cluster.PodSpec{Name: objName(opt, "server"), Node: node, Labels: fixtureLabels(opt, "server"), Server: true})
	if err != nil {
		return nil, err
	}
	return throughService(ctx, cl, c, opt, pod, pod, []string{pod.Name})
}
