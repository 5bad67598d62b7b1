package scenario

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/names"
	"github.com/cnibench/cnibench/internal/result"
)

// p2sReplicas: HTTP through a Service to N replicas (seed 001 §5.2.2 last part, Table 5.6).
// A client pod on the first node fetches a 10 MB file from a Service whose endpoints are
// c.Replicas nginx pods on the other node(s), one new connection per request so the Service
// balances every request, and measures time to first byte and transfer rate per request. The
// seed's statistic (6 fetches, mean of the central 4) is kept as ttfb_seed_ms beside the
// distribution over all requests. c.Services-1 extra Services load the data plane as in p2s.
type p2sReplicas struct{}

func init() { Register(p2sReplicas{}) }

func (p2sReplicas) Name() string { return "p2s-replicas" }

func (p2sReplicas) Info() Info {
	return Info{
		Service:           always,
		Summary:           "HTTP through a Service to N nginx replicas: TTFB and rate of a 10 MB file (seed 001 §5.2.2, Table 5.6)",
		DefaultDataplanes: []string{"flannel", "calico"},
		Placements:        []string{"inter"},
		Protocols:         []string{"http"},
		DefaultProtocols:  []string{"http"},
		Params:            []string{"replicas", "services", "proxy"},
	}
}

const (
	// replicasServicePort is the measured Service's port (the replicas listen on
	// driver.HTTPPort).
	replicasServicePort = 80
	// replicaWorkers bounds the replicas prepared and started at once.
	replicaWorkers = 8
	// everyReplicaFactor: a trial with at least this many requests per replica must reach
	// every replica (with random balancing, a given replica of n misses all of 10n requests
	// with probability (1-1/n)^(10n) < e^-10, about 5e-5).
	everyReplicaFactor = 10
)

// replicasFixture is a client pod, nginx replicas and the Services of one case.
type replicasFixture struct {
	trialFrame
	replicas []cluster.Pod
	dirs     []string // each replica's nginx directory ("" = not prepared)
	procs    []cluster.Process
	vip      string
	pods     []string // to delete on Close
	services []string // to delete on Close
}

