// Package clustertest is a fake cluster.Cluster for unit tests of scenarios and the runner,
// which then run without root in milliseconds. It keeps pods, Services and NetworkPolicies in
// memory (with pod IPs and ClusterIPs), answers the measuring tools' commands with real output
// recorded under internal/driver/testdata, samples node CPU as counters that grow by a fixed
// step, fails on purpose where a test asks it to, and tells what its user left behind.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Config sets up a Fake. The zero Config is a two-node cluster of backend "fake" with pod MTU
// 1500 that enforces no NetworkPolicy and fails nothing.
type Config struct {
	// Nodes are the cluster's nodes (default: node0 at 172.30.0.10, node1 at 172.30.0.11).
	Nodes []cluster.Node
	// Facts are what Facts returns (the zero Facts: backend "fake", dataplane "fake", pod MTU
	// 1500).
	Facts cluster.Facts
	// Programmed is what Programmed returns (a copy); nil: the data plane cannot be seen.
	Programmed map[string]float64
	// EnforcePolicies makes the installed NetworkPolicies decide which pod reaches which (see
	// Reaches); without it policies are kept but deny nothing, like a CNI without a policy
	// engine.
	EnforcePolicies bool
	// PolicyLag, with EnforcePolicies: the first PolicyLag connection attempts (busybox nc)
	// after policies are created are refused whatever the policies say, as a real CNI that
	// applies new policies asynchronously refuses a new pod until its next sync.
	PolicyLag int
	// CPUStep is what each NodeCPU call adds to the node's counters (zero: DefaultCPUStep).
	CPUStep cluster.CPUSample
	// Fail makes calls fail on purpose.
	Fail Failures
	// PktGenMax is what the simulated packet generator offers flat out, and VNFCapacity what
	// each VNF forwarding for it does, in packets/s (0: DefaultPktGenMax, DefaultVNFCapacity).
	PktGenMax, VNFCapacity float64
	// NoExclusiveCPUs makes the cluster grant no exclusive CPUs (a kubelet without the static
	// CPU manager policy): every pod may run on CPUs 0-1. Otherwise a pod created with
	// exclusive CPUs runs on CPU 1 and the others on CPU 0 (as `cat /proc/self/status` in
	// the pod says).
	NoExclusiveCPUs bool
	// NoNetAdmin makes the pods lack CAP_NET_ADMIN: `cnibench pkt knf` says so and forwards
	// nothing (an unprivileged Kubernetes pod).
	NoNetAdmin bool
	// NoNodePorts is why the cluster serves no NodePorts: NodePorts returns it as an
	// unsupported error ("" = NodePorts are served; see cluster.NodePortChecker).
	NoNodePorts string
}

// Failures are the calls a Fake fails on purpose.
type Failures struct {
	// Pods, Services and Policies: a create call that asks for an object of one of these
	// names fails, and creates none of the objects it was asked for.
	Pods, Services, Policies []string
	// Exec and Start in these pods return an error.
	Exec, Start []string
	// ToolRuns is how many of the next client runs of a measuring tool (iperf3, netperf,
	// curl) replay a recorded failure instead of a measurement.
	ToolRuns int
	// Drop are addresses (of pods, Services or nodes) that drop what is sent to them: no
	// connection to them gets through.
	Drop []string
}

// DefaultCPUStep is 100 ticks: 45 % busy (user 30, system 10, softirq 5), idle 50, steal 5.
var DefaultCPUStep = cluster.CPUSample{User: 30, System: 10, SoftIRQ: 5, Idle: 50, Steal: 5}

// Call is one Exec or Start.
type Call struct {
	Pod  string
	Argv []string // as given
	// CPU is the CPU of a `taskset -c CPU` prefix (-1 without one); Cmd is argv without it.
	CPU int
	Cmd []string
}

// Fake is an in-memory cluster.Cluster. It is safe for concurrent use.
type Fake struct {
	nodes        []cluster.Node
	facts        cluster.Facts
	programmed   map[string]float64
	enforce      bool
	lag, lagLeft int // Config.PolicyLag, and the refusals left since policies were created
	step         cluster.CPUSample
	fail         Failures
	noNP         string

	mu       sync.Mutex
	pods     []cluster.Pod // in creation order
	services []service
	policies []networkingv1.NetworkPolicy
	procs    []*process
	execs    []Call
	starts   []Call
	history  []string
	cpu      map[string]cluster.CPUSample
	podIPs   map[string]int // per node: pod addresses handed out
	vips     int            // ClusterIPs handed out
	outside  int            // addresses of external clients handed out
	closed   int
	pkt      pktRun // the simulated packet engine's last run (pkt.go)
	// exclusive are the pods created with exclusive CPUs (see Config.NoExclusiveCPUs).
	exclusive map[string]bool
	noExcl    bool
	// noNetAdmin: pods lack CAP_NET_ADMIN (Config.NoNetAdmin).
	noNetAdmin bool

	pktGenMax, vnfCapacity float64
}

