package pktengine

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"time"
)

// GenConfig is what the generator sends.
type GenConfig struct {
	Mode  Mode
	Sizes []int // the repeating sequence of frame sizes (ParseSize)
	// SizeName is how the sizes were asked for ("256", "imix"), for the result.
	SizeName string
	Addrs    Addrs
	// Rate is the target in packets per second; 0 sends as fast as the engine can.
	Rate     float64
	Duration time.Duration
	// Streams is the number of streams (TEIDs FirstTEID, FirstTEID+1, ...); one of them is
	// active at a time, the next one every Rotate.
	Streams   int
	FirstTEID uint32
	Rotate    time.Duration
	// ProbeRate is how many frames per second are marked as latency probes (0: none).
	ProbeRate float64
	// Flows is how many outer UDP flows the frames spread over, in turn, frame by frame: source
	// ports Addrs.SrcPort, +1, ... (0 or 1: one flow). A load balancer that picks an endpoint
	// per flow (a Service: conntrack) can only spread several.
	Flows int
	// Batch is the most frames handed to the kernel at once (0: DefaultBatch).
	Batch int
}

// DefaultBatch is how many frames the generator hands to the engine at once at most.
const DefaultBatch = 64

// maxFailing is how many batches in a row the kernel may refuse before the generator gives up.
const maxFailing = 1000

// ConfigError is a bad value in a GenConfig; Field is named as the CLI flag is.
type ConfigError struct{ Field, Msg string }

func (e *ConfigError) Error() string { return e.Field + " " + e.Msg }

