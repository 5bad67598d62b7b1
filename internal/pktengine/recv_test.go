package pktengine

import (
	"context"
	"testing"
	"time"
)

func feed(seqs ...uint64) *stream {
	s := &stream{id: 1}
	for _, q := range seqs {
		s.add(q & wireMask)
	}
	return s
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for q := from; q < to; q++ {
		out = append(out, q)
	}
	return out
}

func TestStreamAccounting(t *testing.T) {
	for _, c := range []struct {
		name string
		seqs []uint64
		want StreamCounts
	}{
		{"in order", seqRange(0, 10), StreamCounts{Received: 10, Unique: 10}},
		{"one swapped", []uint64{0, 1, 3, 2, 4}, StreamCounts{Received: 5, Unique: 5, Reordered: 1}},
		{"duplicate", []uint64{0, 1, 1, 2}, StreamCounts{Received: 4, Unique: 3, Duplicates: 1}},
		{"duplicate of a reordered one", []uint64{0, 2, 1, 1, 2, 3}, StreamCounts{Received: 6, Unique: 4, Duplicates: 2, Reordered: 1}},
		{"gaps", []uint64{0, 2, 5}, StreamCounts{Received: 3, Unique: 3, Lost: 3}},
		{"head lost", []uint64{3, 4}, StreamCounts{Received: 2, Unique: 2, Lost: 3}},
		{"gap filled late", []uint64{0, 5, 1, 2, 3, 4}, StreamCounts{Received: 6, Unique: 6, Reordered: 4}},
		{"reversed", []uint64{4, 3, 2, 1, 0}, StreamCounts{Received: 5, Unique: 5, Reordered: 4}},
		{"duplicate after a jump", append(seqRange(0, 11), 20, 5), StreamCounts{Received: 13, Unique: 12, Duplicates: 1, Lost: 9}},
		// 5 is more than SeqWindow behind 100000: late, so unique (it cannot be told from a
		// duplicate); so is the repeat of 5.
		{"beyond the window", []uint64{0, 1, 100000, 5, 5}, StreamCounts{Received: 5, Unique: 5, Reordered: 2, Late: 2, Lost: 99996}},
		// The window was cleared by the jump: a sequence number just inside it is new.
		{"inside the window after a jump", []uint64{0, 1, SeqWindow + 10, 11, 11}, StreamCounts{Received: 5, Unique: 4, Duplicates: 1, Reordered: 1, Lost: SeqWindow + 11 - 4}},
	} {
		s := feed(c.seqs...)
		if got := s.counts(); got != c.want {
			t.Errorf("%s %v:\n got %+v\nwant %+v", c.name, c.seqs, got, c.want)
		}
	}
}

// 48-bit sequence numbers wrap without being taken for reordering or loss.
func TestStreamAccountingWrap(t *testing.T) {
	const span = uint64(1) << 48
	s := &stream{id: 1}
	for _, q := range []uint64{span - 3, span - 2, span - 1, span, span + 1} {
		s.add(q & wireMask)
	}
	c := s.counts()
	if s.highest != span+1 || c.Unique != 5 || c.Reordered != 0 || c.Duplicates != 0 {
		t.Fatalf("highest %d, counts %+v; want highest %d, 5 unique, nothing reordered or duplicated", s.highest, c, span+1)
	}
}

