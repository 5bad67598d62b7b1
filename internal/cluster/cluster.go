// Package cluster is the seam between scenarios and backends. A scenario is written only
// against Cluster; the lab backend (network namespaces on one host) and the kube backend (a real
// Kubernetes cluster) implement it. A capability a backend lacks is reported with an error that
// wraps ErrUnsupported, which the runner records as "skipped: <reason>".
package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/account"
)

// ErrUnsupported marks something a backend or this host cannot do.
var ErrUnsupported = errors.New("unsupported")

// Unsupported returns an error wrapping ErrUnsupported with a reason for the report.
func Unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// Node is a cluster node.
type Node struct {
	Name string
	IP   string // node (underlay) address
}

// PodSpec asks for a pod on a named node.
type PodSpec struct {
	Name        string
	Node        string
	Labels      map[string]string
	HostNetwork bool // share the node's network (baseline node2node)
	// Server marks a pod that serves the measurement: the kube backend runs it as a Deployment
	// of one replica pinned to Node, the lab as a plain pod.
	Server bool
	// Silent marks a pod that exists only to load the data plane (seed 001's silent pods): it
	// runs nothing. Node "" lets the backend spread silent pods over its nodes; the kube backend
	// places them on kwok fake nodes when the run has some.
	Silent bool
	// Ports are the pod's declared container ports (named ports of NetworkPolicies and
	// Services resolve against them).
	Ports []ContainerPort
	// External asks for a client outside the cluster, on the nodes' network (seed 003's
	// external client): it reaches the cluster only through the nodes' addresses (NodePorts)
	// and is never an endpoint. The lab puts it in a namespace of its own on the underlay, off
	// every node; the kube backend runs it as a host-network pod on Node (a real cluster has no
	// machine outside its nodes that cnibench could start processes on). Node is where the
	// backend places it if it must be on a node, and the node whose CPU a trial samples.
	External bool
	// AnswerPort asks for a pod that, from the moment it can be an endpoint, answers every TCP
	// connection on this port with one line holding the address it was reached at (its own)
	// and closes it: the reaction scenario tells its endpoints apart by it. The lab answers
	// from inside the pod's namespace as soon as the pod is attached; the kube backend runs
	// busybox nc as the container's command, with a readiness probe on the port. Only for a
	// pod on the pod network that runs (not Silent, HostNetwork or External). 0: none.
	AnswerPort int
	// CPU is the pod's CPU resources (zero: none; the pod shares its node's CPUs).
	CPU CPU
}

// CPU is a pod's CPU resources, as a Kubernetes pod spec gives them (seed 002's knobs: CPU
// limits, and CPU isolation as Guaranteed against Burstable pods).
type CPU struct {
	// LimitMilli caps the pod's CPU time in thousandths of a CPU (a CFS quota); 0: no cap.
	LimitMilli int
	// Exclusive asks for whole CPUs that no other pod uses: LimitMilli/1000 of them (at least
	// one; LimitMilli, if set, a multiple of 1000). The lab gives the pod a cpuset of its own
	// and moves the run's other pods onto the CPUs left, as a kubelet's static CPU manager
	// does with its shared pool; the kube backend makes the pod Guaranteed (requests equal
	// limits), which gets CPUs of its own only from a kubelet with the static CPU manager
	// policy. A backend that cannot give the CPUs says so (ErrUnsupported).
	Exclusive bool
}

// CPUs is how many whole CPUs an exclusive request is for.
func (c CPU) CPUs() int {
	if c.LimitMilli <= 1000 {
		return 1
	}
	return c.LimitMilli / 1000
}

// Check says what is wrong with a request (nil: nothing): a negative limit, or an exclusive
// one that is not whole CPUs.
func (c CPU) Check() error {
	switch {
	case c.LimitMilli < 0:
		return BadInput("cpu limit %dm: give 0 (none) or more millicores", c.LimitMilli)
	case c.Exclusive && c.LimitMilli%1000 != 0:
		return BadInput("exclusive CPUs with a limit of %dm: exclusive CPUs are whole CPUs (1000m, 2000m, ...)", c.LimitMilli)
	}
	return nil
}

// ContainerPort is a declared port of a pod.
type ContainerPort struct {
	Name     string // "" for an unnamed port
	Port     int
	Protocol string // "tcp", "udp" or "sctp"
}

// Pod is a created pod.
type Pod struct {
	Name        string
	Node        string
	IP          string
	HostNetwork bool
	External    bool // a client outside the cluster (PodSpec.External)
	Labels      map[string]string
	Ports       []ContainerPort
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name       string // "" for a single unnamed port
	Port       int    // the Service's port
	TargetPort int    // the pods' port (0: same as Port)
	Protocol   string // "tcp" or "udp"
	// NodePort is the port a NodePort Service serves this port on at every node's address
	// (asked for: 0 = the cluster picks one; created: the one it has).
	NodePort int
}

