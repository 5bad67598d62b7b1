package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// p2s: pod to Service to pod, intra and inter node (seed 001 §5.2.2): the client reaches the
// server through a ClusterIP Service; every connection of the tool crosses it (iperf3's
// control and data connections, netperf's control and fixed data port, UDP too).
type p2s struct{}

func init() { Register(p2s{}) }

func (p2s) Name() string { return "p2s" }

func (p2s) Info() Info {
	return Info{
		Summary:           "pod to Service to pod, intra and inter node (seed 001 §5.2.2)",
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        []string{"intra", "inter"},
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
		Params:            append([]string{"services", "proxy"}, workloadParams...),
		Check:             checkWorkload,
		Service:           always,
	}
}

// extraPort is where the endpoints of extra Services answer (the lab's silent pods answer
// HTTP there with their own address).
const extraPort = 8080

// extraServices creates n Services beyond the measured ones, each with its own endpoint: a
// silent pod declaring extraPort (seed 001 loads the cluster with 1..10,000 Services). It
// returns the pods and Services created, for deletion, and how long programming the Services
// took (from the create call to every Service being ready).
func extraServices(ctx context.Context, cl cluster.Cluster, n int) (pods, services []string, programMS float64, err error) {
	if n <= 0 {
		return nil, nil, 0, nil
	}
	specs, svcs := ServicesWithEndpoints(n, "extra", map[string]string{"app": "cnibench", "role": "extra"}, extraPort)
	made, err := cl.CreatePods(ctx, specs)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%d endpoint pods of extra Services: %w", n, err)
	}
	for _, p := range made {
		pods = append(pods, p.Name)
	}
	start := time.Now()
	out, err := cl.CreateServices(ctx, svcs)
	if err != nil {
		return nil, nil, 0, errors.Join(fmt.Errorf("%d extra Services: %w", n, err), cl.DeletePods(context.WithoutCancel(ctx), pods))
	}
	programMS = float64(time.Since(start).Microseconds()) / 1000
	for _, s := range out {
		services = append(services, s.Name)
	}
	return pods, services, programMS, nil
}

// servicePorts are the ports a tool's server needs through a Service, for a trial of streams
// streams: netperf's data port of each instance (driver.Instances).
func servicePorts(drv driver.Driver, streams int) []cluster.ServicePort {
	tool := drv.Name()
	port := driver.ServerPort(tool)
	if driver.HasDataPort(drv) {
		out := []cluster.ServicePort{{Name: tool + "-ctl", Port: port, Protocol: "tcp"}}
		for i, s := range driver.Instances(drv, driver.Spec{DataPort: netperfDataPort, Streams: streams}) {
			suffix := ""
			if i > 0 {
				suffix = strconv.Itoa(i)
			}
			out = append(out, cluster.ServicePort{Name: tool + "-tcp" + suffix, Port: s.DataPort, Protocol: "tcp"},
				cluster.ServicePort{Name: tool + "-udp" + suffix, Port: s.DataPort, Protocol: "udp"})
		}
		return out
	}
	return []cluster.ServicePort{{Name: tool + "-tcp", Port: port, Protocol: "tcp"}, {Name: tool + "-udp", Port: port, Protocol: "udp"}}
}

func (p2s) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	client, server, err := createPair(ctx, cl, opt, c.Placement, false)
	if err != nil {
		return nil, err
	}
	return throughService(ctx, cl, c, opt, client, server, []string{client.Name, server.Name})
}

// throughService puts c.Services-1 extra Services and then a Service selecting server in cl,
// starts the server and returns a fixture whose client targets the Service's address; pods
// (the client's and server's) are deleted on Close and on error.
func throughService(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options, client, server cluster.Pod, pods []string) (Fixture, error) {
	drv, err := driver.For(c.Protocol)
	if err != nil {
		return nil, errors.Join(err, cl.DeletePods(context.WithoutCancel(ctx), pods))
	}
	// The extra Services first: the measured one is then programmed with (and, in kube-proxy's
	// iptables layout, ordered after) all of them.
	extraPods, extras, extraMS, err := extraServices(ctx, cl, c.Services-1)
	if err != nil {
		return nil, errors.Join(err, cl.DeletePods(context.WithoutCancel(ctx), pods))
	}
	pods = append(pods, extraPods...)
	start := time.Now()
	svc, err := cluster.CreateService(ctx, cl, cluster.ServiceSpec{Name: objName(opt, "server"), Selector: server.Labels, Ports: servicePorts(drv, c.Streams)})
	if err != nil {
		return nil, errors.Join(err, cl.DeleteServices(context.WithoutCancel(ctx), extras), cl.DeletePods(context.WithoutCancel(ctx), pods))
	}
	svcMS := float64(time.Since(start).Microseconds()) / 1000
	f, err := startPair(ctx, cl, c, opt, client, server, pods)
	if err != nil {
		_ = cl.DeleteServices(context.WithoutCancel(ctx), append(extras, svc.Name))
		return nil, err
	}
	f.services = append(extras, svc.Name)
	f.target, f.spec.Target = svc.ClusterIP, svc.ClusterIP
	f.setup = setupMetrics(ctx, cl, map[string]float64{"services_program_ms": extraMS + svcMS, "service_program_ms": svcMS})
	return f, nil
}

// setupMetrics merges what the backend reports as programmed with the setup timings.
func setupMetrics(ctx context.Context, cl cluster.Cluster, timings map[string]float64) map[string]float64 {
	out := cl.Programmed(ctx)
	if out == nil {
		out = map[string]float64{}
	}
	for k, v := range timings {
		out[k] = v
	}
	return out
}