func badField(field, format string, args ...any) error {
	return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Check validates c (a *ConfigError: the CLI reports it as the user's mistake).
func (c GenConfig) Check() error {
	if len(c.Sizes) == 0 {
		return badField("size", "missing")
	}
	for _, s := range c.Sizes {
		if s < MinFrameSize(c.Mode) || s > MaxFrameSize {
			return badField("size", "%d out of range for mode %s (%d..%d)", s, c.Mode, MinFrameSize(c.Mode), MaxFrameSize)
		}
	}
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return badField("rate", "%v must be >= 0 packets/s (0: as fast as possible)", c.Rate)
	case c.Duration <= 0:
		return badField("duration", "%v must be > 0", c.Duration)
	case c.Streams < 1:
		return badField("streams", "%d must be >= 1", c.Streams)
	case uint64(c.FirstTEID)+uint64(c.Streams)-1 > math.MaxUint32:
		return badField("teid", "%d with %d streams: TEIDs up to %d do not fit 32 bits", c.FirstTEID, c.Streams, uint64(c.FirstTEID)+uint64(c.Streams)-1)
	case c.Rotate <= 0:
		return badField("rotate", "%v must be > 0", c.Rotate)
	case c.Flows < 0 || int(c.Addrs.SrcPort)+max(c.Flows, 1)-1 > math.MaxUint16:
		return badField("flows", "%d from source port %d: give 1..%d flows", c.Flows, c.Addrs.SrcPort, math.MaxUint16-int(c.Addrs.SrcPort)+1)
	case c.ProbeRate < 0 || math.IsNaN(c.ProbeRate) || math.IsInf(c.ProbeRate, 0):
		return badField("probe-rate", "%v must be >= 0 per second", c.ProbeRate)
	case c.Batch < 0:
		return badField("batch", "%d must be >= 0", c.Batch)
	}
	return nil
}

// GenResult is the generator's report (its JSON is the output of `cnibench pkt gen`).
type GenResult struct {
	Engine    string `json:"engine"`
	TX        string `json:"tx"` // how the engine sent
	Dev       string `json:"dev"`
	Mode      Mode   `json:"mode"`
	FrameSize string `json:"frame_size"`  // as asked: "256" or "imix"
	Sizes     []int  `json:"frame_sizes"` // the distinct frame sizes sent (FCS included)
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	DstMAC    string `json:"dst_mac"`
	// TargetPPS is the rate asked for; 0: as fast as possible.
	TargetPPS float64 `json:"target_pps"`
	// DurationS is from the start of sending to the last frame handed to the kernel.
	DurationS   float64 `json:"duration_s"`
	SentPackets uint64  `json:"sent_packets"`
	// SentBytes counts frame sizes in the RFC 2544 sense (4-byte FCS included, no preamble
	// nor inter-frame gap); AchievedBPS is SentBytes*8 per second.
	SentBytes   uint64  `json:"sent_bytes"`
	AchievedPPS float64 `json:"achieved_pps"`
	AchievedBPS float64 `json:"achieved_bps"`
	ProbesSent  uint64  `json:"probes_sent"`
	// Flows is how many outer UDP flows (source ports) the frames took in turn.
	Flows int `json:"flows"`
	// TXErrors counts hand-overs the kernel answered with an error (it or the interface
	// dropped a frame: the frames count as sent, and a dropped one shows as lost).
	TXErrors  uint64       `json:"tx_errors"`
	Streams   []StreamSent `json:"streams"`
	RotateS   float64      `json:"rotate_s"`
	ProbeRate float64      `json:"probe_rate"`
}

// StreamSent is one stream's count.
type StreamSent struct {
	TEID uint32 `json:"teid"`
	Sent uint64 `json:"sent"`
}

// clock is the generator's time: now is monotonic time since an arbitrary origin, wallNs the
// CLOCK_REALTIME written into the frames, sleep waits (or returns early when ctx ends).
type clock interface {
	now() time.Duration
	wallNs() int64
	sleep(ctx context.Context, d time.Duration)
}

type realClock struct {
	origin time.Time
	timer  *time.Timer
}

func newRealClock() *realClock {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &realClock{origin: time.Now(), timer: t}
}

func (c *realClock) now() time.Duration { return time.Since(c.origin) }
func (c *realClock) wallNs() int64      { return time.Now().UnixNano() }
func (c *realClock) sleep(ctx context.Context, d time.Duration) {
	c.timer.Reset(d)
	select {
	case <-c.timer.C:
	case <-ctx.Done():
		if !c.timer.Stop() {
			<-c.timer.C
		}
	}
}

// schedule holds a rate: by elapsed time t, due(t) frames may have been sent, never more.
type schedule struct{ rate float64 }

// due is how many frames the schedule allows by elapsed time t: floor(rate*t).
func (s schedule) due(t time.Duration) uint64 {
	return uint64(s.rate * t.Seconds())
}

// at is the elapsed time at which the n-th frame (1-based) becomes due.
func (s schedule) at(n uint64) time.Duration {
	return time.Duration(math.Ceil(float64(n) / s.rate * float64(time.Second)))
}

// Generate sends cfg's frames through engine e on interface ifc until cfg.Duration has passed
// or ctx ends. Call it inside the interface's namespace.
func Generate(ctx context.Context, e Engine, ifc Iface, cfg GenConfig) (GenResult, error) {
	if err := cfg.Check(); err != nil {
		return GenResult{}, err
	}
	if need := FrameIPBytes(slices.Max(cfg.Sizes)); need > ifc.MTU {
		return GenResult{}, fmt.Errorf("a frame of %d bytes carries %d bytes of IP, more than the MTU of %s (%d)",
			slices.Max(cfg.Sizes), need, ifc.Name, ifc.MTU)
	}
	tx, err := e.OpenTX(ifc)
	if err != nil {
		return GenResult{}, fmt.Errorf("%s on %s: %w", e.Name(), ifc.Name, err)
	}
	g := newGenerator(cfg)
	res, err := g.run(ctx, tx, newRealClock())
	if cerr := tx.Close(); err == nil && cerr != nil {
		err = cerr
	}
	res.Engine, res.TX, res.Dev = e.Name(), tx.Describe(), ifc.Name
	return res, err
}

type generator struct {
	cfg       GenConfig
	batch     int
	templates map[int][]byte // a frame of each size (stream FirstTEID)
	payOff    int
	flow      int      // the flow of the next frame (GenConfig.Flows)
	sent      []uint64 // per stream
	seq       []uint64 // per stream: the next sequence number
	lens      []int
}

func newGenerator(cfg GenConfig) *generator {
	g := &generator{cfg: cfg, batch: cfg.Batch, templates: map[int][]byte{}, payOff: payloadOffset(cfg.Mode),
		sent: make([]uint64, cfg.Streams), seq: make([]uint64, cfg.Streams)}
	if g.batch == 0 {
		g.batch = DefaultBatch
	}
	g.lens = make([]int, g.batch)
	for _, s := range cfg.Sizes {
		if g.templates[s] == nil {
			g.templates[s] = BuildFrame(make([]byte, s-FCSLen), cfg.Addrs, cfg.Mode, s, cfg.FirstTEID)
		}
	}
	return g
}

// run is the send loop. With a rate it sends by the schedule: whenever frames are due it
// hands them over in batches, so that frames a pause (hypervisor steal, a slow kernel) held
// back go out as soon as it ends, and it never gets ahead of the schedule; when none is due
// it sleeps until the next one is. Without a rate it sends batch after batch. It stops at the
// end of the duration (having sent what was due by then, up to one more batch) or when ctx
// ends.
func (g *generator) run(ctx context.Context, tx TX, clk clock) (GenResult, error) {
	cfg := g.cfg
	sched := schedule{cfg.Rate}
	var (
		sent, bytes, probes, txErrors uint64
		sizeIdx, failing              int
		nextProbe                     time.Duration // elapsed time of the next probe
		probeEvery                    time.Duration
	)
	if cfg.ProbeRate > 0 {
		probeEvery = time.Duration(float64(time.Second) / cfg.ProbeRate)
	}
	start := clk.now()
	var last time.Duration
	for ctx.Err() == nil {
		el := clk.now() - start
		final := el >= cfg.Duration
		if final {
			el = cfg.Duration
		}
		want := g.batch
		if cfg.Rate > 0 {
			due := sched.due(el)
			if due <= sent {
				if final {
					break
				}
				clk.sleep(ctx, max(min(sched.at(sent+1), cfg.Duration)-el, time.Microsecond))
				continue
			}
			want = int(min(due-sent, uint64(g.batch)))
		}
		bufs, err := tx.Reserve(want)
		if err != nil {
			return g.result(sent, bytes, probes, txErrors, last), err
		}
		if len(bufs) == 0 {
			if final {
				break
			}
			continue
		}
		wall := clk.wallNs()
		stream := int(el/cfg.Rotate) % cfg.Streams
		teid := cfg.FirstTEID + uint32(stream)
		probe := probeEvery > 0 && el >= nextProbe
		for i, b := range bufs {
			size := cfg.Sizes[sizeIdx]
			if sizeIdx++; sizeIdx == len(cfg.Sizes) {
				sizeIdx = 0
			}
			f := b[:copy(b, g.templates[size])]
			if cfg.Mode == GTPU {
				PutTEID(f, teid)
			}
			if cfg.Flows > 1 {
				PutSrcPort(f, cfg.Addrs.SrcPort+uint16(g.flow))
				if g.flow++; g.flow == cfg.Flows {
					g.flow = 0
				}
			}
			Payload{Stream: teid, Seq: g.seq[stream], TxNs: wall, Probe: probe && i == 0}.Put(f[g.payOff:])
			g.seq[stream]++
			g.lens[i] = len(f)
			bytes += uint64(size)
		}
		if probe {
			// The probe goes first in its batch: stamp it again right before the hand-over.
			PutTxNs(bufs[0][g.payOff:], clk.wallNs())
			probes++
			if nextProbe += probeEvery; nextProbe <= el {
				nextProbe = el + probeEvery // after a pause: one probe, not a burst of them
			}
		}
		if err := tx.Submit(g.lens[:len(bufs)]); err != nil {
			txErrors++
			if failing++; failing == maxFailing {
				return g.result(sent, bytes, probes, txErrors, last), fmt.Errorf("the kernel refused %d batches in a row: %w", failing, err)
			}
		} else {
			failing = 0
		}
		sent += uint64(len(bufs))
		g.sent[stream] += uint64(len(bufs))
		if last = clk.now() - start; final {
			break
		}
	}
	return g.result(sent, bytes, probes, txErrors, last), nil
}

func (g *generator) result(sent, bytes, probes, txErrors uint64, elapsed time.Duration) GenResult {
	cfg := g.cfg
	r := GenResult{Mode: cfg.Mode, FrameSize: cfg.SizeName, TargetPPS: cfg.Rate,
		Src: cfg.Addrs.Src.String(), Dst: cfg.Addrs.Dst.String(), DstMAC: net.HardwareAddr(cfg.Addrs.DstMAC[:]).String(),
		DurationS: elapsed.Seconds(), SentPackets: sent, SentBytes: bytes, ProbesSent: probes, TXErrors: txErrors,
		RotateS: cfg.Rotate.Seconds(), ProbeRate: cfg.ProbeRate, Flows: max(cfg.Flows, 1)}
	r.Sizes = slices.Compact(slices.Sorted(slices.Values(cfg.Sizes)))
	if s := elapsed.Seconds(); s > 0 {
		r.AchievedPPS = float64(sent) / s
		r.AchievedBPS = float64(bytes) * 8 / s
	}
	r.Streams = make([]StreamSent, len(g.sent))
	for i, n := range g.sent {
		r.Streams[i] = StreamSent{TEID: cfg.FirstTEID + uint32(i), Sent: n}
	}
	return r
}
