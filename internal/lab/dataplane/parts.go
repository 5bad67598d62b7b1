package dataplane

import (
	"net"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/engine/policy"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// Attach wires pods to their node, the way a CNI plugin and its node agent do.
type Attach interface {
	Part
	// PodNetwork reports whether pods get a network of their own; without one a dataplane
	// has host-network pods only (node2node) or a bare veth pair (bare).
	PodNetwork() bool
	// CNI returns the node's CNI network name and plugin configuration with the given IPAM
	// section (what a kubelet finds in /etc/cni/net.d).
	CNI(podMTU int, ipam map[string]any) (network string, plugin map[string]any)
	// SetupNode programs a node before its pods come (routes the CNI's agent keeps).
	SetupNode(n Node) error
	// PodAdded finishes a pod after CNI ADD, as the CNI's agent does.
	PodAdded(n Node, p PodNet) error
	// Filtered readies a node for Services and policies filtering its pods' traffic in the
	// node's IP stack (called once per node before the first programming, when
	// Parts.StackFiltered); FilterNeeds is what the host needs then.
	Filtered(n Node) error
	FilterNeeds() []string
}

// PodNet is a pod as CNI ADD left it.
type PodNet struct {
	NS       string // network namespace name
	IP       net.IP
	HostVeth string // the host side interface the CNI result names ("" when none)
	// Netlink runs fn with a netlink handle inside the pod's namespace.
	Netlink func(fn func(h *netlink.Handle) error) error
}

// Overlay carries traffic between nodes' pods.
type Overlay interface {
	Part
	// Overhead is the bytes the overlay adds to every packet (pods get the underlay MTU less it).
	Overhead() int
	// SetupNode creates the node's overlay devices (called for every node first).
	SetupNode(n Node, p Preset, underlayMTU int) error
	// Remote programs in node n the way to remote node m's blocks.
	Remote(n, m Node, p Preset) error
	// Facts describe the overlay of a preset for the run's record (device, port, ...).
	Facts(p Preset) map[string]any
}

// Agent is what a CNI's node agent programs besides the pods' attachment and the overlay: its
// own forwarding and NAT rules (flanneld's FLANNEL-FWD and FLANNEL-POSTRTG chains).
type Agent interface {
	Part
	// SetupNode programs a node (after its overlay and attach set-up).
	SetupNode(n Node) error
}

// Proxy is a Service implementation.
type Proxy interface {
	Part
	// Usable is nil when the lab programs Services with this engine on this host, else an
	// error that says why not (the lab reports the cases as skipped with it).
	Usable() error
	// Render renders every Service of the lab; Apply programs a rendering in node n,
	// replacing the previous one.
	Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts)
	Apply(n Node, input []byte) error
}

// PartialProxy is implemented by the proxies that can program a node with only what changed
// since their last rendering for it, as kube-proxy's partial syncs do (the lab's sync mode
// "partial"; "full" always uses Render). The lab keeps, per node, the state the last
// rendering that was applied without error returned, and forgets it when an Apply fails (the
// next rendering is then a full one).
type PartialProxy interface {
	Proxy
	// RenderPartial renders svcs as a change from prev, the state the last applied rendering
	// for this node returned (nil: none, or its Apply failed: a full rendering, which must
	// replace whatever the node holds). The input is applied with Apply; next is kept for
	// the next call. Counts are those of the whole ruleset after the change (as Render's),
	// with Changed set to what the input touches.
	RenderPartial(prev any, svcs []proxy.Service, opt proxy.Options) (input []byte, next any, cnt proxy.Counts)
}

// PodHook is implemented by the proxy and policy engines that program each pod's host side
// (an eBPF program on its host interface): the lab calls PodAdded for every pod it attaches,
// after the attach kind's PodAdded, whether or not Services or policies exist yet.
type PodHook interface {
	PodAdded(n Node, p PodNet) error
}

// Policy is a NetworkPolicy engine.
type Policy interface {
	Part
	// Usable is nil when the engine enforces NetworkPolicies here, else an error that says
	// why not (the lab reports the cases as skipped with it).
	Usable() error
	// Render renders a node's compiled policies; Apply installs the rendering in node n,
	// replacing the previous one.
	Render(prog *policy.Program) (Rendering, policy.Counts)
	Apply(n Node, r Rendering) error
}

// PartialPolicy is implemented by the policy engines that can program a node with only what
// changed since their last rendering for it (Calico's and Cilium's incremental updates; the
// lab's sync mode "partial", as for proxies: see PartialProxy for how the lab keeps the state).
type PartialPolicy interface {
	Policy
	// RenderPartial renders prog as a change from prev, the state the last applied rendering
	// for this node returned (nil: none, or its Apply failed: a full rendering, which must
	// replace whatever the node holds). The rendering is applied with Apply; next is kept for
	// the next call. Counts are those of the whole program (as Render's), with Changed set to
	// what the rendering touches.
	RenderPartial(prev any, prog *policy.Program) (r Rendering, next any, cnt policy.Counts)
}

// Resting is implemented by the parts that poll a CPU whether traffic comes or not (OVS-DPDK's
// PMD threads): Wake makes node n's poll as it is meant to, Rest lets it sleep while no trial
// runs (cluster.Resting). A node is resting after SetupNode.
type Resting interface {
	Wake(n Node) error
	Rest(n Node) error
}

// Counting is implemented by the parts that keep packet counters in each node (the eBPF data
// paths: per cube, per program): cumulative, named "<function>_<counter>" with a prefix no
// other part uses; what a run reads before and after a trial.
type Counting interface {
	Counters(n Node) (map[string]uint64, error)
}

// Combining is implemented by the engines that work only with some other parts: Combines
// says why the parts cannot run together (nil when they can); Resolve reports it as
// unsupported.
type Combining interface {
	Combines(p Parts) error
}

// Rendering is an engine's input to its tools, one element per tool run.
type Rendering [][]byte
