package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/nf"
	_ "github.com/cnibench/cnibench/internal/nf/kinds" // every network-function kind
)

var _ cluster.Chainer = (*Cluster)(nil)

// secondaryNetworkGroup is the API group of Multus' NetworkAttachmentDefinitions (the
// de-facto standard for secondary pod interfaces).
const secondaryNetworkGroup = "k8s.cni.cncf.io"

// Chain implements cluster.Chainer on the cluster network: the client, the server and
// spec.Length network-function pods on the run's first node, chained at layer 3 by host routes
// inside the pods (nf.PodRoutes: the pods of a node share one layer-2 segment on a bridge CNI).
// The NF pods forward (nf.PodSysctls, which the kubelet must allow as unsafe sysctls) and every
// pod of the chain has NET_ADMIN (routes, the NF's rules). Only the kinds that run in a pod
// (nf.PodKind) can: the transparent ones need a second interface per pod. Before it returns, the
// chain is checked to be crossed (nf.CheckPodChain); a cluster where it is not reports the kind
// as unsupported with the reason. Deleting the client or the server deletes the NF pods.
func (c *Cluster) Chain(ctx context.Context, spec cluster.ChainSpec) (cluster.Pod, cluster.Pod, cluster.ChainControl, error) {
	none := func(err error) (cluster.Pod, cluster.Pod, cluster.ChainControl, error) {
		return cluster.Pod{}, cluster.Pod{}, nil, err
	}
	kind, err := nf.Get(spec.NF)
	if err != nil {
		return none(cluster.BadInput("%v", err))
	}
	pk, ok := kind.(nf.PodKind)
	if !ok {
		return none(cluster.Unsupported("network function %s is %s: on a cluster it needs a second interface in every pod of the chain, %s", spec.NF, kind.Layer(), c.secondaryNetworks(ctx)))
	}
	if spec.Length < 1 {
		return none(cluster.BadInput("chain length %d: want 1 or more", spec.Length))
	}
	var ports []nf.Port
	for _, p := range spec.Ports {
		ports = append(ports, nf.PortOf(p.Protocol, p.Port))
	}
	node := c.nodes[0].Name
	names := []string{spec.Client}
	for i := 1; i <= spec.Length; i++ {
		names = append(names, spec.Client+"-nf"+strconv.Itoa(i))
	}
	names = append(names, spec.Server)
	specs := make([]cluster.PodSpec, len(names))
	isNF := map[string]bool{}
	for i, n := range names {
		specs[i] = cluster.PodSpec{Name: n, Node: node}
		isNF[n] = i > 0 && i < len(names)-1
	}
	pods, err := c.createPods(ctx, specs, func(s cluster.PodSpec, p *corev1.Pod) { chainPod(p, isNF[s.Name]) })
	if err != nil {
		return none(fmt.Errorf("%s chain of %d: %w", spec.NF, spec.Length, err))
	}
	c.mu.Lock()
	c.chains[spec.Client], c.chains[spec.Server] = names, names
	c.mu.Unlock()
	fail := func(err error) (cluster.Pod, cluster.Pod, cluster.ChainControl, error) {
		_ = c.DeletePods(context.WithoutCancel(ctx), []string{spec.Client})
		return none(fmt.Errorf("%s chain of %d: %w", spec.NF, spec.Length, err))
	}
	hops := make([]nf.PodHop, len(pods))
	for i, p := range pods {
		ip, err := netip.ParseAddr(p.IP)
		if err != nil {
			return fail(fmt.Errorf("pod %s: address %q: %v", p.Name, p.IP, err))
		}
		hops[i] = nf.PodHop{IP: ip, Run: c.podRunner(p.Name)}
	}
	client, server, nfs := hops[0], hops[len(hops)-1], hops[1:len(hops)-1]
	if _, err := nf.StartPodChain(ctx, pk, ports, spec.Rules, client, server, nfs); err != nil {
		return fail(err)
	}
	if err := nf.CheckPodChain(ctx, pk, client, server, nfs[0]); err != nil {
		if errors.Is(err, nf.ErrBypassed) {
			err = cluster.Unsupported("%v (the chain needs the pods of a node on one layer-2 segment, as a bridge CNI puts them)", err)
		}
		return fail(err)
	}
	return pods[0], pods[len(pods)-1], podChain{}, nil
}

// chainPod gives a pod of a chain NET_ADMIN (its routes; an NF's rules) and an NF pod the
// sysctls that make it forward.
func chainPod(p *corev1.Pod, isNF bool) {
	for i := range p.Spec.Containers {
		ct := &p.Spec.Containers[i]
		if ct.SecurityContext == nil {
			ct.SecurityContext = &corev1.SecurityContext{}
		}
		if ct.SecurityContext.Capabilities == nil {
			ct.SecurityContext.Capabilities = &corev1.Capabilities{}
		}
		ct.SecurityContext.Capabilities.Add = append(ct.SecurityContext.Capabilities.Add, "NET_ADMIN")
	}
	if !isNF {
		return
	}
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	values := nf.PodSysctls()
	for _, name := range nf.PodSysctlNames() {
		p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: name, Value: values[name]})
	}
}

// podRunner runs a command in the pod's container through exec, stdin fed to it; a non-zero
// exit is an error with the start of its standard error.
func (c *Cluster) podRunner(pod string) nf.PodRunner {
	return func(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
		res, err := c.execInput(ctx, pod, stdin, argv)
		if err != nil {
			return nil, err
		}
		if res.ExitCode != 0 {
			msg := strings.TrimSpace(string(res.Stderr))
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			return res.Stdout, fmt.Errorf("%s in pod %s: exit code %d: %s", strings.Join(argv, " "), pod, res.ExitCode, msg)
		}
		return res.Stdout, nil
	}
}

// secondaryNetworks says why this cluster gives pods no second interface.
func (c *Cluster) secondaryNetworks(ctx context.Context) string {
	groups, err := c.cs.Discovery().ServerGroups()
	if err != nil {
		return fmt.Sprintf("and the cluster's API groups could not be read (%v)", err)
	}
	for _, g := range groups.Groups {
		if g.Name == secondaryNetworkGroup {
			return "and cnibench does not attach chains through Multus (" + secondaryNetworkGroup + ") yet"
		}
	}
	return "which this cluster has no provider for (no " + secondaryNetworkGroup + " API: Multus is not installed)"
}

// withChains adds to names the other pods of the chains they belong to.
func (c *Cluster) withChains(names []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(names)
	for _, n := range names {
		for _, m := range c.chains[n] {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// podChain is the ChainControl of a chain of pods: the kinds that run in pods do not poll, so
// pausing has nothing to stop.
type podChain struct{}

func (podChain) Resume() error { return nil }
func (podChain) Pause() error  { return nil }
