package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// n2s: from outside the cluster to a NodePort Service to pod (seed 003's external-to-service).
// The client is outside the cluster on the nodes' network (cluster.PodSpec.External) and
// reaches the server pod only through <node address>:<NodePort>; every connection of the tools
// crosses the NodePort: iperf3's control and data connections (UDP too, on the NodePort its
// control connection uses), netperf's control connection and its data connection (on a data
// port that is its own NodePort, see n2sPorts).
//
// Placement says which node's NodePort the client targets: intra, the server's node (the node
// delivers to its own pod); inter, the other node, which forwards to the server's node (with
// externalTrafficPolicy Cluster; with Local that node has no endpoint and drops the traffic by
// design: those cases are skipped with that reason). The client is placed on a node only where
// the backend must put it on one (a real cluster runs it as a host-network pod): on a node other
// than the targeted one, so that its traffic arrives at the targeted node from outside as an
// external client's does (a node's own traffic to its NodePort is handled as local traffic);
// intra: the other node, inter: the server's node. A one-node cluster has no other node.
type n2s struct{}

func init() { Register(n2s{}) }

func (n2s) Name() string { return "n2s" }

// externalTrafficPolicies are n2s's values of the case label externalTrafficPolicy.
var externalTrafficPolicies = []string{"cluster", "local"}

func (n2s) Info() Info {
	return Info{
		Service:           always,
		Summary:           "from outside the cluster to a NodePort Service to pod, externalTrafficPolicy cluster and local, intra and inter node (seed 003)",
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        []string{"intra", "inter"},
		Protocols:         []string{"tcp", "udp", "rr", "crr", "udprr"},
		DefaultProtocols:  []string{"tcp", "udp", "rr", "crr"},
		Params:            []string{"proxy", "external-traffic-policy"},
		DefaultStrs:       map[string][]string{"external-traffic-policy": externalTrafficPolicies},
		Check:             checkN2S,
	}
}

func checkN2S(c result.Case) error {
	if !slices.Contains(externalTrafficPolicies, c.ExternalTrafficPolicy) {
		return fmt.Errorf("external-traffic-policy %q: want one of %s", c.ExternalTrafficPolicy, strings.Join(externalTrafficPolicies, ", "))
	}
	return nil
}

// nodePortBand is where n2s asks for the NodePorts it picks itself (netperf's data port): the
// static band of Kubernetes' default NodePort range (30000-32767), which the API server leaves
// to requests before it allocates from it (KEP-3668: min(max(16, 2768/32), 128) = 86 ports).
const (
	nodePortBandLow  = 30000
	nodePortBandSize = 86
)

// n2sPorts are the ports of the Service for a protocol, the ports of a tool's connections
// only: iperf3's port (TCP; and UDP for udp, which then must have the same NodePort: iperf3
// sends its UDP test to its control connection's port); for netperf its control port and the
// data port in the test's protocol. netperf tells netserver to listen on the data port the
// client connects to (-P ,PORT), so through a NodePort the data port is the NodePort itself:
// the data port is asked for as the Service's port, target port and NodePort at once.
func n2sPorts(protocol string, dataPort int) []cluster.ServicePort {
	switch protocol {
	case "rr", "crr":
		return []cluster.ServicePort{{Name: "netperf-tcp", Port: dataPort, Protocol: "tcp", NodePort: dataPort},
			{Name: "netperf-ctl", Port: driver.ServerPort("netperf"), Protocol: "tcp"}}
	case "udprr":
		return []cluster.ServicePort{{Name: "netperf-udp", Port: dataPort, Protocol: "udp", NodePort: dataPort},
			{Name: "netperf-ctl", Port: driver.ServerPort("netperf"), Protocol: "tcp"}}
	case "udp":
		return []cluster.ServicePort{{Name: "iperf3-tcp", Port: driver.ServerPort("iperf3"), Protocol: "tcp"},
			{Name: "iperf3-udp", Port: driver.ServerPort("iperf3"), Protocol: "udp"}}
	}
	return []cluster.ServicePort{{Name: "iperf3-tcp", Port: driver.ServerPort("iperf3"), Protocol: "tcp"}}
}

