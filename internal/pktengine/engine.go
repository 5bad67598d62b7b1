// Package pktengine is the packet engine of the VNF scenario: a generator of GTP-U (or plain
// UDP) frames at a held rate, with rotating TEIDs and timestamped latency probes, and a
// receiver that accounts for every frame of the generator per stream (loss, duplicates,
// reordering) and measures the probes' one-way latency. Both run inside a pod (a network
// namespace), as `cnibench pkt gen` and `cnibench pkt recv`, and print one JSON object each
// (GenResult, RecvResult) that internal/driver parses.
//
// The generator and the receiver are written against Engine, the way frames move between user
// space and an interface. An engine is one file that registers itself (engine_afpacket.go:
// AF_PACKET rings; engine_afxdp.go: AF_XDP sockets in copy mode); the default is the best
// usable one.
package pktengine

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Iface is an interface of the current network namespace.
type Iface struct {
	Name       string
	Index, MTU int
}

// Engine opens the frame I/O of an interface. Open* must be called inside the interface's
// network namespace; the TX and RX they return may be used from any thread, one at a time.
type Engine interface {
	Name() string
	// Rank orders the engines for a role: the default is the usable engine of the highest
	// rank for it.
	Rank(r Role) int
	// Usable tells why this host cannot run the engine (nil: it can).
	Usable() error
	OpenTX(ifc Iface) (TX, error)
	OpenRX(ifc Iface) (RX, error)
}

// TX sends frames.
type TX interface {
	// Reserve returns up to n free frame buffers, each at least MaxFrameSize-FCSLen bytes, in
	// the order they will be sent. When none is free it waits for the kernel to free some,
	// at most about a tenth of a second; no buffer then is not an error.
	Reserve(n int) ([][]byte, error)
	// Submit sends the first len(lens) buffers of the last Reserve, buffer i holding a frame
	// of lens[i] bytes; the rest of that Reserve are given back unused. An error means the
	// kernel refused some of them (they are lost); the others still go.
	Submit(lens []int) error
	// Describe says how the engine sends, for the result ("TPACKET_V2 TX ring, ...").
	Describe() string
	Close() error
}

// RX receives frames.
type RX interface {
	// Read waits up to timeout for frames and calls fn for each one that is ready: its bytes
	// (valid during the call only, possibly cut short after the first bytes), its length on
	// the wire (FCS excluded) and the kernel's receive time (CLOCK_REALTIME, ns).
	Read(timeout time.Duration, fn func(frame []byte, wireLen int, rxNs int64)) error
	// Settle is how long a frame that has arrived may take to be readable (a block's retire
	// timer): after the last frame, a receiver reads that long before it stops.
	Settle() time.Duration
	// Drops are the frames the kernel dropped so far for want of room for them, and (when the
	// engine knows) how often it found the ring full.
	Drops() (drops, full uint64)
	Describe() string
	Close() error
}

// Role is what an engine is chosen for by default: sending (the generator) or receiving (the
// receiver). The faster sender need not be the better receiver: one engine may time frames
// by the kernel's receive timestamp and another by its read.
type Role int

const (
	RoleSend Role = iota
	RoleRecv
)

func (r Role) String() string {
	if r == RoleRecv {
		return "receiving"
	}
	return "sending"
}

var (
	regMu   sync.Mutex
	engines = map[string]Engine{}
)

// Register adds an engine (from its file's init). A name registered twice panics.
func Register(e Engine) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := engines[e.Name()]; dup {
		panic("pktengine: engine " + e.Name() + " registered twice")
	}
	engines[e.Name()] = e
}

// Engines lists the registered engines, best (highest rank) for sending first.
func Engines() []Engine { return enginesFor(RoleSend) }

func enginesFor(r Role) []Engine {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]Engine, 0, len(engines))
	for _, e := range engines {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rank(r) != out[j].Rank(r) {
			return out[i].Rank(r) > out[j].Rank(r)
		}
		return out[i].Name() < out[j].Name()
	})
	return out
}

// EngineNames lists the registered engines' names, best first.
func EngineNames() []string {
	var names []string
	for _, e := range Engines() {
		names = append(names, e.Name())
	}
	return names
}

// ErrUnknownEngine is wrapped by Lookup for a name no engine has.
var ErrUnknownEngine = errors.New("unknown packet engine")

// Lookup returns the engine of that name, or ("") the best usable one for role r.
func Lookup(name string, r Role) (Engine, error) {
	all := enginesFor(r)
	if name != "" {
		for _, e := range all {
			if e.Name() == name {
				return e, nil
			}
		}
		return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownEngine, name, strings.Join(EngineNames(), ", "))
	}
	var why []string
	for _, e := range all {
		err := e.Usable()
		if err == nil {
			return e, nil
		}
		why = append(why, e.Name()+": "+err.Error())
	}
	return nil, fmt.Errorf("no usable packet engine for %s (%s)", r, strings.Join(why, "; "))
}
