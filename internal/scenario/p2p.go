package scenario

import (
	"context"
	"errors"
	"fmt"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// p2p: pod to pod, intra and inter node (seed 001 §5.2.1).
type p2p struct{}

func init() { Register(p2p{}) }

func (p2p) Name() string { return "p2p" }

func (p2p) Info() Info {
	return Info{
		Summary:           "pod to pod, intra and inter node (seed 001 §5.2.1)",
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        []string{"intra", "inter"},
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
		Params:            append([]string{"pods"}, workloadParams...),
		Check:             checkWorkload,
	}
}

func (p2p) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	client, server, err := createPair(ctx, cl, opt, c.Placement, false)
	if err != nil {
		return nil, err
	}
	pods := []string{client.Name, server.Name}
	// c.Pods silent pods, beside the client and the server, only load the data plane (seed
	// 001's silent pods; the kube backend may put them on kwok fake nodes).
	if n := c.Pods; n > 0 {
		silent, err := cl.CreatePods(ctx, SilentPods(n, "silent", map[string]string{"app": "cnibench", "role": "silent"}))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%d silent pods: %w", n, err), cl.DeletePods(context.WithoutCancel(ctx), pods))
		}
		for _, p := range silent {
			pods = append(pods, p.Name)
		}
	}
	return startPair(ctx, cl, c, opt, client, server, pods)
}
