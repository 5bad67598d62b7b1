package pktengine

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
)

// BenchmarkEngines64 compares af_packet and af_xdp, paired by round, in one run on one veth
// pair: 64-byte UDP frames as fast as each can, the sending thread on CPU 0.
//
//   - send: the generator alone with each engine (the receiver's namespace holds a Sink, no
//     receiver runs), its rate being what the peer end received per second (its interface
//     counter);
//   - receive: the af_packet generator into a receiver (CPU 1) with each engine, the rate it
//     received (rx_pps), what it lost and its ring drops.
//
// Each round runs both engines, in alternating order; the ratios af_xdp/af_packet are per
// round, summarised by their median.
//
//	go test -run '^$' -bench Engines64 -benchtime 1x ./internal/pktengine
func BenchmarkEngines64(b *testing.B) {
	if err := (afXDP{}).Usable(); err != nil {
		b.Skip(err)
	}
	p := newPair(b)
	var closeSink func()
	if err := netns.Do(p.recv, func() (err error) { closeSink, err = Sink(GTPPort); return err }); err != nil {
		b.Fatal(err)
	}
	defer closeSink()
	engines := [2]string{"af_packet", "af_xdp"}
	var tx, rx [2][]float64
	var lost, drops [2]uint64
	for range b.N {
		for round := range enginesRounds {
			order := []int{0, 1}
			if round%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				rx0 := rxPackets(b, p)
				o := genOptions(UDP, "64", 0, enginesSeconds*time.Second)
				o.CPU = 0
				o.Engine, o.Dst, o.SrcPort, o.DstPort = engines[i], p.recvIP, GTPPort, GTPPort
				var gen GenResult
				if err := netns.Do(p.gen, func() (err error) { gen, err = RunGen(b.Context(), o); return err }); err != nil {
					b.Fatal(err)
				}
				pps := float64(rxPackets(b, p)-rx0) / gen.DurationS
				tx[i] = append(tx[i], pps)
				b.Logf("round %d send %-9s: %.0f pps sent, %.0f received by the peer, %d send errors", round, engines[i], gen.AchievedPPS, pps, gen.TXErrors)
			}
			for _, i := range order {
				o := genOptions(UDP, "64", 0, enginesSeconds*time.Second)
				o.CPU, o.Engine = 0, "af_packet"
				gen, recv := p.trial(b, o, engines[i], 1)
				l := max(gen.SentPackets, recv.Unique) - recv.Unique
				rx[i] = append(rx[i], recv.RxPPS)
				lost[i] += l
				drops[i] += recv.RingDrops
				b.Logf("round %d recv %-9s: %d sent (%.0f pps), %d received (%.0f pps), lost %d, ring drops %d (full %d), p50 %.1f µs",
					round, engines[i], gen.SentPackets, gen.AchievedPPS, recv.Received, recv.RxPPS, l, recv.RingDrops, recv.RingFull, recv.Latency.P50)
			}
		}
	}
	for i, e := range engines {
		b.ReportMetric(median(tx[i]), "send_"+e+"_pps")
		b.ReportMetric(median(rx[i]), "recv_"+e+"_pps")
		b.ReportMetric(float64(lost[i]), "recv_"+e+"_lost")
		b.ReportMetric(float64(drops[i]), "recv_"+e+"_ring_drops")
	}
	b.ReportMetric(medianRatio(tx[1], tx[0]), "send_xdp/packet")
	b.ReportMetric(medianRatio(rx[1], rx[0]), "recv_xdp/packet")
	b.Logf("send pps af_packet %s, af_xdp %s; per-round ratio af_xdp/af_packet %s", fmtRates(tx[0]), fmtRates(tx[1]), fmtRatios(tx[1], tx[0]))
	b.Logf("recv pps af_packet %s, af_xdp %s; per-round ratio af_xdp/af_packet %s", fmtRates(rx[0]), fmtRates(rx[1]), fmtRatios(rx[1], rx[0]))
}

const (
	enginesRounds  = 5
	enginesSeconds = 2
)

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func ratios(a, b []float64) []float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		r = append(r, a[i]/b[i])
	}
	return r
}

func medianRatio(a, b []float64) float64 { return median(ratios(a, b)) }

func fmtRates(v []float64) string {
	s := ""
	for _, x := range v {
		s += fmt.Sprintf(" %.0f", x)
	}
	return "[" + s[min(1, len(s)):] + "]"
}

func fmtRatios(a, b []float64) string {
	s := ""
	for _, x := range ratios(a, b) {
		s += fmt.Sprintf(" %.3f", x)
	}
	return "[" + s[min(1, len(s)):] + "] median " + fmt.Sprintf("%.3f", medianRatio(a, b))
}
