package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/result"
)

// pairFixture measures from a client pod to a server pod with one tool: the workload shared by
// baseline and p2p (and the Service scenarios, with a Service address as target).
type pairFixture struct {
	trialFrame
	server   cluster.Pod
	target   string
	drv      driver.Driver
	spec     driver.Spec
	srv      cluster.Process
	pods     []string // to delete on Close
	services []string // to delete on Close
	policies []string // to delete on Close
	// fragments is how many IPv4 fragments each UDP datagram takes (case label fragment
	// allow, a message larger than one packet); 0 otherwise.
	fragments int
}

// udpLen is the largest datagram payload (up to iperf3's 1448 default) that fits the pod MTU
// unfragmented; the backend reports its pod MTU in its Facts.
func udpLen(cl cluster.Cluster) int {
	if mtu := cl.Facts().PodMTU; mtu > 0 && mtu-28 < driver.DefaultLen {
		return mtu - 28
	}
	return driver.DefaultLen
}

// podMTU names the pod MTU udpLen went by.
func podMTU(cl cluster.Cluster) string {
	if mtu := cl.Facts().PodMTU; mtu > 0 {
		return strconv.Itoa(mtu)
	}
	return "unknown (1500 assumed)"
}

// netperfDataPort is the fixed data port for netperf, so the data connection can cross a
// Service or policy that opens only known ports.
const netperfDataPort = 12866

