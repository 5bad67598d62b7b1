package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/param"
	"github.com/cnibench/cnibench/internal/pktengine"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/search"
)

// vnf: a packet-forwarding VNF under orchestration (seed 002 ch. 5-6; the IETF BMWG
// containerized-infrastructure draft). A generator pod sends GTP-U (or plain UDP) frames to a
// load balancer in front of N VNF replicas; each replica forwards them to a receiver pod,
// which accounts for every frame. The load balancer is a Service (the data plane's proxy:
// iptables, nftables, eBPF) or an ingress pod (lb=ingress), the replicas get the case's CPU resources (a limit; CPUs shared
// with the node's other pods or their own), and the placement puts them on the generator's
// (the load balancer's) node, the other node, or both. The generator and the receiver stand on
// the first node.
//
// A trial is one NDR/PDR search (search.MLR: loss targets 0 and 0.005, width 0.005) whose
// trials are runs of the packet engine at a rate; its final trials last the case's duration,
// its first ones a second. The highest rate searched is what the generator offers flat out
// through the Service (measured at set-up), less 5 %: above it a VNF's losses could not be
// told from the generator's limits. An NDR at that rate says the VNFs forward all the
// generator can send. A trial whose generator still falls short of its rate (a busy host)
// counts the frames not sent as lost, and the search says how many trials did.
type vnf struct{}

func init() { Register(vnf{}) }

func (vnf) Name() string { return "vnf" }

// vnfPort is the port the Service, the VNFs and the receiver use: GTP-U's.
const vnfPort = pktengine.GTPPort

// vnfKind is a kind of VNF: the command its replicas run to forward what reaches them on
// vnfPort to the receiver at to ("IP:port"), given the cnibench executable of the pods.
type vnfKind struct {
	name, summary string
	argv          func(self, to string) []string
	// ready is the line the command prints once it forwards ("": it does from its start).
	ready string
	// unsupported are phrases of its error output that mean the pod cannot run this kind (no
	// privilege for it): the case is then skipped with that output, not failed.
	unsupported []string
}

var vnfKinds = map[string]vnfKind{}

func registerVNF(k vnfKind) {
	if _, dup := vnfKinds[k.name]; dup {
		panic("scenario: VNF kind " + k.name + " registered twice")
	}
	vnfKinds[k.name] = k
}

// VNFSummary says what a kind of VNF is ("" for an unknown one).
func VNFSummary(name string) string { return vnfKinds[name].summary }

