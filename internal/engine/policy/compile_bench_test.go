package policy

import (
	"strconv"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// scaleCluster is the scale case: 10,000 pods in 10 namespaces, each pod with a unique label
// id=<n>, two pods per namespace labelled role=client; 20,000 policies, each selecting one pod
// by its unique label (every pod is selected by two policies), with an ingress rule from the
// role=client pods of its namespace on TCP 80 and a named port, and an egress rule to them on
// UDP 53. Every pod is local (the worst case: 10,000 pod firewalls).
func scaleCluster() ([]Pod, []Namespace, []networkingv1.NetworkPolicy) {
	const nPods, nNS, nPols = 10000, 10, 20000
	var nss []Namespace
	for i := range nNS {
		nss = append(nss, ns("ns"+strconv.Itoa(i)))
	}
	pods := make([]Pod, nPods)
	for i := range pods {
		p := pod(nss[i%nNS].Name, "pod-"+strconv.Itoa(i), "10."+strconv.Itoa(100+i>>16)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255),
			"id", strconv.Itoa(i))
		if i/nNS < 2 {
			p.Labels["role"] = "client"
		}
		p.Ports = []NamedPort{{Name: "http", Protocol: "TCP", Port: 8080}}
		pods[i] = p
	}
	pols := make([]networkingv1.NetworkPolicy, nPols)
	http := intstr.FromString("http")
	for j := range pols {
		target := j % nPods
		pols[j] = netpol(nss[target%nNS].Name, "pol-"+strconv.Itoa(j), networkingv1.NetworkPolicySpec{
			PodSelector: *ml("id", strconv.Itoa(target)),
			PolicyTypes: types(ingressT, egressT),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "client"))},
				Ports: []networkingv1.NetworkPolicyPort{tcp(80), {Port: &http}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{podPeer(ml("role", "client"))},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: protoPtr("UDP"), Port: intPort(53)}},
			}},
		})
	}
	return pods, nss, pols
}

func BenchmarkCompile10kPods20kPolicies(b *testing.B) {
	pods, nss, pols := scaleCluster()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Compile(pods, nss, pols); err != nil {
			b.Fatal(err)
		}
	}
}

// The scale case compiles to the shape expected: selector sets shared (one SRC and one DST
// set per namespace, one named-port set per selected pod). Its speed is
// BenchmarkCompile10kPods20kPolicies' business, not this test's.
func TestCompileScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	pods, nss, pols := scaleCluster()
	start := time.Now()
	prog, err := Compile(pods, nss, pols)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compiled 10,000 pods and 20,000 policies in %v: %d policy chains, %d pod chains, %d sets",
		elapsed, len(prog.Policies), len(prog.Pods), len(prog.Sets))
	if len(prog.Policies) != 20000 || len(prog.Pods) != 10000 {
		t.Errorf("%d policy chains, %d pod chains", len(prog.Policies), len(prog.Pods))
	}
	// 10 SRC + 10 DST selector sets, 10,000 named-port sets (one per target pod).
	if len(prog.Sets) != 20+10000 {
		t.Errorf("%d sets, want 10020", len(prog.Sets))
	}
	if err := prog.Validate(); err != nil {
		t.Fatal(err)
	}
	ev := prog.Evaluator()
	// pod-0 and pod-10 are the clients of ns0; pod-20 and pod-30 are other pods of ns0.
	p0, p10, p20, p30 := pods[0].IP, pods[10].IP, pods[20].IP, pods[30].IP
	if !ev.AllowsIngress(fl(p0, p20, "TCP", 80)) || !ev.AllowsIngress(fl(p0, p20, "TCP", 8080)) ||
		ev.AllowsIngress(fl(p0, p20, "TCP", 81)) || ev.AllowsIngress(fl(p30, p20, "TCP", 80)) ||
		!ev.AllowsEgress(fl(p20, p10, "UDP", 53)) || ev.AllowsEgress(fl(p20, p30, "UDP", 53)) {
		t.Error("scale program decides wrongly")
	}
}
