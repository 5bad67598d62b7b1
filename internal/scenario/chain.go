package scenario

import (
	"context"
	"fmt"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// chain: a service-function chain, client -> N network functions -> server (seed 000 ch. 5),
// each NF a firewall that lets the measured flow through and drops the rest. The measurement is
// the pair's (a single TCP stream, RR latency); its baseline is the bare veth pair.
type chain struct{}

func init() { Register(chain{}) }

func (chain) Name() string { return "chain" }

func (chain) Info() Info {
	return Info{
		Summary:           "service-function chain: client -> N network functions (firewalls) -> server (seed 000 ch. 5)",
		Dataplanes:        []string{"bare"},
		DefaultDataplanes: []string{"bare"},
		Placements:        []string{"intra"},
		Protocols:         []string{"tcp", "udp", "rr", "udprr"},
		DefaultProtocols:  []string{"tcp", "rr"},
		Params:            []string{"nf", "chain-length", "rules"},
		DefaultStrs:       map[string][]string{"nf": {"route-iptables"}},
		DefaultInts:       map[string][]int{"chain-length": {1}, "rules": {10}},
		// A chain's NFs may poll a CPU (DPDK, OVS): no other fixture stands beside it.
		Exclusive: func(result.Case) bool { return true },
		Check: func(c result.Case) error {
			if c.NF == "" || c.ChainLength < 1 || c.Rules < 1 {
				return fmt.Errorf("a chain needs nf, chain-length >= 1 and rules >= 1")
			}
			drv, err := driver.For(c.Protocol)
			if err != nil {
				return err
			}
			if need := 2 * len(servicePorts(drv, 1)); c.Rules < need {
				return fmt.Errorf("rules %d: the %s flow alone needs %d allow rules (each port both ways); set rules to %d or more", c.Rules, c.Protocol, need, need)
			}
			return nil
		},
	}
}

func (chain) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	ch, ok := cl.(cluster.Chainer)
	if !ok {
		return nil, cluster.Unsupported("backend %s cannot build service-function chains yet", cl.Facts().Backend)
	}
	drv, err := driver.For(c.Protocol)
	if err != nil {
		return nil, err
	}
	client, server, ctl, err := ch.Chain(ctx, cluster.ChainSpec{
		Client: objName(opt, "client"), Server: objName(opt, "server"),
		NF: c.NF, Length: c.ChainLength, Rules: c.Rules, Ports: servicePorts(drv, 1), CPUs: opt.CPUs,
	})
	if err != nil {
		return nil, err
	}
	pf, err := startPair(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
	if err != nil {
		return nil, err
	}
	return &chainFixture{pairFixture: pf, ctl: ctl}, nil
}

// chainFixture runs the pair's trials with the chain resumed, and pauses it after each.
type chainFixture struct {
	*pairFixture
	ctl cluster.ChainControl
}

func (f *chainFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	if err := f.ctl.Resume(); err != nil {
		return Measurement{}, fmt.Errorf("resume the chain: %w", err)
	}
	m, err := f.pairFixture.Trial(ctx, durationS)
	if perr := f.ctl.Pause(); perr != nil && err == nil {
		err = fmt.Errorf("pause the chain: %w", perr)
	}
	return m, err
}
