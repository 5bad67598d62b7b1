package scenario_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

const fakeSelf = "/usr/local/bin/cnibench"

func vnfCase(placement string, replicas, cpuLimit int, isolation string) result.Case {
	c := fakeCase("vnf", "fake", placement, "gtpu")
	c.VNF, c.Replicas, c.CPULimit, c.CPUIsolation, c.FrameSize = "userspace", replicas, cpuLimit, isolation, 256
	c.ID = c.MakeID()
	return c
}

// A search through three simulated VNFs of 40,000 pps each (the fake's packet engine: a known
// loss curve) finds the NDR of 120,000 pps and the PDR of 120,000/0.995 within the search's
// precision; the pods, their CPU resources and placement, the Service and the VNF commands
// are as the case asks; Close leaves nothing.
func TestVNFSearchThroughFake(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, VNFCapacity: 40_000})
	c := vnfCase("split", 3, 500, "shared")
	f := mustSetUp(t, fc, c)
	m := mustTrial(t, f)
	ndr, pdr := m.Metrics["ndr_pps"], m.Metrics["pdr_pps"]
	if ndr > 120_000*1.0001 || ndr < 120_000*(1-0.005) { // whole packets
		t.Errorf("NDR %.1f, want 120,000 within 0.5 %%", ndr)
	}
	if want := 120_000 / 0.995; pdr > want || pdr < want*(1-0.005) {
		t.Errorf("PDR %.1f, want %.1f within 0.5 %%", pdr, want)
	}
	if w := m.Metrics["ndr_relative_width"]; w <= 0 || w > 0.005 {
		t.Errorf("NDR width %g", w)
	}
	if m.Metrics["generator_max_pps"] != clustertest.DefaultPktGenMax || m.Metrics["search_max_pps"] != 0.95*clustertest.DefaultPktGenMax {
		t.Errorf("generator %v, search max %v", m.Metrics["generator_max_pps"], m.Metrics["search_max_pps"])
	}
	if m.Metrics["latency_p50_us"] != 100 || m.Metrics["search_trials_count"] < 5 || m.Metrics["ndr_bps"] != ndr*256*8 {
		t.Errorf("metrics %v", m.Metrics)
	}

	pods := map[string]cluster.Pod{}
	for _, p := range fc.Pods() {
		pods[p.Name] = p
	}
	if len(pods) != 5 || pods["gen"].Node != "node0" || pods["recv"].Node != "node0" ||
		pods["vnf0"].Node != "node0" || pods["vnf1"].Node != "node1" || pods["vnf2"].Node != "node0" {
		t.Errorf("pods %v: want gen and recv on node0, the VNFs split", pods)
	}
	svcs := fc.Services()
	if len(svcs) != 1 || svcs[0].Ports[0].Port != 2152 || svcs[0].Ports[0].Protocol != "udp" {
		t.Fatalf("services %+v", svcs)
	}
	var fwds, gens int
	for _, s := range fc.Starts() {
		if slices.Contains(s.Cmd, "fwd") {
			fwds++
			if s.Cmd[0] != fakeSelf || !slices.Contains(s.Cmd, pods["recv"].IP+":2152") || !strings.HasPrefix(s.Pod, "vnf") {
				t.Errorf("VNF command %v in %s", s.Cmd, s.Pod)
			}
		}
	}
	for _, e := range fc.Execs() {
		if slices.Contains(e.Cmd, "gen") {
			gens++
			if e.Pod != "gen" || !slices.Contains(e.Cmd, svcs[0].ClusterIP) || !slices.Contains(e.Cmd, "--cpu") {
				t.Errorf("generator %v in %s: want it to the Service, pinned", e.Cmd, e.Pod)
			}
		}
	}
	if fwds != 3 || gens != int(m.Metrics["search_trials_count"])+1 {
		t.Errorf("%d VNFs started, %d generator runs for %v search trials and the calibration", fwds, gens, m.Metrics["search_trials_count"])
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fc.AssertEmpty(t)
}

// The CPU resources reach the VNF pods' specs (a recording fake checks them through
// CreatePods), and exclusive CPUs leave the generator and the receiver unpinned.
func TestVNFCPUResources(t *testing.T) {
	rec := &podRecorder{Fake: clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}})}
	f := mustSetUp(t, rec, vnfCase("inter", 2, 1000, "exclusive"))
	defer f.Close(context.Background())
	for _, s := range rec.specs {
		isVNF := strings.HasPrefix(s.Name, "vnf")
		if want := (cluster.CPU{LimitMilli: 1000, Exclusive: true}); isVNF && (s.CPU != want || s.Node != "node1") || !isVNF && s.CPU != (cluster.CPU{}) {
			t.Errorf("pod %s: CPU %+v on %s", s.Name, s.CPU, s.Node)
		}
	}
	for _, e := range rec.Execs() {
		if slices.Contains(e.Cmd, "--cpu") {
			t.Errorf("generator pinned with exclusive VNF CPUs: %v", e.Cmd)
		}
	}
}

