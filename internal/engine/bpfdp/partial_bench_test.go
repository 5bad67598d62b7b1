package bpfdp

import (
	"net/netip"
	"os"
	"testing"
	"time"
)

// benchServices is the benchmark's table: Services with one backend each.
const benchServices = 10000

// benchTable is n ClusterIP Services with one backend each.
func benchTable(n int) []Service {
	out := make([]Service, n)
	for i := range out {
		out[i] = Service{Addr: netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}), Port: 80, Proto: "tcp",
			Backends: bes(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 1)}), 8080))}
	}
	return out
}

// benchLB is one kind of Service table: a node holding it, written whole, and changed.
type benchLB struct {
	name   string
	node   func(b *testing.B) Node
	set    func(n Node, svcs []Service) error
	change func(n Node, prev ServiceTable, svcs []Service) (diff time.Duration, err error)
	pins   []string
}

var benchLBs = []benchLB{
	{
		name: "ebpf",
		node: func(b *testing.B) Node { return scratchNode(b, false) },
		set:  Node.SetServices,
		change: func(n Node, prev ServiceTable, svcs []Service) (time.Duration, error) {
			t0 := time.Now()
			c, _, _, err := prev.Diff(svcs)
			d := time.Since(t0)
			if err != nil {
				return d, err
			}
			return d, n.ChangeServices(c)
		},
		pins: []string{lbServices, lbBackends},
	},
	{
		name: "polycube",
		node: func(b *testing.B) Node {
			n := scratchNode(b, true)
			setupScratchPolycube(b, n, PolycubeChain)
			return n
		},
		set: func(n Node, svcs []Service) error { return n.PolycubeSetServices(PolycubeServices{ClusterIPs: svcs}) },
		change: func(n Node, prev ServiceTable, svcs []Service) (time.Duration, error) {
			t0 := time.Now()
			c, _, _, err := PolycubeTable{ClusterIPs: prev}.Diff(PolycubeServices{ClusterIPs: svcs})
			d := time.Since(t0)
			if err != nil {
				return d, err
			}
			return d, n.PolycubeChangeServices(c)
		},
		pins: []string{pcPin("ilb_svc"), pcPin("ilb_be"), pcPin("elb_svc"), pcPin("elb_be"), pcPin("nat_ports")},
	},
}

// BenchmarkServiceUpdate10k writes 10,000 Services with one backend each into two nodes'
// tables, then adds one Service: in one node by a full resync (SetServices,
// PolycubeSetServices: every entry written again, both maps walked for stale keys), in the
// other by a change (ServiceTable.Diff against the table kept from the last write, then
// ChangeServices, PolycubeChangeServices: the new Service's entry and backend). Reported per
// iteration: full_apply_s (the first 10,000), update_full_apply_s and update_partial_apply_s
// (the +1, in the maps), update_diff_s (the diff, in Go: it builds the new table, so it grows
// with the Services as a rendering does), and the two nodes' tables are checked to be equal
// after. For the svc_lb (ebpf, ebpf-sock) and the polycube ILB (ClusterIPs):
//
//	go test -run '^$' -bench ServiceUpdate10k -benchtime 1x ./internal/engine/bpfdp/
func BenchmarkServiceUpdate10k(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (BPF maps)")
	}
	if err := LBUsable(); err != nil {
		b.Skip(err)
	}
	svcs := benchTable(benchServices + 1)
	prev, err := NewServiceTable(svcs[:benchServices])
	if err != nil {
		b.Fatal(err)
	}
	for _, lb := range benchLBs {
		b.Run(lb.name, func(b *testing.B) {
			if lb.name == "polycube" {
				if err := PolycubeUsable(); err != nil {
					b.Skip(err)
				}
			}
			var first, full, partial, diff time.Duration
			for range b.N {
				b.StopTimer()
				resync, change := lb.node(b), lb.node(b)
				if err := lb.set(change, svcs[:benchServices]); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if err := lb.set(resync, svcs[:benchServices]); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := lb.set(resync, svcs); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				d, err := lb.change(change, prev, svcs)
				if err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				first, full, partial, diff = first+t1.Sub(t0), full+t2.Sub(t1), partial+t3.Sub(t2)-d, diff+d
				b.StopTimer()
				sameMaps(b, "after the update", change, resync, lb.pins...)
				if got := len(dumpMap(b, change, lb.pins[0])); got != benchServices+1 {
					b.Fatalf("after the update: %d Services in %s, want %d", got, lb.pins[0], benchServices+1)
				}
			}
			n := float64(b.N)
			b.ReportMetric(first.Seconds()/n, "full_apply_s")
			b.ReportMetric(full.Seconds()/n, "update_full_apply_s")
			b.ReportMetric(partial.Seconds()/n, "update_partial_apply_s")
			b.ReportMetric(diff.Seconds()/n, "update_diff_s")
			b.ReportMetric(0, "ns/op") // the seconds above say it better
		})
	}
}
