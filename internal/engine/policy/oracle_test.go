package policy

// This file is the oracle: an evaluation of the NetworkPolicy specification written straight
// from the Kubernetes documentation, as plainly as possible, with no indexes, no caches and no
// shared code with the compiler (except the label selector library of apimachinery, which is
// what the API server itself uses). The quoted sentences come from
// https://kubernetes.io/docs/concepts/services-networking/network-policies/ ("docs") and from
// the API reference of NetworkPolicySpec, NetworkPolicyPeer, NetworkPolicyPort and IPBlock
// ("API"), i.e. the doc comments of k8s.io/api/networking/v1.
//
// Choices where the documentation leaves room (the compiler and Program.Allows make the same):
//
//   - ipBlock is evaluated literally on the address, pod addresses included. The docs say
//     "These should be cluster-external IPs, since Pod IPs are ephemeral and unpredictable",
//     which is advice to the policy author, not a rule of evaluation; Calico and kube-router
//     match an ipBlock against whatever address the packet carries, and so do we.
//   - A pod talking to itself is always allowed ("a pod cannot block access to itself"); in
//     the kernel such a packet goes through the pod's loopback and never reaches the node's
//     firewall.
//   - Traffic from or to the pod's node is always allowed by the docs ("traffic to and from the
//     node where a Pod is running is always allowed"), but a Flow does not say which addresses
//     belong to nodes, so it is NOT modelled here: every address that is not a pod's is an
//     external address, matched by ipBlock peers and by empty peer lists only. The renderers
//     must exempt the node's own traffic themselves.
//   - A flow with no pod at either end is allowed: "NetworkPolicies apply to a connection with
//     a pod on one or both ends, and are not relevant to other connections."
//   - Policies are assumed valid (as the API server validates them; Compile rejects invalid
//     ones). A selector that does not parse selects nothing here; a pod whose namespace is not
//     listed is in a namespace without labels (Compile rejects it); pods without an address
//     cannot be the end of a flow.

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Reference reports whether the NetworkPolicies pols allow flow f in a cluster made of pods and
// namespaces nss, according to the Kubernetes documentation. It is the oracle the compiler is
// tested against: slow (every question scans everything) and obviously right. See the comment
// at the top of oracle_test.go for the semantics chosen where the documentation is silent
// (ipBlock on pod addresses, a pod talking to itself, node traffic).
func Reference(pods []Pod, nss []Namespace, pols []networkingv1.NetworkPolicy, f Flow) bool {
	src := refPodWithIP(pods, f.Src)
	dst := refPodWithIP(pods, f.Dst)

	// docs: "NetworkPolicies apply to a connection with a pod on one or both ends, and are not
	// relevant to other connections."
	if src == nil && dst == nil {
		return true
	}
	// docs: "Other pods that are allowed (exception: a pod cannot block access to itself)".
	if src != nil && src == dst {
		return true
	}
	// docs: "For a connection from a source pod to a destination pod to be allowed, both the
	// egress policy on the source pod and the ingress policy on the destination pod need to
	// allow the connection. If either side does not allow the connection, it will not happen."
	return refEgressAllows(nss, pols, src, dst, f) && refIngressAllows(nss, pols, src, dst, f)
}

// refEgressAllows is the egress side: may src open this connection? src nil = not a pod.
func refEgressAllows(nss []Namespace, pols []networkingv1.NetworkPolicy, src, dst *Pod, f Flow) bool {
	if src == nil {
		return true // an external source has no egress policy
	}
	isolated := false
	for i := range pols {
		pol := &pols[i]
		// docs: "A pod is isolated for egress if there is any NetworkPolicy that both selects
		// the pod and has "Egress" in its policyTypes; we say that such a policy applies to
		// the pod for egress."
		if !refSelectsPod(pol, src) || !refHasType(pol, networkingv1.PolicyTypeEgress) {
			continue
		}
		isolated = true
		// docs: "When a pod is isolated for egress, the only allowed connections from the pod
		// are those allowed by the egress list of some NetworkPolicy that applies to the pod
		// for egress. The effects of those egress lists combine additively."
		for _, rule := range pol.Spec.Egress {
			// docs: "Each rule allows traffic which matches both the to and ports sections."
			if refPeersMatch(nss, pol, rule.To, dst, f.Dst) && refPortsMatch(rule.Ports, dst, f) {
				return true
			}
		}
	}
	// docs: "By default, a pod is non-isolated for egress; all outbound connections are
	// allowed."
	return !isolated
}

