package dpdk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

func TestDPDK(t *testing.T) { nftest.Check(t, kind{}) }

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func txOn(t *testing.T, ep nf.Endpoint) bool {
	t.Helper()
	on, err := nf.FeatureOn(ep, nf.TxChecksum)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

// After Close testpmd is gone (by PID, and from its namespace, which still exists), its runtime
// directory and /var/run/dpdk/<prefix> do not exist, and the peers checksum again.
func TestCloseLeavesNothing(t *testing.T) {
	r := &nftest.Recorder{Kind: kind{}}
	ch := nftest.Build(t, r, 1, 10)
	started, _ := r.Started()
	in := started[0].(*instance)
	ns := ch.Spec.NFName(1)
	pid := in.PID()
	if got := netns.PIDs(ns); !slices.Equal(got, []int{pid}) {
		t.Fatalf("processes in %s: %v, want testpmd %d", ns, got, pid)
	}
	if _, err := os.Stat(filepath.Join(in.dir, "dpdk", in.env.Name)); err != nil {
		t.Errorf("runtime directory while running: %v", err)
	}
	if _, err := os.Stat(filepath.Join(VarRunDPDK, in.env.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s/%s exists while running (%v)", VarRunDPDK, in.env.Name, err)
	}
	for _, ep := range []nf.Endpoint{in.env.InPeer, in.env.OutPeer} {
		if txOn(t, ep) {
			t.Errorf("TX checksumming of %s/%s on while running", ep.NS, ep.Dev)
		}
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("testpmd (PID %d) still exists after Close", pid)
	}
	if left := netns.PIDs(ns); len(left) != 0 {
		t.Errorf("processes left in %s: %v", ns, left)
	}
	for _, d := range []string{in.dir, filepath.Join(VarRunDPDK, in.env.Name)} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Close (%v)", d, err)
		}
	}
	for _, ep := range []nf.Endpoint{in.env.InPeer, in.env.OutPeer} {
		if !txOn(t, ep) {
			t.Errorf("TX checksumming of %s/%s not restored", ep.NS, ep.Dev)
		}
	}
	if ps := in.cmd.ProcessState; ps == nil || !ps.Success() {
		t.Errorf("testpmd did not exit by itself on EOF: %v", ps)
	}
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A cnibench killed mid-run leaves testpmd to netns.KillAll (lab clean) and Pdeathsig; then
// nothing of it is left outside env.Dir (no /var/run/dpdk/<prefix>), and Close still succeeds.
func TestKilledLeavesNothingOutside(t *testing.T) {
	r := &nftest.Recorder{Kind: kind{}}
	ch := nftest.Build(t, r, 1, 10)
	started, _ := r.Started()
	in := started[0].(*instance)
	ns := ch.Spec.NFName(1)
	if err := netns.KillAll(ns); err != nil {
		t.Fatal(err)
	}
	if err := netns.Delete(ns); err != nil {
		t.Fatal(err)
	}
	<-in.done
	if !gone(in.PID()) {
		t.Errorf("testpmd (PID %d) still exists", in.PID())
	}
	if _, err := os.Stat(filepath.Join(VarRunDPDK, in.env.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s/%s exists (%v)", VarRunDPDK, in.env.Name, err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(in.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Close (%v)", in.dir, err)
	}
}

func TestArgs(t *testing.T) {
	env := nf.Env{Name: "cnbt1-nf1", In: "in0", Out: "out0"}
	got := strings.Join(Args(env, 1500, "1"), " ")
	want := "--no-huge -m 34 --no-pci --no-shconf --no-telemetry --file-prefix cnbt1-nf1 --lcores 0@(1),1@(1) " +
		"--vdev net_af_packet0,iface=in0 --vdev net_af_packet1,iface=out0 -- --forward-mode=io --auto-start --total-num-mbufs=4096"
	if got != want {
		t.Errorf("args:\n%s\nwant\n%s", got, want)
	}
	got = strings.Join(Args(env, 9000, "0,1"), " ")
	for _, w := range []string{"net_af_packet0,iface=in0,blocksz=16384,framesz=16384", "--mbuf-size=16512", "--lcores 0@(0,1),1@(0,1)"} {
		if !strings.Contains(got, w) {
			t.Errorf("args for MTU 9000 lack %q: %s", w, got)
		}
	}
}

// A paused chain's testpmd is stopped (it polls no CPU and forwards nothing); resumed, it
// forwards and filters as before.
func TestPauseResume(t *testing.T) {
	ch := nftest.Build(t, kind{}, 1, 10)
	pids := netns.PIDs(ch.Spec.NFName(1))
	if len(pids) == 0 {
		t.Fatal("no testpmd in the NF's namespace")
	}
	state := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pids[0]))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return f[0]
	}
	if err := ch.Pause(); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != "T" {
		t.Errorf("testpmd state %q after Pause, want T (stopped)", s)
	}
	if err := nftest.EchoTCP(ch, 5201, 1000, time.Second); err == nil {
		t.Error("a paused chain forwarded allowed TCP")
	}
	if err := ch.Resume(); err != nil {
		t.Fatal(err)
	}
	if s := state(); s == "T" {
		t.Errorf("testpmd still stopped after Resume")
	}
	nftest.Traffic(t, ch)
	// Closing a paused chain ends testpmd cleanly too.
	if err := ch.Pause(); err != nil {
		t.Fatal(err)
	}
}
