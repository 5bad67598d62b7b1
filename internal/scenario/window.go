package scenario

import (
	"context"
	"fmt"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
)

// window is a trial's measuring window: what every backend gives (the busy, softirq and
// steal shares of the node a trial samples) and, where the backend accounts
// (cluster.Accounter) and the run wants it, where the CPU time and the packets went per CPU,
// role and hop. Open it right before the tool runs and close it right after.
type window struct {
	cl      cluster.Cluster
	node    string
	before  cluster.CPUSample
	cpuErr  error
	acct    cluster.AccountWindow
	acctErr error
	closed  bool
}

// openWindow opens a window on node's CPU; ask says whether to ask for the backend's
// accounting (and its per-hop latency), with the trial's client and server pods (either may be
// "") to order the path between them.
func openWindow(ctx context.Context, cl cluster.Cluster, node string, ask accountAsk, client, server string) *window {
	w := &window{cl: cl, node: node}
	if a, ok := cl.(cluster.Accounter); ok && ask.on {
		w.acct, w.acctErr = a.Account(ctx, cluster.AccountPath{Client: client, Server: server, Trace: ask.trace, Amplify: ask.amplify})
	}
	w.before, w.cpuErr = cl.NodeCPU(ctx, node)
	return w
}

// close ends the window: it adds the node's busy, softirq and steal shares to m (when both
// samples were read) and returns the accounting (nil when the backend has none or the run
// turned it off; a failure to account is a note in it, never a failed trial).
func (w *window) close(ctx context.Context, m map[string]float64) *account.Trial {
	w.closed = true
	after, err := w.cl.NodeCPU(ctx, w.node)
	if w.cpuErr == nil && err == nil && m != nil {
		busy, sirq := cluster.Busy(w.before, after)
		m["cpu_node_busy_pct"], m["cpu_node_softirq_pct"] = busy, sirq
		m["cpu_node_steal_pct"] = cluster.StealPct(w.before, after)
	}
	switch {
	case w.acctErr != nil:
		return &account.Trial{Notes: []string{fmt.Sprintf("not accounted: %v", w.acctErr)}}
	case w.acct == nil:
		return nil
	}
	a, err := w.acct.Close(ctx)
	if err != nil {
		return &account.Trial{Notes: []string{fmt.Sprintf("not accounted: %v", err)}}
	}
	return a
}

// abandon closes a window a failed trial did not close (deferred after openWindow: a backend's
// accounting window samples until it is closed).
func (w *window) abandon(ctx context.Context) {
	if !w.closed && w.acct != nil {
		w.closed = true
		_, _ = w.acct.Close(ctx)
	}
}