// The receiver picks the generator's frames out of others, accounts per TEID, and measures
// the probes' latency (receive time minus transmit time).
func TestReceiverFrames(t *testing.T) {
	r := newReceiver()
	buf := make([]byte, MaxFrameSize)
	const t0 = int64(1_763_000_000_000_000_000)
	send := func(m Mode, size int, teid uint32, seq uint64, probe bool, rxAfter int64) {
		f := BuildFrame(buf, testAddrs, m, size, teid)
		tx := t0 + int64(seq)*1000
		Payload{Stream: teid, Seq: seq, TxNs: tx, Probe: probe}.Put(f[payloadOffset(m):])
		r.frame(f[:min(len(f), 128)], len(f), tx+rxAfter) // cut as a snap length does
	}
	for q := range uint64(100) {
		send(GTPU, 256, 7, q, q%10 == 0, 20_000+int64(q)*100) // latencies 20..29 µs for the probes
	}
	send(GTPU, 256, 7, 50, false, 0) // a duplicate
	for q := uint64(0); q < 50; q += 2 {
		send(UDP, 1518, 9, q, false, 0) // every other one lost
	}
	r.frame([]byte{1, 2, 3}, 3, t0)                 // not even Ethernet
	r.frame(make([]byte, 60), 60, t0)               // not IPv4
	other := BuildFrame(buf, testAddrs, UDP, 64, 0) // IPv4/UDP but no payload magic
	r.frame(other, len(other), t0)
	send(GTPU, 256, 7, 100, true, -5_000) // a probe received 5 µs before it was sent

	res := r.result()
	if res.Other != 3 {
		t.Errorf("other frames %d, want 3", res.Other)
	}
	if len(res.Streams) != 2 || res.Streams[0].TEID != 7 || res.Streams[1].TEID != 9 {
		t.Fatalf("streams %+v, want TEIDs 7 and 9", res.Streams)
	}
	if got, want := res.Streams[0].StreamCounts, (StreamCounts{Received: 102, Unique: 101, Duplicates: 1}); got != want {
		t.Errorf("TEID 7: %+v, want %+v", got, want)
	}
	if got, want := res.Streams[1].StreamCounts, (StreamCounts{Received: 25, Unique: 25, Lost: 24}); got != want {
		t.Errorf("TEID 9: %+v, want %+v", got, want)
	}
	if res.Received != 127 || res.Unique != 126 || res.Lost != 24 || res.Duplicates != 1 {
		t.Errorf("totals %+v", res.StreamCounts)
	}
	if want := uint64(102*256 + 25*1518); res.ReceivedBytes != want {
		t.Errorf("received bytes %d, want %d (frame sizes with FCS)", res.ReceivedBytes, want)
	}
	if res.Probes != 11 || res.NegativeLatency != 1 || res.Latency.Count != 10 {
		t.Errorf("probes %d, negative %d, in the histogram %d; want 11, 1, 10", res.Probes, res.NegativeLatency, res.Latency.Count)
	}
	// Probes at seq 0, 10, .., 90: latencies 20, 21, .., 29 µs.
	l := res.Latency
	near := func(got, want float64) bool { return got >= want*0.999 && got <= want*1.001 }
	if !near(l.Min, 20) || !near(l.Max, 29) || !near(l.P50, 24) || !near(l.P90, 28) || !near(l.Mean, 24.5) {
		t.Errorf("latency %+v, want min 20, p50 24, p90 28, mean 24.5, max 29 µs", l)
	}
}

// drainRX delivers one of the generator's frames per Read until until (wall time), then none.
type drainRX struct {
	until time.Time
	seq   uint64
}

func (x *drainRX) Read(timeout time.Duration, fn func([]byte, int, int64)) error {
	if time.Now().After(x.until) {
		time.Sleep(timeout)
		return nil
	}
	f := BuildFrame(make([]byte, MaxFrameSize), testAddrs, GTPU, 256, 1)
	Payload{Stream: 1, Seq: x.seq, TxNs: time.Now().UnixNano()}.Put(f[payloadOffset(GTPU):])
	x.seq++
	fn(f, len(f), time.Now().UnixNano())
	time.Sleep(5 * time.Millisecond)
	return nil
}
func (x *drainRX) Settle() time.Duration       { return 10 * time.Millisecond }
func (x *drainRX) Drops() (drops, full uint64) { return 0, 0 }
func (x *drainRX) Describe() string            { return "drain" }
func (x *drainRX) Close() error                { return nil }

// A receiver told to stop drains (RFC 2544 counts frames still on their way): frames that keep
// coming for 300 ms after the stop are all received, and it then stops within about
// drainQuiet; frames that never stop coming end it after drainMax.
func TestReceiverDrains(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration // frames keep coming this long after the stop
		max   time.Duration // the receiver must stop within this after the stop
	}{
		{"in flight", 300 * time.Millisecond, 300*time.Millisecond + drainQuiet + 150*time.Millisecond},
		{"endless", time.Hour, drainMax + 150*time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // told to stop at once
			stop := time.Now()
			rx := &drainRX{until: stop.Add(c.after)}
			res, err := receive(ctx, rx, RecvConfig{})
			took := time.Since(stop)
			if err != nil {
				t.Fatal(err)
			}
			if took > c.max || took < min(c.after, drainMax) {
				t.Errorf("stopped %v after the stop, want between %v and %v", took, min(c.after, drainMax), c.max)
			}
			if res.Received != rx.seq || rx.seq < 20 {
				t.Errorf("received %d of the %d frames delivered", res.Received, rx.seq)
			}
		})
	}
}
