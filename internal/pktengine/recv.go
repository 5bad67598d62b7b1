package pktengine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// RecvResult is the receiver's report (its JSON is the output of `cnibench pkt recv`). The
// totals are the sums over the streams.
type RecvResult struct {
	Engine    string  `json:"engine"`
	RX        string  `json:"rx"` // how the engine received
	Dev       string  `json:"dev"`
	DurationS float64 `json:"duration_s"` // how long the receiver ran
	StreamCounts
	// ReceivedBytes counts frame sizes as the generator does (4-byte FCS included).
	ReceivedBytes uint64 `json:"received_bytes"`
	// RxPPS is Received over the time from the first to the last frame of the generator.
	RxPPS float64 `json:"rx_pps"`
	// Other counts the IPv4 frames that were not the generator's (ARP and the like never
	// reach the receiver).
	Other uint64 `json:"other_frames"`
	// Probes counts the latency probes received; Latency is their one-way latency (the
	// kernel's receive time minus the generator's transmit time).
	Probes  uint64  `json:"probes"`
	Latency Latency `json:"latency_us"`
	// NegativeLatency counts probes received before they were sent by the clocks (the
	// generator's and the receiver's clocks disagree; left out of Latency).
	NegativeLatency uint64 `json:"negative_latency"`
	// RingDrops are the frames the kernel dropped because the receiver's ring was full (the
	// receiver did not keep up: the losses may be its own), RingFull how often it was full.
	RingDrops uint64         `json:"ring_drops"`
	RingFull  uint64         `json:"ring_full"`
	Streams   []StreamResult `json:"streams"`
}

// StreamCounts are the counts of one stream, or of all.
type StreamCounts struct {
	Received   uint64 `json:"received"`   // frames, duplicates included
	Unique     uint64 `json:"unique"`     // distinct sequence numbers
	Duplicates uint64 `json:"duplicates"` // frames whose sequence number was seen before
	// Reordered counts frames that arrived with a sequence number below the highest seen.
	Reordered uint64 `json:"reordered"`
	// Lost counts the sequence numbers missing below the highest seen (sequences start at 0):
	// frames lost after the last one received are not seen by sequence gaps.
	Lost uint64 `json:"lost"`
	// Late counts reordered frames too far behind (SeqWindow) to tell a duplicate from a
	// late frame: they count as unique.
	Late uint64 `json:"late"`
}

// StreamResult is one stream's report.
type StreamResult struct {
	TEID uint32 `json:"teid"`
	StreamCounts
	Highest uint64 `json:"highest_seq"`
}

// Latency summarises a histogram, in µs.
type Latency struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// SeqWindow is how far behind the highest sequence number of a stream a frame can be told
// apart as a duplicate or a late arrival.
const SeqWindow = 1 << 16

// stream accounts for one stream's sequence numbers.
type stream struct {
	id uint32
	c  StreamCounts
	// highest is the highest sequence number seen (valid once any is); seen has a bit per
	// sequence number in (highest-SeqWindow, highest], at index seq % SeqWindow.
	highest uint64
	any     bool
	seen    [SeqWindow / 64]uint64
}

func (s *stream) bit(seq uint64) (*uint64, uint64) {
	i := seq % SeqWindow
	return &s.seen[i/64], 1 << (i % 64)
}

// add accounts for a frame with the (48-bit) sequence number wire.
func (s *stream) add(wire uint64) {
	s.c.Received++
	if !s.any {
		s.any, s.highest = true, wire
		w, b := s.bit(wire)
		*w |= b
		s.c.Unique++
		return
	}
	seq := extendSeq(s.highest, wire)
	switch {
	case seq > s.highest:
		if seq-s.highest >= SeqWindow {
			clear(s.seen[:])
		} else {
			for q := s.highest + 1; q < seq; q++ {
				w, b := s.bit(q)
				*w &^= b
			}
		}
		w, b := s.bit(seq)
		*w |= b
		s.highest = seq
		s.c.Unique++
	case s.highest-seq >= SeqWindow:
		s.c.Reordered++
		s.c.Late++
		s.c.Unique++
	default:
		w, b := s.bit(seq)
		if *w&b != 0 {
			s.c.Duplicates++
			return
		}
		*w |= b
		s.c.Reordered++
		s.c.Unique++
	}
}

// counts are the stream's counts with Lost worked out.
func (s *stream) counts() StreamCounts {
	c := s.c
	if s.any && s.highest+1 > c.Unique {
		c.Lost = s.highest + 1 - c.Unique
	}
	return c
}

// receiver accounts for the frames of one receive run.
type receiver struct {
	streams  map[uint32]*stream
	last     *stream
	hist     *hdrhistogram.Histogram // ns
	bytes    uint64
	other    uint64
	probes   uint64
	negative uint64
	firstNs  int64
	lastNs   int64
	ours     uint64
}

// Latencies up to a minute are recorded with 3 significant digits (in ns).
const maxLatencyNs = int64(time.Minute)

func newReceiver() *receiver {
	return &receiver{streams: map[uint32]*stream{}, hist: hdrhistogram.New(1, maxLatencyNs, 3)}
}

