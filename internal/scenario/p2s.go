package scenario

import (
	"context"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// p2s: pod to Service to pod, intra and inter node (seed 001 §5.2.2): the client reaches the
// server through a ClusterIP Service; every connection of the tool crosses it (iperf3's
// control and data connections, netperf's control and fixed data port, UDP too).
type p2s struct{}

func init() { register(p2s{}) }

func (p2s) Name() string { return "p2s" }

func (p2s) Info() Info {
	return Info{
		Summary:           "pod to Service to pod, intra and inter node (seed 001 §5.2.2)",
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        []string{"intra", "inter"},
		Protocols:         driver.Protocols(),
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
	}
}

// servicePorts are the ports a tool's server needs through a Service.
func servicePorts(tool string) []cluster.ServicePort {
	port := driver.ServerPort(tool)
	if tool == "netperf" {
		return []cluster.ServicePort{
			{Name: "netperf-ctl", Port: port, Protocol: "tcp"},
			{Name: "netperf-tcp", Port: netperfDataPort, Protocol: "tcp"},
			{Name: "netperf-udp", Port: netperfDataPort, Protocol: "udp"},
		}
	}
	return []cluster.ServicePort{{Name: tool + "-tcp", Port: port, Protocol: "tcp"}, {Name: tool + "-udp", Port: port, Protocol: "udp"}}
}

func (p2s) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (Fixture, error) {
	drv, err := driver.For(c.Protocol)
	if err != nil {
		return nil, err
	}
	client, server, err := createPair(ctx, cl, c.Placement, false)
	if err != nil {
		return nil, err
	}
	pods := []string{client.Name, server.Name}
	svc, err := cl.CreateService(ctx, cluster.ServiceSpec{Name: "server", Selector: server.Labels, Ports: servicePorts(drv.Name())})
	if err != nil {
		_ = cl.DeletePods(context.WithoutCancel(ctx), pods)
		return nil, err
	}
	f, err := startPair(ctx, cl, c, opt, client, server, pods)
	if err != nil {
		_ = cl.DeleteService(context.WithoutCancel(ctx), svc.Name)
		return nil, err
	}
	f.services = append(f.services, svc.Name)
	f.target, f.spec.Target = svc.ClusterIP, svc.ClusterIP
	return f, nil
}
