// Package hoptrace is `--trace hops`: per-hop latency from the kernel's own clock. A copy of
// one eBPF program (bpf/hop_trace.c) sits first in the tcx ingress and egress hooks of every
// device of a trial's path and stamps a sample of the TCP segments that pass (1 in 2^bits, the
// same segments everywhere: the sample is taken on a hash of the segment's identity) in a map
// shared by all copies. When the trial ends, each sampled segment's stamps are lined up in
// time: the difference between two in a row is the time the segment took from one point to
// the next. Per pair of points the package gives P50, P99 and the mean (account.HopLatency).
//
// A tc hook stamps a packet when the device's hook runs: at egress before the device's qdisc
// (time in a qdisc counts to the way to the next point), at ingress when the receiving CPU
// processes it (time in a backlog queue counts to the way there). The tracer never changes a
// packet nor its fate.
package hoptrace

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/stats"
)

// DefaultSampleBits samples 1 segment in 64.
const DefaultSampleBits = 6

// Point is one device hook a tracer stamps at.
type Point struct {
	NS      string // the namespace the device is in
	Where   string // what the namespace is: a pod's or a node's name, "fabric", a network function's
	Dev     string
	Ingress bool // the ingress hook (false: egress)
	L2      bool // the device's frames start with an Ethernet header
}

// Name is how a point is shown: "client eth0 egress".
func (p Point) Name() string {
	dir := "egress"
	if p.Ingress {
		dir = "ingress"
	}
	return p.Where + " " + p.Dev + " " + dir
}

// Options tune a tracer.
type Options struct {
	SampleBits  int      // a segment is sampled when its hash has this many low zero bits (0: DefaultSampleBits)
	TunnelPorts []uint16 // VXLAN UDP ports to look into on the underlay (at most 2)
}

// Tracer is a running trace.
type Tracer struct {
	points []Point
	stamps *ebpf.Map
	progs  []*ebpf.Program
	links  []link.Link
}

// Usable says why this kernel cannot trace hops (nil: it can): the tracer is a tc program on
// tcx links, as the eBPF network functions are.
func Usable() error { return nf.HaveTCX() }

// Start attaches a copy of the program to every point, first in its hook. A point whose device
// is gone is an error (the trace would miss it); on any error nothing stays attached.
func Start(points []Point, o Options) (_ *Tracer, err error) {
	if len(points) == 0 {
		return nil, errors.New("no point to trace")
	}
	if len(o.TunnelPorts) > 2 {
		return nil, fmt.Errorf("%d tunnel ports: the tracer looks into at most 2", len(o.TunnelPorts))
	}
	bits := cmp.Or(o.SampleBits, DefaultSampleBits)
	if bits < 0 || bits > 20 {
		return nil, fmt.Errorf("sample bits %d: give 0..20 (1 segment in 2^bits is stamped)", bits)
	}
	spec, err := loadHoptrace()
	if err != nil {
		return nil, fmt.Errorf("hop tracer: %w", err)
	}
	t := &Tracer{points: slices.Clone(points)}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.stamps, err = ebpf.NewMap(spec.Maps["stamps"]); err != nil {
		return nil, fmt.Errorf("hop tracer's map: %w", err)
	}
	var ports [2]uint16
	copy(ports[:], o.TunnelPorts)
	for i, p := range points {
		s := spec.Copy()
		for name, v := range map[string]any{"point": uint32(i), "l2": b2u8(p.L2), "sample_bits": uint8(bits),
			"tunnel_port1": htons(ports[0]), "tunnel_port2": htons(ports[1])} {
			if err := s.Variables[name].Set(v); err != nil {
				return nil, fmt.Errorf("hop tracer: set %s: %w", name, err)
			}
		}
		var objs hoptracePrograms
		if err := s.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"stamps": t.stamps}}); err != nil {
			return nil, fmt.Errorf("hop tracer: load for %s: %w", p.Name(), err)
		}
		t.progs = append(t.progs, objs.HopTrace)
		if err := t.attach(p, objs.HopTrace); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// attach puts prog first in p's hook.
