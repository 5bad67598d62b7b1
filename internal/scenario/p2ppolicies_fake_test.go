package scenario_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/scenario"
)

func policyNames(pols []networkingv1.NetworkPolicy) []string {
	var out []string
	for _, p := range pols {
		out = append(out, p.Name)
	}
	return out
}

// With policies unset, every silent pod gets two policies (ingress and egress) and the pair
// two: 2*pods+2; policies=N gives N over the silent pods plus the pair's two.
func TestP2PPoliciesCreatesTwoPerSilentPodPlusThePairs(t *testing.T) {
	for _, tc := range []struct{ pods, policies, want int }{{3, 0, 8}, {3, 5, 7}, {0, 0, 2}} {
		fc := clustertest.New(clustertest.Config{EnforcePolicies: true})
		c := fakeCase("p2p-policies", "calico", "inter", "tcp")
		c.Pods, c.Policies = tc.pods, tc.policies
		f := mustSetUp(t, fc, c)
		names := policyNames(fc.Policies())
		if len(names) != tc.want || !slices.Equal(names[:2], []string{"pair-ingress", "pair-egress"}) {
			t.Errorf("pods=%d policies=%d: %v, want %d with the pair's first", tc.pods, tc.policies, names, tc.want)
		}
		if tc.pods == 3 && tc.policies == 0 && names[7] != "silent2-egress" {
			t.Errorf("last policy %s, want silent2-egress", names[7])
		}
		m := mustTrial(t, f)
		if m.Metrics["policies_total"] != float64(tc.want) {
			t.Errorf("policies_total %v, want %d", m.Metrics["policies_total"], tc.want)
		}
		wantMetrics(t, m.Metrics, "policies_program_ms", "throughput_bps")
		closeEmpty(t, fc, f)
	}
}

// Where the policies are enforced, the outsider's probe of the server fails and the client's
// succeeds, so the case runs; the outsider is on the client's node.
func TestP2PPoliciesRunsWhenOutsiderIsDenied(t *testing.T) {
	fc := clustertest.New(clustertest.Config{EnforcePolicies: true})
	c := fakeCase("p2p-policies", "calico", "inter", "rr")
	c.Pods = 2
	f := mustSetUp(t, fc, c)
	server, _ := fc.Pod("server")
	outsider, _ := fc.Pod("outsider")
	if outsider.Node != "node0" {
		t.Errorf("outsider on %s, want the client's node0", outsider.Node)
	}
	probes := 0
	for _, e := range fc.Execs() {
		if len(e.Cmd) > 1 && e.Cmd[1] == "nc" && slices.Contains(e.Cmd, server.IP) && slices.Contains(e.Cmd, "12865") {
			probes++
		}
	}
	if probes != 2 {
		t.Errorf("%d probes of %s:12865, want the client's and the outsider's: %v", probes, server.IP, fc.Execs())
	}
	mustTrial(t, f)
	closeEmpty(t, fc, f)
}

// Where the CNI applies new policies asynchronously and refuses the client at first (as
// kube-router does until its next sync), the client is tried until it gets through; where it
// never does, the setup fails saying so and deletes everything.
func TestP2PPoliciesWaitsForTheClient(t *testing.T) {
	defer scenario.SetDenyWait(300*time.Millisecond, 10*time.Millisecond)()
	fc := clustertest.New(clustertest.Config{EnforcePolicies: true, PolicyLag: 3})
	c := fakeCase("p2p-policies", "calico", "inter", "rr")
	c.Pods = 2
	f := mustSetUp(t, fc, c)
	tries := 0
	for _, e := range fc.Execs() {
		if len(e.Cmd) > 1 && e.Cmd[1] == "nc" {
			tries++
		}
	}
	if tries != 3+2 {
		t.Errorf("%d connection attempts, want 3 refused, the client's, the outsider's", tries)
	}
	closeEmpty(t, fc, f)
	slow := clustertest.New(clustertest.Config{EnforcePolicies: true, PolicyLag: 1 << 20})
	_, err := setUpOn(t, slow, c)
	if err == nil || !strings.Contains(err.Error(), "policies block the client") {
		t.Errorf("setup: %v, want the client blocked", err)
	}
	slow.AssertEmpty(t)
}

// Where policies are not enforced, the outsider reaches the server: the setup fails (a case
// only counts when its policies hold) and deletes everything.
func TestP2PPoliciesFailsWhenOutsiderReachesServer(t *testing.T) {
	fc := clustertest.New(clustertest.Config{EnforcePolicies: false})
	c := fakeCase("p2p-policies", "calico", "intra", "tcp")
	c.Pods = 4
	defer scenario.SetDenyWait(300*time.Millisecond, 100*time.Millisecond)()
	_, err := setUpOn(t, fc, c)
	if err == nil || !strings.Contains(err.Error(), "policies not enforced: a pod no policy admits reached the server") {
		t.Errorf("setup: %v, want policies not enforced", err)
	}
	// The outsider was tried again while the policies had time to take effect.
	tries := 0
	for _, e := range fc.Execs() {
		if len(e.Cmd) > 1 && e.Cmd[1] == "nc" {
			tries++
		}
	}
	if tries < 3 {
		t.Errorf("%d connection attempts, want the client's and the outsider's repeated until denyWait", tries)
	}
	fc.AssertEmpty(t)
}

// More policies than two per silent pod is bad input, rejected before anything is created;
// a setup failing halfway (a silent pod, a policy, the server) deletes what it created.
func TestP2PPoliciesSetupFailuresLeaveNothing(t *testing.T) {
	fc := clustertest.New(clustertest.Config{EnforcePolicies: true})
	c := fakeCase("p2p-policies", "calico", "inter", "tcp")
	c.Pods, c.Policies = 3, 7
	if _, err := setUpOn(t, fc, c); err == nil || !strings.Contains(err.Error(), "7 policies need at least 4 silent pods") {
		t.Errorf("7 policies on 3 pods: %v", err)
	}
	if h := fc.History(); len(h) != 0 {
		t.Errorf("calls made: %v", h)
	}
	for _, fail := range []clustertest.Failures{
		{Pods: []string{"outsider"}},
		{Pods: []string{"silent1"}},
		{Policies: []string{"silent1-egress"}},
		{Start: []string{"server"}},
		{Exec: []string{"outsider"}},
	} {
		fc := clustertest.New(clustertest.Config{EnforcePolicies: true, Fail: fail})
		c.Policies = 0
		if _, err := setUpOn(t, fc, c); err == nil {
			t.Errorf("%+v: setup succeeded", fail)
		}
		if left := fc.Leftovers(); len(left) > 0 {
			t.Errorf("%+v: left behind %s", fail, fmt.Sprint(left))
		}
	}
}
