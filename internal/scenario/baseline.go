package scenario

import (
	"context"
	"fmt"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// baseline: reference points with no CNI at all, so every other result reads as a delta.
// Dataplane "bare" is two namespaces joined by one veth pair (seed 000's 1S1C); "node2node"
// is node to node over the underlay through host-network pods.
type baseline struct{}

func init() { Register(baseline{}) }

func (baseline) Name() string { return result.BaselineScenario }

func (baseline) Info() Info {
	return Info{
		Summary:           "reference points without a CNI: bare veth pair; node to node over the underlay",
		Dataplanes:        []string{"bare", "node2node"},
		DefaultDataplanes: []string{"bare", "node2node"},
		Placements:        []string{"intra", "inter"},
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
		Valid:             func(dp, pl string) bool { return dp != "bare" || pl == "intra" },
		Params:            workloadParams,
		Check:             checkWorkload,
		// node2node's servers listen on the node's own ports.
		Exclusive: func(c result.Case) bool { return c.Dataplane == "node2node" },
	}
}

func (baseline) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	switch c.Dataplane {
	case "bare":
		bp, ok := cl.(cluster.BarePairer)
		if !ok {
			return nil, cluster.Unsupported("baseline bare needs two namespaces joined by one veth pair, which backend %s cannot make", cl.Facts().Backend)
		}
		client, server, err := bp.BarePair(ctx, objName(opt, "client"), objName(opt, "server"))
		if err != nil {
			return nil, err
		}
		return startPair(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
	case "node2node":
		client, server, err := createPair(ctx, cl, opt, c.Placement, true)
		if err != nil {
			return nil, err
		}
		return startPair(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
	}
	return nil, fmt.Errorf("baseline has no dataplane %q (valid: bare, node2node)", c.Dataplane)
}
