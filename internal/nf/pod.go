package nf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// PodKind is a Routed kind that also runs inside a pod of a cluster network (the kube
// backend): the NF has one interface there (the pod's eth0, shared with every hop), forwarding
// is enabled by PodSysctls, the chain is made by the host routes of PodRoutes, and the kind runs
// its tools in the pod's container through a PodRunner.
type PodKind interface {
	Kind
	// PodTools are the host tools (internal/hosttools names) the NF runs in its pod: the tools
	// image carries them.
	PodTools() []string
	// PodFiles are other host files those tools load at run time (plug-ins), absolute paths
	// (globs allowed): the tools image carries them at the same paths, with their libraries.
	PodFiles() []string
	// StartInPod makes the NF in the pod behind run enforce rules on what it forwards.
	StartInPod(ctx context.Context, run PodRunner, rules RuleSet) error
	// Dropped is how many packets the NF in the pod behind run has dropped so far.
	Dropped(ctx context.Context, run PodRunner) (uint64, error)
}

// PodRunner runs argv in an NF's pod with stdin (nil: none) and returns its standard output;
// a non-zero exit is an error carrying the command's standard error.
type PodRunner func(ctx context.Context, stdin []byte, argv ...string) ([]byte, error)

// PodInterface is the name a cluster network gives a pod's interface (the CNI convention).
const PodInterface = "eth0"

// PodSysctls are the namespaced sysctls an NF pod is created with: it forwards, and it sends no
// ICMP redirects (client, NFs and server share one subnet, so without that the first NF would
// tell the client to send to the server directly, and the chain would be bypassed). Sending a
// redirect is on when either "all" or the interface says so: both are turned off.
func PodSysctls() map[string]string {
	return map[string]string{
		"net.ipv4.ip_forward":                               "1",
		"net.ipv4.conf.all.send_redirects":                  "0",
		"net.ipv4.conf." + PodInterface + ".send_redirects": "0",
	}
}