type podRecorder struct {
	*clustertest.Fake
	specs []cluster.PodSpec
}

func (r *podRecorder) CreatePods(ctx context.Context, specs []cluster.PodSpec) ([]cluster.Pod, error) {
	r.specs = append(r.specs, specs...)
	return r.Fake.CreatePods(ctx, specs)
}

// Without a cnibench executable for the pods the case is skipped with the reason, creating
// nothing; bad parameters are refused before anything is built.
func TestVNFUnsupportedAndChecks(t *testing.T) {
	fc := clustertest.New(clustertest.Config{})
	_, err := setUpOn(t, fc, vnfCase("intra", 1, 0, "shared"))
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "no cnibench executable") {
		t.Fatalf("got %v", err)
	}
	if h := fc.History(); len(h) != 0 {
		t.Errorf("created %v", h)
	}
	sc, _ := scenario.Get("vnf")
	for _, c := range []struct {
		mod  func(*result.Case)
		want string
	}{
		{func(c *result.Case) { c.FrameSize = 64 }, "frame-size 64"},
		{func(c *result.Case) { c.CPULimit, c.CPUIsolation = 1500, "exclusive" }, "whole CPUs"},
		{func(c *result.Case) { c.Replicas = 17 }, "replicas 17"},
	} {
		cs := vnfCase("intra", 1, 0, "shared")
		c.mod(&cs)
		if err := sc.Info().Check(cs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cs, err, c.want)
		}
	}
	if err := sc.Info().Check(vnfCase("split", 4, 200, "shared")); err != nil {
		t.Errorf("a good case: %v", err)
	}
}

// With an ingress, the generator sends to a load balancer pod on its node that forwards to
// every replica in turn (no Service): through it the NDR is what one forwarder does (the
// fake's ingress is single-threaded like the replicas), not the sum of the replicas'.
func TestVNFIngress(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, VNFCapacity: 40_000})
	c := vnfCase("inter", 2, 0, "shared")
	c.LB = "ingress"
	c.ID = c.MakeID()
	f := mustSetUp(t, fc, c)
	m := mustTrial(t, f)
	if ndr := m.Metrics["ndr_pps"]; ndr > 40_000*1.0001 || ndr < 40_000*(1-0.005) { // whole packets: 40,000.3 pps for 1 s sends 40,000
		t.Errorf("NDR %.1f through the ingress, want 40,000 within 0.5 %%", ndr)
	}
	if len(fc.Services()) != 0 {
		t.Errorf("services %v with an ingress", fc.Services())
	}
	pods := map[string]cluster.Pod{}
	for _, p := range fc.Pods() {
		pods[p.Name] = p
	}
	var ingress []string
	for _, s := range fc.Starts() {
		if s.Pod == "ingress" {
			ingress = s.Cmd
		}
	}
	if want := pods["vnf0"].IP + ":2152," + pods["vnf1"].IP + ":2152"; !slices.Contains(ingress, want) || pods["ingress"].Node != "node0" {
		t.Errorf("ingress %v on %s, want it on node0 forwarding to %s", ingress, pods["ingress"].Node, want)
	}
	for _, e := range fc.Execs() {
		if slices.Contains(e.Cmd, "gen") && !slices.Contains(e.Cmd, pods["ingress"].IP) {
			t.Errorf("generator %v not to the ingress", e.Cmd)
		}
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fc.AssertEmpty(t)
}

// Exclusive CPUs: where the cluster grants them (the VNF pods run on CPUs the generator does
// not) the case is set up; where it does not (a kubelet without the static CPU manager) the
// case is skipped saying so, and nothing of it is left.
func TestVNFExclusiveCPUsChecked(t *testing.T) {
	c := vnfCase("intra", 1, 1000, "exclusive")
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}})
	f := mustSetUp(t, fc, c)
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	no := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, NoExclusiveCPUs: true})
	_, err := setUpOn(t, no, c)
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "may run on CPUs 0,1, the generator on 0,1") || !strings.Contains(err.Error(), "static") {
		t.Errorf("no exclusive CPUs: %v", err)
	}
	no.AssertEmpty(t)
	// Shared CPUs are not checked.
	f, err = setUpOn(t, no, vnfCase("intra", 1, 1000, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close(context.Background())
}
