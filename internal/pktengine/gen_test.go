package pktengine

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"
)

// fakeClock is the generator's time in a test: it moves only when the generator sleeps or
// the fake TX says so.
type fakeClock struct {
	t      time.Duration
	sleeps int
}

func (c *fakeClock) now() time.Duration { return c.t }
func (c *fakeClock) wallNs() int64      { return 1_763_000_000_000_000_000 + int64(c.t) }
func (c *fakeClock) sleep(_ context.Context, d time.Duration) {
	if d <= 0 {
		panic("the generator asked to sleep " + d.String())
	}
	c.t += d
	c.sleeps++
}

type batch struct {
	at     time.Duration // when it was handed over
	total  uint64        // frames sent so far, this batch included
	frames []Packet
	sizes  []int
}

// fakeTX records what the generator hands over; cost is the clock time a batch takes, pause
// a stall of the clock after batch pauseAt.
type fakeTX struct {
	t       *testing.T
	clk     *fakeClock
	bufs    [][]byte
	batches []batch
	total   uint64
	cost    time.Duration
	pauseAt int
	pause   time.Duration
	failAll bool
	// srcPorts are the frames' outer UDP source ports, in order.
	srcPorts []uint16
}

func newFakeTX(t *testing.T, clk *fakeClock) *fakeTX {
	tx := &fakeTX{t: t, clk: clk, pauseAt: -1}
	for range DefaultBatch {
		tx.bufs = append(tx.bufs, make([]byte, MaxFrameSize))
	}
	return tx
}

func (x *fakeTX) Reserve(n int) ([][]byte, error) {
	if n < 1 || n > len(x.bufs) {
		x.t.Fatalf("Reserve(%d)", n)
	}
	return x.bufs[:n], nil
}

func (x *fakeTX) Submit(lens []int) error {
	b := batch{at: x.clk.t}
	for i, l := range lens {
		p, ok := ParseFrame(x.bufs[i][:l])
		if !ok {
			x.t.Fatalf("batch %d frame %d is not the generator's", len(x.batches), i)
		}
		b.frames = append(b.frames, p)
		b.sizes = append(b.sizes, l+FCSLen)
		x.srcPorts = append(x.srcPorts, binary.BigEndian.Uint16(x.bufs[i][ethLen+ipLen:]))
	}
	x.total += uint64(len(lens))
	b.total = x.total
	x.batches = append(x.batches, b)
	x.clk.t += x.cost
	if len(x.batches)-1 == x.pauseAt {
		x.clk.t += x.pause
	}
	if x.failAll {
		return errors.New("no buffer space")
	}
	return nil
}

func (x *fakeTX) Describe() string { return "fake" }
func (x *fakeTX) Close() error     { return nil }

func genConfig(rate float64, d time.Duration) GenConfig {
	return GenConfig{Mode: GTPU, Sizes: []int{256}, SizeName: "256", Addrs: testAddrs, Rate: rate, Duration: d,
		Streams: 1, FirstTEID: 100, Rotate: 2 * time.Second, ProbeRate: 1}
}

func runFake(t *testing.T, cfg GenConfig, setup func(*fakeTX)) (GenResult, *fakeTX, error) {
	t.Helper()
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: 5 * time.Second} // an origin other than 0
	tx := newFakeTX(t, clk)
	if setup != nil {
		setup(tx)
	}
	res, err := newGenerator(cfg).run(context.Background(), tx, clk)
	return res, tx, err
}

// neverAhead fails if any batch left before the schedule allowed it.
func neverAhead(t *testing.T, tx *fakeTX, rate float64) {
	t.Helper()
	for i, b := range tx.batches {
		el := b.at - 5*time.Second
		if allowed := uint64(rate * el.Seconds()); b.total > allowed {
			t.Fatalf("batch %d at %v: %d frames sent, the schedule allows %d", i, el, b.total, allowed)
		}
	}
}