type service struct {
	cluster.Service
	selector map[string]string
	local    bool // externalTrafficPolicy Local (of a NodePort Service)
}

// New returns a Fake set up by cfg.
func New(cfg Config) *Fake {
	f := &Fake{nodes: cfg.Nodes, programmed: cfg.Programmed, enforce: cfg.EnforcePolicies, lag: cfg.PolicyLag, fail: cfg.Fail, noNP: cfg.NoNodePorts,
		cpu: map[string]cluster.CPUSample{}, podIPs: map[string]int{}, exclusive: map[string]bool{}, noExcl: cfg.NoExclusiveCPUs,
		noNetAdmin: cfg.NoNetAdmin}
	if len(f.nodes) == 0 {
		f.nodes = []cluster.Node{{Name: "node0", IP: "172.30.0.10"}, {Name: "node1", IP: "172.30.0.11"}}
	}
	f.facts = cfg.Facts
	if f.facts.Backend == "" && f.facts.Dataplane == "" && f.facts.PodMTU == 0 && f.facts.Details == nil {
		f.facts = cluster.Facts{Backend: "fake", Dataplane: "fake", PodMTU: 1500, TempDir: "/tmp/clustertest", Self: cfg.Facts.Self}
	}
	f.pktGenMax, f.vnfCapacity = cfg.PktGenMax, cfg.VNFCapacity
	if f.pktGenMax == 0 {
		f.pktGenMax = DefaultPktGenMax
	}
	if f.vnfCapacity == 0 {
		f.vnfCapacity = DefaultVNFCapacity
	}
	f.step = cfg.CPUStep
	if f.step == (cluster.CPUSample{}) {
		f.step = DefaultCPUStep
	}
	return f
}

// Bare is a Fake that can also make a bare pair (cluster.BarePairer).
type Bare struct{ *Fake }

// NewBare returns a Bare set up by cfg.
func NewBare(cfg Config) *Bare { return &Bare{New(cfg)} }

// BarePair implements cluster.BarePairer: two pods on the first node.
func (b *Bare) BarePair(ctx context.Context, client, server string) (cluster.Pod, cluster.Pod, error) {
	b.mu.Lock()
	b.log("bare pair %s %s", client, server)
	b.mu.Unlock()
	node := b.nodes[0].Name
	pods, err := b.CreatePods(ctx, []cluster.PodSpec{{Name: client, Node: node}, {Name: server, Node: node}})
	if err != nil {
		return cluster.Pod{}, cluster.Pod{}, err
	}
	return pods[0], pods[1], nil
}

// FailToolRuns makes the next n client runs of a measuring tool replay a recorded failure.
func (f *Fake) FailToolRuns(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail.ToolRuns = n
}

// log records an event; f.mu is held.
func (f *Fake) log(format string, args ...any) {
	f.history = append(f.history, fmt.Sprintf(format, args...))
}

// Nodes implements cluster.Cluster.
func (f *Fake) Nodes(ctx context.Context) ([]cluster.Node, error) {
	return slices.Clone(f.nodes), ctx.Err()
}

func (f *Fake) node(name string) (int, bool) {
	i := slices.IndexFunc(f.nodes, func(n cluster.Node) bool { return n.Name == name })
	return i, i >= 0
}

