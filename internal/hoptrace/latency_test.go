package hoptrace

import (
	"math"
	"testing"
)

// Segments stamped at the points of a path, data one way and acknowledgements the other, come
// out as pairs of points in a row with the times between them, grouped by where they started;
// a segment stamped once is not traced; a pair only a stray segment took is left out.
func TestLatency(t *testing.T) {
	pts := []Point{
		{Where: "client", Dev: "eth0"},
		{Where: "node0", Dev: "veth1", Ingress: true},
		{Where: "node0", Dev: "veth2"},
		{Where: "server", Dev: "eth0", Ingress: true},
		{Where: "server", Dev: "eth0"},
		{Where: "client", Dev: "eth0", Ingress: true},
	}
	var st []Stamp
	// 200 data segments: client egress -> node ingress 5 us (the 200th: 100 us), node
	// veth1 -> veth2 20 us, veth2 -> server 3 us. Stamps come in any order.
	for i := range 200 {
		t0 := uint64(1e9 + i*1000)
		first := uint64(5000)
		if i == 199 {
			first = 100_000
		}
		st = append(st, Stamp{Pkt: uint64(i), Point: 3, NS: t0 + first + 23000}, Stamp{Pkt: uint64(i), Point: 0, NS: t0},
			Stamp{Pkt: uint64(i), Point: 1, NS: t0 + first}, Stamp{Pkt: uint64(i), Point: 2, NS: t0 + first + 20000})
	}
	// 50 acknowledgements back: server egress -> client ingress 7 us; one stamped once.
	for i := range 50 {
		t0 := uint64(2e9 + i*1000)
		st = append(st, Stamp{Pkt: uint64(1000 + i), Point: 4, NS: t0}, Stamp{Pkt: uint64(1000 + i), Point: 5, NS: t0 + 7000})
	}
	st = append(st, Stamp{Pkt: 5000, Point: 4, NS: 3e9})
	// A stray: a data segment that skipped the node (1 of 201 < 1 %).
	st = append(st, Stamp{Pkt: 6000, Point: 0, NS: 4e9}, Stamp{Pkt: 6000, Point: 3, NS: 4e9 + 9000})

	ls, traced := Latency(pts, st)
	if traced != 251 {
		t.Errorf("%d traced segments, want 251", traced)
	}
	want := []struct {
		start, from, to string
		n, p50, p99, at float64
	}{
		{"client eth0 egress", "client eth0 egress", "node0 veth1 ingress", 200, 5, 5, 0},
		{"client eth0 egress", "node0 veth1 ingress", "node0 veth2 egress", 200, 20, 20, 5 + 95.0/200},
		{"client eth0 egress", "node0 veth2 egress", "server eth0 ingress", 200, 3, 3, 25 + 95.0/200},
		{"server eth0 egress", "server eth0 egress", "client eth0 ingress", 50, 7, 7, 0},
	}
	if len(ls) != len(want) {
		t.Fatalf("%d pairs, want %d: %+v", len(ls), len(want), ls)
	}
	for i, w := range want {
		l := ls[i]
		if l.Start != w.start || l.From != w.from || l.To != w.to || l.Packets != w.n || l.P50US != w.p50 || l.P99US != w.p99 || math.Abs(l.AtUS-w.at) > 1e-9 {
			t.Errorf("pair %d: %+v, want %+v", i, l, w)
		}
	}
	// The one slow segment: the mean sees it, P50 and P99 (nearest rank of 200) do not.
	if l := ls[0]; math.Abs(l.MeanUS-(5+95.0/200)) > 1e-9 {
		t.Errorf("mean %v us, want %v", l.MeanUS, 5+95.0/200)
	}
}