// refIngressAllows is the ingress side: may dst accept this connection? dst nil = not a pod.
func refIngressAllows(nss []Namespace, pols []networkingv1.NetworkPolicy, src, dst *Pod, f Flow) bool {
	if dst == nil {
		return true // an external destination has no ingress policy
	}
	isolated := false
	for i := range pols {
		pol := &pols[i]
		// docs: "A pod is isolated for ingress if there is any NetworkPolicy that both selects
		// the pod and has "Ingress" in its policyTypes; we say that such a policy applies to
		// the pod for ingress."
		if !refSelectsPod(pol, dst) || !refHasType(pol, networkingv1.PolicyTypeIngress) {
			continue
		}
		isolated = true
		// docs: "When a pod is isolated for ingress, the only allowed connections into the pod
		// are those from the pod's node and those allowed by the ingress list of some
		// NetworkPolicy that applies to the pod for ingress. The effects of those ingress
		// lists combine additively." (The pod's node is not modelled: see the file comment.)
		for _, rule := range pol.Spec.Ingress {
			// docs: "Each rule allows traffic which matches both the from and ports sections."
			if refPeersMatch(nss, pol, rule.From, src, f.Src) && refPortsMatch(rule.Ports, dst, f) {
				return true
			}
		}
	}
	// docs: "By default, a pod is non-isolated for ingress; all inbound connections are
	// allowed."
	return !isolated
}

// refSelectsPod: does pol's podSelector select pod?
func refSelectsPod(pol *networkingv1.NetworkPolicy, pod *Pod) bool {
	// API: "podSelector selects the pods to which this NetworkPolicy object applies. [...] An
	// empty selector matches all pods in the policy's namespace."
	return pod.Namespace == pol.Namespace && refSelectorMatches(&pol.Spec.PodSelector, pod.Labels)
}

// refHasType: does pol apply to direction t?
func refHasType(pol *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(pol.Spec.PolicyTypes) == 0 {
		// docs: "If no policyTypes are specified on a NetworkPolicy then by default Ingress
		// will always be set and Egress will be set if the NetworkPolicy has any egress
		// rules."
		if t == networkingv1.PolicyTypeIngress {
			return true
		}
		return len(pol.Spec.Egress) > 0
	}
	return slices.Contains(pol.Spec.PolicyTypes, t)
}

// refPeersMatch: does the from/to list admit the other end of the connection (pod, or nil for
// an external address, and its address ip)?
func refPeersMatch(nss []Namespace, pol *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer, pod *Pod, ip string) bool {
	// API: "If this field is empty or missing, this rule matches all sources (traffic not
	// restricted by source). If this field is present and contains at least one item, this
	// rule allows traffic only if the traffic matches at least one item in the from list."
	// (and the same words for "to" and destinations)
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if refPeerMatches(nss, pol, peer, pod, ip) {
			return true
		}
	}
	return false
}

// refPeerMatches: does one from/to element admit the other end?
func refPeerMatches(nss []Namespace, pol *networkingv1.NetworkPolicy, peer networkingv1.NetworkPolicyPeer, pod *Pod, ip string) bool {
	if peer.IPBlock != nil {
		// docs: "ipBlock: This selects particular IP CIDR ranges to allow as ingress sources or
		// egress destinations." Evaluated on the address itself, pods included (file comment).
		return refInIPBlock(peer.IPBlock, ip)
	}
	if pod == nil {
		return false // selectors only ever select pods
	}
	switch {
	case peer.PodSelector != nil && peer.NamespaceSelector == nil:
		// API: "Otherwise it selects the pods matching podSelector in the policy's own
		// namespace." docs: "podSelector: This selects particular Pods in the same namespace
		// as the NetworkPolicy which should be allowed as ingress sources or egress
		// destinations."
		return pod.Namespace == pol.Namespace && refSelectorMatches(peer.PodSelector, pod.Labels)
	case peer.PodSelector == nil && peer.NamespaceSelector != nil:
		// API: "Otherwise it selects all pods in the namespaces selected by
		// namespaceSelector." docs: "namespaceSelector: This selects particular namespaces for
		// which all Pods should be allowed as ingress sources or egress destinations."
		return refSelectorMatches(peer.NamespaceSelector, refNamespaceLabels(nss, pod.Namespace))
	case peer.PodSelector != nil && peer.NamespaceSelector != nil:
		// docs: "A single to/from entry that specifies both namespaceSelector and podSelector
		// selects particular Pods within particular namespaces."
		return refSelectorMatches(peer.NamespaceSelector, refNamespaceLabels(nss, pod.Namespace)) &&
			refSelectorMatches(peer.PodSelector, pod.Labels)
	}
	return false // an empty peer is invalid (the API server rejects it)
}