// ServiceSpec asks for a ClusterIP Service over the pods whose labels include Selector, or a
// NodePort Service.
type ServiceSpec struct {
	Name     string
	Selector map[string]string
	Ports    []ServicePort
	// ClusterIP asks for this ClusterIP (Kubernetes' spec.clusterIP): one a deleted Service
	// had, so that a client can probe the address before the Service exists again (the change
	// scenario); "" = the cluster picks one. An address in use or outside the cluster's
	// service range is an error.
	ClusterIP string
	// NodePort makes it a NodePort Service: each port is also served on every node's address.
	NodePort bool
	// ExternalLocal is externalTrafficPolicy Local: NodePort traffic goes only to endpoints on
	// the node it arrived at, keeping the client's address (a node without one drops it);
	// false is Cluster: any endpoint, the client's address masqueraded.
	ExternalLocal bool
	// NoWait returns from CreateServices once the control plane accepted the Service, without
	// waiting for its endpoints and proxy (the change scenario times those with its own
	// probe). A backend whose call programs the data plane itself (the lab) ignores it.
	NoWait bool
}

// Service is a created Service.
type Service struct {
	Name      string
	ClusterIP string
	Ports     []ServicePort
	Endpoints []string // pod IPs behind it when it was created
}

// ExecResult is the outcome of a command run to completion in a pod.
type ExecResult struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// Ready tells Start when a server counts as started.
type Ready struct {
	TCPPort int // wait until something listens on this TCP port in the pod (0: don't wait)
}

// Process is a long-running command in a pod.
type Process interface {
	// Stop terminates the process (SIGTERM, then SIGKILL) and waits for it.
	Stop() error
	// Output returns what the process wrote so far (stdout and stderr).
	Output() []byte
}

// LocalOutput is a Process whose Output copies what this program holds in memory (the lab's
// host processes) instead of reading it from a node: a waiter may look at it every few
// milliseconds.
type LocalOutput interface {
	LocalOutput()
}

// IdleChildSignaler is a Process whose children the backend sees (the lab's: host processes).
// SignalIdleChildren sends sig to each child that stayed blocked, without running, for quiet,
// and returns how many it signalled: how a trial ends a server's per-test process that waits
// out a timer after the client's test is over (driver.Linger).
type IdleChildSignaler interface {
	SignalIdleChildren(sig syscall.Signal, quiet time.Duration) (int, error)
}

// CPUSample is cumulative CPU time of a node in clock ticks, as in /proc/stat's "cpu" line.
type CPUSample = account.CPUTimes

// StealPct is the share of the interval between a and b the hypervisor took away: a trial
// with much steal ran on a machine that was not all its own.
func StealPct(a, b CPUSample) float64 {
	dt := float64(b.Total() - a.Total())
	if dt <= 0 {
		return 0
	}
	return 100 * float64(b.Steal-a.Steal) / dt
}

// Busy returns (busy%, softirq%) of the interval between a and b; busy is the time this
// machine's CPUs worked (steal, idle and iowait excluded).
func Busy(a, b CPUSample) (busyPct, softirqPct float64) {
	dt := float64(b.Total() - a.Total())
	if dt <= 0 {
		return 0, 0
	}
	notBusy := float64((b.Idle + b.IOWait + b.Steal) - (a.Idle + a.IOWait + a.Steal))
	return 100 * (dt - notBusy) / dt, 100 * float64(b.SoftIRQ-a.SoftIRQ) / dt
}

// Facts describe a cluster's data plane: typed fields for what scenarios need, Details for the
// run's environment record only (scenarios never read Details).
type Facts struct {
	Backend   string // "lab", "kube", ...
	Dataplane string // the preset ("flannel", ...) or "cluster" for a real cluster's own
	PodMTU    int    // the MTU pods get; 0 when unknown
	// Name is what names the cluster's objects where it lives (the lab's prefix, the kube
	// namespace): printed when a run builds it, so a user knows what belongs to the run.
	Name string
	// TempDir is a directory of the pods' file system where a scenario may put scratch files
	// (nginx's content); the backend removes it with the cluster.
	TempDir string
	// Self is the cnibench executable as the cluster's pods run it ("" when they have none):
	// the packet engine of the vnf scenario runs in pods.
	Self string
	// Details are the backend's other facts (overlay, prefix, kube-proxy mode, ...), recorded
	// under the run's environment.
	Details map[string]any
}

