package pktengine

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf/dpdk"
)

// BenchmarkTxOnly64 puts the generator next to DPDK's: 64-byte frames as fast as each can send,
// from one core (CPU 0), out of the same veth end, one after the other in one run: cnibench's
// generator on each of its engines (AF_XDP, AF_PACKET), then dpdk-testpmd's txonly mode through its net_af_packet and its
// net_af_xdp (copy mode here) drivers. Each rate is what the peer end received per second
// (its interface counter), over txOnlySeconds; a driver testpmd lacks is reported, not faked.
//
//	go test -run '^$' -bench TxOnly64 -benchtime 1x ./internal/pktengine
func BenchmarkTxOnly64(b *testing.B) {
	p := newPair(b)
	var closeSink func()
	if err := netns.Do(p.recv, func() (err error) { closeSink, err = Sink(GTPPort); return err }); err != nil {
		b.Fatal(err)
	}
	defer closeSink()
	testpmd, tpErr := exec.LookPath(dpdk.Testpmd)
	for range b.N {
		for _, engine := range EngineNames() {
			if e, _ := Lookup(engine, RoleSend); e.Usable() != nil {
				b.Logf("cnibench %s: skipped: %v", engine, e.Usable())
				continue
			}
			rx0 := rxPackets(b, p)
			o := genOptions(UDP, "64", 0, txOnlySeconds*time.Second)
			o.CPU = 0
			o.Engine, o.Dst, o.SrcPort, o.DstPort = engine, p.recvIP, GTPPort, GTPPort
			var gen GenResult
			err := netns.Do(p.gen, func() (err error) { gen, err = RunGen(b.Context(), o); return err })
			if err != nil {
				b.Fatal(err)
			}
			got := float64(rxPackets(b, p)-rx0) / gen.DurationS
			b.ReportMetric(got, "cnibench_"+engine+"_pps")
			b.Logf("cnibench pkt gen --engine %s (%s): %.0f pps sent, %.0f received by the peer", engine, gen.TX, gen.AchievedPPS, got)
		}
		for _, drv := range []string{"net_af_packet0,iface=" + p.genDev, "net_af_xdp0,iface=" + p.genDev + ",start_queue=0,queue_count=1"} {
			name := strings.SplitN(drv, "0,", 2)[0]
			if tpErr != nil {
				b.Logf("testpmd %s: skipped: %v", name, tpErr)
				continue
			}
			pps, out, err := testpmdTxOnly(b, p, testpmd, drv)
			if err != nil {
				b.Logf("testpmd %s: skipped: %v\n%s", name, err, out)
				continue
			}
			b.ReportMetric(pps, "testpmd_"+strings.TrimPrefix(name, "net_")+"_pps")
			b.Logf("dpdk-testpmd txonly %s: %.0f pps received by the peer", name, pps)
		}
	}
}

const txOnlySeconds = 3

// rxPackets is the peer end's received-packets counter.
func rxPackets(b *testing.B, p nsPair) uint64 { return linkRxPackets(b, p.recv, p.recvDev) }

// linkRxPackets is what interface dev of namespace ns has received (its kernel counter).
func linkRxPackets(tb testing.TB, ns, dev string) uint64 {
	tb.Helper()
	h, err := netns.Netlink(ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		tb.Fatal(err)
	}
	return l.Attrs().Statistics.RxPackets
}

// testpmdTxOnly runs testpmd's txonly mode (60-byte frames: 64 with the FCS, IPv4/UDP as the
// generator's, to the peer's MAC) on one vdev in the generator's namespace for txOnlySeconds,
// its forwarding core on CPU 0, and returns what the peer received per second.
func testpmdTxOnly(b *testing.B, p nsPair, testpmd, vdev string) (float64, string, error) {
	h, err := netns.Netlink(p.recv)
	if err != nil {
		return 0, "", err
	}
	peer, err := h.LinkByName(p.recvDev)
	h.Close()
	if err != nil {
		return 0, "", err
	}
	// The same frames as the generator's: to the peer's MAC and address, UDP to the port its
	// sink holds, so that the peer does the same work for both.
	args := []string{"--net=" + netns.Path(p.gen), "--", testpmd,
		"--no-huge", "-m", "64", "--no-pci", "--no-shconf", "--no-telemetry", "--file-prefix", "cnbtxonly",
		"--lcores", "0@(1),1@(0)", "--vdev", vdev, "--",
		"--forward-mode=txonly", "--txpkts=60", "--auto-start", "--total-num-mbufs=4096",
		"--eth-peer=0," + peer.Attrs().HardwareAddr.String(), "--tx-ip=" + p.genIP.String() + "," + p.recvIP.String(),
		"--tx-udp=" + strconv.Itoa(GTPPort) + "," + strconv.Itoa(GTPPort)}
	cmd := exec.Command("nsenter", args...)
	// EAL's runtime directory under the benchmark's temporary one, not /var/run/dpdk.
	cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+b.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	// Its first second starts the ports; count the rest.
	time.Sleep(time.Second)
	rx0, t0 := rxPackets(b, p), time.Now()
	time.Sleep(txOnlySeconds * time.Second)
	rx1, el := rxPackets(b, p), time.Since(t0)
	stdin.Close() // testpmd stops on EOF
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		err = <-done
	}
	if rx1 == rx0 {
		return 0, out.String(), err
	}
	return float64(rx1-rx0) / el.Seconds(), out.String(), nil
}
