package scenario_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cluster/clustertest"
	"github.com/cnibench/cnibench/internal/result"
	"github.com/cnibench/cnibench/internal/scenario"
)

const fakeSelf = "/usr/local/bin/cnibench"

func vnfCase(placement string, replicas, cpuLimit int, isolation string) result.Case {
	c := fakeCase("vnf", "fake", placement, "gtpu")
	c.Replicas = replicas
	c.SetWord("vnf", "userspace")
	c.SetInt("cpu-limit", cpuLimit)
	c.SetWord("cpu-isolation", isolation)
	c.SetInt("frame-size", 256)
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
	if m.Metrics["latency_p50_us"] != 100 || m.Metrics["search_trials_count"] < 3 || m.Metrics["ndr_bps"] != ndr*256*8 {
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
		{func(c *result.Case) { c.SetInt("frame-size", 64) }, "frame-size 64"},
		{func(c *result.Case) { c.SetInt("cpu-limit", 1500); c.SetWord("cpu-isolation", "exclusive") }, "whole CPUs"},
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
	c.SetWord("lb", "ingress")
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

// The other searches through the same simulated VNFs (3 x 40,000 pps): binary finds the NDR
// and PDR within the width goal with every trial at the final duration; the ramp (seed 002)
// finds the maximum feasible throughput within its 5 % step, named as the seed names it.
func TestVNFSearches(t *testing.T) {
	for _, s := range []string{"binary", "ramp"} {
		t.Run(s, func(t *testing.T) {
			fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, VNFCapacity: 40_000})
			c := vnfCase("intra", 3, 0, "shared")
			c.SetWord("search", s)
			c.ID = c.MakeID()
			if !strings.Contains(c.ID, "/search="+s+"/") {
				t.Errorf("id %s does not name the search", c.ID)
			}
			f := mustSetUp(t, fc, c)
			m := mustTrial(t, f)
			closeEmpty(t, fc, f)
			var raw struct {
				Method string `json:"method"`
				Trials []struct {
					D int64 `json:"duration_ns"`
				} `json:"trials"`
			}
			if err := json.Unmarshal(m.Raw, &raw); err != nil {
				t.Fatal(err)
			}
			if raw.Method != s || len(raw.Trials) != int(m.Metrics["search_trials_count"]) {
				t.Errorf("raw method %q, %d trials; metrics %v", raw.Method, len(raw.Trials), m.Metrics)
			}
			for _, tr := range raw.Trials {
				if tr.D != int64(time.Second) {
					t.Errorf("%s trial of %d ns, want all at the final 1 s", s, tr.D)
				}
			}
			switch s {
			case "binary":
				if ndr := m.Metrics["ndr_pps"]; ndr > 120_000*1.0001 || ndr < 120_000*(1-0.005) {
					t.Errorf("NDR %.1f, want 120,000 within 0.5 %%", ndr)
				}
			case "ramp":
				// The highest step losing under 1 %: 120,000/0.99 is where loss reaches 1 %.
				mf := m.Metrics["max_feasible_pps"]
				if top := 120_000 / 0.99; mf > top || mf < top/1.05 {
					t.Errorf("max feasible %.1f, want within a 5 %% step under %.1f", mf, top)
				}
				if w := m.Metrics["max_feasible_relative_width"]; w < 0.04 || w > 0.05 || m.Metrics["latency_p50_us"] != 100 {
					t.Errorf("metrics %v", m.Metrics)
				}
				if _, ok := m.Metrics["ndr_pps"]; ok {
					t.Errorf("a ramp reports no NDR: %v", m.Metrics)
				}
			}
		})
	}
}