func (t *Tracer) attach(p Point, prog *ebpf.Program) error {
	h, err := netns.Netlink(p.NS)
	if err != nil {
		return err
	}
	lk, err := h.LinkByName(p.Dev)
	h.Close()
	if err != nil {
		return fmt.Errorf("hop tracer: device %s in %s: %w", p.Dev, p.NS, err)
	}
	at := ebpf.AttachTCXEgress
	if p.Ingress {
		at = ebpf.AttachTCXIngress
	}
	var l link.Link
	err = netns.Do(p.NS, func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Program: prog, Interface: lk.Attrs().Index, Attach: at, Anchor: link.Head()})
		return err
	})
	if err != nil {
		return fmt.Errorf("hop tracer: attach to %s: %w", p.Name(), err)
	}
	t.links = append(t.links, l)
	return nil
}

// Stop detaches the tracer and returns what it stamped.
func (t *Tracer) Stop() ([]Stamp, error) {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	var out []Stamp
	var k hoptraceStampKey
	var v uint64
	it := t.stamps.Iterate()
	for it.Next(&k, &v) {
		if int(k.Point) < len(t.points) {
			out = append(out, Stamp{Pkt: k.Pkt, Point: int(k.Point), NS: v})
		}
	}
	errs = append(errs, it.Err())
	t.close()
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("hop tracer: %w", err)
	}
	return out, nil
}

// close releases what the tracer holds (detaching what is still attached).
func (t *Tracer) close() {
	for _, l := range t.links {
		_ = l.Close()
	}
	for _, p := range t.progs {
		_ = p.Close()
	}
	if t.stamps != nil {
		_ = t.stamps.Close()
	}
	t.links, t.progs, t.stamps = nil, nil, nil
}

// Points are the tracer's points, in the order their indexes refer to.
func (t *Tracer) Points() []Point { return t.points }

// Stamp is one sampled segment's time at one point.
type Stamp struct {
	Pkt   uint64 // the segment's identity
	Point int    // the index of the point
	NS    uint64 // the kernel's monotonic clock, nanoseconds
}

// Latency lines each sampled segment's stamps up in time and puts the difference between two
// in a row on that pair of points, grouped by the point the segment was first stamped at. It
// returns the pairs with their figures (in path order: by start, then by where along the way)
// and how many segments were stamped at two points or more. A pair fewer than minShare of its
// start's segments took is left out (a segment now and then stamped at a point it usually
// passes unseen, or not stamped at one it passes: a full map, a race with the attach).
func Latency(points []Point, stamps []Stamp) ([]account.HopLatency, int) {
	const minShare = 0.01
	byPkt := map[uint64][]Stamp{}
	for _, s := range stamps {
		byPkt[s.Pkt] = append(byPkt[s.Pkt], s)
	}
	type pair struct{ start, from, to int }
	deltas := map[pair][]float64{}
	at := map[pair]float64{}
	starts := map[int]int{}
	traced := 0
	for _, ss := range byPkt {
		if len(ss) < 2 {
			continue
		}
		traced++
		slices.SortFunc(ss, func(a, b Stamp) int { return cmp.Or(cmp.Compare(a.NS, b.NS), cmp.Compare(a.Point, b.Point)) })
		starts[ss[0].Point]++
		for i := 1; i < len(ss); i++ {
			p := pair{ss[0].Point, ss[i-1].Point, ss[i].Point}
			deltas[p] = append(deltas[p], float64(ss[i].NS-ss[i-1].NS)/1e3)
			at[p] += float64(ss[i-1].NS-ss[0].NS) / 1e3
		}
	}
	var out []account.HopLatency
	for p, ds := range deltas {
		if float64(len(ds)) < minShare*float64(starts[p.start]) {
			continue
		}
		slices.Sort(ds)
		sum := 0.0
		for _, d := range ds {
			sum += d
		}
		n := float64(len(ds))
		out = append(out, account.HopLatency{Start: points[p.start].Name(), From: points[p.from].Name(), To: points[p.to].Name(),
			Packets: n, P50US: stats.NearestRank(ds, 50), P99US: stats.NearestRank(ds, 99), MeanUS: sum / n, AtUS: at[p] / n})
	}
	account.SortLatency(out)
	return out, traced
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// htons is a port in network order as the program compares it (a little-endian load of the
// big-endian bytes).
func htons(p uint16) uint16 { return p<<8 | p>>8 }
