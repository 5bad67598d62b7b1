package scenario

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/result"
)

func TestP2SReplicasInfo(t *testing.T) {
	s, err := Get("p2s-replicas")
	if err != nil {
		t.Fatal(err)
	}
	i := s.Info()
	if !slices.Equal(i.Placements, []string{"inter"}) || !slices.Equal(i.Protocols, []string{"http"}) ||
		!slices.Equal(i.DefaultDataplanes, []string{"flannel", "calico"}) {
		t.Errorf("info = %+v", i)
	}
	for _, p := range []string{"replicas", "services", "proxy"} {
		if !slices.Contains(i.Params, p) {
			t.Errorf("params %v lack %s", i.Params, p)
		}
	}
}

func TestCheckServed(t *testing.T) {
	reps := []string{"replica0", "replica1", "replica2"}
	// Enough requests (>= 10 per replica): every replica must have served.
	lo, hi, err := checkServed(map[string]int{"replica0": 10, "replica1": 12, "replica2": 8}, reps, 30)
	if err != nil || lo != 8 || hi != 12 {
		t.Errorf("all served: %d %d %v", lo, hi, err)
	}
	lo, hi, err = checkServed(map[string]int{"replica0": 20, "replica2": 10}, reps, 30)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 replicas served none of 30 requests: replica1") || lo != 0 || hi != 20 {
		t.Errorf("one idle: %d %d %v", lo, hi, err)
	}
	// Too few requests to demand it: only reported.
	if lo, hi, err := checkServed(map[string]int{"replica0": 29}, reps, 29); err != nil || lo != 0 || hi != 29 {
		t.Errorf("few requests: %d %d %v", lo, hi, err)
	}
	// A response from a pod that is no replica of the case is an error.
	if _, _, err := checkServed(map[string]int{"replica0": 10, "extra7": 1}, reps, 11); err == nil || !strings.Contains(err.Error(), "extra7") {
		t.Errorf("stranger: %v", err)
	}
	var many []string
	for i := 0; i < 25; i++ {
		many = append(many, fmt.Sprintf("r%d", i))
	}
	if _, _, err := checkServed(nil, many, 1000); err == nil || !strings.Contains(err.Error(), "and 15 more") {
		t.Errorf("many idle: %v", err)
	}
}

// TestP2SReplicasLab runs the scenario on a real flannel lab: real nginx replicas behind the
// lab's kube-proxy-style Service, one curl run, every replica reached, and nothing left behind.
func TestP2SReplicasLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if testing.Short() {
		t.Skip("short mode")
	}
	p := fmt.Sprintf("cnbth%04d", rand.Intn(10000))
	l, err := lab.Up(context.Background(), lab.Config{Prefix: p, Dataplane: "flannel"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("lab close: %v", err)
		}
		if left := lab.Leftovers(p); len(left) > 0 {
			t.Errorf("leftovers: %v", left)
		}
	})
	for _, c := range []struct{ replicas, services int }{{4, 0}, {2, 3}} {
		t.Run(fmt.Sprintf("replicas=%d/services=%d", c.replicas, c.services), func(t *testing.T) {
			cs := result.Case{Scenario: "p2s-replicas", Backend: "lab", Dataplane: "flannel", Placement: "inter",
				Protocol: "http", Tool: "curl", Replicas: c.replicas, Services: c.services}
			cs.ID = cs.MakeID()
			fx, err := p2sReplicas{}.Setup(context.Background(), l, cs, Options{CPUs: [2]int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			f := fx.(*replicasFixture)
			closed := false
			t.Cleanup(func() {
				if !closed {
					_ = f.Close(context.Background())
				}
			})
			pods, dirs := slices.Clone(f.pods), slices.Clone(f.dirs)
			if len(pods) != 1+c.replicas+max(c.services-1, 0) || len(dirs) != c.replicas {
				t.Fatalf("pods %v, dirs %v", pods, dirs)
			}
			nodes, _ := l.Nodes(context.Background())
			for _, r := range f.replicas {
				if r.Node == f.client.Node || r.Node != nodes[1].Name {
					t.Errorf("replica %s on %s, client on %s: not inter node", r.Name, r.Node, f.client.Node)
				}
			}

			m, err := f.Trial(context.Background(), 1)
			if err != nil {
				t.Fatalf("%v\n%s", err, m.Raw)
			}
			fetches, err := driver.ParseCurl(m.Raw)
			if err != nil || len(fetches) != driver.MinHTTPRequests {
				t.Fatalf("raw output: %d fetches, %v", len(fetches), err)
			}
			_, counts := driver.HTTPStats(fetches)
			for _, r := range f.replicas {
				if counts[r.Name] == 0 {
					t.Errorf("replica %s served nothing: %v", r.Name, counts)
				}
			}
			mt := m.Metrics
			t.Logf("metrics: %v; per replica: %v", mt, counts)
			if mt["requests"] != driver.MinHTTPRequests || mt["replicas_served"] != float64(c.replicas) || mt["replica_requests_min"] < 1 {
				t.Errorf("requests %v, replicas_served %v, min per replica %v", mt["requests"], mt["replicas_served"], mt["replica_requests_min"])
			}
			// TTFB through a VXLAN overlay and the Service on one host: well above zero, well
			// below a second; 10 MB move at more than 100 Mbit/s.
			if mt["ttfb_p50_ms"] <= 0.01 || mt["ttfb_p99_ms"] > 1000 || mt["ttfb_seed_ms"] <= 0 || mt["ttfb_seed_ms"] > 1000 {
				t.Errorf("implausible TTFB: %v", mt)
			}
			if mt["transfer_bps"] < 1e8 || mt["requests_per_s"] <= 0 {
				t.Errorf("implausible rate: %v", mt)
			}
			if _, ok := mt["services_program_ms"]; !ok || mt["service_endpoints"] != float64(c.replicas) {
				t.Errorf("setup metrics missing: %v", mt)
			}
			// Server side: each replica's access log records what X-Replica credits it with.
			for i, r := range f.replicas {
				b, err := os.ReadFile(filepath.Join(f.dirs[i], "access.log"))
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Count(string(b), "GET "+driver.HTTPFile+"?"); got != counts[r.Name] {
					t.Errorf("%s logged %d requests, X-Replica credits it with %d", r.Name, got, counts[r.Name])
				}
			}

			// A replica that stops answering fails the trial (its requests get no response).
			if err := f.procs[0].Stop(); err != nil {
				t.Fatal(err)
			}
			f.procs[0] = nil
			if m, err := f.Trial(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "no HTTP response") {
				t.Errorf("trial with a dead replica: %v\n%s", err, m.Raw)
			}

			closed = true
			if err := f.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, name := range pods {
				if _, err := l.Pod(name); err == nil {
					t.Errorf("pod %s still exists after Close", name)
				}
			}
			for _, d := range dirs {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("replica directory %s left behind: %v", d, err)
				}
			}
		})
	}
}
