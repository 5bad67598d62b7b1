package clustertest

import (
	"net"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cnibench/cnibench/internal/cluster"
)

// admits tells whether the NetworkPolicies let src open a TCP connection to port of dst, as
// Kubernetes defines it for pods of one namespace: a pod selected by no policy of a direction
// is open in that direction; a selected one only to peers (and ports) a rule of one of its
// policies names. Host-network pods are never selected. Without Config.EnforcePolicies
// everything is admitted. f.mu is held.
func (f *Fake) admits(src, dst cluster.Pod, port int) bool {
	if !f.enforce {
		return true
	}
	return f.open(dst, networkingv1.PolicyTypeIngress, src, dst, port) &&
		f.open(src, networkingv1.PolicyTypeEgress, dst, dst, port)
}

// open tells whether subject's policies of direction dir let it talk to peer on port of dst.
func (f *Fake) open(subject cluster.Pod, dir networkingv1.PolicyType, peer, dst cluster.Pod, port int) bool {
	if subject.HostNetwork {
		return true
	}
	isolated := false
	for _, p := range f.policies {
		if !slices.Contains(policyTypes(p), dir) || !matches(&p.Spec.PodSelector, subject.Labels) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range p.Spec.Ingress {
				if peersMatch(r.From, peer) && portsMatch(r.Ports, dst, port) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Egress {
				if peersMatch(r.To, peer) && portsMatch(r.Ports, dst, port) {
					return true
				}
			}
		}
	}
	return !isolated
}

// policyTypes are a policy's directions (Kubernetes' default when PolicyTypes is empty:
// ingress, and egress when it has egress rules).
func policyTypes(p networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(p.Spec.PolicyTypes) > 0 {
		return p.Spec.PolicyTypes
	}
	out := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(p.Spec.Egress) > 0 {
		out = append(out, networkingv1.PolicyTypeEgress)
	}
	return out
}

func matches(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

// peersMatch: no peers is every peer; a namespace selector alone picks every pod when empty
// (all pods live in one namespace) and none otherwise.
func peersMatch(peers []networkingv1.NetworkPolicyPeer, pod cluster.Pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		switch {
		case p.IPBlock != nil:
			if inBlock(p.IPBlock, pod.IP) {
				return true
			}
		case p.PodSelector != nil:
			if matches(p.PodSelector, pod.Labels) {
				return true
			}
		case p.NamespaceSelector != nil:
			if matches(p.NamespaceSelector, nil) {
				return true
			}
		}
	}
	return false
}

func inBlock(b *networkingv1.IPBlock, ip string) bool {
	addr := net.ParseIP(ip)
	_, cidr, err := net.ParseCIDR(b.CIDR)
	if err != nil || addr == nil || !cidr.Contains(addr) {
		return false
	}
	for _, e := range b.Except {
		if _, ex, err := net.ParseCIDR(e); err == nil && ex.Contains(addr) {
			return false
		}
	}
	return true
}

// portsMatch: no ports is every port; a named port is one dst declares under that name.
func portsMatch(ports []networkingv1.NetworkPolicyPort, dst cluster.Pod, port int) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		switch {
		case p.Port == nil:
			return true
		case p.Port.StrVal != "":
			if slices.ContainsFunc(dst.Ports, func(c cluster.ContainerPort) bool { return c.Name == p.Port.StrVal && c.Port == port }) {
				return true
			}
		default:
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if int32(port) >= p.Port.IntVal && int32(port) <= end {
				return true
			}
		}
	}
	return false
}
