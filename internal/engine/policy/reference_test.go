package policy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ---- builders shared by the tests of the package ----

func netpol(ns, name string, spec networkingv1.NetworkPolicySpec) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

// ml is a matchLabels selector from key, value pairs (none: the empty selector).
func ml(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	for i := 0; i+1 < len(kv); i += 2 {
		if s.MatchLabels == nil {
			s.MatchLabels = map[string]string{}
		}
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func protoPtr(p string) *corev1.Protocol { v := corev1.Protocol(p); return &v }

func intPort(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }

func namedPort(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }

func i32(n int) *int32 { v := int32(n); return &v }

func tcp(n int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: protoPtr("TCP"), Port: intPort(n)}
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func types(t ...networkingv1.PolicyType) []networkingv1.PolicyType { return t }

const (
	ingressT = networkingv1.PolicyTypeIngress
	egressT  = networkingv1.PolicyTypeEgress
)

func ns(name string, kv ...string) Namespace {
	l := map[string]string{"kubernetes.io/metadata.name": name}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return Namespace{Name: name, Labels: l}
}

func pod(namespace, name, ip string, kv ...string) Pod {
	l := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return Pod{Name: name, Namespace: namespace, IP: ip, Labels: l, Local: true}
}

func fl(src, dst, proto string, port int) Flow {
	return Flow{Src: src, Dst: dst, Protocol: proto, Port: port}
}

// scenario is a cluster, policies and flows with the answer the documentation gives.
type scenario struct {
	name  string
	pods  []Pod
	nss   []Namespace
	pols  []networkingv1.NetworkPolicy
	flows []flowWant
}

type flowWant struct {
	f    Flow
	want bool
	why  string
}

// The docs' example cluster: "default" holds db, frontend and another pod; "myproject-ns" is
// labelled project=myproject; "other" holds a role=frontend pod that is NOT in default.
var (
	ipDB       = "10.244.0.10"
	ipFrontend = "10.244.0.11"
	ipOther    = "10.244.0.12"
	ipProj     = "10.244.1.10"
	ipStranger = "10.244.2.10"
)

func docsCluster() ([]Pod, []Namespace) {
	pods := []Pod{
		pod("default", "db", ipDB, "role", "db"),
		pod("default", "frontend", ipFrontend, "role", "frontend"),
		pod("default", "other", ipOther, "role", "other"),
		pod("myproject-ns", "proj", ipProj, "role", "worker"),
		pod("other", "stranger", ipStranger, "role", "frontend"),
	}
	nss := []Namespace{ns("default"), ns("myproject-ns", "project", "myproject"), ns("other")}
	return pods, nss
}

// scenarios are hand-written from the documentation; compile_test.go runs them through
// Compile + Allows too.
func scenarios() []scenario {
	pods, nss := docsCluster()
	var out []scenario

	// The NetworkPolicy resource section's example, and the docs' reading of it.
	out = append(out, scenario{
		name: "docs example test-network-policy", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "test-network-policy", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			PolicyTypes: types(ingressT, egressT),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					blockPeer("172.17.0.0/16", "172.17.1.0/24"),
					nsPeer(ml("project", "myproject")),
					podPeer(ml("role", "frontend")),
				},
				Ports: []networkingv1.NetworkPolicyPort{tcp(6379)},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/24")},
				Ports: []networkingv1.NetworkPolicyPort{tcp(5978)},
			}},
		})},
		flows: []flowWant{
			{fl(ipFrontend, ipDB, "TCP", 6379), true, "any pod in default with role=frontend"},
			{fl(ipFrontend, ipDB, "TCP", 6380), false, "only TCP port 6379"},
			{fl(ipFrontend, ipDB, "UDP", 6379), false, "only TCP"},
			{fl(ipOther, ipDB, "TCP", 6379), false, "role=other is not a listed source"},
			{fl(ipProj, ipDB, "TCP", 6379), true, "any pod in a namespace with project=myproject"},
			{fl(ipStranger, ipDB, "TCP", 6379), false, "role=frontend but not in default"},
			{fl("172.17.0.5", ipDB, "TCP", 6379), true, "172.17.0.0-172.17.0.255"},
			{fl("172.17.1.5", ipDB, "TCP", 6379), false, "except 172.17.1.0/24"},
			{fl("172.17.2.5", ipDB, "TCP", 6379), true, "172.17.2.0-172.17.255.255"},
			{fl("172.18.0.1", ipDB, "TCP", 6379), false, "outside the ipBlock"},
			{fl(ipDB, "10.0.0.5", "TCP", 5978), true, "egress to 10.0.0.0/24 on TCP 5978"},
			{fl(ipDB, "10.0.0.5", "TCP", 80), false, "egress: only TCP 5978"},
			{fl(ipDB, "10.0.1.5", "TCP", 5978), false, "egress: outside 10.0.0.0/24"},
			{fl(ipDB, ipFrontend, "TCP", 80), false, "db is isolated for egress"},
			{fl(ipFrontend, ipOther, "TCP", 80), true, "pods not selected accept all traffic"},
			{fl(ipDB, ipDB, "TCP", 1), true, "a pod cannot block access to itself"},
			{fl("192.0.2.1", "192.0.2.2", "TCP", 1), true, "no pod at either end"},
		},
	})

	// Default policies.
	denyIngress := netpol("default", "default-deny-ingress", networkingv1.NetworkPolicySpec{
		PodSelector: *ml(), PolicyTypes: types(ingressT)})
	allowAllIngress := netpol("default", "allow-all-ingress", networkingv1.NetworkPolicySpec{
		PodSelector: *ml(), Ingress: []networkingv1.NetworkPolicyIngressRule{{}}, PolicyTypes: types(ingressT)})
	denyEgress := netpol("default", "default-deny-egress", networkingv1.NetworkPolicySpec{
		PodSelector: *ml(), PolicyTypes: types(egressT)})
	allowAllEgress := netpol("default", "allow-all-egress", networkingv1.NetworkPolicySpec{
		PodSelector: *ml(), Egress: []networkingv1.NetworkPolicyEgressRule{{}}, PolicyTypes: types(egressT)})
	denyAll := netpol("default", "default-deny-all", networkingv1.NetworkPolicySpec{
		PodSelector: *ml(), PolicyTypes: types(ingressT, egressT)})

	out = append(out, scenario{
		name: "default deny all ingress", pods: pods, nss: nss, pols: []networkingv1.NetworkPolicy{denyIngress},
		flows: []flowWant{
			{fl(ipFrontend, ipDB, "TCP", 80), false, "every pod of default is isolated for ingress"},
			{fl(ipProj, ipDB, "UDP", 53), false, "from another namespace too"},
			{fl("203.0.113.1", ipDB, "TCP", 80), false, "from outside too"},
			{fl(ipDB, ipProj, "TCP", 80), true, "does not change egress"},
			{fl(ipDB, "203.0.113.1", "TCP", 80), true, "does not change egress (external)"},
			{fl(ipProj, ipStranger, "TCP", 80), true, "other namespaces are not affected"},
		},
	})
	out = append(out, scenario{
		name: "allow all ingress beats deny", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{denyIngress, allowAllIngress},
		flows: []flowWant{
			{fl(ipFrontend, ipDB, "TCP", 80), true, "no additional policy can deny"},
			{fl("203.0.113.1", ipDB, "SCTP", 9), true, "any source, any port"},
		},
	})
	out = append(out, scenario{
		name: "default deny all egress", pods: pods, nss: nss, pols: []networkingv1.NetworkPolicy{denyEgress},
		flows: []flowWant{
			{fl(ipDB, ipFrontend, "TCP", 80), false, "isolated for egress"},
			{fl(ipDB, ipProj, "UDP", 53), false, "to another namespace"},
			{fl(ipDB, "203.0.113.1", "TCP", 443), false, "to outside"},
			{fl(ipProj, ipDB, "TCP", 80), true, "ingress unchanged"},
			{fl("203.0.113.1", ipDB, "TCP", 80), true, "ingress from outside unchanged"},
		},
	})
	out = append(out, scenario{
		name: "allow all egress beats deny", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{denyEgress, allowAllEgress},
		flows: []flowWant{
			{fl(ipDB, ipFrontend, "TCP", 80), true, ""},
			{fl(ipDB, "203.0.113.1", "UDP", 53), true, ""},
		},
	})
	out = append(out, scenario{
		name: "default deny all", pods: pods, nss: nss, pols: []networkingv1.NetworkPolicy{denyAll},
		flows: []flowWant{
			{fl(ipDB, ipFrontend, "TCP", 80), false, ""},
			{fl(ipProj, ipDB, "TCP", 80), false, ""},
			{fl(ipDB, ipProj, "TCP", 80), false, ""},
			{fl(ipProj, ipStranger, "TCP", 80), true, "other namespaces unaffected"},
			{fl(ipOther, ipOther, "TCP", 80), true, "a pod cannot block access to itself"},
		},
	})

	// policyTypes defaulting: egress rules and no policyTypes = Ingress AND Egress, so the
	// absent ingress list isolates ingress too.
	out = append(out, scenario{
		name: "policyTypes default with egress rules", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "egress-only-by-mistake", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "frontend"))},
			}},
		})},
		flows: []flowWant{
			{fl(ipDB, ipFrontend, "TCP", 80), true, "egress rule"},
			{fl(ipDB, ipOther, "TCP", 80), false, "egress isolated"},
			{fl(ipFrontend, ipDB, "TCP", 80), false, "Ingress is always set by default: isolated, no rule"},
		},
	})
	out = append(out, scenario{
		name: "policyTypes Egress ignores ingress rules", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "egress-only", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			PolicyTypes: types(egressT),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "nobody"))},
			}},
		})},
		flows: []flowWant{
			{fl(ipFrontend, ipDB, "TCP", 80), true, "not isolated for ingress"},
			{fl(ipDB, ipFrontend, "TCP", 80), false, "isolated for egress, no egress rule"},
		},
	})
	out = append(out, scenario{
		name: "policyTypes Ingress only ignores egress rules", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "ingress-only", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			PolicyTypes: types(ingressT),
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "nobody"))},
			}},
		})},
		flows: []flowWant{
			{fl(ipDB, ipFrontend, "TCP", 80), true, "not isolated for egress"},
			{fl(ipFrontend, ipDB, "TCP", 80), false, "isolated for ingress, no ingress rule"},
		},
	})

	// namespaceSelector AND podSelector (one element) vs OR (two elements).
	alicePods := []Pod{
		pod("default", "server", "10.1.0.1", "app", "server"),
		pod("default", "local-client", "10.1.0.2", "role", "client"),
		pod("alice", "alice-client", "10.1.1.1", "role", "client"),
		pod("alice", "alice-web", "10.1.1.2", "role", "web"),
		pod("bob", "bob-client", "10.1.2.1", "role", "client"),
	}
	aliceNss := []Namespace{ns("default"), ns("alice", "user", "alice"), ns("bob", "user", "bob")}
	out = append(out, scenario{
		name: "namespaceSelector AND podSelector", pods: alicePods, nss: aliceNss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "and", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("app", "server"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: ml("user", "alice"),
				PodSelector:       ml("role", "client"),
			}}}},
		})},
		flows: []flowWant{
			{fl("10.1.1.1", "10.1.0.1", "TCP", 80), true, "role=client in user=alice"},
			{fl("10.1.1.2", "10.1.0.1", "TCP", 80), false, "user=alice but not role=client"},
			{fl("10.1.0.2", "10.1.0.1", "TCP", 80), false, "role=client but in default"},
			{fl("10.1.2.1", "10.1.0.1", "TCP", 80), false, "role=client in user=bob"},
		},
	})
	out = append(out, scenario{
		name: "namespaceSelector OR podSelector", pods: alicePods, nss: aliceNss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "or", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("app", "server"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				nsPeer(ml("user", "alice")),
				podPeer(ml("role", "client")),
			}}},
		})},
		flows: []flowWant{
			{fl("10.1.1.1", "10.1.0.1", "TCP", 80), true, "in user=alice"},
			{fl("10.1.1.2", "10.1.0.1", "TCP", 80), true, "any pod in user=alice"},
			{fl("10.1.0.2", "10.1.0.1", "TCP", 80), true, "role=client in the local namespace"},
			{fl("10.1.2.1", "10.1.0.1", "TCP", 80), false, "role=client but neither local nor alice"},
		},
	})
	out = append(out, scenario{
		name: "empty namespaceSelector selects all namespaces; kubernetes.io/metadata.name", pods: alicePods, nss: aliceNss,
		pols: []networkingv1.NetworkPolicy{
			netpol("default", "all-clients", networkingv1.NetworkPolicySpec{
				PodSelector: *ml("app", "server"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: ml(), PodSelector: ml("role", "client"),
				}}}},
			}),
			netpol("alice", "from-bob-by-name", networkingv1.NetworkPolicySpec{
				PodSelector: *ml(),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					nsPeer(ml("kubernetes.io/metadata.name", "bob")),
				}}},
			}),
		},
		flows: []flowWant{
			{fl("10.1.2.1", "10.1.0.1", "TCP", 80), true, "role=client in any namespace"},
			{fl("10.1.0.2", "10.1.0.1", "TCP", 80), true, "role=client in default"},
			{fl("10.1.1.2", "10.1.0.1", "TCP", 80), false, "not role=client"},
			{fl("10.1.2.1", "10.1.1.2", "TCP", 80), true, "namespace bob targeted by its name label"},
			{fl("10.1.0.1", "10.1.1.2", "TCP", 80), false, "default is not bob"},
		},
	})

	// matchExpressions.
	exprPods := []Pod{
		pod("default", "target", "10.2.0.1", "app", "target"),
		pod("default", "a", "10.2.0.2", "tier", "a"),
		pod("default", "b", "10.2.0.3", "tier", "b"),
		pod("default", "c", "10.2.0.4", "tier", "c", "canary", "yes"),
		pod("default", "plain", "10.2.0.5"),
	}
	exprNss := []Namespace{ns("default")}
	exprScenario := func(name string, s *metav1.LabelSelector, want map[string]bool) scenario {
		sc := scenario{name: name, pods: exprPods, nss: exprNss,
			pols: []networkingv1.NetworkPolicy{netpol("default", "expr", networkingv1.NetworkPolicySpec{
				PodSelector: *ml("app", "target"),
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(s)}}},
			})}}
		for _, src := range []string{"10.2.0.2", "10.2.0.3", "10.2.0.4", "10.2.0.5"} {
			sc.flows = append(sc.flows, flowWant{fl(src, "10.2.0.1", "TCP", 80), want[src], name})
		}
		return sc
	}
	out = append(out,
		exprScenario("In", expr("tier", metav1.LabelSelectorOpIn, "a", "c"), map[string]bool{"10.2.0.2": true, "10.2.0.4": true}),
		exprScenario("NotIn (matches pods without the key)", expr("tier", metav1.LabelSelectorOpNotIn, "a"), map[string]bool{"10.2.0.3": true, "10.2.0.4": true, "10.2.0.5": true}),
		exprScenario("Exists", expr("canary", metav1.LabelSelectorOpExists), map[string]bool{"10.2.0.4": true}),
		exprScenario("DoesNotExist", expr("tier", metav1.LabelSelectorOpDoesNotExist), map[string]bool{"10.2.0.5": true}),
		exprScenario("matchLabels AND matchExpressions", &metav1.LabelSelector{
			MatchLabels:      map[string]string{"tier": "c"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "canary", Operator: metav1.LabelSelectorOpIn, Values: []string{"yes"}}},
		}, map[string]bool{"10.2.0.4": true}),
	)

	// except: several excepts, nested; an ipBlock matches pod addresses literally.
	out = append(out, scenario{
		name: "ipBlock except, literal on pod addresses", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "blocks", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				blockPeer("10.244.0.0/16", "10.244.1.0/24", "10.244.2.0/25"),
			}}},
		})},
		flows: []flowWant{
			{fl(ipFrontend, ipDB, "TCP", 80), true, "pod address inside the cidr"},
			{fl(ipProj, ipDB, "TCP", 80), false, "pod address inside an except"},
			{fl(ipStranger, ipDB, "TCP", 80), false, "10.244.2.10 inside except 10.244.2.0/25"},
			{fl("10.244.2.200", ipDB, "TCP", 80), true, "10.244.2.200 outside except 10.244.2.0/25"},
			{fl("10.245.0.1", ipDB, "TCP", 80), false, "outside the cidr"},
		},
	})
	out = append(out, scenario{
		name: "ipBlock 0.0.0.0/0 except", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "internet", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			PolicyTypes: types(egressT),
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				blockPeer("0.0.0.0/0", "10.0.0.0/8", "192.168.0.0/16"),
			}}},
		})},
		flows: []flowWant{
			{fl(ipDB, "8.8.8.8", "UDP", 53), true, "internet"},
			{fl(ipDB, "200.1.1.1", "TCP", 443), true, "internet, upper half"},
			{fl(ipDB, ipFrontend, "TCP", 80), false, "cluster addresses excepted"},
			{fl(ipDB, "192.168.1.1", "TCP", 80), false, "excepted"},
		},
	})

	// endPort: the docs' multi-port-egress example.
	out = append(out, scenario{
		name: "endPort", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "multi-port-egress", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("role", "db"),
			PolicyTypes: types(egressT),
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/24")},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr("TCP"), Port: intPort(32000), EndPort: i32(32768)}},
			}},
		})},
		flows: []flowWant{
			{fl(ipDB, "10.0.0.1", "TCP", 32000), true, "first port of the range"},
			{fl(ipDB, "10.0.0.1", "TCP", 32768), true, "endPort is inclusive"},
			{fl(ipDB, "10.0.0.1", "TCP", 32400), true, "inside"},
			{fl(ipDB, "10.0.0.1", "TCP", 31999), false, "below"},
			{fl(ipDB, "10.0.0.1", "TCP", 32769), false, "above"},
			{fl(ipDB, "10.0.0.1", "UDP", 32400), false, "TCP only"},
		},
	})

	// Named ports, resolved on the destination pod; protocol defaults.
	npPods := []Pod{
		{Name: "web", Namespace: "default", IP: "10.3.0.1", Labels: map[string]string{"app": "web"}, Local: true,
			Ports: []NamedPort{{Name: "http", Protocol: "TCP", Port: 8080}, {Name: "metrics", Port: 9090}, {Name: "dns", Protocol: "UDP", Port: 5353}}},
		{Name: "web2", Namespace: "default", IP: "10.3.0.2", Labels: map[string]string{"app": "web"}, Local: true,
			Ports: []NamedPort{{Name: "http", Protocol: "TCP", Port: 80}}},
		{Name: "client", Namespace: "default", IP: "10.3.0.3", Labels: map[string]string{"app": "client"}, Local: true},
		{Name: "api", Namespace: "default", IP: "10.3.0.4", Labels: map[string]string{"app": "api"}, Local: true,
			Ports: []NamedPort{{Name: "http", Protocol: "TCP", Port: 7000}}},
	}
	npNss := []Namespace{ns("default")}
	out = append(out, scenario{
		name: "named ports (ingress)", pods: npPods, nss: npNss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "named-in", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("app", "web"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Port: namedPort("http")},
				{Port: namedPort("metrics")},
				{Protocol: protoPtr("TCP"), Port: namedPort("dns")},
			}}},
		})},
		flows: []flowWant{
			{fl("10.3.0.3", "10.3.0.1", "TCP", 8080), true, "http is 8080 on web"},
			{fl("10.3.0.3", "10.3.0.1", "TCP", 80), false, "80 is http on web2, not on web"},
			{fl("10.3.0.3", "10.3.0.2", "TCP", 80), true, "http is 80 on web2"},
			{fl("10.3.0.3", "10.3.0.2", "TCP", 8080), false, "8080 is not http on web2"},
			{fl("10.3.0.3", "10.3.0.1", "TCP", 9090), true, "metrics: container port protocol defaults to TCP"},
			{fl("10.3.0.3", "10.3.0.1", "UDP", 8080), false, "the entry's protocol defaults to TCP"},
			{fl("10.3.0.3", "10.3.0.1", "TCP", 5353), false, "dns is a UDP port, the entry asks for TCP"},
			{fl("10.3.0.3", "10.3.0.1", "UDP", 5353), false, "the entry asks for TCP"},
			{fl("192.0.2.9", "10.3.0.1", "TCP", 8080), true, "empty from: any source, external too"},
		},
	})
	out = append(out, scenario{
		name: "named ports (egress)", pods: npPods, nss: npNss,
		pols: []networkingv1.NetworkPolicy{netpol("default", "named-out", networkingv1.NetworkPolicySpec{
			PodSelector: *ml("app", "client"),
			PolicyTypes: types(egressT),
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: namedPort("http")}}},
				{To: []networkingv1.NetworkPolicyPeer{podPeer(ml("app", "web"))},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr("UDP"), Port: namedPort("dns")}}},
			},
		})},
		flows: []flowWant{
			{fl("10.3.0.3", "10.3.0.1", "TCP", 8080), true, "http of the destination web"},
			{fl("10.3.0.3", "10.3.0.4", "TCP", 7000), true, "http of the destination api"},
			{fl("10.3.0.3", "10.3.0.4", "TCP", 8080), false, "8080 is not api's http"},
			{fl("10.3.0.3", "192.0.2.9", "TCP", 8080), false, "external addresses have no named ports"},
			{fl("10.3.0.3", "10.3.0.1", "UDP", 5353), true, "dns of web, UDP"},
			{fl("10.3.0.3", "10.3.0.2", "UDP", 5353), false, "web2 declares no dns"},
		},
	})

	// Both ends must agree.
	out = append(out, scenario{
		name: "egress and ingress must both allow", pods: pods, nss: nss,
		pols: []networkingv1.NetworkPolicy{
			netpol("default", "frontend-out", networkingv1.NetworkPolicySpec{
				PodSelector: *ml("role", "frontend"), PolicyTypes: types(egressT),
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "db"))}}},
			}),
			netpol("default", "db-in", networkingv1.NetworkPolicySpec{
				PodSelector: *ml("role", "db"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "frontend"))},
					Ports: []networkingv1.NetworkPolicyPort{tcp(5432)},
				}},
			}),
		},
		flows: []flowWant{
			{fl(ipFrontend, ipDB, "TCP", 5432), true, "both sides allow"},
			{fl(ipFrontend, ipDB, "TCP", 80), false, "egress allows, ingress does not"},
			{fl(ipFrontend, ipOther, "TCP", 80), false, "ingress (none) allows, egress does not"},
			{fl(ipOther, ipDB, "TCP", 5432), false, "ingress does not allow role=other"},
		},
	})
	return out
}

func TestReferenceDocs(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			for _, fw := range sc.flows {
				if got := Reference(sc.pods, sc.nss, sc.pols, fw.f); got != fw.want {
					t.Errorf("%s: Reference = %v, want %v (%s)", flowString(fw.f), got, fw.want, fw.why)
				}
			}
		})
	}
}

// No policy: everything is allowed.
func TestReferenceNoPolicy(t *testing.T) {
	pods, nss := docsCluster()
	for _, a := range []string{ipDB, ipFrontend, ipProj, "198.51.100.1"} {
		for _, b := range []string{ipDB, ipStranger, "198.51.100.2"} {
			if !Reference(pods, nss, nil, fl(a, b, "UDP", 53)) {
				t.Errorf("%s -> %s denied without any policy", a, b)
			}
		}
	}
}

func flowString(f Flow) string {
	return fmt.Sprintf("%s -> %s %s/%d", f.Src, f.Dst, f.Protocol, f.Port)
}
