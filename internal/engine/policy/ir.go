// Package policy is a NetworkPolicy engine: it compiles policies and renders and applies them in
// a network namespace it is given (a lab node's; it builds none, see internal/engine). Its input is the real networking.k8s.io/v1
// NetworkPolicy type plus the pods and namespaces of the cluster; Compile turns them into a
// Program (this file): the engine-neutral description of what a node must enforce, with the
// pod selectors already resolved to address sets, the way Calico and kube-router resolve them.
// Three renderers turn a Program into kernel state:
//
//   - iptables + ipset (kube-router's layout: per-pod firewall chains jumped to by pod address,
//     per-policy chains, ipsets for selectors), one ipset restore and one iptables-restore;
//   - nftables (sets and verdict maps: the pod dispatch is one map lookup), one nft transaction;
//   - eBPF (bpf.go: Cilium's security identities, an IP cache and a policy map keyed by
//     identity, a few lookups per packet), loaded into maps by internal/engine/bpfdp.
//
// The package's tests hold two oracles: Reference (oracle_test.go), an independent evaluation
// of the NetworkPolicy specification written straight from the Kubernetes documentation, and
// Program.Allows (eval_test.go), a model of what the kernel decides with a Program loaded;
// the property test checks that a compiled Program decides every flow the way Reference does.
// Program.Validate (eval_test.go) checks that a Program is well formed.
package policy

// Pod is a pod as the policy engine sees it.
type Pod struct {
	Name, Namespace string
	IP              string
	Labels          map[string]string
	Ports           []NamedPort // declared container ports (for named ports)
	// Local marks a pod on the node the Program is compiled for (only local pods get firewall
	// chains; sets hold every pod of the cluster).
	Local bool
}

// NamedPort is a declared container port.
type NamedPort struct {
	Name     string
	Protocol string // "TCP", "UDP" or "SCTP" (Kubernetes spelling)
	Port     int
}

// Namespace is a namespace with its labels (kubernetes.io/metadata.name is added by the
// caller, as the API server does).
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Flow is one packet's 5-tuple as far as policies care (the first packet of a connection;
// replies of allowed connections are allowed by connection tracking).
type Flow struct {
	Src, Dst string // IPv4 addresses
	Protocol string // "TCP", "UDP" or "SCTP"
	Port     int    // destination port
}

// SetKind says what a Set holds.
type SetKind string

const (
	// SetAddrs holds IPv4 addresses (pods chosen by selectors).
	SetAddrs SetKind = "addrs"
	// SetNets holds CIDRs, some of them exceptions (an ipBlock with except).
	SetNets SetKind = "nets"
	// SetAddrPorts holds address,protocol:port triples (a named port resolved on each pod).
	SetAddrPorts SetKind = "addr-ports"
)

// Set is a named set of addresses, networks or address-port pairs. Names are chosen by the
// compiler, unique within a Program and at most 31 characters (ipset's limit).
type Set struct {
	Name    string
	Kind    SetKind
	Members []Member // sorted, no duplicates
}

// Member is one element of a Set.
type Member struct {
	// Addr is an address (SetAddrs, SetAddrPorts) or a CIDR (SetNets).
	Addr string
	// Except marks a SetNets member that is carved out of the set ("nomatch" in ipset, a
	// resolved into disjoint address ranges in nftables). Longest prefix wins, as in ipset
	// hash:net.
	Except bool
	// Protocol and Port complete a SetAddrPorts member.
	Protocol string
	Port     int
}

// Peer says whom a rule admits: any address, or the addresses of a set.
type Peer struct {
	Any bool
	Set string // name of a SetAddrs or SetNets set
}

// PortMatch is one entry of a rule's ports list.
type PortMatch struct {
	// Any: every port and protocol (a rule without ports).
	Any      bool
	Protocol string // "TCP", "UDP" or "SCTP"
	// Port..EndPort is the destination port range (EndPort == Port for one port; Port 0 with
	// a protocol = every port of that protocol).
	Port, EndPort int
	// Set, for a named port: the destination address and port must be a member of this
	// SetAddrPorts set (the name resolved on each destination pod).
	Set string
}

// Rule admits a flow when its peer matches the flow's other end (the source for ingress, the
// destination for egress) and at least one of its ports matches the destination port.
type Rule struct {
	Peers []Peer      // at least one; a flow matches when any peer matches
	Ports []PortMatch // at least one; a flow matches when any entry matches
}

// PolicyChain is one NetworkPolicy compiled: its ingress and egress rules. An empty rule list
// admits nothing (the policy only isolates).
type PolicyChain struct {
	Name      string // unique within the Program, at most 28 characters
	Namespace string
	Policy    string // the NetworkPolicy's name
	Ingress   []Rule
	Egress    []Rule
}

// PodFirewall is what a local pod's traffic is checked against. A pod selected by no policy of
// a direction is not isolated in that direction and gets no chain for it.
type PodFirewall struct {
	Pod       string // namespace/name
	IP        string
	Chain     string   // unique within the Program, at most 28 characters
	IngressOf []string // PolicyChain names whose ingress rules apply (non-empty = isolated)
	EgressOf  []string // PolicyChain names whose egress rules apply (non-empty = isolated)
}

// Program is what one node enforces.
type Program struct {
	Sets     []Set
	Policies []PolicyChain
	Pods     []PodFirewall // local pods selected by at least one policy
}

// Counts summarise a Program for the case record.
type Counts struct {
	Policies, PodChains, Sets, SetMembers, Rules int
	// Changed is what a partial rendering's input touches (chains, sets, map or set elements,
	// BPF map entries: each engine counts its own objects); 0 for a full rendering.
	Changed int
}
