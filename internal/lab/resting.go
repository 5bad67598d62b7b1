package lab

import (
	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

var _ cluster.Resting = (*Lab)(nil)

// Wake wakes every node's parts that rest between trials (dataplane.Resting); nothing when the
// data plane has none.
func (l *Lab) Wake() error { return l.resting(dataplane.Resting.Wake) }

// Rest lets them rest again.
func (l *Lab) Rest() error { return l.resting(dataplane.Resting.Rest) }

func (l *Lab) resting(fn func(dataplane.Resting, dataplane.Node) error) error {
	for _, p := range []any{l.dp.Attach, l.dp.Overlay, l.dp.Proxy, l.dp.Policy} {
		r, ok := p.(dataplane.Resting)
		if !ok {
			continue
		}
		for _, n := range l.nodes {
			if err := fn(r, l.view(n)); err != nil {
				return err
			}
		}
	}
	return nil
}
