package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// pairFixture measures from a client pod to a server pod with one tool: the workload shared by
// baseline and p2p (and, later, the Service scenarios with a Service address as target).
type pairFixture struct {
	cl             cluster.Cluster
	client, server cluster.Pod
	target         string
	drv            driver.Driver
	spec           driver.Spec
	cpus           [2]int
	srv            cluster.Process
	pods           []string // to delete on Close
	services       []string // to delete on Close
	policies       []string // to delete on Close
	// setup are figures of the case's setup (time to program Services and policies, rule and
	// set counts from cl.Programmed), added to every trial's metrics: they are conditions of
	// each trial, and the summary then shows them beside the measurements.
	setup map[string]float64
}

// pin prefixes argv with taskset so placement on this small machine is never left to chance.
func pin(cpu int, argv []string) []string {
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// udpLen is the largest datagram payload (up to iperf3's 1448 default) that fits the pod MTU
// unfragmented; the backend reports its pod MTU in Info.
func udpLen(cl cluster.Cluster) int {
	if mtu, ok := cl.Info()["pod_mtu"].(int); ok && mtu > 0 && mtu-28 < driver.DefaultLen {
		return mtu - 28
	}
	return driver.DefaultLen
}

// netperfDataPort is the fixed data port for netperf, so the data connection can cross a
// Service or policy that opens only known ports.
const netperfDataPort = 12866

// startPair starts the server for c.Protocol in the server pod and returns a fixture. pods
// are deleted on Close (and on error).
func startPair(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options, client, server cluster.Pod, pods []string) (_ *pairFixture, err error) {
	f := &pairFixture{cl: cl, client: client, server: server, target: server.IP, cpus: opt.CPUs, pods: pods}
	defer func() {
		if err != nil {
			_ = f.Close(context.Background())
		}
	}()
	if f.drv, err = driver.For(c.Protocol); err != nil {
		return nil, err
	}
	port := driver.ServerPort(f.drv.Name())
	f.spec = driver.Spec{Protocol: c.Protocol, Target: f.target, Port: port, MSS: driver.DefaultLen, UDPLen: udpLen(cl)}
	if f.drv.Name() == "netperf" {
		f.spec.DataPort = netperfDataPort
	}
	f.srv, err = cl.Start(ctx, server.Name, pin(opt.CPUs[1], f.drv.ServerCommand(port)), cluster.Ready{TCPPort: port})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Trial runs the client once and adds node CPU figures to the tool's metrics.
func (f *pairFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	spec := f.spec
	spec.DurationS = durationS
	argv := pin(f.cpus[0], f.drv.Command(spec))
	tctx, cancel := context.WithTimeout(ctx, time.Duration(durationS+30)*time.Second)
	defer cancel()
	before, cpuErr := f.cl.NodeCPU(ctx, f.client.Node)
	res, err := f.cl.Exec(tctx, f.client.Name, argv)
	after, cpuErr2 := f.cl.NodeCPU(ctx, f.client.Node)
	if err != nil {
		return Measurement{Raw: res.Stdout}, fmt.Errorf("%s: %w", f.drv.Name(), err)
	}
	m, perr := f.drv.Parse(res.Stdout, spec)
	if perr != nil {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg != "" {
			perr = fmt.Errorf("%w (stderr: %s)", perr, msg)
		}
		return Measurement{Raw: append(res.Stdout, res.Stderr...)}, perr
	}
	if res.ExitCode != 0 {
		return Measurement{Raw: res.Stdout}, fmt.Errorf("%s exited %d: %s", f.drv.Name(), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if cpuErr == nil && cpuErr2 == nil {
		busy, sirq := cluster.Busy(before, after)
		m["cpu_node_busy_pct"], m["cpu_node_softirq_pct"] = busy, sirq
		m["cpu_node_steal_pct"] = cluster.StealPct(before, after)
	}
	if spec.Protocol == "udp" {
		m["udp_payload_bytes"] = float64(spec.UDPLen)
	}
	for k, v := range f.setup {
		m[k] = v
	}
	return Measurement{Metrics: m, Raw: res.Stdout}, nil
}

// Close stops the server and deletes the pods.
func (f *pairFixture) Close(ctx context.Context) error {
	var errs []error
	if f.srv != nil {
		errs = append(errs, f.srv.Stop())
	}
	if len(f.services) > 0 {
		errs = append(errs, f.cl.DeleteServices(ctx, f.services))
	}
	if len(f.policies) > 0 {
		errs = append(errs, f.cl.DeleteNetworkPolicies(ctx, f.policies))
	}
	if len(f.pods) > 0 {
		errs = append(errs, f.cl.DeletePods(ctx, f.pods))
	}
	return errors.Join(errs...)
}

// placeNodes picks the client and server nodes for a placement.
func placeNodes(ctx context.Context, cl cluster.Cluster, placement string) (string, string, error) {
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return "", "", err
	}
	if len(nodes) == 0 {
		return "", "", errors.New("cluster has no nodes")
	}
	switch placement {
	case "intra":
		return nodes[0].Name, nodes[0].Name, nil
	case "inter":
		if len(nodes) < 2 {
			return "", "", cluster.Unsupported("inter-node placement needs 2 nodes, cluster has %d", len(nodes))
		}
		return nodes[0].Name, nodes[1].Name, nil
	}
	return "", "", fmt.Errorf("unknown placement %q (valid: intra, inter)", placement)
}

// createPair creates a client and a server pod for a placement.
func createPair(ctx context.Context, cl cluster.Cluster, placement string, hostNetwork bool) (cluster.Pod, cluster.Pod, error) {
	cn, sn, err := placeNodes(ctx, cl, placement)
	if err != nil {
		return cluster.Pod{}, cluster.Pod{}, err
	}
	labels := func(role string) map[string]string { return map[string]string{"app": "cnibench", "role": role} }
	client, err := cl.CreatePod(ctx, cluster.PodSpec{Name: "client", Node: cn, Labels: labels("client"), HostNetwork: hostNetwork})
	if err != nil {
		return cluster.Pod{}, cluster.Pod{}, err
	}
	server, err := cl.CreatePod(ctx, cluster.PodSpec{Name: "server", Node: sn, Labels: labels("server"), HostNetwork: hostNetwork, Server: true})
	if err != nil {
		_ = cl.DeletePod(ctx, client.Name)
		return cluster.Pod{}, cluster.Pod{}, err
	}
	return client, server, nil
}