// Record returns the facts as the run's environment records them: Details with backend,
// dataplane and pod_mtu added (pod_mtu only when known).
func (f Facts) Record() map[string]any {
	out := make(map[string]any, len(f.Details)+3)
	for k, v := range f.Details {
		out[k] = v
	}
	out["backend"] = f.Backend
	if f.Dataplane != "" {
		out["dataplane"] = f.Dataplane
	}
	if f.PodMTU > 0 {
		out["pod_mtu"] = f.PodMTU
	}
	return out
}

// Cluster is what every backend provides. Work on one object is the plural call with one
// element (see the helpers CreatePod, DeletePod, CreateService, DeleteService).
type Cluster interface {
	Nodes(ctx context.Context) ([]Node, error)
	// CreatePods creates pods (in parallel where the backend can; a spec without Node goes to
	// a node the backend picks) and returns them, in the order of specs, once every one has an
	// IP. On an error the pods already created are deleted again. A pod that a Service's
	// selector picks becomes one of its endpoints, as in Kubernetes: the call does not wait
	// for that (on the lab, its own endpoint controller, it happens within the call).
	CreatePods(ctx context.Context, specs []PodSpec) ([]Pod, error)
	// DeletePods deletes pods and waits until they are gone; their endpoints leave the
	// Services that selected them.
	DeletePods(ctx context.Context, names []string) error
	// CreateServices creates ClusterIP Services (one data-plane programming on the lab,
	// parallel API calls on a cluster) and returns them, in the order of specs, once traffic to
	// each reaches its endpoints (the pods matching the selector at that time). A NodePort
	// Service comes back with the NodePort of each port (Kubernetes gives the ports of one
	// Service with the same number, TCP and UDP, one NodePort; an asked-for NodePort another
	// Service has is an error wrapping ErrNodePortTaken). On an error the Services already
	// created are deleted again.
	CreateServices(ctx context.Context, specs []ServiceSpec) ([]Service, error)
	DeleteServices(ctx context.Context, names []string) error
	// CreateNetworkPolicies installs networking.k8s.io/v1 NetworkPolicies (an empty Namespace
	// means the run's namespace, where every pod of the run lives) and returns once they are
	// programmed. A backend that cannot enforce them returns an error wrapping ErrUnsupported.
	CreateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error
	DeleteNetworkPolicies(ctx context.Context, names []string) error
	// UpdateNetworkPolicies replaces existing policies, by name, with these (an edit of each,
	// as `kubectl apply` of a changed policy makes) and returns as CreateNetworkPolicies does.
	// A policy that does not exist is an error, and nothing is changed then.
	UpdateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error
	// Programmed describes what the data plane holds now for Services and policies (counts of
	// rules, chains, sets, set elements, programming times; keys are metric names such as
	// "proxy_rules_count"); backends that cannot see it return nil.
	Programmed(ctx context.Context) map[string]float64
	// Exec runs argv in the pod to completion. A non-zero exit is not an error: see ExitCode.
	Exec(ctx context.Context, pod string, argv []string) (ExecResult, error)
	// Start starts a long-running argv in the pod and waits until it is ready.
	Start(ctx context.Context, pod string, argv []string, ready Ready) (Process, error)
	// NodeCPU samples the node's cumulative CPU time.
	NodeCPU(ctx context.Context, node string) (CPUSample, error)
	// Facts describe the data plane (pod MTU for scenarios; the rest for the run's record).
	Facts() Facts
	// Close removes everything the cluster object created.
	Close(ctx context.Context) error
}

// ConcurrentFixtures is what a backend offers whose fixtures (the pods, Services and policies
// of different cases, each under names of its own) may be set up and torn down at the same
// time: on a real cluster both are mostly waiting for the kubelets to start or stop pods (a
// second or two a fixture on the project's test cluster), and a block's fixtures then wait
// together. The runner asks with a type assertion; without it, fixtures are set up and torn
// down one after another.
type ConcurrentFixtures interface {
	ConcurrentFixtures() bool
}

// BarePairer is what a backend that can join two pods by nothing but one veth pair offers
// (the baseline "bare"); a scenario asks for it with a type assertion and reports the case as
// unsupported where the backend lacks it.
type BarePairer interface {
	BarePair(ctx context.Context, client, server string) (Pod, Pod, error)
}

// ChainSpec asks for a service-function chain: a client pod, Length network functions of kind
// NF between it and the server pod, each enforcing a firewall of Rules rules that lets the
// client reach Ports on the server (and the replies come back) and drops everything else.
type ChainSpec struct {
	Client, Server string // pod names
	NF             string // network-function kind
	Length, Rules  int
	Ports          []ServicePort // Port and Protocol ("tcp"/"udp") of each port the flow uses
	// CPUs are the client's and server's CPUs: a kind that pins a polling forwarder avoids them
	// when the host has another.
	CPUs [2]int
}