// CreatePods implements cluster.Cluster: node i's pods get 10.244.i.2, .3, ...; a pod without
// a node goes to the node with the fewest pods; a host-network pod gets its node's address; an
// external client gets one of the nodes' network from the top (172.30.0.254, .253, ...) and
// keeps the node it asked for (the first node when none) as the node a trial samples.
func (f *Fake) CreatePods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	for _, s := range specs {
		if _, ok := f.node(s.Node); !ok && s.Node != "" {
			return nil, fmt.Errorf("clustertest: pod %s: no node %q", s.Name, s.Node)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	names := namesOf(specs, func(s cluster.PodSpec) string { return s.Name })
	if err := checkNew(ctx, "pod", names, f.fail.Pods, func(n string) bool { _, ok := f.pod(n); return ok }); err != nil {
		return nil, err
	}
	out := make([]cluster.Pod, len(specs))
	for i, s := range specs {
		node := s.Node
		if node == "" {
			node = f.emptiestNode()
		}
		n, _ := f.node(node)
		p := cluster.Pod{Name: s.Name, Node: node, HostNetwork: s.HostNetwork, External: s.External, Labels: maps.Clone(s.Labels), Ports: slices.Clone(s.Ports)}
		switch {
		case s.External:
			if s.Node == "" {
				p.Node = f.nodes[0].Name
			}
			f.outside++
			p.IP = fmt.Sprintf("172.30.0.%d", 255-f.outside)
		case s.HostNetwork:
			p.IP = f.nodes[n].IP
		default:
			f.podIPs[node]++
			p.IP = fmt.Sprintf("10.244.%d.%d", n, 1+f.podIPs[node])
		}
		f.pods = append(f.pods, p)
		out[i] = p
		f.exclusive[p.Name] = s.CPU.Exclusive
	}
	f.log("create pods %s", strings.Join(names, " "))
	return out, nil
}

func (f *Fake) emptiestNode() string {
	count := map[string]int{}
	for _, p := range f.pods {
		count[p.Node]++
	}
	best := f.nodes[0].Name
	for _, n := range f.nodes {
		if count[n.Name] < count[best] {
			best = n.Name
		}
	}
	return best
}

// pod finds a pod by name; f.mu is held.
func (f *Fake) pod(name string) (cluster.Pod, bool) {
	i := slices.IndexFunc(f.pods, func(p cluster.Pod) bool { return p.Name == name })
	if i < 0 {
		return cluster.Pod{}, false
	}
	return f.pods[i], true
}

// DeletePods implements cluster.Cluster. Deleting a pod that does not exist is an error (the
// others are deleted all the same).
func (f *Fake) DeletePods(ctx context.Context, names []string) error {
	return deleteNamed(ctx, f, &f.pods, "pods", names, func(p cluster.Pod) string { return p.Name })
}

// CreateServices implements cluster.Cluster: ClusterIPs 10.96.0.1, .2, ... in creation order;
// the endpoints are the addresses of the pods the selector picks at that time. A NodePort
// Service's ports get NodePorts as Kubernetes gives them: the one asked for (an error wrapping
// cluster.ErrNodePortTaken when another Service has it), else the lowest free above the static
// band 30000-30085 that Kubernetes leaves to requests (then in it); ports of one Service with
// the same port number share one.
func (f *Fake) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := namesOf(specs, func(s cluster.ServiceSpec) string { return s.Name })
	taken := func(n string) bool {
		return slices.ContainsFunc(f.services, func(s service) bool { return s.Name == n })
	}
	if err := checkNew(ctx, "Service", names, f.fail.Services, taken); err != nil {
		return nil, err
	}
	out := make([]cluster.Service, len(specs))
	made := make([]service, len(specs))
	inUse := map[int]bool{}
	for _, s := range f.services {
		for _, p := range s.Ports {
			inUse[p.NodePort] = true
		}
	}
	for i, s := range specs {
		svc := cluster.Service{Name: s.Name, Ports: slices.Clone(s.Ports)}
		if err := allocNodePorts(s, svc.Ports, inUse); err != nil {
			return nil, err
		}
		made[i] = service{Service: svc, selector: maps.Clone(s.Selector), local: s.NodePort && s.ExternalLocal}
	}
	for i, s := range made {
		if s.ClusterIP = specs[i].ClusterIP; s.ClusterIP == "" {
			f.vips++
			s.ClusterIP = fmt.Sprintf("10.96.%d.%d", f.vips/250, f.vips%250)
		} else if slices.ContainsFunc(f.services, func(o service) bool { return o.ClusterIP == s.ClusterIP }) {
			return nil, fmt.Errorf("service %s: ClusterIP %s is in use", s.Name, s.ClusterIP)
		}
		for _, p := range f.selected(s.selector) {
			s.Endpoints = append(s.Endpoints, p.IP)
		}
		f.services = append(f.services, s)
		out[i] = s.Service
		out[i].Ports = slices.Clone(s.Ports)
	}
	f.log("create services %s", strings.Join(names, " "))
	return out, nil
}