// Noisy neighbours: CPU-bound pods with the case's CPU limit stand on the VNFs' nodes, each
// running its loop, and go with the fixture; an ingress-remote stands on the other node.
func TestVNFNoisyAndRemoteIngress(t *testing.T) {
	rec := &podRecorder{Fake: clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}})}
	c := vnfCase("split", 2, 0, "shared")
	c.SetInt("noisy", 3)
	c.SetInt("noisy-cpu-limit", 250)
	c.SetWord("lb", "ingress-remote")
	c.ID = c.MakeID()
	if !strings.Contains(c.ID, "/lb=ingress-remote") || !strings.Contains(c.ID, "/noisy=3/ncpu=250") {
		t.Errorf("id %s", c.ID)
	}
	f := mustSetUp(t, rec, c)
	nodes := map[string]string{}
	for _, s := range rec.specs {
		nodes[s.Name] = s.Node
		if strings.HasPrefix(s.Name, "noisy") && s.CPU != (cluster.CPU{LimitMilli: 250}) {
			t.Errorf("noisy pod %s: CPU %+v", s.Name, s.CPU)
		}
	}
	if nodes["noisy0"] != "node0" || nodes["noisy1"] != "node1" || nodes["noisy2"] != "node0" || nodes["noisy3"] != "" || nodes["ingress"] != "node1" {
		t.Errorf("pods on %v: want the noisy ones beside vnf0 (node0) and vnf1 (node1) in turn, the ingress on node1", nodes)
	}
	loops := func() (n int) {
		for _, s := range rec.Starts() {
			if strings.HasPrefix(s.Pod, "noisy") && slices.Contains(s.Cmd, "while :; do :; done") {
				n++
			}
		}
		return n
	}
	// The loops run during the case's own trials only: a run keeps every case's fixture
	// standing, and one case's noise must not load another's trials. The generator is
	// calibrated with them running.
	if n := loops(); n != 0 {
		t.Errorf("%d noisy loops running after set-up", n)
	}
	mustTrial(t, f)
	if n := loops(); n != 3 {
		t.Errorf("%d noisy loops started in a trial: %v", n, rec.Starts())
	}
	for _, l := range rec.Leftovers() {
		if strings.Contains(l, "in noisy") {
			t.Errorf("after the trial: %s", l)
		}
	}
	h := rec.History()
	firstLoop, firstGen := -1, -1
	for i, l := range h {
		if firstLoop < 0 && strings.HasPrefix(l, "start noisy") {
			firstLoop = i
		}
		if firstGen < 0 && strings.HasPrefix(l, "exec gen") {
			firstGen = i
		}
	}
	if firstLoop < 0 || firstGen < firstLoop {
		t.Errorf("the generator ran (calibration) before the noise: %v", h)
	}
	closeEmpty(t, rec.Fake, f)

	sc, _ := scenario.Get("vnf")
	for _, c := range []struct {
		mod  func(*result.Case)
		want string
	}{
		{func(c *result.Case) { c.SetInt("noisy-cpu-limit", 250) }, "with no noisy pods"},
		{func(c *result.Case) { c.SetWord("search", "golden") }, `unknown search "golden"`},
	} {
		cs := vnfCase("intra", 1, 0, "shared")
		c.mod(&cs)
		if err := sc.Info().Check(cs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cs, err, c.want)
		}
	}
	// One node: the remote ingress is skipped with the reason, leaving nothing.
	one := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, Nodes: []cluster.Node{{Name: "node0", IP: "172.30.0.10"}}})
	c = vnfCase("intra", 1, 0, "shared")
	c.SetWord("lb", "ingress-remote")
	if _, err := setUpOn(t, one, c); !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "second node") {
		t.Errorf("remote ingress on one node: %v", err)
	}
	one.AssertEmpty(t)
}

// The kernel VNFs (kernel: NAT rules, xdp: an XDP program): each replica runs `pkt knf` or
// `pkt xfwd` to the receiver and the case goes on once it
// says it forwards; in pods without CAP_NET_ADMIN (an unprivileged Kubernetes pod) the case
// is skipped with the pod's own words, and nothing of it is left.
func TestVNFKernelKinds(t *testing.T) {
	for _, kind := range []struct{ name, verb string }{{"kernel", "knf"}, {"xdp", "xfwd"}} {
		t.Run(kind.name, func(t *testing.T) { testVNFKernelKind(t, kind.name, kind.verb) })
	}
}

func testVNFKernelKind(t *testing.T, name, verb string) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, VNFCapacity: 40_000})
	c := vnfCase("intra", 2, 0, "shared")
	c.SetWord("vnf", name)
	c.ID = c.MakeID()
	f := mustSetUp(t, fc, c)
	m := mustTrial(t, f)
	if ndr := m.Metrics["ndr_pps"]; ndr > 80_000*1.0001 || ndr < 80_000*(1-0.005) {
		t.Errorf("NDR %.1f through 2 kernel VNFs of 40,000 pps, want 80,000", ndr)
	}
	pods := map[string]cluster.Pod{}
	for _, p := range fc.Pods() {
		pods[p.Name] = p
	}
	knf := 0
	for _, s := range fc.Starts() {
		if slices.Contains(s.Cmd, verb) {
			knf++
			if !slices.Contains(s.Cmd, pods["recv"].IP+":2152") || !strings.HasPrefix(s.Pod, "vnf") {
				t.Errorf("kernel VNF %v in %s", s.Cmd, s.Pod)
			}
		}
	}
	if knf != 2 || !slices.Contains(m.Server, verb) {
		t.Errorf("%d kernel VNFs started; server command %v", knf, m.Server)
	}
	closeEmpty(t, fc, f)

	no := clustertest.New(clustertest.Config{Facts: cluster.Facts{Self: fakeSelf}, NoNetAdmin: true})
	_, err := setUpOn(t, no, c)
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "CAP_NET_ADMIN") {
		t.Errorf("without CAP_NET_ADMIN: %v", err)
	}
	no.AssertEmpty(t)
}

// A frame larger than the pods' MTU can carry (1518 bytes through an overlay's 1450) is a case
// the data plane cannot run as set up: skipped, saying which underlay MTU would do, before any
// pod is made.
func TestVNFFrameOverMTU(t *testing.T) {
	fc := clustertest.New(clustertest.Config{Facts: cluster.Facts{Backend: "fake", Dataplane: "fake", PodMTU: 1450, Self: fakeSelf}})
	c := vnfCase("intra", 1, 0, "shared")
	c.Protocol = "udp"
	c.SetInt("frame-size", 1518)
	c.ID = c.MakeID()
	_, err := setUpOn(t, fc, c)
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "1500 bytes of IP, more than the pods' MTU 1450") || !strings.Contains(err.Error(), "--mtu 1550") {
		t.Errorf("1518-byte frames at MTU 1450: %v", err)
	}
	fc.AssertEmpty(t)
	if h := fc.History(); len(h) != 0 {
		t.Errorf("created %v", h)
	}
	c.SetInt("frame-size", 1280)
	c.ID = c.MakeID()
	f := mustSetUp(t, fc, c)
	closeEmpty(t, fc, f)
}