// PodSysctlNames are PodSysctls' names, sorted (what a kubelet must allow).
func PodSysctlNames() []string {
	var out []string
	for k := range PodSysctls() {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Route is a host route: Dst/32 through the neighbour Via.
type Route struct {
	Dst, Via netip.Addr
}

// Args is the route as `ip route replace` arguments.
func (r Route) Args() []string {
	return []string{"ip", "route", "replace", r.Dst.String() + "/32", "via", r.Via.String(), "dev", PodInterface}
}

// PodRoutes are the host routes that chain pods sharing one layer-2 segment (the pods of one
// node on a bridge CNI): the client and every NF reach the server through the next NF, the
// server and every NF reach the client through the previous one; the NFs next to the client
// and the server reach them directly (no route). It returns the client's, the server's and each
// NF's routes.
func PodRoutes(client, server netip.Addr, nfs []netip.Addr) (clientR, serverR []Route, nfR [][]Route, err error) {
	if len(nfs) == 0 {
		return nil, nil, nil, fmt.Errorf("a chain needs at least one network function")
	}
	seen := map[netip.Addr]bool{client: true}
	if seen[server] {
		return nil, nil, nil, fmt.Errorf("client and server share the address %s", server)
	}
	seen[server] = true
	for i, a := range nfs {
		if !a.Is4() || seen[a] {
			return nil, nil, nil, fmt.Errorf("network function %d: address %s is not a distinct IPv4 address", i+1, a)
		}
		seen[a] = true
	}
	if !client.Is4() || !server.Is4() {
		return nil, nil, nil, fmt.Errorf("chains are IPv4: client %s, server %s", client, server)
	}
	n := len(nfs)
	clientR = []Route{{Dst: server, Via: nfs[0]}}
	serverR = []Route{{Dst: client, Via: nfs[n-1]}}
	nfR = make([][]Route, n)
	for i := range nfs {
		if i < n-1 {
			nfR[i] = append(nfR[i], Route{Dst: server, Via: nfs[i+1]})
		}
		if i > 0 {
			nfR[i] = append(nfR[i], Route{Dst: client, Via: nfs[i-1]})
		}
	}
	return clientR, serverR, nfR, nil
}

// PodKinds are the registered kinds that run in pods (sorted by name).
func PodKinds() []PodKind { return kindsAs[PodKind]() }

// PodHop is one pod of a chain on a cluster network: its address and how to run its tools.
type PodHop struct {
	IP  netip.Addr
	Run PodRunner
}

// ErrBypassed marks a chain whose traffic does not cross its network functions: on a cluster
// network whose pods do not share one layer-2 segment (a /32 per pod behind the node, as
// Calico and Cilium do), the routes of PodRoutes are taken by the node, not by the next pod.
var ErrBypassed = errors.New("traffic does not cross the network functions")

// StartPodChain programs a chain of pods that are up (the NFs created with PodSysctls): the
// routes of PodRoutes in every pod, then kind k in every NF with the rule set of ruleCount
// rules that lets the client reach ports on the server. It returns the rule set.
func StartPodChain(ctx context.Context, k PodKind, ports []Port, ruleCount int, client, server PodHop, nfs []PodHop) (RuleSet, error) {
	ips := make([]netip.Addr, len(nfs))
	for i, h := range nfs {
		ips[i] = h.IP
	}
	cr, sr, nr, err := PodRoutes(client.IP, server.IP, ips)
	if err != nil {
		return RuleSet{}, err
	}
	rules, err := Build(Flow{Client: client.IP, Server: server.IP, Ports: ports}, ruleCount)
	if err != nil {
		return RuleSet{}, err
	}
	route := func(who string, h PodHop, routes []Route) error {
		for _, r := range routes {
			if _, err := h.Run(ctx, nil, r.Args()...); err != nil {
				return fmt.Errorf("%s: route to %s via %s (the pods of a chain must be neighbours on one layer-2 segment): %w", who, r.Dst, r.Via, err)
			}
		}
		return nil
	}
	for i, h := range nfs {
		who := fmt.Sprintf("network function %d", i+1)
		if err := route(who, h, nr[i]); err != nil {
			return RuleSet{}, err
		}
		if err := k.StartInPod(ctx, h.Run, rules); err != nil {
			return RuleSet{}, fmt.Errorf("%s: start %s: %w", who, k.Name(), err)
		}
	}
	if err := route("client", client, cr); err != nil {
		return RuleSet{}, err
	}
	if err := route("server", server, sr); err != nil {
		return RuleSet{}, err
	}
	return rules, nil
}

// pingCount is how many pings CheckPodChain sends.
const pingCount = 2

// CheckPodChain proves that the client's traffic to the server crosses the first network
// function: pings (which no rule set allows) must not get through, the first NF's drop counter
// must grow by at least as many, and the client must still route to the server through the
// first NF afterwards. Otherwise the error wraps ErrBypassed.
func CheckPodChain(ctx context.Context, k PodKind, client, server PodHop, first PodHop) error {
	before, err := k.Dropped(ctx, first.Run)
	if err != nil {
		return fmt.Errorf("read the first network function's drops: %w", err)
	}
	_, perr := client.Run(ctx, nil, "busybox", "ping", "-c", strconv.Itoa(pingCount), "-W", "1", server.IP.String())
	if perr == nil {
		return fmt.Errorf("%w: a ping from the client (%s) reached the server (%s) although every network function drops it", ErrBypassed, client.IP, server.IP)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	after, err := k.Dropped(ctx, first.Run)
	if err != nil {
		return fmt.Errorf("read the first network function's drops: %w", err)
	}
	// An NF that sends ICMP redirects has told the client by now that the server is its
	// neighbour; the client then sends the rest straight to it (the replies still cross the
	// NF, so the pings alone would not show it).
	out, err := client.Run(ctx, nil, "ip", "route", "get", server.IP.String())
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if via := routeVia(out); via != first.IP.String() {
		if via == "" {
			via = "directly"
		} else {
			via = "via " + via
		}
		return fmt.Errorf("%w: the client routes to the server %s, not through the first network function %s (an ICMP redirect?): %s", ErrBypassed, via, first.IP, strings.Join(strings.Fields(string(out)), " "))
	}
	if after-before < pingCount {
		return fmt.Errorf("%w: %d pings from the client were lost but the first network function (%s) dropped %d packets (ping: %v)", ErrBypassed, pingCount, first.IP, after-before, perr)
	}
	return nil
}

// routeVia is the gateway of `ip route get` output (iproute2's or busybox's), "" for none.
func routeVia(out []byte) string {
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "via" {
			return f[i+1]
		}
	}
	return ""
}

// PortOf is the port of a flow given as protocol name ("udp"; anything else is TCP) and number.
func PortOf(protocol string, port int) Port {
	if protocol == "udp" {
		return Port{Proto: UDP, Port: uint16(port)}
	}
	return Port{Proto: TCP, Port: uint16(port)}
}