// allocNodePorts gives the ports of a NodePort Service their NodePorts in place (see
// CreateServices), marking them in inUse; ports of other Services get none.
func allocNodePorts(s cluster.ServiceSpec, ports []cluster.ServicePort, inUse map[int]bool) error {
	byPort := map[int]int{} // port number -> its NodePort in this Service
	for i := range ports {
		if !s.NodePort {
			ports[i].NodePort = 0
			continue
		}
		if np, ok := byPort[ports[i].Port]; ok && (ports[i].NodePort == 0 || ports[i].NodePort == np) {
			ports[i].NodePort = np
			continue
		}
		np := ports[i].NodePort
		switch {
		case np != 0 && (np < 30000 || np > 32767):
			return fmt.Errorf("clustertest: service %s: nodePort %d outside 30000-32767", s.Name, np)
		case np != 0 && inUse[np]:
			return fmt.Errorf("clustertest: service %s: nodePort %d: %w", s.Name, np, cluster.ErrNodePortTaken)
		case np == 0:
			for k := 0; k < 2768; k++ {
				if np = 30000 + (86+k)%2768; !inUse[np] {
					break
				}
			}
			if inUse[np] {
				return fmt.Errorf("clustertest: service %s: no free nodePort", s.Name)
			}
		}
		inUse[np] = true
		byPort[ports[i].Port] = np
		ports[i].NodePort = np
	}
	return nil
}

// NodePorts implements cluster.NodePortChecker: Config.NoNodePorts.
func (f *Fake) NodePorts() error {
	if f.noNP != "" {
		return cluster.Unsupported("%s", f.noNP)
	}
	return nil
}

// selected are the pods (neither host-network nor external) a Service selector picks; f.mu is
// held.
func (f *Fake) selected(selector map[string]string) []cluster.Pod {
	var out []cluster.Pod
	for _, p := range f.pods {
		if !p.HostNetwork && !p.External && cluster.Selects(selector, p.Labels) {
			out = append(out, p)
		}
	}
	return out
}

// DeleteServices implements cluster.Cluster. Deleting a Service that does not exist is an
// error (the others are deleted all the same).
func (f *Fake) DeleteServices(ctx context.Context, names []string) error {
	return deleteNamed(ctx, f, &f.services, "services", names, func(s service) string { return s.Name })
}

// CreateNetworkPolicies implements cluster.Cluster.
func (f *Fake) CreateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := namesOf(pols, func(p networkingv1.NetworkPolicy) string { return p.Name })
	taken := func(n string) bool {
		return slices.ContainsFunc(f.policies, func(p networkingv1.NetworkPolicy) bool { return p.Name == n })
	}
	if err := checkNew(ctx, "NetworkPolicy", names, f.fail.Policies, taken); err != nil {
		return err
	}
	for _, p := range pols {
		f.policies = append(f.policies, *p.DeepCopy())
	}
	if f.enforce {
		f.lagLeft = f.lag
	}
	f.log("create policies %s", strings.Join(names, " "))
	return nil
}

// DeleteNetworkPolicies implements cluster.Cluster. Deleting a policy that does not exist is
// an error (the others are deleted all the same).
func (f *Fake) DeleteNetworkPolicies(ctx context.Context, names []string) error {
	return deleteNamed(ctx, f, &f.policies, "policies", names, func(p networkingv1.NetworkPolicy) string { return p.Name })
}

// UpdateNetworkPolicies implements cluster.Cluster: the policies of these names are replaced;
// a name that does not exist is an error, and nothing is replaced then.
func (f *Fake) UpdateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	idx := make([]int, len(pols))
	for i, p := range pols {
		if idx[i] = slices.IndexFunc(f.policies, func(q networkingv1.NetworkPolicy) bool { return q.Name == p.Name }); idx[i] < 0 {
			return fmt.Errorf("clustertest: no NetworkPolicy %q", p.Name)
		}
	}
	for i, p := range pols {
		f.policies[idx[i]] = *p.DeepCopy()
	}
	f.log("update policies %s", strings.Join(namesOf(pols, func(p networkingv1.NetworkPolicy) string { return p.Name }), " "))
	return nil
}

// Programmed implements cluster.Cluster: a copy of Config.Programmed.
func (f *Fake) Programmed(context.Context) map[string]float64 {
	return maps.Clone(f.programmed)
}