func (p2sReplicas) Setup(ctx context.Context, cl cluster.Cluster, c result.Case, opt Options) (_ Fixture, err error) {
	if c.Protocol != "http" {
		return nil, fmt.Errorf("p2s-replicas measures protocol http, not %q", c.Protocol)
	}
	if c.Placement != "inter" {
		return nil, cluster.Unsupported("p2s-replicas runs inter node only (seed 001 skips intra node to spare the node %d replicas), not %q", max(c.Replicas, 1), c.Placement)
	}
	nodes, err := cl.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	if len(nodes) < 2 {
		return nil, cluster.Unsupported("p2s-replicas needs 2 nodes, cluster has %d", len(nodes))
	}
	n := max(c.Replicas, 1)
	// Lab pods share the host's file system: the token keeps this fixture's directories apart
	// inside the cluster's scratch directory, which the backend removes with the cluster.
	token := names.Random(names.Lower, 8)
	f := &replicasFixture{trialFrame: newFrame(cl, opt, cluster.Pod{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close(context.WithoutCancel(ctx)))
		}
	}()

	// The client on the first node, the replicas spread over the others, in one call.
	specs := []cluster.PodSpec{{Name: objName(opt, "client"), Node: nodes[0].Name, Labels: fixtureLabels(opt, "client")}}
	for i := 0; i < n; i++ {
		specs = append(specs, cluster.PodSpec{Name: objName(opt, fmt.Sprintf("replica%d", i)), Node: nodes[1+i%(len(nodes)-1)].Name,
			Labels: fixtureLabels(opt, "replica"), Server: true,
			Ports: []cluster.ContainerPort{{Name: "http", Port: driver.HTTPPort, Protocol: "tcp"}}})
	}
	made, err := cl.CreatePods(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("client and %d replica pods: %w", n, err)
	}
	for _, p := range made {
		f.pods = append(f.pods, p.Name)
	}
	f.client, f.replicas = made[0], made[1:]

	// Each replica: its directory (config and file), then nginx, pinned to the server CPU.
	f.dirs, f.procs = make([]string, n), make([]cluster.Process, n)
	cmds := make([][]string, n) // each worker writes its own
	err = cluster.Parallel(ctx, n, replicaWorkers, func(i int) error {
		pod := f.replicas[i]
		dir := filepath.Join(cl.Facts().TempDir, fmt.Sprintf("cnibench-http-%s-%s", token, pod.Name))
		f.dirs[i] = dir
		res, err := cl.Exec(ctx, pod.Name, driver.NginxSetupCommand(dir, driver.HTTPPort, pod.Name))
		if err != nil {
			return fmt.Errorf("prepare nginx in %s: %w", pod.Name, err)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("prepare nginx in %s: exit %d: %s", pod.Name, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		cmds[i] = pin(opt.CPUs[1], driver.NginxCommand(dir))
		f.procs[i], err = cl.Start(ctx, pod.Name, cmds[i], cluster.Ready{TCPPort: driver.HTTPPort})
		return err
	})
	if err != nil {
		return nil, err
	}
	if n > 0 {
		f.serverCmd = cmds[0] // the trials record the first replica's (the others differ in their directory)
	}

	// The extra Services first: the measured one is then programmed with (and, in
	// kube-proxy's iptables layout, ordered after) all of them, as in p2s.
	extraPods, extras, extraMS, err := extraServices(ctx, cl, c.Services-1)
	f.pods = append(f.pods, extraPods...)
	f.services = append(f.services, extras...)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	svc, err := cluster.CreateService(ctx, cl, cluster.ServiceSpec{Name: objName(opt, "web"), Selector: fixtureLabels(opt, "replica"),
		Ports: []cluster.ServicePort{{Name: "http", Port: replicasServicePort, TargetPort: driver.HTTPPort, Protocol: "tcp"}}})
	if err != nil {
		return nil, err
	}
	svcMS := float64(time.Since(start).Microseconds()) / 1000
	f.services = append(f.services, svc.Name)
	f.vip = svc.ClusterIP
	f.setup = setupMetrics(ctx, cl, map[string]float64{"services_program_ms": extraMS + svcMS, "service_program_ms": svcMS,
		"service_endpoints": float64(len(svc.Endpoints))})
	return f, nil
}

// Trial fetches the file driver.HTTPRequests(durationS) times (at least 100; 20 per second
// of duration, so the default 12 trials of 10 s make 2,400 requests per case) in one curl
// run, and fails when a response came from a pod that is not a replica, or, with at least
// everyReplicaFactor requests per replica, when a replica served none.
func (f *replicasFixture) Trial(ctx context.Context, durationS int) (Measurement, error) {
	n := driver.HTTPRequests(durationS)
	// curl bounds each request (connect 5 s, whole transfer 60 s); this bounds the run at a
	// generous 5 s per request.
	timeout := 30*time.Second + time.Duration(n)*5*time.Second
	read := func(stdouts [][]byte) ([]driver.Fetch, error) { return driver.ParseCurl(stdouts[0]) }
	return measure(ctx, &f.trialFrame, "curl", [][]string{driver.CurlCommand(f.vip, replicasServicePort, n)}, timeout, read,
		func(fetches []driver.Fetch) (map[string]float64, error) {
			if len(fetches) != n {
				return nil, fmt.Errorf("curl reported %d of %d requests", len(fetches), n)
			}
			m, counts := driver.HTTPStats(fetches)
			replicas := make([]string, len(f.replicas))
			for i, p := range f.replicas {
				replicas[i] = p.Name
			}
			lo, hi, err := checkServed(counts, replicas, n)
			m["replica_requests_min"], m["replica_requests_max"] = float64(lo), float64(hi)
			return m, err
		})
}

// checkServed returns the fewest and the most requests a replica served (replicas that served
// none count as 0) and an error when a response named a pod that is not one of replicas, or
// when requests >= everyReplicaFactor*len(replicas) and some replica served none.
func checkServed(counts map[string]int, replicas []string, requests int) (lo, hi int, err error) {
	known := map[string]bool{}
	for _, r := range replicas {
		known[r] = true
	}
	var strangers []string
	for r := range counts {
		if !known[r] {
			strangers = append(strangers, r)
		}
	}
	if len(strangers) > 0 {
		sort.Strings(strangers)
		return 0, 0, fmt.Errorf("responses from %s, which are not replicas of this case", strings.Join(strangers, ", "))
	}
	var idle []string
	for i, r := range replicas {
		c := counts[r]
		if i == 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
		if c == 0 {
			idle = append(idle, r)
		}
	}
	if len(idle) > 0 && requests >= everyReplicaFactor*len(replicas) {
		return lo, hi, fmt.Errorf("%d of %d replicas served none of %d requests: %s", len(idle), len(replicas), requests, excerptList(idle, 10))
	}
	return lo, hi, nil
}

// excerptList joins the first max names and says how many more there are.
func excerptList(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}

// Close stops nginx, removes the replicas' directories, and deletes the Services and pods.
func (f *replicasFixture) Close(ctx context.Context) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	add := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	_ = cluster.Parallel(ctx, len(f.replicas), replicaWorkers, func(i int) error {
		if i < len(f.procs) && f.procs[i] != nil {
			add(f.procs[i].Stop())
		}
		if i < len(f.dirs) && f.dirs[i] != "" {
			res, err := f.cl.Exec(ctx, f.replicas[i].Name, driver.NginxCleanupCommand(f.dirs[i]))
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("remove %s in %s: exit %d: %s", f.dirs[i], f.replicas[i].Name, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
			}
			add(err)
		}
		return nil
	})
	if len(f.services) > 0 {
		add(f.cl.DeleteServices(ctx, f.services))
	}
	if len(f.pods) > 0 {
		add(f.cl.DeletePods(ctx, f.pods))
	}
	f.procs, f.dirs, f.services, f.pods = nil, nil, nil, nil
	return errors.Join(errs...)
}
