package clustertest

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/pktengine"
)

// The packet engine of the vnf scenario, simulated: `cnibench pkt gen` offers its --rate (or
// Config.PktGenMax flat out) for --duration; sent to a Service's ClusterIP, what reaches the
// receiver is at most Config.VNFCapacity packets/s per endpoint of the Service running a
// `pkt fwd` (a device with a known loss curve); sent to a pod running a `pkt fwd` with
// targets (an ingress), as much as its forwarding targets take, up to one forwarder's
// capacity (it is one too); `cnibench pkt knf` and `pkt xfwd` forward as `pkt fwd` does, and say they are
// ready (or, with Config.NoNetAdmin, that it may not); `cnibench pkt recv` says it is ready at
// once and, once stopped, reports what the last generator run delivered.

// Defaults of the simulated packet engine.
const (
	DefaultPktGenMax   = 500_000
	DefaultVNFCapacity = 50_000
)

// pktRun is what the last generator run sent and what reached the receiver.
type pktRun struct{ sent, delivered uint64 }

// isPkt tells whether cmd is `<cnibench> pkt VERB`.
func isPkt(cmd []string, verb string) bool {
	return len(cmd) > 2 && cmd[1] == "pkt" && cmd[2] == verb
}

// pktGen answers a generator run; f.mu is held.
func (f *Fake) pktGen(cmd []string) (cluster.ExecResult, error) {
	rate, err := strconv.ParseFloat(flag(cmd, "--rate"), 64)
	if err != nil {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: pkt gen --rate %q", flag(cmd, "--rate"))
	}
	d, err := time.ParseDuration(flag(cmd, "--duration"))
	if err != nil {
		return cluster.ExecResult{}, fmt.Errorf("clustertest: pkt gen --duration %q", flag(cmd, "--duration"))
	}
	if rate == 0 {
		rate = f.pktGenMax
	}
	sent := uint64(math.Round(rate * d.Seconds()))
	capacity := 0.0
	dst := flag(cmd, "--dst")
	if i := slices.IndexFunc(f.services, func(s service) bool { return s.ClusterIP == dst }); i >= 0 {
		for _, p := range f.selected(f.services[i].selector) {
			if f.forwarder(p.IP) != nil {
				capacity += f.vnfCapacity
			}
		}
	} else if fw := f.forwarder(dst); fw != nil {
		// A forwarder with targets (an ingress): one forwarder's capacity at most, and what its
		// targets that forward can take.
		for _, to := range strings.Split(flag(fw.cmd, "--to"), ",") {
			host, _, _ := strings.Cut(to, ":")
			if f.forwarder(host) != nil {
				capacity += f.vnfCapacity
			}
		}
		capacity = min(capacity, f.vnfCapacity)
	}
	f.pkt = pktRun{sent: sent, delivered: min(sent, uint64(capacity*d.Seconds()))}
	out, _ := json.Marshal(pktengine.GenResult{Engine: "af_packet", TX: "simulated", Dst: flag(cmd, "--dst"), TargetPPS: rate, DurationS: d.Seconds(),
		SentPackets: sent, AchievedPPS: rate, Mode: pktengine.Mode(flag(cmd, "--mode")), FrameSize: flag(cmd, "--size"),
		Streams: []pktengine.StreamSent{{TEID: 1, Sent: sent}}})
	return cluster.ExecResult{Stdout: out}, nil
}

// forwarder is the running `pkt fwd` of the pod with address ip (nil: none); f.mu is held.
func (f *Fake) forwarder(ip string) *process {
	for _, p := range f.pods {
		if p.IP != ip {
			continue
		}
		for _, pr := range f.procs {
			if pr.pod == p.Name && !pr.stopped && (isPkt(pr.cmd, "fwd") || (isPkt(pr.cmd, "knf") || isPkt(pr.cmd, "xfwd")) && !f.noNetAdmin) {
				return pr
			}
		}
	}
	return nil
}

// pktRecvOutput is a receiver's output: its ready line, and once stopped its result; f.mu is
// held.
func (f *Fake) pktRecvOutput(stopped bool) []byte {
	out := []byte(pktengine.RecvReadyLine + "\n")
	if !stopped {
		return out
	}
	r := pktengine.RecvResult{Engine: "af_packet", RX: "simulated", Probes: 1, Streams: []pktengine.StreamResult{},
		Latency: pktengine.Latency{Count: 1, Min: 100, Mean: 100, P50: 100, P90: 100, P99: 100, Max: 100}}
	r.Received, r.Unique = f.pkt.delivered, f.pkt.delivered
	b, _ := json.Marshal(r)
	return append(append(out, b...), '\n')
}