// Chainer is what a backend that builds service-function chains offers; a scenario asks for it
// with a type assertion and reports the case as unsupported where the backend lacks it.
// Deleting the client or the server pod removes the chain's network functions. The chain comes
// back paused (see ChainControl).
type Chainer interface {
	Chain(ctx context.Context, spec ChainSpec) (client, server Pod, ctl ChainControl, err error)
}

// ChainControl resumes a chain's network functions for a trial and pauses them after it: an NF
// that polls a CPU whether traffic comes or not (DPDK) is stopped while it is paused, so it
// takes no CPU from the trials of other cases; the others do not change.
type ChainControl interface {
	Resume() error
	Pause() error
}

// Resting is implemented by clusters whose data plane polls CPUs whether traffic comes or not
// (the lab's OVS-DPDK nodes: PMD threads). A run keeps every case's cluster standing, so the
// runner wakes a cluster for each trial of its cases and lets it rest after: a resting cluster
// takes next to no CPU from the trials of other cases, an awake one runs as it is meant to.
type Resting interface {
	Wake() error
	Rest() error
}

// CounterReader is implemented by clusters whose data plane keeps packet counters it can read
// (the lab's eBPF data paths: per cube, per program): cumulative counts by node and counter
// name, nil when it keeps none. A trial records what they counted during it.
type CounterReader interface {
	DataplaneCounters() (map[string]map[string]uint64, error)
}

// Accounter is implemented by clusters that can say where a trial's CPU time and packets went
// (package account): per CPU of the machines the trial ran on, per role (the processes of each
// pod, network function and node), per hop (the devices of the path) and the kernel counters
// that explain loss and retransmits. A scenario opens a window right before its tool runs.
type Accounter interface {
	Account(ctx context.Context, path AccountPath) (AccountWindow, error)
}

// AccountPath names a trial's client and server pods ("" when a trial has none), so the
// accounting can order the hops between them; Trace asks for per-hop latency too (TraceHops;
// a backend that cannot trace says why in the accounting's notes). Amplify > 1 makes the
// accounting's sampler look that many times as often as it would (doctor --account-cost
// --account-amplify: a cost too small to resolve made resolvable, then divided back).
type AccountPath struct {
	Client, Server string
	Trace          string
	Amplify        int
}

// TraceHops asks an accounting window for per-hop latency: the time sampled TCP segments take
// from each device hook of the path to the next (run --trace hops).
const TraceHops = "hops"

// AccountWindow is an open accounting window.
type AccountWindow interface {
	// Close ends the window and returns what happened in it.
	Close(ctx context.Context) (*account.Trial, error)
}

// ErrNodePortTaken marks a Service asking for a NodePort that another Service has: a caller
// that picks NodePorts itself tries another one.
var ErrNodePortTaken = errors.New("nodePort already allocated")

// NodePortChecker is what a backend whose Service implementation may lack NodePorts offers (the
// lab, whose proxy engine decides); a scenario asks for it with a type assertion before it
// makes a NodePort Service. A backend without it serves NodePorts wherever it has Services.
type NodePortChecker interface {
	// NodePorts is nil when NodePort Services are served here, else an error wrapping
	// ErrUnsupported that says why not.
	NodePorts() error
}

// CreatePod creates one pod (CreatePods with one spec).
func CreatePod(ctx context.Context, cl Cluster, spec PodSpec) (Pod, error) {
	pods, err := cl.CreatePods(ctx, []PodSpec{spec})
	if err != nil {
		return Pod{}, err
	}
	return pods[0], nil
}

// DeletePod deletes one pod.
func DeletePod(ctx context.Context, cl Cluster, name string) error {
	return cl.DeletePods(ctx, []string{name})
}

// CreateService creates one Service (CreateServices with one spec).
func CreateService(ctx context.Context, cl Cluster, spec ServiceSpec) (Service, error) {
	svcs, err := cl.CreateServices(ctx, []ServiceSpec{spec})
	if err != nil {
		return Service{}, err
	}
	return svcs[0], nil
}

// DeleteService deletes one Service.
func DeleteService(ctx context.Context, cl Cluster, name string) error {
	return cl.DeleteServices(ctx, []string{name})
}

// Pin prefixes argv with taskset so the command runs on cpu only: placement on a small
// machine is never left to chance.
func Pin(cpu int, argv []string) []string {
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// Pinned undoes Pin: the CPU and the command of an argv Pin made (ok false for any other).
func Pinned(argv []string) (cpu int, cmd []string, ok bool) {
	if len(argv) < 4 || argv[0] != "taskset" || argv[1] != "-c" {
		return -1, argv, false
	}
	cpu, err := strconv.Atoi(argv[2])
	if err != nil || cpu < 0 {
		return -1, argv, false
	}
	return cpu, argv[3:], true
}
