package lab

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/nf"
	_ "github.com/cnibench/cnibench/internal/nf/kinds" // every network-function kind
)

var _ cluster.Chainer = (*Lab)(nil)

// Chain implements cluster.Chainer: the client and server pods are two namespaces on the first
// node joined through spec.Length network functions, each its own namespace with two veths
// (seed 000's chains; nothing of the preset's pod network is involved), MTU = the underlay MTU.
// Deleting the client or the server pod removes the network functions. The chain comes back
// paused (its polling NFs stopped: nf.Pauser).
func (l *Lab) Chain(ctx context.Context, spec cluster.ChainSpec) (cluster.Pod, cluster.Pod, cluster.ChainControl, error) {
	kind, err := nf.Get(spec.NF)
	if err != nil {
		return cluster.Pod{}, cluster.Pod{}, nil, cluster.BadInput("%v", err)
	}
	if err := kind.Usable(); err != nil {
		return cluster.Pod{}, cluster.Pod{}, nil, cluster.Unsupported("network function %s: %v", spec.NF, err)
	}
	var ports []nf.Port
	for _, p := range spec.Ports {
		ports = append(ports, nf.PortOf(p.Protocol, p.Port))
	}
	l.mu.Lock()
	if err := l.freeNames(spec.Client, spec.Server); err != nil {
		l.mu.Unlock()
		return cluster.Pod{}, cluster.Pod{}, nil, err
	}
	l.chainSeq++
	seq := strconv.Itoa(l.chainSeq)
	node := l.nodes[0].name
	c := &pod{Pod: cluster.Pod{Name: spec.Client, Node: node}, ns: l.cfg.Prefix + "-p-" + spec.Client}
	s := &pod{Pod: cluster.Pod{Name: spec.Server, Node: node}, ns: l.cfg.Prefix + "-p-" + spec.Server}
	l.pods[spec.Client], l.pods[spec.Server] = c, s
	l.mu.Unlock()
	fail := func(err error) (cluster.Pod, cluster.Pod, cluster.ChainControl, error) {
		_ = l.DeletePod(context.WithoutCancel(ctx), spec.Client)
		_ = l.DeletePod(context.WithoutCancel(ctx), spec.Server)
		return cluster.Pod{}, cluster.Pod{}, nil, fmt.Errorf("%s chain of %d: %w", spec.NF, spec.Length, err)
	}
	for _, p := range []*pod{c, s} {
		if err := createNS(p.ns); err != nil {
			return fail(err)
		}
	}
	ch, err := nf.BuildChain(ctx, nf.ChainSpec{
		Kind: kind, Length: spec.Length, Rules: spec.Rules, Ports: ports, Client: c.ns, Server: s.ns,
		NFName: func(i int) string { return l.cfg.Prefix + "-nf" + seq + "-" + strconv.Itoa(i) },
		Dir:    filepath.Join(TempDir(l.cfg.Prefix), "chain"+seq),
		BPFDir: filepath.Join(l.StateDir(), "bpf"+seq),
		MTU:    l.cfg.MTU, CPU: nfCPU(spec.CPUs),
	})
	if err != nil {
		return fail(err)
	}
	l.mu.Lock()
	c.IP, s.IP = ch.ClientIP.String(), ch.ServerIP.String()
	l.chains[spec.Client], l.chains[spec.Server] = ch, ch
	l.mu.Unlock()
	if err := ch.Pause(); err != nil {
		return fail(err)
	}
	return c.Pod, s.Pod, ch, nil
}

// nfCPU is the CPU a polling network function gets: the first that is neither the client's
// nor the server's, or any (-1) on a host without one.
func nfCPU(cpus [2]int) int {
	for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
		if cpu != cpus[0] && cpu != cpus[1] {
			return cpu
		}
	}
	return -1
}

// closeChain removes the network functions of the chain pod name belongs to (if any).
func (l *Lab) closeChain(name string) error {
	l.mu.Lock()
	ch := l.chains[name]
	for k, v := range l.chains {
		if v == ch {
			delete(l.chains, k)
		}
	}
	l.mu.Unlock()
	if ch == nil {
		return nil
	}
	return ch.Close()
}

// closeChains removes every chain's network functions.
func (l *Lab) closeChains() error {
	l.mu.Lock()
	var names []string
	for k := range l.chains {
		names = append(names, k)
	}
	l.mu.Unlock()
	var errs []error
	for _, n := range names {
		errs = append(errs, l.closeChain(n))
	}
	return errors.Join(errs...)
}
