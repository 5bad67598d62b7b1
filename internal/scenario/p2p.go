package scenario

import (
	"context"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// p2p: pod to pod, intra and inter node (seed 001 §5.2.1).
type p2p struct{}

func init() { register(p2p{}) }

func (p2p) Name() string { return "p2p" }

func (p2p) Info() Info {
	return Info{
		Summary:           "pod to pod, intra and inter node (seed 001 §5.2.1)",
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        []string{"intra", "inter"},
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
	}
}

func (p2p) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	client, server, err := createPair(ctx, cl, c.Placement, false)
	if err != nil {
		return nil, err
	}
	return startPair(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
}