// n2sNodes picks, for a placement, the server's node, the node whose NodePort the client
// targets and the node the client is put on (see n2s).
func n2sNodes(ctx context.Context, cl cluster.Cluster, placement string) (server, target, client cluster.Node, err error) {
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return server, target, client, err
	}
	if len(nodes) == 0 {
		return server, target, client, errors.New("cluster has no nodes")
	}
	server, target = nodes[0], nodes[0]
	switch placement {
	case "intra":
	case "inter":
		if len(nodes) < 2 {
			return server, target, client, cluster.Unsupported("inter-node placement needs 2 nodes, cluster has %d", len(nodes))
		}
		target = nodes[1]
	default:
		return server, target, client, fmt.Errorf("unknown placement %q (valid: intra, inter)", placement)
	}
	client = target
	if i := slices.IndexFunc(nodes, func(n cluster.Node) bool { return n.Name != target.Name }); i >= 0 {
		client = nodes[i]
	}
	if target.IP == "" {
		return server, target, client, fmt.Errorf("node %s has no address to reach its NodePorts at", target.Name)
	}
	return server, target, client, nil
}

func (n2s) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (_ Fixture, err error) {
	if err := checkN2S(c); err != nil {
		return nil, err
	}
	drv, err := driver.For(c.Protocol)
	if err != nil {
		return nil, err
	}
	if np, ok := cl.(cluster.NodePortChecker); ok {
		if err := np.NodePorts(); err != nil {
			return nil, err
		}
	}
	local := c.ExternalTrafficPolicy == "local"
	if local && c.Placement == "inter" {
		return nil, cluster.Unsupported("externalTrafficPolicy Local, inter node: the targeted node has no endpoint of the Service and drops NodePort traffic by design (intra measures Local)")
	}
	serverNode, target, clientNode, err := n2sNodes(ctx, cl, c.Placement)
	if err != nil {
		return nil, err
	}
	made, err := cl.CreatePods(ctx, []cluster.PodSpec{
		{Name: objName(opt, "client"), Node: clientNode.Name, Labels: fixtureLabels(opt, "client"), External: true},
		{Name: objName(opt, "server"), Node: serverNode.Name, Labels: fixtureLabels(opt, "server"), Server: true},
	})
	if err != nil {
		return nil, err
	}
	client, server := made[0], made[1]
	f := &pairFixture{trialFrame: newFrame(cl, opt, client), server: server, target: target.IP,
		drv: drv, pods: []string{client.Name, server.Name}}
	f.serverName = server.Name
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close(context.WithoutCancel(ctx)))
		}
	}()

	start := time.Now()
	svc, dataPort, err := createNodePortService(ctx, cl, cluster.ServiceSpec{Name: objName(opt, "server"), Selector: server.Labels,
		NodePort: true, ExternalLocal: local}, c.Protocol)
	if err != nil {
		return nil, err
	}
	svcMS := float64(time.Since(start).Microseconds()) / 1000
	f.services = []string{svc.Name}
	port := driver.ServerPort(drv.Name())
	ctl := nodePortOf(svc, port, "tcp")
	if ctl == 0 {
		return nil, fmt.Errorf("service %s: no NodePort for TCP port %d: %+v", svc.Name, port, svc.Ports)
	}
	if c.Protocol == "udp" {
		if u := nodePortOf(svc, port, "udp"); u != ctl {
			return nil, cluster.Unsupported("iperf3 sends its UDP test to the port of its TCP control connection: the NodePort Service needs one NodePort for TCP and UDP port %d (as Kubernetes gives it), and this cluster gave TCP %d and UDP %d", port, ctl, u)
		}
	}

	// One connection through the NodePort before the trials: a broken path fails the case
	// here, with the address it tried; the server's side of it says what source address the
	// endpoint sees (the client's own, or the node's where the node masqueraded it).
	setup := map[string]float64{"service_program_ms": svcMS}
	src, err := probeNodePort(ctx, cl, client.Name, server.Name, target.IP, ctl, port)
	if err != nil {
		return nil, fmt.Errorf("NodePort %s:%d of node %s (externalTrafficPolicy %s) from the external client %s: %w", target.IP, ctl, target.Name, c.ExternalTrafficPolicy, client.IP, err)
	}
	if src != "" {
		setup["client_ip_preserved"] = 0
		if src == client.IP {
			setup["client_ip_preserved"] = 1
		}
	}

	f.spec = driver.Spec{Protocol: c.Protocol, Target: target.IP, Port: ctl, MSS: driver.DefaultLen, UDPLen: udpLen(cl)}
	if driver.HasDataPort(drv) {
		f.spec.DataPort = dataPort
	}
	f.serverCmd = pin(opt.CPUs[1], drv.ServerCommand(port))
	if f.srv, err = cl.Start(ctx, server.Name, f.serverCmd, cluster.Ready{TCPPort: port}); err != nil {
		return nil, err
	}
	f.setup = setupMetrics(ctx, cl, setup)
	return f, nil
}