// startPair starts the server for c.Protocol in the server pod and returns a fixture. pods
// are deleted on Close (and on error).
func startPair(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options, client, server cluster.Pod, pods []string) (_ *pairFixture, err error) {
	f := &pairFixture{trialFrame: newFrame(cl, opt, client), server: server, target: server.IP, pods: pods}
	f.serverName = server.Name
	defer func() {
		if err != nil {
			_ = f.Close(context.Background())
		}
	}()
	if f.drv, err = driver.For(c.Protocol); err != nil {
		return nil, err
	}
	port := driver.ServerPort(f.drv.Name())
	f.spec = driver.Spec{Protocol: c.Protocol, Target: f.target, Port: port, MSS: driver.DefaultLen, UDPLen: udpLen(cl),
		Streams: c.Streams, MsgSize: c.MsgSize}
	if driver.HasDataPort(f.drv) {
		f.spec.DataPort = netperfDataPort
	}
	if udpMessages(c.Protocol) && c.MsgSize > 0 {
		if c.MsgSize > f.spec.UDPLen {
			if c.Fragment != result.FragmentAllow {
				return nil, cluster.Unsupported("a UDP message of %d bytes does not fit one packet at pod MTU %s (at most %d bytes): "+
					"give msg-size %d or less, or fragment allow to send the datagrams fragmented", c.MsgSize, podMTU(cl), f.spec.UDPLen, f.spec.UDPLen)
			}
			f.fragments = fragmentsPerDatagram(cl.Facts().PodMTU, c.MsgSize)
		}
		if c.Protocol == "udp" {
			f.spec.UDPLen = c.MsgSize
		}
	}
	f.serverCmd = pin(opt.CPUs[1], f.drv.ServerCommand(port))
	f.srv, err = cl.Start(ctx, server.Name, f.serverCmd, cluster.Ready{TCPPort: port})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Trial runs the client once (its instances at once, for a tool that runs one stream per
// process) and adds node CPU figures to the tool's metrics.
func (f *pairFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	spec := f.spec
	spec.DurationS = durationS
	m, err := measureSpec(ctx, &f.trialFrame, f.drv, spec, f.srv, time.Duration(durationS+30)*time.Second)
	if m.Metrics != nil && f.fragments > 0 {
		m.Metrics["udp_fragments_per_datagram"] = float64(f.fragments)
	}
	return m, err
}

// udpMessages tells whether protocol sends its messages as UDP datagrams.
func udpMessages(protocol string) bool { return protocol == "udp" || protocol == "udprr" }

// fragmentsPerDatagram is how many IPv4 fragments a UDP datagram of payload bytes takes at
// mtu (each fragment but the last carries a multiple of 8 bytes); 0 when mtu is unknown.
func fragmentsPerDatagram(mtu, payload int) int {
	if mtu <= 28 {
		return 0
	}
	per := (mtu - 20) &^ 7
	return (payload + 8 + per - 1) / per
}

// measureSpec measures spec with drv against server srv: one client run per instance
// (driver.Instances), their figures merged by the driver. A server whose test processes linger
// past the client's test (driver.Linger) has them ended once the test length has passed and
// they sit idle, where the backend can see them (cluster.IdleChildSignaler).
func measureSpec(ctx context.Context, fr *trialFrame, drv driver.Driver, spec driver.Spec, srv cluster.Process, timeout time.Duration) (Measurement, error) {
	if sig, ok := driver.Linger(drv, spec); ok {
		if s, ok := srv.(cluster.IdleChildSignaler); ok {
			defer endLinger(ctx, s, sig, time.Duration(spec.DurationS)*time.Second)()
		}
	}
	ins := driver.Instances(drv, spec)
	argvs := make([][]string, len(ins))
	for i, s := range ins {
		argvs[i] = drv.Command(s)
	}
	read := func(stdouts [][]byte) (driver.Metrics, error) {
		ms := make([]driver.Metrics, len(ins))
		for i, s := range ins {
			m, err := drv.Parse(stdouts[i], s)
			if err != nil {
				if len(ins) > 1 {
					err = fmt.Errorf("instance %d of %d: %w", i+1, len(ins), err)
				}
				return nil, err
			}
			ms[i] = m
		}
		if len(ms) == 1 {
			return ms[0], nil
		}
		md, ok := drv.(driver.MultiDriver)
		if !ok {
			return nil, fmt.Errorf("%s: %d instances but no way to merge them", drv.Name(), len(ms))
		}
		return md.Merge(ms, spec)
	}
	return measure(ctx, fr, drv.Name(), argvs, timeout, read,
		func(m driver.Metrics) (map[string]float64, error) {
			if spec.Protocol == "udp" {
				m["udp_payload_bytes"] = float64(spec.UDPLen)
			}
			return m, nil
		})
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

// workloadParams are the plan keys of a pair's workload: parallel streams and message size.
var workloadParams = []string{"streams", "msg-size", "fragment"}

// checkWorkload rejects streams and message sizes the case's tool cannot run, and fragment
// where there is no UDP message to fragment.
func checkWorkload(c result.Case) error {
	if c.Fragment != "" && (!udpMessages(c.Protocol) || c.MsgSize == 0) {
		return fmt.Errorf("fragment %s applies to udp and udprr cases with a msg-size: put them in a group of their own", c.Fragment)
	}
	return driver.CheckWorkload(c.Protocol, c.Streams, c.MsgSize)
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

// objName is the name of a fixture's pod or Service: base, after the fixture's name when it
// has one (fixtures standing in one cluster at once must not collide).
func objName(opt Options, base string) string {
	if opt.Name == "" {
		return base
	}
	return opt.Name + "-" + base
}

// fixtureLabels are the labels of a fixture's pod in role. A fixture with a name also carries
// it as label "fixture", so its Service selects its own pods, not those of another fixture
// standing in the same cluster with the same role.
func fixtureLabels(opt Options, role string) map[string]string {
	l := map[string]string{"app": "cnibench", "role": role}
	if opt.Name != "" {
		l["fixture"] = opt.Name
	}
	return l
}

// createPair creates a client and a server pod for a placement, both on the host network or
// neither.
func createPair(ctx context.Context, cl cluster.Cluster, opt Options, placement string, hostNetwork bool) (cluster.Pod, cluster.Pod, error) {
	return createPairOn(ctx, cl, opt, placement, hostNetwork, hostNetwork)
}

// createPairOn creates a client and a server pod for a placement, each on the host network
// or not.
func createPairOn(ctx context.Context, cl cluster.Cluster, opt Options, placement string, clientHost, serverHost bool) (cluster.Pod, cluster.Pod, error) {
	cn, sn, err := placeNodes(ctx, cl, placement)
	if err != nil {
		return cluster.Pod{}, cluster.Pod{}, err
	}
	// One call: on a cluster the two pods start at once (a second or two each).
	pods, err := cl.CreatePods(ctx, []cluster.PodSpec{
		{Name: objName(opt, "client"), Node: cn, Labels: fixtureLabels(opt, "client"), HostNetwork: clientHost},
		{Name: objName(opt, "server"), Node: sn, Labels: fixtureLabels(opt, "server"), HostNetwork: serverHost, Server: true}})
	if err != nil {
		return cluster.Pod{}, cluster.Pod{}, err
	}
	return pods[0], pods[1], nil
}

// lingerQuiet is how long a server's test process must sit blocked, without running once,
// after the test length has passed, to count as done: during a test it runs for every
// transaction (tens of microseconds apart), so a test still under way is never that quiet.
const lingerQuiet = 30 * time.Millisecond

// lingerStart is how long after the test length the watch starts: the client's test starts
// once it has set up its control connection (a few milliseconds after the trial starts), so it
// ends that much after the test length; a server process is not taken for done before then.
const lingerStart = 100 * time.Millisecond

// endLinger watches s from the start of a trial of test length d: once d and lingerStart have
// passed, it sends sig to the server's test processes that sit idle, until the returned stop is
// called, which waits for the watcher to end.
func endLinger(ctx context.Context, s cluster.IdleChildSignaler, sig syscall.Signal, d time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(d + lingerStart)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			_, _ = s.SignalIdleChildren(sig, lingerQuiet)
			select {
			case <-ctx.Done():
				return
			case <-time.After(lingerQuiet / 3):
			}
		}
	}()
	return func() { cancel(); <-done }
}
