package lab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
)

// BenchmarkServiceAddOneAt10k is the lab's side of the change scenario's Service kind without
// the prober: a two-node calico lab with the nftables proxy (partial syncs), 10,000 Services
// standing, each selecting the one endpoint pod; each iteration creates one more Service and
// deletes it again. Reported: add_ms and remove_ms, the calls (every node programmed), and
// add_program_ms / remove_program_ms, what the lab records as proxy_program_ms. Set-up takes
// a few seconds:
//
//	go test -run '^$' -bench ServiceAddOneAt10k -benchtime 20x ./internal/lab/
func BenchmarkServiceAddOneAt10k(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ctx := context.Background()
	prefix := testPrefix()
	l, err := Up(ctx, Config{Prefix: prefix, Dataplane: "calico", Proxy: "nftables"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Close(ctx); err != nil {
			b.Errorf("lab close: %v", err)
		}
		if left := Leftovers(prefix); len(left) > 0 {
			b.Errorf("leftovers after close: %v", left)
		}
	})
	sel := map[string]string{"app": "bench"}
	if _, err := l.CreatePods(ctx, []cluster.PodSpec{{Name: "ep", Node: "node1", Labels: sel}}); err != nil {
		b.Fatal(err)
	}
	spec := func(name string) cluster.ServiceSpec {
		return cluster.ServiceSpec{Name: name, Selector: sel, Ports: []cluster.ServicePort{{Port: 80, TargetPort: 8080, Protocol: "TCP"}}}
	}
	specs := make([]cluster.ServiceSpec, 10000)
	for i := range specs {
		specs[i] = spec(fmt.Sprintf("s%05d", i))
	}
	if _, err := l.CreateServices(ctx, specs); err != nil {
		b.Fatal(err)
	}
	var add, remove time.Duration
	var addProg, removeProg float64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := l.CreateServices(ctx, []cluster.ServiceSpec{spec("one")}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		addProg += l.Programmed(ctx)["proxy_program_ms"]
		if err := l.DeleteServices(ctx, []string{"one"}); err != nil {
			b.Fatal(err)
		}
		remove += time.Since(t1)
		add += t1.Sub(t0)
		removeProg += l.Programmed(ctx)["proxy_program_ms"]
	}
	n := float64(b.N)
	b.ReportMetric(add.Seconds()*1000/n, "add_ms")
	b.ReportMetric(remove.Seconds()*1000/n, "remove_ms")
	b.ReportMetric(addProg/n, "add_program_ms")
	b.ReportMetric(removeProg/n, "remove_program_ms")
	b.ReportMetric(0, "ns/op")
}
