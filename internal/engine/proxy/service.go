// Package proxy programs Services the way kube-proxy does, in a network namespace it is given
// (a lab node's; it builds none, see internal/engine):
//   - iptables mode (RenderIPTables, ApplyIPTables): KUBE-SERVICES -> KUBE-SVC-<hash> ->
//     KUBE-SEP-<hash>, statistic-mode random per endpoint, masquerade marking for hairpin and
//     off-cluster sources, NodePorts through KUBE-NODEPORTS -> KUBE-EXT-<hash>, as one
//     iptables-restore input so that 10,000 Services are one call;
//   - nftables mode (RenderNFTables, ApplyNFTables): table ip kube-proxy,
//     the service-ips and service-nodeports verdict maps, service-/external-/local-/endpoint-
//     chains with numgen load balancing, as one nft transaction;
//   - IPVS mode (RenderIPVS): ipvsadm, ipset and address text only, since the lab's kernel has
//     no IPVS (IPVSAvailable says why).
//
// The iptables and nftables modes also render partial syncs, as kube-proxy does
// (RenderIPTablesPartial, RenderNFTablesPartial): only what changed since the state the last
// rendering returned, applied with the same ApplyIPTables and ApplyNFTables.
//
// What every rendering shares (the Service model, Options, Counts, the Service order and
// sameService) is in service.go; each mode's renderer and its partial syncs are in its own files.
package proxy

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Endpoint is one backend of a Service port.
type Endpoint struct {
	IP   string
	Port int
	// Node is the node the endpoint's pod runs on: it is local to a rendering for that node
	// (Options.NodeName), which matters to externalTrafficPolicy Local.
	Node string
}

func (e Endpoint) String() string { return fmt.Sprintf("%s:%d", e.IP, e.Port) }

// Service is one port of a ClusterIP or NodePort Service with its ready endpoints.
type Service struct {
	Namespace, Name string
	PortName        string // the Service port's name ("" for an unnamed port)
	ClusterIP       string
	Port            int
	Protocol        string // "tcp" or "udp"
	Endpoints       []Endpoint
	// NodePort is the port every node serves the Service on (type NodePort); 0 = none.
	NodePort int
	// ExternalLocal is externalTrafficPolicy Local: a node sends NodePort traffic only to
	// its own endpoints and keeps the client's source address (false = Cluster: any
	// endpoint, source masqueraded).
	ExternalLocal bool
}

// PortKey is kube-proxy's ServicePortName string: "namespace/name:portname", or
// "namespace/name" for an unnamed port.
func (s Service) PortKey() string {
	if s.PortName == "" {
		return s.Namespace + "/" + s.Name
	}
	return s.Namespace + "/" + s.Name + ":" + s.PortName
}

// Options of the iptables and nftables renderings.
type Options struct {
	// NodeName is the node the rendering is for: an endpoint whose Node is NodeName is local
	// ("" = no node: no endpoint is local). Only NodePorts with externalTrafficPolicy Local
	// depend on it; the rest renders the same for every node.
	NodeName string
	// NodeIPs are the node's addresses NodePorts are served on (nftables: the nodeport-ips
	// set). The iptables rendering does not use them: it matches every local address
	// ("-m addrtype --dst-type LOCAL"), as kube-proxy's iptables mode does by default.
	NodeIPs []string
	// ClusterCIDR: traffic to a Service from outside it is masqueraded (kube-proxy's
	// --cluster-cidr); "" = no such rule.
	ClusterCIDR string
	// Stale are chains of an earlier rendering to remove (flushed, then deleted), as
	// kube-proxy does for Services and endpoints that went away.
	Stale []string
	// ServiceCIDR (nftables only): new connections to an address of it that is no
	// ClusterIP are dropped, as kube-proxy does when it knows the service CIDR; "" = no
	// such rule.
	ServiceCIDR string
	// NFTMod1Maps makes RenderNFTables dispatch a Service with a single endpoint through
	// "numgen random mod 1 vmap { 0 : goto ... }" as kube-proxy up to 1.36 did, instead of a
	// plain goto (kube-proxy 1.37+): each such rule is an anonymous map, and the kernel
	// scans every map of the table when it creates one, so 10,000 of them cost minutes.
	NFTMod1Maps bool
}

// MasqMark is kube-proxy's default masquerade mark bit.
const MasqMark = "0x4000"

// Counts are what a rendering holds, for the case record.
type Counts struct {
	Services, Endpoints, Chains, Rules int
	// Elements are the set and map elements (nftables maps and sets, ipset entries); 0 for
	// the iptables rendering, which has none.
	Elements int
	Names    []string // the chains declared (iptables: of the nat and the filter table)
	// Changed is what a partial rendering (RenderPartial) touches: chains written, flushed
	// or deleted plus set/map elements added or deleted; 0 for a full rendering.
	Changed int
}

// sameService says whether a and b render the same on the same node: every field equal,
// the endpoints in the same order (another order renders the same, but is rendered again to
// find that out). TestSameServiceSeesEveryField keeps it in step with Service.
func sameService(a, b Service) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.PortName == b.PortName && a.ClusterIP == b.ClusterIP &&
		a.Port == b.Port && a.Protocol == b.Protocol && a.NodePort == b.NodePort && a.ExternalLocal == b.ExternalLocal &&
		slices.Equal(a.Endpoints, b.Endpoints)
}

// sortedServices returns a copy of svcs ordered by cmpServices: the renderings write Services
// in this order, so that their output does not depend on the caller's, and the partial ones
// merge a rendering with the previous one in it. A list in this order already (the lab's) is
// only checked.
func sortedServices(svcs []Service) []Service {
	svcs = slices.Clone(svcs)
	byService := func(a, b Service) int { return cmpServices(&a, &b) }
	if !slices.IsSortedFunc(svcs, byService) {
		slices.SortFunc(svcs, byService)
	}
	return svcs
}

// cmpServices orders Service ports by namespace, name, port name and protocol: what tells
// them apart (a Service port's identity).
func cmpServices(a, b *Service) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name),
		strings.Compare(a.PortName, b.PortName), strings.Compare(a.Protocol, b.Protocol))
}

// sortedEndpoints returns s's endpoints ordered by address, the order they are balanced in.
func (s Service) sortedEndpoints() []Endpoint {
	eps := append([]Endpoint(nil), s.Endpoints...)
	sort.Slice(eps, func(i, j int) bool { return eps[i].String() < eps[j].String() })
	return eps
}