// VNFKinds lists the kinds of VNF of the vnf scenario, sorted.
func VNFKinds() []string {
	var out []string
	for n := range vnfKinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func init() {
	registerVNF(vnfKind{name: "userspace",
		summary: "seed 002's VNF: a single-threaded user-space UDP forwarder, one system call per datagram each way (cnibench pkt fwd)",
		argv:    fwdArgv})
	registerVNF(vnfKind{name: "kernel",
		summary: "the kernel forwards: IPv4 forwarding and stateless NAT rules in the pod (nftables; cnibench pkt knf) send each datagram on to the receiver from the pod's address; needs CAP_NET_ADMIN in the pod",
		argv: func(self, to string) []string {
			return []string{self, "pkt", "knf", "--port", strconv.Itoa(vnfPort), "--to", to}
		},
		ready:       pktengine.KnfReadyLine,
		unsupported: []string{"CAP_NET_ADMIN", "/proc/sys is read-only", "neither nft nor iptables-restore"}})
	registerVNF(vnfKind{name: "xdp",
		summary: "an XDP program on the pod's interface (generic mode, through a bpf_link) rewrites each datagram for the pod's address towards the receiver and sends it back out with XDP_TX (cnibench pkt xfwd); needs CAP_NET_ADMIN and CAP_BPF in the pod",
		argv: func(self, to string) []string {
			return []string{self, "pkt", "xfwd", "--port", strconv.Itoa(vnfPort), "--to", to}
		},
		ready:       pktengine.XfwdReadyLine,
		unsupported: []string{"CAP_NET_ADMIN", "CAP_BPF"}})
}

// waitReady waits until a VNF process says it forwards (kinds with a ready line). Output that
// says the pod may not run the kind makes the case unsupported.
func (k vnfKind) waitReady(ctx context.Context, proc cluster.Process) error {
	if k.ready == "" {
		return nil
	}
	for deadline := time.Now().Add(readyWait); ; time.Sleep(20 * time.Millisecond) {
		out := proc.Output()
		if bytes.Contains(out, []byte(k.ready)) {
			return nil
		}
		text := excerptLines(strings.TrimSpace(string(out)), 3)
		for _, u := range k.unsupported {
			if bytes.Contains(out, []byte(u)) {
				return cluster.Unsupported("this cluster's pods cannot run it: %s", text)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %s: %s", readyWait, text)
		}
	}
}

// fwdArgv runs the user-space UDP forwarder on vnfPort to the targets in to ("IP:port", or
// several, comma-separated, taken in turn).
func fwdArgv(self, to string) []string {
	return []string{self, "pkt", "fwd", "--port", strconv.Itoa(vnfPort), "--to", to}
}

// vnfSplit is the placement that spreads the replicas over both nodes.
const vnfSplit = "split"

// The load balancers (case label lb): a ClusterIP Service (the data plane's proxy), or an
// ingress: a pod on the generator's node running a user-space UDP load balancer (`cnibench
// pkt fwd` with every replica as a target, taken in turn), as seed 002's Ingress (an nginx
// UDP stream proxy) is.
const (
	vnfService       = "service"
	vnfIngress       = "ingress"
	vnfIngressRemote = "ingress-remote" // the ingress pod on the other node
)

// The vnf scenario's own case parameters (Info.Declares), by key; a case's are read with
// Case.Int and Case.Word.
const (
	pVNF        = "vnf"
	pCPULimit   = "cpu-limit"
	pIsolation  = "cpu-isolation"
	pFrameSize  = "frame-size"
	pLB         = "lb"
	pSearch     = "search"
	pNoisy      = "noisy"
	pNoisyLimit = "noisy-cpu-limit"
)

// vnfParams declares them: a VNF's kind (a variant: "vnf=kernel" right after the protocol),
// each replica's CPU limit and isolation, the frame size, the load balancer, the search, and
// the noisy neighbours beside the replicas (a scale: seed 002's "local calculation").
func vnfParams() []param.Param {
	return []param.Param{
		{Key: pVNF, Label: "vnf", Kind: param.Word, Help: "vnf: VNF kinds to sweep (default userspace)",
			Order: 110, Values: VNFKinds, ID: "vnf", Place: param.Variant},
		{Key: pCPULimit, Label: "cpu_limit", Help: "vnf: each VNF replica's CPU limit in millicores, to sweep (0 = none; default 0)",
			Order: 120, Max: 64000, ID: "cpu", Sweep: true},
		{Key: pIsolation, Label: "cpu_isolation", Kind: param.Word,
			Help:  "vnf: the VNF's CPUs shared with the node's other pods (Kubernetes' Burstable) or exclusive to it (Guaranteed, static CPU manager) (default shared)",
			Order: 130, Words: []string{"shared", "exclusive"}, ID: "iso"},
		{Key: pFrameSize, Label: "frame_size", Help: "vnf: frame sizes in bytes with FCS, to sweep (default 256)",
			Order: 140, Min: 64, Max: 1518, ID: "size", Sweep: true},
		{Key: pLB, Label: "lb", Kind: param.Word,
			Help:  "vnf: what spreads the traffic over the VNF's replicas: a ClusterIP Service or a user-space UDP load balancer pod on the generator's node (ingress) or the other (ingress-remote, as seed 002's Ingress controller) (default service)",
			Order: 150, Words: []string{vnfService, vnfIngress, vnfIngressRemote}, ID: "lb"},
		{Key: pSearch, Label: "search", Kind: param.Word,
			Help:  "vnf: NDR/PDR by an MLRsearch-style search (mlr), by RFC 2544 binary searches (binary), or seed 002's maximum feasible throughput by a rate rising 5 % a step (ramp) (default mlr)",
			Order: 160, Values: VNFSearches, ID: "search"},
		{Key: pNoisy, Label: "noisy", Help: "vnf: CPU-bound pods beside the VNF replicas (seed 002's local calculation), to sweep (default 0)",
			Order: 190, Max: 64, ID: "noisy", Sweep: true, Load: true, Compare: param.Scale},
		{Key: pNoisyLimit, Label: "noisy_cpu_limit", Help: "vnf: each noisy pod's CPU limit in millicores, to sweep (0 = none; default 0)",
			Order: 200, Max: 64000, ID: "ncpu", Sweep: true, Compare: param.Scale},
	}
}

func (vnf) Info() Info {
	return Info{
		// The default and lb service spread the traffic by a Service; the ingress kinds by a pod.
		Service:           func(c result.Case) bool { return c.Word(pLB) != vnfIngress && c.Word(pLB) != vnfIngressRemote },
		Summary:           "packet-forwarding VNF: generator -> Service -> N VNF replicas -> receiver, NDR/PDR by an MLRsearch-style search (seed 002, IETF BMWG)",
		DefaultDataplanes: []string{"flannel"},
		// The VNF replicas on the generator's (load balancer's) node, on the other node, or
		// spread over both.
		Placements:       []string{"intra", "inter", vnfSplit},
		Protocols:        []string{string(pktengine.GTPU), string(pktengine.UDP)},
		DefaultProtocols: []string{string(pktengine.GTPU)},
		Params:           []string{"replicas", "proxy"},
		Declares:         vnfParams(),
		Tool:             driver.PktTool,
		DefaultStrs:      map[string][]string{pVNF: {"userspace"}, pIsolation: {"shared"}, pLB: {vnfService}},
		DefaultInts:      map[string][]int{pFrameSize: {256}},
		// The generator runs flat out during a search: nothing else may share the nodes.
		Exclusive: func(result.Case) bool { return true },
		// The first goal's rate: the no-drop rate (a ramp's maximum feasible throughput).
		Primary: func(c result.Case) string { return vnfSearchOf(c).metric(0) + "_pps" },
		// The PDR beside the NDR (a ramp has one rate only).
		Charted: func(c result.Case) []string {
			s := vnfSearchOf(c)
			if pdr := s.metric(vnfPDRTarget) + "_pps"; pdr != s.metric(0)+"_pps" {
				return []string{pdr}
			}
			return nil
		},
		NoBaseline: true,
		// A trial is a search (vnfSearches).
		TrialSeconds: func(c result.Case, d int) float64 { return vnfSearchOf(c).seconds(d) },
		Check: func(c result.Case) error {
			if _, err := pktengine.ParseSize(strconv.Itoa(c.Int(pFrameSize)), pktengine.Mode(c.Protocol)); err != nil {
				return fmt.Errorf("frame-size %d: %v", c.Int(pFrameSize), err)
			}
			if c.Replicas > 16 {
				return fmt.Errorf("replicas %d: the vnf scenario runs 1..16 VNF replicas", c.Replicas)
			}
			if _, ok := vnfSearches[c.Word(pSearch)]; !ok && c.Word(pSearch) != "" {
				return fmt.Errorf("unknown search %q (valid: %s)", c.Word(pSearch), strings.Join(VNFSearches(), ", "))
			}
			if c.Int(pNoisyLimit) > 0 && c.Int(pNoisy) == 0 {
				return fmt.Errorf("noisy-cpu-limit %d with no noisy pods: set noisy too (a case with noisy 0 takes no limit)", c.Int(pNoisyLimit))
			}
			if err := (cluster.CPU{LimitMilli: c.Int(pNoisyLimit)}).Check(); err != nil {
				return fmt.Errorf("noisy-cpu-limit: %v", err)
			}
			return vnfCPU(c).Check()
		},
	}
}

// vnfCPU is the CPU resources of a case's VNF replicas.
func vnfCPU(c result.Case) cluster.CPU {
	return cluster.CPU{LimitMilli: c.Int(pCPULimit), Exclusive: c.Word(pIsolation) == "exclusive"}
}

// vnfFixture is the pods, the Service and the VNF processes of one case.
type vnfFixture struct {
	cl        cluster.Cluster
	c         result.Case
	self      string
	gen, recv cluster.Pod
	account   accountAsk // what each trial's accounting is asked (Options)
	vip       string
	genCPU    *int // where the generator and the receiver are pinned (nil: not pinned)
	recvCPU   *int
	maxRate   float64 // the search's highest rate
	genMax    float64 // what the generator offered on its own at set-up
	procs     []cluster.Process
	vnfCmd    []string // a replica's command line
	pods      []string
	noisy     []string // the noisy neighbours' pods
	service   string
	// last is the packet engine's outcome of each search trial, by rate and duration.
	last map[trialKey]pktOutcome
	// short counts the search's trials whose generator offered less than 99 % of the rate.
	short int
}

type trialKey struct {
	rate float64
	d    time.Duration
}

// pktOutcome is what the generator and the receiver said of one trial.
type pktOutcome struct {
	gen  pktengine.GenResult
	recv pktengine.RecvResult
}

func (vnf) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (_ Fixture, err error) {
	kind, ok := vnfKinds[c.Word(pVNF)]
	if !ok {
		return nil, fmt.Errorf("unknown VNF kind %q (valid: %s)", c.Word(pVNF), strings.Join(VNFKinds(), ", "))
	}
	mode := pktengine.Mode(c.Protocol)
	if _, err := pktengine.ParseMode(string(mode)); err != nil {
		return nil, err
	}
	if mtu := cl.Facts().PodMTU; mtu > 0 && pktengine.FrameIPBytes(c.Int(pFrameSize)) > mtu {
		return nil, cluster.Unsupported("frame-size %d carries %d bytes of IP, more than the pods' MTU %d (the underlay's less the overlay's overhead): raise the underlay's MTU (lab: --mtu %d)",
			c.Int(pFrameSize), pktengine.FrameIPBytes(c.Int(pFrameSize)), mtu, result.DefaultMTU+pktengine.FrameIPBytes(c.Int(pFrameSize))-mtu)
	}
	self := cl.Facts().Self
	if self == "" {
		return nil, cluster.Unsupported("the vnf scenario runs cnibench's packet engine in pods, and this cluster's pods have no cnibench executable (lab: run the cnibench binary, or set %s)", "CNIBENCH_SELF")
	}
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, errors.New("cluster has no nodes")
	}
	if c.Placement != "intra" && len(nodes) < 2 {
		return nil, cluster.Unsupported("placement %s needs 2 nodes, cluster has %d", c.Placement, len(nodes))
	}
	n := max(c.Replicas, 1)
	f := &vnfFixture{cl: cl, c: c, self: self, last: map[trialKey]pktOutcome{}, account: askOf(opt)}
	defer func() {
		if err != nil {
			_ = f.Close(context.WithoutCancel(ctx))
		}
	}()
	labels := fixtureLabels(opt, "vnf")
	specs := []cluster.PodSpec{
		{Name: objName(opt, "gen"), Node: nodes[0].Name, Labels: fixtureLabels(opt, "gen")},
		{Name: objName(opt, "recv"), Node: nodes[0].Name, Labels: fixtureLabels(opt, "recv")},
	}
	for i := 0; i < n; i++ {
		node := nodes[0].Name
		switch {
		case c.Placement == "inter", c.Placement == vnfSplit && i%2 == 1:
			node = nodes[1].Name
		}
		specs = append(specs, cluster.PodSpec{Name: objName(opt, fmt.Sprintf("vnf%d", i)), Node: node, Labels: labels, CPU: vnfCPU(c),
			Ports: []cluster.ContainerPort{{Name: "gtpu", Port: vnfPort, Protocol: "udp"}}})
	}
	pods, err := cl.CreatePods(ctx, specs)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		f.pods = append(f.pods, p.Name)
	}
	f.gen, f.recv = pods[0], pods[1]
	if !vnfCPU(c).Exclusive {
		// Exclusive CPUs take the host's highest ones and move every other pod off them: the
		// generator and the receiver then share what is left, unpinned.
		f.genCPU, f.recvCPU = &opt.CPUs[0], &opt.CPUs[1]
	}
	to := net.JoinHostPort(f.recv.IP, strconv.Itoa(vnfPort))
	vnfs := pods[2:]
	if c.Word(pLB) == vnfIngress || c.Word(pLB) == vnfIngressRemote {
		// The ingress: the generator's frames go to it, and it to the replicas in turn.
		node := nodes[0].Name
		if c.Word(pLB) == vnfIngressRemote {
			if len(nodes) < 2 {
				return nil, cluster.Unsupported("lb %s puts the ingress on a second node, cluster has %d", c.Word(pLB), len(nodes))
			}
			node = nodes[1].Name
		}
		ing, err := cl.CreatePods(ctx, []cluster.PodSpec{{Name: objName(opt, "ingress"), Node: node, Labels: fixtureLabels(opt, "ingress"),
			Ports: []cluster.ContainerPort{{Name: "gtpu", Port: vnfPort, Protocol: "udp"}}}})
		if err != nil {
			return nil, err
		}
		f.pods = append(f.pods, ing[0].Name)
		var targets []string
		for _, p := range vnfs {
			targets = append(targets, net.JoinHostPort(p.IP, strconv.Itoa(vnfPort)))
		}
		argv := fwdArgv(self, strings.Join(targets, ","))
		proc, err := cl.Start(ctx, ing[0].Name, argv, cluster.Ready{})
		if err != nil {
			return nil, fmt.Errorf("start the ingress: %w", err)
		}
		f.procs = append(f.procs, proc)
		f.vip = ing[0].IP
	} else {
		f.service = objName(opt, "vnf")
		svcs, err := cl.CreateServices(ctx, []cluster.ServiceSpec{{Name: f.service, Selector: labels,
			Ports: []cluster.ServicePort{{Port: vnfPort, TargetPort: vnfPort, Protocol: "udp"}}}})
		if err != nil {
			f.service = ""
			return nil, err
		}
		f.vip = svcs[0].ClusterIP
	}
	if vnfCPU(c).Exclusive {
		if err := f.checkExclusive(ctx, vnfs); err != nil {
			return nil, err
		}
	}
	for _, p := range vnfs {
		argv := kind.argv(self, to)
		proc, err := cl.Start(ctx, p.Name, argv, cluster.Ready{})
		if err != nil {
			return nil, fmt.Errorf("start VNF %s in %s: %w", c.Word(pVNF), p.Name, err)
		}
		f.procs = append(f.procs, proc)
		f.vnfCmd = argv
		if err := kind.waitReady(ctx, proc); err != nil {
			return nil, fmt.Errorf("VNF %s in %s: %w", c.Word(pVNF), p.Name, err)
		}
	}
	if err := f.createNoisy(ctx, opt, vnfs); err != nil {
		return nil, err
	}
	if len(f.noisy) == 0 {
		if err := f.calibrate(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// calibrate measures what the generator offers flat out to the load balancer: the search
// stays below. On one host the generator's CPU also pays for the path its frames take from
// its pod (the Service's NAT, an overlay's encapsulation), so this is measured on that path;
// with noisy neighbours, at the start of each trial with them running (they take CPU from the
// generator too).
func (f *vnfFixture) calibrate(ctx context.Context) error {
	o, err := f.run(ctx, f.vip, 0, time.Second)
	if err != nil {
		return fmt.Errorf("generator calibration: %w", err)
	}
	f.genMax = o.gen.AchievedPPS
	f.maxRate = 0.95 * f.genMax
	if f.maxRate < 2*vnfMinRate {
		return fmt.Errorf("generator calibration: it offered %.0f pps alone, too little to search", f.genMax)
	}
	return nil
}

// createNoisy creates the pods of the case's noisy neighbours (seed 002's "local
// calculation"): c.Int(pNoisy) pods, each with c.Int(pNoisyLimit) millicores (0: no limit), spread over
// the nodes the VNF replicas stand on. Their CPU-bound loops run during the case's trials only
// (startNoisy): a run keeps every case's fixture standing, and one case's neighbours must not
// load another's trials.
func (f *vnfFixture) createNoisy(ctx context.Context, opt Options, vnfs []cluster.Pod) error {
	if f.c.Int(pNoisy) == 0 {
		return nil
	}
	var specs []cluster.PodSpec
	for i := 0; i < f.c.Int(pNoisy); i++ {
		specs = append(specs, cluster.PodSpec{Name: objName(opt, fmt.Sprintf("noisy%d", i)), Node: vnfs[i%len(vnfs)].Node,
			Labels: fixtureLabels(opt, "noisy"), CPU: cluster.CPU{LimitMilli: f.c.Int(pNoisyLimit)}})
	}
	pods, err := f.cl.CreatePods(ctx, specs)
	if err != nil {
		return fmt.Errorf("noisy neighbours: %w", err)
	}
	for _, p := range pods {
		f.pods = append(f.pods, p.Name)
		f.noisy = append(f.noisy, p.Name)
	}
	return nil
}

// startNoisy starts one CPU-bound loop in each noisy pod; the stop function ends them.
func (f *vnfFixture) startNoisy(ctx context.Context) (stop func() error, err error) {
	var procs []cluster.Process
	stop = func() error {
		var errs []error
		for _, p := range procs {
			errs = append(errs, p.Stop())
		}
		procs = nil
		return errors.Join(errs...)
	}
	for _, pod := range f.noisy {
		proc, err := f.cl.Start(ctx, pod, noisyArgv, cluster.Ready{})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("noisy neighbour %s: %w", pod, err), stop())
		}
		procs = append(procs, proc)
	}
	return stop, nil
}

// noisyArgv is a noisy neighbour's program: a shell loop that never sleeps.
var noisyArgv = []string{driver.BusyboxPath, "sh", "-c", "while :; do :; done"}

// checkExclusive makes sure exclusive CPUs were granted: no VNF replica may run on a CPU the
// generator may run on (as `cat /proc/self/status` in the pods says). A kubelet without the
// static CPU manager policy makes a Guaranteed pod and gives it no CPUs of its own: the case
// is then skipped with the reason, never measured as if isolated.
func (f *vnfFixture) checkExclusive(ctx context.Context, vnfs []cluster.Pod) error {
	gen, err := f.allowedCPUs(ctx, f.gen.Name)
	if err != nil {
		return err
	}
	for _, p := range vnfs {
		cpus, err := f.allowedCPUs(ctx, p.Name)
		if err != nil {
			return err
		}
		for c := range cpus {
			if gen[c] {
				return cluster.Unsupported("exclusive CPUs were not granted: VNF pod %s may run on CPUs %s, the generator on %s (on Kubernetes the kubelet's CPU manager policy must be static)", p.Name, cpuSetString(cpus), cpuSetString(gen))
			}
		}
	}
	return nil
}

// allowedCPUs are the CPUs a new process in pod may run on (Cpus_allowed_list).
func (f *vnfFixture) allowedCPUs(ctx context.Context, pod string) (map[int]bool, error) {
	res, err := f.cl.Exec(ctx, pod, []string{driver.BusyboxPath, "cat", "/proc/self/status"})
	if err != nil {
		return nil, fmt.Errorf("CPUs of pod %s: %w", pod, err)
	}
	list, err := cluster.AllowedCPUs(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("CPUs of pod %s: %w", pod, err)
	}
	cpus := map[int]bool{}
	for _, c := range list {
		cpus[c] = true
	}
	return cpus, nil
}

func cpuSetString(cpus map[int]bool) string {
	var l []int
	for c := range cpus {
		l = append(l, c)
	}
	sort.Ints(l)
	return cluster.FormatCPUList(l)
}

// vnfFlows is how many outer UDP flows (source ports) the generator's frames take in turn. A
// Service picks an endpoint per flow (kube-proxy: at random, once per conntrack entry), so a
// single flow would reach one replica whatever their number; with 256 the busiest of 5
// replicas gets about 23 % of the frames (20 % would be even). Seed 002's replicas shared the
// traffic through kube-proxy the same way. The ingress takes frames in turn, whatever the flow.
const vnfFlows = 256

// vnfPDRTarget is the loss target of the partial-drop rate (search.Config's default).
const vnfPDRTarget = 0.005

// vnfMinRate is the lowest rate searched (packets/s).
const vnfMinRate = 1000

// readyWait bounds the wait for the receiver to say it is ready.
const readyWait = 10 * time.Second

// run runs the receiver, then the generator at rate (0: as fast as it can) for d to dst, and
// returns what both said.
func (f *vnfFixture) run(ctx context.Context, dst string, rate float64, d time.Duration) (pktOutcome, error) {
	var o pktOutcome
	recv, err := f.cl.Start(ctx, f.recv.Name, driver.PktRecvCommand(driver.PktRecvSpec{Binary: f.self, CPU: f.recvCPU}), cluster.Ready{})
	if err != nil {
		return o, fmt.Errorf("start the receiver: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = recv.Stop()
		}
	}()
	for deadline := time.Now().Add(readyWait); !bytes.Contains(recv.Output(), []byte(pktengine.RecvReadyLine)); {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return o, fmt.Errorf("receiver not ready after %s: %s", readyWait, excerptLines(strings.TrimSpace(string(recv.Output())), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
	argv := driver.PktGenCommand(driver.PktGenSpec{Binary: f.self, Dst: dst, Mode: f.c.Protocol, Size: strconv.Itoa(f.c.Int(pFrameSize)),
		RatePPS: rate, DurationS: d.Seconds(), Flows: vnfFlows, CPU: f.genCPU})
	tctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	res, err := f.cl.Exec(tctx, f.gen.Name, argv)
	if err != nil {
		return o, fmt.Errorf("generator: %w", err)
	}
	if res.ExitCode != 0 {
		return o, fmt.Errorf("generator exited %d: %s", res.ExitCode, excerptLines(strings.TrimSpace(string(res.Stderr)), 5))
	}
	if o.gen, err = driver.PktGenResult(res.Stdout); err != nil {
		return o, err
	}
	stopped = true
	if err := recv.Stop(); err != nil {
		return o, fmt.Errorf("stop the receiver: %w", err)
	}
	if o.recv, err = driver.PktRecvResult(recv.Output()); err != nil {
		return o, err
	}
	return o, nil
}

// Measure implements search.Measurer: one run of the packet engine through the VNFs.
func (f *vnfFixture) Measure(ctx context.Context, rate float64, d time.Duration) (search.Trial, error) {
	o, err := f.run(ctx, f.vip, rate, d)
	if err != nil {
		return search.Trial{}, err
	}
	f.last[trialKey{rate, d}] = o
	// A generator that could not offer the rate (its CPU also pays for its frames' path on
	// this host, and shares it with whatever else runs) counts the frames it did not send as
	// lost: the rate was not carried end to end.
	t := search.Trial{Sent: max(o.gen.SentPackets, uint64(rate*d.Seconds()))}
	if o.gen.SentPackets < uint64(0.99*rate*d.Seconds()) {
		f.short++
	}
	if o.recv.Unique < t.Sent {
		t.Lost = t.Sent - o.recv.Unique
	}
	return t, nil
}

func (f *vnfFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	final := time.Duration(durationS) * time.Second
	srch := vnfSearchOf(f.c)
	clear(f.last)
	f.short = 0
	if len(f.noisy) > 0 {
		stop, err := f.startNoisy(ctx)
		if err != nil {
			return Measurement{}, err
		}
		defer stop()
		if err := f.calibrate(ctx); err != nil {
			return Measurement{}, err
		}
	}
	win := openWindow(ctx, f.cl, f.gen.Node, f.account, f.gen.Name, f.recv.Name)
	defer win.abandon(context.WithoutCancel(ctx))
	res, err := srch.run(ctx, f, f.maxRate, final)
	cpu := map[string]float64{}
	acct := win.close(ctx, cpu)
	raw, _ := json.Marshal(res)
	client := driver.PktGenCommand(driver.PktGenSpec{Binary: f.self, Dst: f.vip, Mode: f.c.Protocol, Size: strconv.Itoa(f.c.Int(pFrameSize)),
		RatePPS: -1, DurationS: final.Seconds(), Flows: vnfFlows, CPU: f.genCPU})
	client[slices.Index(client, "--rate")+1] = "RATE" // each trial of the search has its own
	if err != nil {
		return Measurement{Raw: raw}, fmt.Errorf("%s search: %w", srch.name, err)
	}
	m := f.metrics(srch, res, final)
	maps.Copy(m, cpu)
	return Measurement{Metrics: m, Raw: raw, Server: f.vnfCmd, Client: client, Accounting: acct}, nil
}

// metrics are a search's figures: each goal's rate (the NDR and PDR, or the ramp's maximum
// feasible throughput: the lower bounds, in packets and in frame bits per second, FCS
// included), the precision reached, the search's cost, the generator's own rate, and of the
// final trial at the first goal (the NDR) the probes' one-way latency and the frames the
// receiver's ring dropped.
func (f *vnfFixture) metrics(srch vnfSearch, r search.Result, final time.Duration) map[string]float64 {
	m := map[string]float64{
		"search_trials_count": float64(len(r.Trials)),
		"search_trial_time_s": r.TrialTime.Seconds(),
		"generator_max_pps":   f.genMax,
		"search_max_pps":      f.maxRate,
		// Trials the generator could not offer fully (their missing frames count as lost).
		"generator_short_trials_count": float64(f.short),
	}
	for i, g := range r.Goals {
		name := srch.metric(g.Target)
		m[name+"_pps"] = g.Lower
		m[name+"_bps"] = g.Lower * float64(f.c.Int(pFrameSize)) * 8
		m[name+"_relative_width"] = g.Width
		if o, ok := f.last[trialKey{g.Lower, final}]; ok && i == 0 {
			if l := o.recv.Latency; l.Count > 0 {
				m["latency_p50_us"], m["latency_p99_us"], m["latency_max_us"] = l.P50, l.P99, l.Max
			}
			m["receiver_ring_drops_count"] = float64(o.recv.RingDrops)
		}
	}
	return m
}

// Close stops the VNFs and deletes the Service and the pods.
func (f *vnfFixture) Close(ctx context.Context) error {
	var errs []error
	for _, p := range f.procs {
		errs = append(errs, p.Stop())
	}
	f.procs = nil
	if f.service != "" {
		errs = append(errs, f.cl.DeleteServices(ctx, []string{f.service}))
		f.service = ""
	}
	if len(f.pods) > 0 {
		errs = append(errs, f.cl.DeletePods(ctx, f.pods))
		f.pods = nil
	}
	return errors.Join(errs...)
}
