package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/nf"
)

// TestChainKinds: an unknown kind is bad input; a transparent kind is unsupported with the
// reason, which says whether the cluster has Multus.
func TestChainKinds(t *testing.T) {
	ctx := context.Background()
	cs := twoNodes()
	c := newCluster(t, cs, Config{})
	spec := cluster.ChainSpec{Client: "client", Server: "server", NF: "nope", Length: 1, Rules: 10}
	if _, _, _, err := c.Chain(ctx, spec); !errors.Is(err, cluster.ErrBadInput) || !strings.Contains(err.Error(), "route-iptables") {
		t.Errorf("unknown kind: %v, want bad input listing the kinds", err)
	}
	spec.NF = "ebpf-tc"
	_, _, _, err := c.Chain(ctx, spec)
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "transparent (layer 2)") || !strings.Contains(err.Error(), "Multus is not installed") {
		t.Errorf("transparent kind without Multus: %v", err)
	}
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: "k8s.cni.cncf.io/v1"}}
	if _, _, _, err := c.Chain(ctx, spec); !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "does not attach chains through Multus") {
		t.Errorf("transparent kind with Multus: %v", err)
	}
	if pods, _ := cs.CoreV1().Pods(c.Namespace()).List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("%d pods created for a chain that cannot be built", len(pods.Items))
	}
}

// TestChainPod: every pod of a chain gets NET_ADMIN; only the NFs get the forwarding sysctls.
func TestChainPod(t *testing.T) {
	c := newCluster(t, twoNodes(), Config{Image: "cnibench/tools:latest"})
	for _, isNF := range []bool{false, true} {
		p := c.podObject(cluster.PodSpec{Name: "x", Node: "worker-a"})
		chainPod(p, isNF)
		caps := p.Spec.Containers[0].SecurityContext.Capabilities
		if caps == nil || !slices.Contains(caps.Add, corev1.Capability("NET_ADMIN")) {
			t.Errorf("nf=%v: capabilities %+v, want NET_ADMIN", isNF, caps)
		}
		if priv := p.Spec.Containers[0].SecurityContext.Privileged; priv == nil || *priv {
			t.Errorf("nf=%v: a chain pod must not be privileged", isNF)
		}
		var got []string
		if p.Spec.SecurityContext != nil {
			for _, s := range p.Spec.SecurityContext.Sysctls {
				if nf.PodSysctls()[s.Name] != s.Value {
					t.Errorf("sysctl %s=%s", s.Name, s.Value)
				}
				got = append(got, s.Name)
			}
		}
		want := []string(nil)
		if isNF {
			want = nf.PodSysctlNames()
		}
		if !slices.Equal(got, want) {
			t.Errorf("nf=%v: sysctls %v, want %v", isNF, got, want)
		}
	}
}

// TestSysctlForbidden: a pod the kubelet rejected for its sysctls is unsupported (the case is
// skipped with how to allow them), not a failure.
func TestSysctlForbidden(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "worker-a"}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "SysctlForbidden",
		Message: "Pod forbidden sysctl: \"net.ipv4.ip_forward\" not allowlisted"}}
	_, err := podUp(p)
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "--allowed-unsafe-sysctls") || !strings.Contains(err.Error(), "net.ipv4.ip_forward") {
		t.Errorf("podUp: %v", err)
	}
}

// A pod the kubelet rejects for want of CPU (Guaranteed pods of whole CPUs on a small node) is
// a case the cluster cannot give, with the kubelet's words, not a failure.
func TestOutOfCPU(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vnf2"}, Spec: corev1.PodSpec{NodeName: "node0"}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu",
		Message: "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000"}}
	_, err := podUp(p)
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "node0 cannot give pod vnf2") || !strings.Contains(err.Error(), "capacity: 2000") {
		t.Errorf("podUp: %v", err)
	}
}

// TestPodRunner runs commands through the exec subresource (the fake exec server runs them
// here): stdin reaches the command, and a non-zero exit is an error with its standard error.
func TestPodRunner(t *testing.T) {
	c := localCluster(t)
	run := c.podRunner("client")
	out, err := run(context.Background(), []byte("rules\nline 2\n"), "cat")
	if err != nil || string(out) != "rules\nline 2\n" {
		t.Fatalf("cat with stdin: %q %v", out, err)
	}
	_, err = run(context.Background(), nil, busybox, "sh", "-c", "echo no such route >&2; exit 2")
	if err == nil || !strings.Contains(err.Error(), "exit code 2") || !strings.Contains(err.Error(), "no such route") {
		t.Fatalf("failing command: %v", err)
	}
}

// TestWithChains: deleting a chain's client or server takes its NFs along.
func TestWithChains(t *testing.T) {
	c := newCluster(t, twoNodes(), Config{})
	all := []string{"c", "c-nf1", "c-nf2", "s"}
	c.chains["c"], c.chains["s"] = all, all
	if got := c.withChains([]string{"s", "other"}); !slices.Equal(got, []string{"s", "other", "c", "c-nf1", "c-nf2"}) {
		t.Errorf("withChains = %v", got)
	}
	c.forget(all)
	if got := c.withChains([]string{"s"}); !slices.Equal(got, []string{"s"}) {
		t.Errorf("after forget: %v", got)
	}
}
