package lab

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

var _ cluster.CounterReader = (*Lab)(nil)

// DataplaneCounters reads the packet counters the data plane's parts keep in each node (parts
// implementing dataplane.Counting: the polycube provider's per-cube packets, drops and
// decisions; the eBPF load balancer's, forwarding's and policy engine's), by node name; nil
// when no part keeps any. The counters are cumulative: a caller that wants a trial's figures
// reads them before and after it.
func (l *Lab) DataplaneCounters() (map[string]map[string]uint64, error) {
	if !l.dp.Attach.PodNetwork() {
		return nil, nil
	}
	var parts []dataplane.Counting
	for _, p := range []any{l.dp.Attach, l.dp.Overlay, l.dp.Proxy, l.dp.Policy} {
		if c, ok := p.(dataplane.Counting); ok {
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	out := map[string]map[string]uint64{}
	for _, n := range l.nodes {
		all := map[string]uint64{}
		for _, c := range parts {
			m, err := c.Counters(l.view(n))
			if err != nil {
				return nil, fmt.Errorf("counters of %s: %w", n.name, err)
			}
			for k, v := range m {
				all[k] = v
			}
		}
		out[n.name] = all
	}
	return out, nil
}