// NodeCPU implements cluster.Cluster: each call adds the CPU step to the node's counters, so
// two samples in a row are one step apart.
func (f *Fake) NodeCPU(ctx context.Context, node string) (cluster.CPUSample, error) {
	if _, ok := f.node(node); !ok {
		return cluster.CPUSample{}, fmt.Errorf("clustertest: no node %q", node)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, d := f.cpu[node], f.step
	s = cluster.CPUSample{User: s.User + d.User, Nice: s.Nice + d.Nice, System: s.System + d.System, Idle: s.Idle + d.Idle,
		IOWait: s.IOWait + d.IOWait, IRQ: s.IRQ + d.IRQ, SoftIRQ: s.SoftIRQ + d.SoftIRQ, Steal: s.Steal + d.Steal}
	f.cpu[node] = s
	return s, ctx.Err()
}

// Facts implements cluster.Cluster.
func (f *Fake) Facts() cluster.Facts {
	out := f.facts
	out.Details = maps.Clone(f.facts.Details)
	return out
}

// Close implements cluster.Cluster. It only counts the call: what the cluster's user did not
// delete stays, for Leftovers to tell.
func (f *Fake) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	f.log("close")
	return nil
}

// Closed tells how many times Close was called.
func (f *Fake) Closed() int { return locked(f, func() int { return f.closed }) }

// Pod returns a pod that exists now.
func (f *Fake) Pod(name string) (cluster.Pod, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pod(name)
}

// Pods are the pods that exist now, in creation order.
func (f *Fake) Pods() []cluster.Pod {
	return locked(f, func() []cluster.Pod { return slices.Clone(f.pods) })
}

// Services are the Services that exist now, in creation order.
func (f *Fake) Services() []cluster.Service {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]cluster.Service, len(f.services))
	for i, s := range f.services {
		out[i] = s.Service
	}
	return out
}

// Policies are the NetworkPolicies that exist now, in creation order.
func (f *Fake) Policies() []networkingv1.NetworkPolicy {
	return locked(f, func() []networkingv1.NetworkPolicy { return slices.Clone(f.policies) })
}

// Execs are all Exec calls so far, in order.
func (f *Fake) Execs() []Call { return locked(f, func() []Call { return slices.Clone(f.execs) }) }

// Starts are all Start calls so far, in order.
func (f *Fake) Starts() []Call { return locked(f, func() []Call { return slices.Clone(f.starts) }) }

// History is every call that changed something (create, delete, start, stop, exec, close),
// one line each in order, e.g. "create services extra0 extra1" or "exec client iperf3 -c ...".
func (f *Fake) History() []string {
	return locked(f, func() []string { return slices.Clone(f.history) })
}

// Leftovers names what exists now and was not deleted (pods, Services, NetworkPolicies) and
// the processes started and never stopped, e.g. "pod client", "process iperf3 in server".
func (f *Fake) Leftovers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.pods {
		out = append(out, "pod "+p.Name)
	}
	for _, s := range f.services {
		out = append(out, "service "+s.Name)
	}
	for _, p := range f.policies {
		out = append(out, "policy "+p.Name)
	}
	for _, p := range f.procs {
		if !p.stopped {
			out = append(out, fmt.Sprintf("process %s in %s", p.cmd[0], p.pod))
		}
	}
	return out
}

// AssertEmpty fails the test when something was left behind (see Leftovers).
func (f *Fake) AssertEmpty(tb testing.TB) {
	tb.Helper()
	if left := f.Leftovers(); len(left) > 0 {
		tb.Errorf("left behind in the fake cluster: %s", strings.Join(left, ", "))
	}
}

// checkNew rejects a create call with an ended context, or one that asks for an object of a
// name that fails on purpose, or of a name empty, taken or asked for twice.
func checkNew(ctx context.Context, kind string, names, fail []string, taken func(string) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, n := range names {
		if slices.Contains(fail, n) {
			return fmt.Errorf("clustertest: creating %s %s fails on purpose", kind, n)
		}
		if n == "" || seen[n] || taken(n) {
			return fmt.Errorf("clustertest: %s name %q empty or taken", kind, n)
		}
		seen[n] = true
	}
	return nil
}

// deleteNamed deletes the named objects from *list; a name not there is an error (the others
// are deleted all the same).
func deleteNamed[T any](ctx context.Context, f *Fake, list *[]T, kind string, names []string, name func(T) string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("delete %s %s", kind, strings.Join(names, " "))
	errs := []error{ctx.Err()}
	for _, n := range names {
		i := slices.IndexFunc(*list, func(o T) bool { return name(o) == n })
		if i < 0 {
			errs = append(errs, fmt.Errorf("clustertest: delete %s: no %s", kind, n))
			continue
		}
		*list = slices.Delete(*list, i, i+1)
	}
	return errors.Join(errs...)
}

// locked returns get's result with f.mu held.
func locked[T any](f *Fake, get func() T) T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return get()
}

func namesOf[T any](objs []T, name func(T) string) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = name(o)
	}
	return out
}
