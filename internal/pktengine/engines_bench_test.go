package pktengine

import (
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/stats"
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
// Each round runs both engines, in alternating order; the ratio af_xdp/af_packet is paired by
// round (stats.PairedRatio), with its 95 % interval.
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
		b.ReportMetric(stats.Summarize(tx[i]).Median, "send_"+e+"_pps")
		b.ReportMetric(stats.Summarize(rx[i]).Median, "recv_"+e+"_pps")
		b.ReportMetric(float64(lost[i]), "recv_"+e+"_lost")
		b.ReportMetric(float64(drops[i]), "recv_"+e+"_ring_drops")
	}
	// Paired by round, as the runner pairs cases (stats.PairedRatio: geometric mean of the
	// per-round ratios with its 95 % interval).
	for _, c := range []struct {
		what string
		v    [2][]float64
	}{{"send", tx}, {"recv", rx}} {
		r := stats.PairedRatio(byRound(c.v[1]), byRound(c.v[0]))
		b.ReportMetric(r.Ratio, c.what+"_xdp/packet")
		b.Logf("%s pps af_packet %.0f, af_xdp %.0f; af_xdp/af_packet %.3f [%.3f, %.3f] over %d rounds",
			c.what, c.v[0], c.v[1], r.Ratio, r.CI95Low, r.CI95High, r.N)
	}
}

// byRound keys each round's value by its round.
func byRound(v []float64) map[int]float64 {
	m := map[int]float64{}
	for i, x := range v {
		m[i] = x
	}
	return m
}

const (
	enginesRounds  = 5
	enginesSeconds = 2
)
