package pktengine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cpupin"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// nsPair is a generator namespace and a receiver namespace joined by a veth pair.
type nsPair struct {
	gen, recv       string // namespace names
	genDev, recvDev string
	genIP, recvIP   netip.Addr
}

// newPair makes the pair (netnstest.NewPair: removed when the test ends, skipped when not
// root).
func newPair(t testing.TB) nsPair {
	t.Helper()
	p := netnstest.NewPair(t, [2]string{"g", "r"}, [2]string{"gen0", "recv0"}, netip.MustParsePrefix("10.252.0.0/24"))
	return nsPair{gen: p.NS[0], recv: p.NS[1], genDev: p.Dev[0], recvDev: p.Dev[1], genIP: p.IP[0], recvIP: p.IP[1]}
}

// openRX opens the receiver's ring of engine name in its namespace (the ring then works from
// any thread).
func (p nsPair) openRX(t testing.TB, name string) RX {
	t.Helper()
	e, err := Lookup(name, RoleRecv)
	if err != nil {
		t.Fatal(err)
	}
	var rx RX
	err = netns.Do(p.recv, func() error {
		ifc, err := IfaceByName(p.recvDev)
		if err != nil {
			return err
		}
		rx, err = e.OpenRX(ifc)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rx
}

// trial runs a receiver with engine recvEngine (pinned to recvCPU if >= 0), then the generator
// (resolving the receiver's MAC address with ARP) with o (o.Engine "": af_packet), then stops
// the receiver, and returns both results.
func (p nsPair) trial(t testing.TB, o GenOptions, recvEngine string, recvCPU int) (GenResult, RecvResult) {
	t.Helper()
	rx := p.openRX(t, recvEngine)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	type recvOut struct {
		res RecvResult
		err error
	}
	done := make(chan recvOut, 1)
	go func() {
		var res RecvResult
		ran := false
		err := cpupin.Run(recvCPU, func() error {
			var err error
			ran = true
			res, err = receive(ctx, rx, RecvConfig{})
			return err
		})
		if !ran {
			_ = rx.Close()
		}
		done <- recvOut{res, err}
	}()
	if o.Engine == "" {
		o.Engine = "af_packet"
	}
	o.Dst, o.SrcPort, o.DstPort = p.recvIP, GTPPort, GTPPort
	var gen GenResult
	err := netns.Do(p.gen, func() error {
		var err error
		gen, err = RunGen(context.Background(), o)
		return err
	})
	stop()
	r := <-done
	if err != nil {
		t.Fatalf("generator: %v", err)
	}
	if r.err != nil {
		t.Fatalf("receiver: %v", r.err)
	}
	return gen, r.res
}

func genOptions(mode Mode, size string, rate float64, d time.Duration) GenOptions {
	sizes, err := ParseSize(size, mode)
	if err != nil {
		panic(err)
	}
	return GenOptions{GenConfig: GenConfig{Mode: mode, Sizes: sizes, SizeName: size, Rate: rate, Duration: d,
		Streams: 3, FirstTEID: 1000, Rotate: 500 * time.Millisecond, ProbeRate: 5}, CPU: -1}
}

// Through a veth pair at 20,000 pps the receiver counts every frame of the generator, per TEID
// as the generator counted them, none lost or twice, and measures the probes' latency; the
// generator holds its rate within 1 %. Each engine sends and receives, on a pair of its own
// (so that the generator resolves the receiver's address with ARP while the receiver's engine
// runs); an engine this host cannot run is skipped with the reason.
func TestGenRecvVeth(t *testing.T) {
	for _, e := range Engines() {
		t.Run(e.Name(), func(t *testing.T) {
			if err := e.Usable(); err != nil {
				t.Skipf("%s: %v", e.Name(), err)
			}
			genRecvVeth(t, e.Name())
		})
	}
}

func genRecvVeth(t *testing.T, engine string) {
	p := newPair(t)
	for _, c := range []struct {
		mode Mode
		size string
		d    time.Duration
	}{{GTPU, "256", 2 * time.Second}, {UDP, "imix", time.Second}, {UDP, "64", time.Second}} {
		t.Run(string(c.mode)+"/"+c.size, func(t *testing.T) {
			const rate = 20000
			o := genOptions(c.mode, c.size, rate, c.d)
			o.Engine = engine
			gen, recv := p.trial(t, o, engine, -1)
			t.Logf("generator: %d frames in %.3f s (%.0f pps, %s); receiver (%s): %d, latency %+v µs, ring drops %d",
				gen.SentPackets, gen.DurationS, gen.AchievedPPS, gen.TX, recv.RX, recv.Received, recv.Latency, recv.RingDrops)
			want := rate * c.d.Seconds()
			if n := float64(gen.SentPackets); n < want*0.99 || n > want*1.01 {
				t.Errorf("sent %d frames, want %.0f ± 1 %%", gen.SentPackets, want)
			}
			if gen.TXErrors != 0 {
				t.Errorf("%d send errors", gen.TXErrors)
			}
			if recv.Received != gen.SentPackets || recv.Unique != gen.SentPackets || recv.Lost != 0 || recv.Duplicates != 0 || recv.Reordered != 0 {
				t.Errorf("received %+v of %d sent", recv.StreamCounts, gen.SentPackets)
			}
			if recv.ReceivedBytes != gen.SentBytes {
				t.Errorf("received %d bytes, sent %d", recv.ReceivedBytes, gen.SentBytes)
			}
			sent := map[uint32]uint64{}
			for _, s := range gen.Streams {
				if s.Sent > 0 {
					sent[s.TEID] = s.Sent
				}
			}
			if len(sent) < 2 || len(recv.Streams) != len(sent) {
				t.Errorf("streams sent %v, received %+v", gen.Streams, recv.Streams)
			}
			for _, s := range recv.Streams {
				if s.Received != sent[s.TEID] {
					t.Errorf("TEID %d: received %d, sent %d", s.TEID, s.Received, sent[s.TEID])
				}
			}
			if recv.Probes != gen.ProbesSent || recv.Latency.Count < 1 || recv.Latency.Min <= 0 || recv.NegativeLatency != 0 {
				t.Errorf("probes: %d sent, %d received, latency %+v µs, %d negative", gen.ProbesSent, recv.Probes, recv.Latency, recv.NegativeLatency)
			}
			if recv.RingDrops != 0 {
				t.Errorf("ring drops %d", recv.RingDrops)
			}
		})
	}
}

// BenchmarkGen64 runs the generator unlimited with 64-byte frames for 2 s per iteration
// (run it with -benchtime=1x), pinned to CPU 0 with the receiver on CPU 1 (and a sink on the
// receiver's port, as pkt recv holds one), and reports the generator's rate and the
// receiver's: veth delivers in the sender's softirq, so the generator's core also carries the
// receiving kernel's work.
func BenchmarkGen64(b *testing.B) {
	p := newPair(b)
	var closeSink func()
	if err := netns.Do(p.recv, func() (err error) { closeSink, err = Sink(GTPPort); return err }); err != nil {
		b.Fatal(err)
	}
	defer closeSink()
	for range b.N {
		o := genOptions(UDP, "64", 0, 2*time.Second)
		o.CPU = 0
		gen, recv := p.trial(b, o, "af_packet", 1)
		b.ReportMetric(gen.AchievedPPS, "gen_pps")
		b.ReportMetric(recv.RxPPS, "rx_pps")
		b.ReportMetric(float64(recv.RingDrops), "ring_drops")
		b.ReportMetric(max(float64(gen.SentPackets)-float64(recv.Unique), 0), "lost")
		b.Logf("%s: %d sent (%.0f pps), %d received (%.0f pps), ring drops %d (full %d), p50 %.1f µs",
			gen.TX, gen.SentPackets, gen.AchievedPPS, recv.Received, recv.RxPPS, recv.RingDrops, recv.RingFull, recv.Latency.P50)
	}
}

// With a Sink on the port, the receiver's host answers the generator's datagrams with no ICMP
// port unreachable (a connected UDP socket would see it as ECONNREFUSED); without, it does.
func TestSink(t *testing.T) {
	p := newPair(t)
	refused := func() bool {
		t.Helper()
		var got error
		err := netns.Do(p.gen, func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.recvIP, GTPPort)))
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Write([]byte("cnibench")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, got = c.Read(make([]byte, 16))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != nil && !errors.Is(got, syscall.ECONNREFUSED) && !os.IsTimeout(got) {
			t.Fatal(got)
		}
		return errors.Is(got, syscall.ECONNREFUSED)
	}
	if !refused() {
		t.Fatal("without a sink no ICMP port unreachable came back: this test would prove nothing")
	}
	var closeSink func()
	if err := netns.Do(p.recv, func() (err error) { closeSink, err = Sink(GTPPort); return err }); err != nil {
		t.Fatal(err)
	}
	defer closeSink()
	if refused() {
		t.Fatal("with a sink the receiver's host still answers with ICMP port unreachable")
	}
}
