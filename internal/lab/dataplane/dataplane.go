// Package dataplane owns the lab's data-plane parts and presets. Every part is an engine behind
// a small interface, registered by its own file in one registry per kind:
//
//   - attach: how a pod is wired to its node (bridge, routed, ...);
//   - overlay: how a node reaches other nodes' pods (vxlan, none = native routes);
//   - proxy: the Service implementation (kube-proxy's iptables and nftables layouts, ...);
//   - policy: the NetworkPolicy engine (iptables + ipset, nftables, ...).
//
// A preset is a named combination of parts. `cnibench list`, doctor, preflight and the case
// labels read the registries: a new engine is one new file that registers itself (plus its
// tests), and nothing else names it.
package dataplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
)

// Part is what every engine has.
type Part interface {
	// Name is the engine's name in presets, plans (--proxy, --policy) and case labels.
	Name() string
	// Summary says in a few words what the engine does or emulates (cnibench list).
	Summary() string
	// Needs are the host capabilities the engine uses, as doctor check names ("vxlan",
	// "nftables", "cni ptp", "tool ipset", ...): preflight refuses a case whose parts need
	// something the doctor found missing, and list says why a preset cannot run.
	Needs() []string
}

// Node is what an engine sees of a lab node while it programs it.
type Node struct {
	Index int
	Name  string
	NS    string // network namespace name
	Path  string // its path (/run/netns/NS), for tools run with nsenter --net=
	IP    net.IP // underlay address
	// BPFDir is where the node's eBPF objects are pinned: a bpf file system the engine that
	// pins first mounts, removed with the lab.
	BPFDir string
	// Dir is a directory of the node's own for an engine's files (daemons' databases, sockets,
	// logs), removed with the lab.
	Dir     string
	PodMTU  int        // the MTU of the pods' interfaces
	PodCIDR *net.IPNet // the node's pod CIDR; its first address is the node's own on the overlay
	// Cgroup is the cgroup v2 directory the node's pod processes run in ("" when the host has
	// no cgroup v2 hierarchy).
	Cgroup string
	// ClusterCIDR holds every node's pod CIDR (and silent pods).
	ClusterCIDR *net.IPNet
	// Blocks are the address blocks other nodes route to this node (pod CIDR, silent pods).
	Blocks []*net.IPNet
	// Netlink runs fn with a netlink handle inside the node's namespace.
	Netlink func(fn func(h *netlink.Handle) error) error
	// Sysctl writes a sysctl (a path under /proc/sys such as "net/ipv4/ip_forward") inside
	// the node's namespace.
	Sysctl func(key, value string) error
}

// XTablesLock is the node's own xtables lock file (iptables' XTABLES_LOCKFILE), in Dir, which
// it creates; "" (the host's /run/xtables.lock) for a node without a Dir. A real node has its
// lock to itself; without one of their own the lab's nodes would share the host's, and
// iptables-legacy on one node would wait for another's.
func (n Node) XTablesLock() (string, error) {
	if n.Dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return "", fmt.Errorf("node %s: %w", n.Name, err)
	}
	return filepath.Join(n.Dir, "xtables.lock"), nil
}

// registry holds the engines of one kind by name.
type registry[T Part] struct {
	kind string
	mu   sync.Mutex
	m    map[string]T
}

func (r *registry[T]) add(p T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]T{}
	}
	if _, dup := r.m[p.Name()]; dup {
		panic(fmt.Sprintf("dataplane: %s %q registered twice", r.kind, p.Name()))
	}
	r.m[p.Name()] = p
}

func (r *registry[T]) get(name string) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.m[name]
	return p, ok
}

// lookup returns the engine or an error naming the valid ones.
func (r *registry[T]) lookup(name string) (T, error) {
	if p, ok := r.get(name); ok {
		return p, nil
	}
	var zero T
	return zero, fmt.Errorf("unknown %s %q (valid: %s)", r.kind, name, strings.Join(r.names(), ", "))
}

// names lists the registered names, sorted, "none" last.
func (r *registry[T]) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i] == None) != (out[j] == None) {
			return out[j] == None
		}
		return out[i] < out[j]
	})
	return out
}

func (r *registry[T]) all() []T {
	var out []T
	for _, n := range r.names() {
		p, _ := r.get(n)
		out = append(out, p)
	}
	return out
}

// None is the name of the engine of each kind that does nothing (no overlay, no Service
// implementation, no policy enforcement).
const None = "none"

var (
	attaches = &registry[Attach]{kind: "attach kind"}
	overlays = &registry[Overlay]{kind: "overlay"}
	proxies  = &registry[Proxy]{kind: "proxy"}
	policies = &registry[Policy]{kind: "policy engine"}
	agents   = &registry[Agent]{kind: "node agent"}
)

// RegisterAttach, RegisterOverlay, RegisterProxy and RegisterPolicy make an engine known; its
// file calls them from init. A name registered twice panics.
func RegisterAttach(a Attach)   { attaches.add(a) }
func RegisterOverlay(o Overlay) { overlays.add(o) }

// RegisterAgent makes a node agent known (see RegisterAttach).
func RegisterAgent(a Agent)   { agents.add(a) }
func RegisterProxy(p Proxy)   { proxies.add(p) }
func RegisterPolicy(p Policy) { policies.add(p) }

// Proxies lists the registered Service implementations ("none" last).
func Proxies() []string { return proxies.names() }

// PolicyEngines lists the registered policy engines ("none" last).
func PolicyEngines() []string { return policies.names() }

// ProxyEngines returns the registered Service implementations.
func ProxyEngines() []Proxy { return proxies.all() }

// PolicyEngineList returns the registered policy engines.
func PolicyEngineList() []Policy { return policies.all() }

// AttachKinds and OverlayKinds return the registered attach kinds and overlays.
func AttachKinds() []Attach   { return attaches.all() }
func OverlayKinds() []Overlay { return overlays.all() }

// Agents returns the registered node agents.
func Agents() []Agent { return agents.all() }
