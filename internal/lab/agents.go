package lab

import (
	"context"
	"fmt"
	"strings"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cpupin"
)

// A node's agents (its proxy's and its policy engine's programming: rendering, and the
// iptables-restore, nft transaction or map updates that apply it) run on one CPU, the node's:
// node i on the i-th of the CPUs this process may use (round robin), skipping those a pod of
// the lab holds exclusively. On a real cluster a node's kube-proxy takes CPU time from that
// node's pods only. Here every node shares the host's CPUs, and the kernel's part of a
// programming runs without being preempted for as long as it takes (this kernel is built
// without preemption: CONFIG_PREEMPT_NONE): an nftables transaction that adds a jump at
// 10,000 Services checks the whole table for loops, about 25 ms. Two nodes programmed on
// whatever CPUs the scheduler picks can take both CPUs of a 2-CPU host for that long, and a
// pod on one node then waits for the other node's programming: the change scenario's
// prober, pinned to CPU 0, sent no connection attempt for 12-17 ms during such commits, so a
// change looked slower on the node that had already obeyed it.

// agentCPUs are the CPUs node agents may run on (those of the process when the lab came up).
func agentCPUs() []int {
	cpus, err := cpupin.Allowed()
	if err != nil {
		return nil
	}
	return cpus
}

// agentCPU is node i's agents' CPU, -1 (anywhere) when every CPU is held by a pod or the
// lab does not know its CPUs.
func (l *Lab) agentCPU(i int) int {
	l.cpus.mu.Lock()
	defer l.cpus.mu.Unlock()
	var free []int
	for _, c := range l.agentCPUs {
		if l.cpus.held[c] == "" {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		return -1
	}
	return free[i%len(free)]
}

// agentsDo runs fn(i) for every node i at once, each as the node's agent: on its CPU.
func (l *Lab) agentsDo(fn func(i int) error) error {
	return cluster.Parallel(context.Background(), len(l.nodes), len(l.nodes), func(i int) error {
		return cpupin.Run(l.agentCPU(i), func() error { return fn(i) })
	})
}

// agentFacts says where the node agents run (Facts): "node0:0 node1:1".
func (l *Lab) agentFacts() string {
	parts := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		cpu := "any"
		if c := l.agentCPU(i); c >= 0 {
			cpu = fmt.Sprint(c)
		}
		parts[i] = n.name + ":" + cpu
	}
	return strings.Join(parts, " ")
}
