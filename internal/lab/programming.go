package lab

// What Service and policy programming share: the figures of the last programming (Programmed).

import (
	"context"
)

// record keeps figures of the last programming for Programmed.
func (l *Lab) record(m map[string]float64) {
	l.progMu.Lock()
	defer l.progMu.Unlock()
	for k, v := range m {
		l.programmed[k] = v
	}
}

// Programmed implements cluster.Cluster: what the last Service and policy programming
// installed in each node, and how long it took.
func (l *Lab) Programmed(ctx context.Context) map[string]float64 {
	l.progMu.Lock()
	defer l.progMu.Unlock()
	out := make(map[string]float64, len(l.programmed))
	for k, v := range l.programmed {
		out[k] = v
	}
	return out
}
