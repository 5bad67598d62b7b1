package dataplane

import (
	"net"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/lab/policy"
	"github.com/cnibench/cnibench/internal/lab/proxy"
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
	// Filtered readies a node for Services and policies filtering its pods' traffic (called
	// once per node before the first programming); FilterNeeds is what the host needs then.
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

// Proxy is a Service implementation.
type Proxy interface {
	Part
	// Usable is nil when the lab programs Services with this engine on this host, else an
	// error that says why not (the lab reports the cases as skipped with it).
	Usable() error
	// Render renders every Service of the lab; Apply programs a rendering in the network
	// namespace at nsPath, replacing the previous one.
	Render(svcs []proxy.Service, opt proxy.Options) ([]byte, proxy.Counts)
	Apply(nsPath string, input []byte) error
}

// Policy is a NetworkPolicy engine.
type Policy interface {
	Part
	// Usable is nil when the engine enforces NetworkPolicies here, else an error that says
	// why not (the lab reports the cases as skipped with it).
	Usable() error
	// Render renders a node's compiled policies; Apply installs the rendering in the network
	// namespace at nsPath, replacing the previous one.
	Render(prog *policy.Program) (Rendering, policy.Counts)
	Apply(nsPath string, r Rendering) error
}

// Rendering is an engine's input to its tools, one element per tool run.
type Rendering [][]byte