// nodePortTries is how many NodePorts of the static band n2s asks for in turn while the
// cluster says the one asked for is taken (by another fixture's Service, say).
const nodePortTries = 16

// createNodePortService creates the NodePort Service of spec with the ports of protocol (see
// n2sPorts). The netperf data port is picked in the static band, from a random place, and the
// next one asked for while the cluster says it is taken. It returns the Service and the data
// port (0 for iperf3).
func createNodePortService(ctx context.Context, cl cluster.Cluster, spec cluster.ServiceSpec, protocol string) (cluster.Service, int, error) {
	first := rand.IntN(nodePortBandSize)
	var err error
	for i := 0; i < nodePortTries; i++ {
		dataPort := nodePortBandLow + (first+i)%nodePortBandSize
		spec.Ports = n2sPorts(protocol, dataPort)
		var svc cluster.Service
		svc, err = cluster.CreateService(ctx, cl, spec)
		if errors.Is(err, cluster.ErrNodePortTaken) {
			continue
		}
		if err != nil {
			return cluster.Service{}, 0, err
		}
		if !slices.ContainsFunc(spec.Ports, func(p cluster.ServicePort) bool { return p.NodePort != 0 }) {
			return svc, 0, nil
		}
		if got := nodePortOf(svc, dataPort, ""); got != dataPort {
			return cluster.Service{}, 0, errors.Join(fmt.Errorf("service %s: asked for NodePort %d for the data port, got %d", spec.Name, dataPort, got),
				cluster.DeleteService(context.WithoutCancel(ctx), cl, svc.Name))
		}
		return svc, dataPort, nil
	}
	return cluster.Service{}, 0, fmt.Errorf("service %s: %d NodePorts asked for in turn were all taken: %w", spec.Name, nodePortTries, err)
}

// nodePortOf is the NodePort of the Service's port number in protocol ("" = any); 0 if none.
func nodePortOf(svc cluster.Service, port int, protocol string) int {
	for _, p := range svc.Ports {
		if p.Port == port && (protocol == "" || p.Protocol == protocol) {
			return p.NodePort
		}
	}
	return 0
}

// probeTries and probeWait bound the connection check: a connection that times out (dropped)
// costs probeTimeoutS, a refused one little; the path is tried again until one gets through.
const (
	probeTries    = 5
	probeTimeoutS = 2
	probeWait     = 500 * time.Millisecond
)

// probeNodePort makes one TCP connection from the client to ip:nodePort, answered in the
// server pod on port by a one-shot listener that writes back `netstat -tn` as the server sees
// it, and returns the source address the server saw ("" when its output does not tell). An
// error says the connection did not get through.
func probeNodePort(ctx context.Context, cl cluster.Cluster, client, server, ip string, nodePort, port int) (string, error) {
	p := strconv.Itoa(port)
	ln, err := cl.Start(ctx, server, []string{"/bin/busybox", "nc", "-l", "-p", p, "-e", "/bin/busybox", "netstat", "-tn"}, cluster.Ready{TCPPort: port})
	if err != nil {
		return "", fmt.Errorf("listener for the check in the server: %w", err)
	}
	defer ln.Stop()
	var last string
	for i := 0; i < probeTries; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(probeWait):
			}
		}
		res, err := cl.Exec(ctx, client, []string{"/bin/busybox", "nc", "-w", strconv.Itoa(probeTimeoutS), ip, strconv.Itoa(nodePort)})
		if err != nil {
			return "", err
		}
		if res.ExitCode == 0 {
			return seenSource(res.Stdout, port), nil
		}
		last = strings.TrimSpace(string(res.Stderr))
		if last == "" {
			last = fmt.Sprintf("nc exited %d", res.ExitCode)
		}
	}
	return "", fmt.Errorf("unreachable after %d tries (%s)", probeTries, last)
}

// seenSource reads `netstat -tn` output for the address connected to local port: the one
// foreign address of the TCP connections to that port ("" when there is none or more than
// one). IPv4-mapped addresses are given as IPv4.
func seenSource(out []byte, port int) string {
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "tcp") || !strings.HasSuffix(f[3], ":"+strconv.Itoa(port)) {
			continue
		}
		i := strings.LastIndexByte(f[4], ':')
		if i < 0 {
			continue
		}
		host := strings.TrimPrefix(f[4][:i], "::ffff:")
		if !slices.Contains(found, host) {
			found = append(found, host)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}
