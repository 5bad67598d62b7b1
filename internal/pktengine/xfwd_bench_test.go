package pktengine

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/stats"
)

// TestVNFsCompare (run only when CNIBENCH_BENCH=vnfs: it loads the host flat out for 18 s)
// compares the three forwarding VNFs, paired by round (stats.PairedRatio), in one run on newKnfNet's bridge: the
// generator (default engine, its sending thread on CPU 0) sends 64-byte UDP frames as fast as
// it can for 2 s to the VNF's port, and the VNF (xfwd: XDP, generic mode; knf: nftables; fwd:
// user space, its thread on CPU 1) sends them on to the receiver's port 2155, where a Sink
// drops them. The rate is what the receiver's eth0 received per second of sending; each round
// runs the three in turn, the order reversed every other round. XDP and nftables work in the
// softirq of the CPU that delivers the frame: with veths, the sender's.
//
//	CNIBENCH_BENCH=vnfs go test -run TestVNFsCompare -v ./internal/pktengine
func TestVNFsCompare(t *testing.T) {
	if os.Getenv("CNIBENCH_BENCH") != "vnfs" {
		t.Skip("a benchmark: set CNIBENCH_BENCH=vnfs")
	}
	const rounds, seconds = 3, 2
	n := newKnfNet(t)
	var closeSink func()
	if err := netns.Do(n.recv, func() (err error) { closeSink, err = Sink(2155); return err }); err != nil {
		t.Fatal(err)
	}
	defer closeSink()
	to := []netip.AddrPort{netip.AddrPortFrom(n.recvIP, 2155)}
	vnfs := []string{"xfwd", "knf", "fwd"}
	// run starts VNF v in n.knf, and returns, once it is ready, what stops it and returns the
	// datagrams it says it forwarded.
	run := func(v string) func() uint64 {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		done := make(chan uint64, 1)
		errc := make(chan error, 1)
		go func() {
			errc <- netns.Do(n.knf, func() error {
				var fwd uint64
				var err error
				switch v {
				case "xfwd":
					var r XfwdResult
					r, err = RunXfwd(ctx, XfwdOptions{Port: GTPPort, To: to, Ready: func() { close(ready) }})
					fwd = r.Packets
				case "knf":
					var r KnfResult
					r, err = RunKnf(ctx, KnfOptions{Port: GTPPort, To: to, Ready: func() { close(ready) }})
					fwd = r.Packets
				case "fwd":
					close(ready) // bound within a few ms; the generator resolves ARP first
					var r FwdResult
					r, err = RunFwd(ctx, FwdOptions{Port: GTPPort, To: to, CPU: 1, RcvBuf: 4 << 20})
					fwd = r.Sent
				}
				done <- fwd
				return err
			})
		}()
		select {
		case <-ready:
		case err := <-errc:
			t.Fatalf("%s: %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
		return func() uint64 {
			cancel()
			if err := <-errc; err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			return <-done
		}
	}
	pps := map[string][]float64{}
	for round := range rounds {
		order := slices.Clone(vnfs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			stop := run(v)
			rx0 := n.rxPackets(t)
			o := genOptions(UDP, "64", 0, seconds*time.Second)
			o.CPU, o.Dst, o.SrcPort, o.DstPort = 0, n.knfIP, GTPPort, GTPPort
			var gen GenResult
			if err := netns.Do(n.gen, func() (err error) { gen, err = RunGen(context.Background(), o); return err }); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the last frames through
			rx := n.rxPackets(t) - rx0
			fwd := stop()
			r := float64(rx) / gen.DurationS
			pps[v] = append(pps[v], r)
			t.Logf("round %d %-4s: generator (%s) sent %.0f pps, the VNF forwarded %d, the receiver got %d: %.0f pps", round, v, gen.Engine, gen.AchievedPPS, fwd, rx, r)
		}
	}
	for _, v := range vnfs {
		r := stats.PairedRatio(byRound(pps[v]), byRound(pps["fwd"]))
		t.Logf("%-4s: pps %.0f, median %.0f; to fwd, paired by round: %.2f [%.2f, %.2f]", v, pps[v], stats.Summarize(pps[v]).Median, r.Ratio, r.CI95Low, r.CI95High)
	}
}

// rxPackets is what the receiver's eth0 has received.
func (n knfNet) rxPackets(t *testing.T) uint64 { return linkRxPackets(t, n.recv, "eth0") }