// At a held rate the generator sends exactly rate x duration frames and is never ahead of the
// schedule, also when a batch costs time.
func TestScheduleHeld(t *testing.T) {
	for _, c := range []struct {
		rate float64
		cost time.Duration
	}{{20000, 0}, {20000, 200 * time.Microsecond}, {1e6, 30 * time.Microsecond}, {333.3, 0}} {
		res, tx, err := runFake(t, genConfig(c.rate, 2*time.Second), func(x *fakeTX) { x.cost = c.cost })
		if err != nil {
			t.Fatal(err)
		}
		neverAhead(t, tx, c.rate)
		if want := uint64(c.rate * 2); res.SentPackets != want || tx.total != want {
			t.Errorf("rate %v, batch cost %v: sent %d (%d handed over), want %d", c.rate, c.cost, res.SentPackets, tx.total, want)
		}
		if res.AchievedPPS < c.rate*0.99 || res.AchievedPPS > c.rate*1.01 {
			t.Errorf("rate %v: achieved %.1f pps", c.rate, res.AchievedPPS)
		}
		if res.SentBytes != res.SentPackets*256 {
			t.Errorf("sent bytes %d for %d frames of 256", res.SentBytes, res.SentPackets)
		}
	}
}

// After a pause (hypervisor steal) the generator catches up at once, in full batches and
// without sleeping, still ends on schedule, and sends one probe for the pause, not a burst.
func TestScheduleCatchesUp(t *testing.T) {
	const rate = 10000
	res, tx, err := runFake(t, genConfig(rate, 4*time.Second), func(x *fakeTX) { x.pauseAt, x.pause = 100, 2500*time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	neverAhead(t, tx, rate)
	if res.SentPackets != 4*rate {
		t.Fatalf("sent %d, want %d", res.SentPackets, 4*rate)
	}
	// 2.5 s at 10,000 pps: 25,000 frames became due during the pause, sent back to back.
	due := uint64(rate * (tx.batches[100].at + 2500*time.Millisecond - 5*time.Second).Seconds())
	i := 101
	for ; tx.batches[i].total < due; i++ {
		if b := tx.batches[i]; b.at != tx.batches[101].at || len(b.frames) != DefaultBatch {
			t.Fatalf("catch-up batch %d: %d frames at %v; want %d frames at once (%v)", i, len(b.frames), b.at, DefaultBatch, tx.batches[101].at)
		}
	}
	if n := i - 101; n < 25000/DefaultBatch {
		t.Fatalf("caught up in %d batches, want at least %d", n, 25000/DefaultBatch)
	}
	var last time.Duration = -time.Hour
	for _, b := range tx.batches {
		if b.frames[0].Probe {
			if b.at-last < time.Second {
				t.Fatalf("probes %v apart", b.at-last)
			}
			last = b.at
		}
	}
}

// Unlimited: batch after batch until the duration has passed.
func TestUnlimited(t *testing.T) {
	res, tx, err := runFake(t, genConfig(0, time.Second), func(x *fakeTX) { x.cost = 10 * time.Microsecond })
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 batches fit the second; the one that starts at 1 s is the last.
	if want := uint64(100001 * DefaultBatch); res.SentPackets != want {
		t.Fatalf("sent %d, want %d", res.SentPackets, want)
	}
	if len(tx.batches[0].frames) != DefaultBatch {
		t.Fatalf("first batch %d frames", len(tx.batches[0].frames))
	}
}

// Streams rotate every period, each with its own sequence numbers; probes go once a second,
// first in their batch; the TEID is in the GTP-U header and the payload alike; IMIX sizes
// follow their pattern.
func TestStreamsProbesSizes(t *testing.T) {
	cfg := genConfig(1000, 7*time.Second)
	cfg.Streams, cfg.Sizes = 3, IMIX(GTPU)
	res, tx, err := runFake(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := map[uint32]uint64{}
	var probes []time.Duration
	i := 0
	for _, b := range tx.batches {
		el := b.at - 5*time.Second
		want := cfg.FirstTEID + uint32(int(el/cfg.Rotate)%cfg.Streams)
		for j, p := range b.frames {
			if p.TEID != want || p.Stream != want {
				t.Fatalf("at %v: TEID %d, stream %d; want %d", el, p.TEID, p.Stream, want)
			}
			if p.Seq != next[p.Stream] {
				t.Fatalf("stream %d: sequence %d, want %d", p.Stream, p.Seq, next[p.Stream])
			}
			next[p.Stream]++
			if p.Probe {
				if j != 0 {
					t.Fatalf("a probe at position %d of its batch", j)
				}
				probes = append(probes, el)
			}
			if b.sizes[j] != cfg.Sizes[i%len(cfg.Sizes)] {
				t.Fatalf("frame %d: size %d, want %d", i, b.sizes[j], cfg.Sizes[i%len(cfg.Sizes)])
			}
			i++
		}
	}
	// Stream 100 is active in [0,2) and [6,7], 101 in [2,4), 102 in [4,6): 1 ms a frame.
	for k, want := range []uint64{2999, 2000, 2000} {
		s := res.Streams[k]
		if s.TEID != cfg.FirstTEID+uint32(k) || s.Sent < want-1 || s.Sent > want+1 || next[s.TEID] != s.Sent {
			t.Errorf("stream %d: %+v (sequence numbers up to %d), want about %d", k, s, next[s.TEID], want)
		}
	}
	if len(probes) != 8 || uint64(len(probes)) != res.ProbesSent {
		t.Fatalf("probes at %v (%d reported), want 8: at the start and every second to 7 s", probes, res.ProbesSent)
	}
	for k := 1; k < len(probes); k++ {
		if d := probes[k] - probes[k-1]; d < time.Second-time.Millisecond || d > time.Second+time.Millisecond {
			t.Fatalf("probes %v apart", d)
		}
	}
	if got := res.Sizes; len(got) != 3 || got[0] != 100 || got[1] != 594 || got[2] != 1518 {
		t.Errorf("frame sizes reported %v", got)
	}
}

// A kernel that refuses every batch ends the generator with an error instead of spinning.
func TestGiveUpOnErrors(t *testing.T) {
	res, _, err := runFake(t, genConfig(0, time.Hour), func(x *fakeTX) { x.failAll, x.cost = true, time.Microsecond })
	if err == nil || res.TXErrors != maxFailing {
		t.Fatalf("error %v after %d refused batches; want an error after %d", err, res.TXErrors, maxFailing)
	}
}

func TestGenConfigCheck(t *testing.T) {
	good := genConfig(100, time.Second)
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for field, mangle := range map[string]func(c *GenConfig){
		"size":       func(c *GenConfig) { c.Sizes = []int{64} }, // below GTP-U's smallest
		"rate":       func(c *GenConfig) { c.Rate = -1 },
		"duration":   func(c *GenConfig) { c.Duration = 0 },
		"streams":    func(c *GenConfig) { c.Streams = 0 },
		"teid":       func(c *GenConfig) { c.FirstTEID, c.Streams = 1<<32-1, 2 },
		"rotate":     func(c *GenConfig) { c.Rotate = 0 },
		"probe-rate": func(c *GenConfig) { c.ProbeRate = -0.5 },
		"flows":      func(c *GenConfig) { c.Flows = 1 << 16 }, // source ports past 65535
	} {
		c := good
		mangle(&c)
		var ce *ConfigError
		if err := c.Check(); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: Check() = %v, want a ConfigError for %s", field, err, field)
		}
	}
}

// Flows: the frames take the outer source ports SrcPort, SrcPort+1, ... in turn, frame by
// frame across batches; one flow keeps SrcPort.
func TestFlows(t *testing.T) {
	cfg := genConfig(1000, 2*time.Second)
	cfg.Flows = 3
	res, tx, err := runFake(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tx.srcPorts) < 1000 || res.Flows != 3 {
		t.Fatalf("%d frames, flows %d", len(tx.srcPorts), res.Flows)
	}
	for i, p := range tx.srcPorts {
		if want := testAddrs.SrcPort + uint16(i%3); p != want {
			t.Fatalf("frame %d: source port %d, want %d", i, p, want)
		}
	}
	cfg.Flows = 0
	res, tx, err = runFake(t, cfg, nil)
	if err != nil || res.Flows != 1 || slices.ContainsFunc(tx.srcPorts, func(p uint16) bool { return p != testAddrs.SrcPort }) {
		t.Errorf("one flow: %v, flows %d, ports not all %d", err, res.Flows, testAddrs.SrcPort)
	}
}