// refInIPBlock: is ip inside the block's cidr and outside every except?
func refInIPBlock(b *networkingv1.IPBlock, ip string) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !cidr.Contains(addr) {
		return false
	}
	// API: "except is a slice of CIDRs that should not be included within an IPBlock".
	for _, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err == nil && ex.Contains(addr) {
			return false
		}
	}
	return true
}

// refPortsMatch: does the ports list admit the flow's protocol and destination port? dst is
// the destination pod (nil for an external destination), whose declared ports resolve names.
func refPortsMatch(ports []networkingv1.NetworkPolicyPort, dst *Pod, f Flow) bool {
	// API: "If this field is empty or missing, this rule matches all ports (traffic not
	// restricted by port). If this field is present and contains at least one item, then this
	// rule allows traffic only if the traffic matches at least one port in the list."
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if refPortMatches(p, dst, f) {
			return true
		}
	}
	return false
}

// refPortMatches: does one ports element admit the flow?
func refPortMatches(p networkingv1.NetworkPolicyPort, dst *Pod, f Flow) bool {
	// API: "protocol represents the protocol (TCP, UDP, or SCTP) which traffic must match. If
	// not specified, this field defaults to TCP."
	proto := string(corev1.ProtocolTCP)
	if p.Protocol != nil {
		proto = string(*p.Protocol)
	}
	if f.Protocol != proto {
		return false
	}
	// API: "If this field is not provided, this matches all port names and numbers. If
	// present, only traffic on the specified protocol AND port will be matched."
	if p.Port == nil {
		return true
	}
	if p.Port.Type == intstr.String {
		// API: "This can either be a numerical or named port on a pod." The name is looked
		// up among the destination pod's declared container ports (with this protocol); an
		// external destination declares no ports.
		if dst == nil {
			return false
		}
		for _, cp := range dst.Ports {
			if cp.Name == p.Port.StrVal && refPortProtocol(cp) == proto && cp.Port == f.Port {
				return true
			}
		}
		return false
	}
	// API: "endPort indicates that the range of ports from port to endPort if set, inclusive,
	// should be allowed by the policy."
	if p.EndPort != nil {
		return int(p.Port.IntVal) <= f.Port && f.Port <= int(*p.EndPort)
	}
	return int(p.Port.IntVal) == f.Port
}

// refPortProtocol is a container port's protocol; Kubernetes defaults it to TCP.
func refPortProtocol(cp NamedPort) string {
	if cp.Protocol == "" {
		return string(corev1.ProtocolTCP)
	}
	return cp.Protocol
}

// refSelectorMatches applies a label selector with the API's own library: matchLabels AND
// matchExpressions (In, NotIn, Exists, DoesNotExist); an empty selector matches everything.
func refSelectorMatches(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(l))
}

// refNamespaceLabels returns the labels of namespace name (none if it is not listed).
func refNamespaceLabels(nss []Namespace, name string) map[string]string {
	for _, ns := range nss {
		if ns.Name == name {
			return ns.Labels
		}
	}
	return nil
}

// refPodWithIP returns the pod whose address is ip, or nil.
func refPodWithIP(pods []Pod, ip string) *Pod {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nil
	}
	for i := range pods {
		if a, err := netip.ParseAddr(pods[i].IP); err == nil && a == addr {
			return &pods[i]
		}
	}
	return nil
}