// frame accounts for one received frame (an RX callback).
func (r *receiver) frame(frame []byte, wireLen int, rxNs int64) {
	p, ok := ParseFrame(frame)
	if !ok {
		r.other++
		return
	}
	s := r.last
	if s == nil || s.id != p.Stream {
		if s = r.streams[p.Stream]; s == nil {
			s = &stream{id: p.Stream}
			r.streams[p.Stream] = s
		}
		r.last = s
	}
	s.add(p.Seq)
	r.bytes += uint64(wireLen + FCSLen)
	if r.ours == 0 {
		r.firstNs = rxNs
	}
	r.ours++
	r.lastNs = rxNs
	if p.Probe {
		r.probes++
		d := latencyNs(rxNs, p.TxNs)
		if d < 0 {
			r.negative++
			return
		}
		_ = r.hist.RecordValue(min(d, maxLatencyNs)) // in range by construction
	}
}

func (r *receiver) result() RecvResult {
	res := RecvResult{ReceivedBytes: r.bytes, Other: r.other, Probes: r.probes, NegativeLatency: r.negative}
	ids := make([]uint32, 0, len(r.streams))
	for id := range r.streams {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	res.Streams = []StreamResult{}
	for _, id := range ids {
		s := r.streams[id]
		c := s.counts()
		res.Streams = append(res.Streams, StreamResult{TEID: id, StreamCounts: c, Highest: s.highest})
		t := &res.StreamCounts
		t.Received += c.Received
		t.Unique += c.Unique
		t.Duplicates += c.Duplicates
		t.Reordered += c.Reordered
		t.Lost += c.Lost
		t.Late += c.Late
	}
	if span := time.Duration(r.lastNs - r.firstNs).Seconds(); r.ours > 1 && span > 0 {
		res.RxPPS = float64(r.ours-1) / span
	}
	if n := r.hist.TotalCount(); n > 0 {
		us := func(ns int64) float64 { return math.Round(float64(ns)/10) / 100 } // µs, 2 decimals
		res.Latency = Latency{Count: uint64(n), Min: us(r.hist.Min()), Mean: math.Round(r.hist.Mean()/10) / 100,
			P50: us(r.hist.ValueAtQuantile(50)), P90: us(r.hist.ValueAtQuantile(90)),
			P99: us(r.hist.ValueAtQuantile(99)), Max: us(r.hist.Max())}
	}
	return res
}

// RecvConfig is how long the receiver runs.
type RecvConfig struct {
	// Duration is how long to receive; 0: until ctx ends.
	Duration time.Duration
	// Ready, when set, is called once the receiver can see frames (its ring is open).
	Ready func() `json:"-"`
}

// RecvReadyLine is what `cnibench pkt recv` prints on stderr once it sees frames: a scenario
// starts the generator after it.
const RecvReadyLine = "pkt recv: ready"

// pollEvery bounds how long the receiver waits in one Read, so that it notices the end.
const pollEvery = 50 * time.Millisecond

// Receive counts the generator's frames arriving on interface ifc through engine e until
// cfg.Duration has passed or ctx ends; then it goes on reading for the engine's settle time,
// so that frames already received are counted. Call it inside the interface's namespace.
func Receive(ctx context.Context, e Engine, ifc Iface, cfg RecvConfig) (RecvResult, error) {
	if cfg.Duration < 0 {
		return RecvResult{}, fmt.Errorf("duration %v must be >= 0", cfg.Duration)
	}
	rx, err := e.OpenRX(ifc)
	if err != nil {
		return RecvResult{}, fmt.Errorf("%s on %s: %w", e.Name(), ifc.Name, err)
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	res, err := receive(ctx, rx, cfg)
	res.Engine, res.Dev = e.Name(), ifc.Name
	return res, err
}

// A receiver told to stop reads on until no frame has come for drainQuiet, drainMax at most.
const (
	drainQuiet = 100 * time.Millisecond
	drainMax   = time.Second
)

// receive runs the receiver on an open RX (from any thread) and closes it.
func receive(ctx context.Context, rx RX, cfg RecvConfig) (RecvResult, error) {
	r := newReceiver()
	start := time.Now()
	var (
		stopAt time.Time // when the receiver was told to stop
		last   time.Time // when the last read that found frames ended
		err    error
	)
	for {
		now := time.Now()
		if stopAt.IsZero() && (ctx.Err() != nil || cfg.Duration > 0 && now.Sub(start) >= cfg.Duration) {
			stopAt = now
		}
		// Told to stop, it drains: frames still on their way (queued in a forwarder's socket,
		// a ring, a qdisc) count as received, not lost, as RFC 2544 waits for them. It stops
		// once the ring's own delay has passed and no frame came for drainQuiet, or after
		// drainMax whatever comes.
		if !stopAt.IsZero() && now.Sub(stopAt) >= rx.Settle() && (now.Sub(last) >= drainQuiet || now.Sub(stopAt) >= drainMax) {
			break
		}
		n := r.ours + r.other
		if err = rx.Read(pollEvery, r.frame); err != nil {
			break
		}
		if r.ours+r.other != n {
			last = time.Now()
		}
	}
	res := r.result()
	res.DurationS = time.Since(start).Seconds()
	res.RingDrops, res.RingFull = rx.Drops()
	res.RX = rx.Describe()
	if cerr := rx.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return res, err
}
