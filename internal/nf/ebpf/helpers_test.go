package ebpf

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

// pair is two new namespaces joined by a veth pair (eth0 in each, up, 10.251.0.1/24 and
// 10.251.0.2/24), removed when the test ends.
type pair struct {
	a, b   string
	aIP    net.IP
	bIP    net.IP
	prefix string
}

func newPair(t *testing.T) pair {
	t.Helper()
	nftest.NeedRoot(t)
	p := netnstest.NewPair(t, [2]string{"a", "b"}, [2]string{"eth0", "eth0"}, netip.MustParsePrefix("10.251.0.0/24"))
	return pair{prefix: p.Prefix, a: p.NS[0], b: p.NS[1], aIP: p.IP[0].AsSlice(), bIP: p.IP[1].AsSlice()}
}

// bpfDir mounts a bpf file system under the test prefix (as a chain does), unmounted when the
// test ends.
func bpfDir(t *testing.T, prefix string) string {
	t.Helper()
	state := filepath.Join(nftest.StateRoot, prefix)
	dir := filepath.Join(state, "bpf")
	t.Cleanup(func() {
		if err := nf.Unmount(dir); err != nil {
			t.Errorf("unmount: %v", err)
		}
		_ = os.RemoveAll(state)
	})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hooks is what is attached to an interface: its XDP program's id (0: none) and the programs
// on its tcx ingress and egress.
type hooks struct {
	xdp      ebpf.ProgramID
	tcxIn    []ebpf.ProgramID
	tcxOut   []ebpf.ProgramID
	features map[string]bool
}

func (h hooks) empty() bool { return h.xdp == 0 && len(h.tcxIn) == 0 && len(h.tcxOut) == 0 }

func hooksOf(t *testing.T, ep nf.Endpoint) hooks {
	t.Helper()
	h, err := netns.Netlink(ep.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lk, err := h.LinkByName(ep.Dev)
	if err != nil {
		t.Fatal(err)
	}
	var out hooks
	if x := lk.Attrs().Xdp; x != nil && x.Attached {
		out.xdp = ebpf.ProgramID(x.ProgId)
	}
	err = netns.Do(ep.NS, func() error {
		for _, q := range []struct {
			at  ebpf.AttachType
			ids *[]ebpf.ProgramID
		}{{ebpf.AttachTCXIngress, &out.tcxIn}, {ebpf.AttachTCXEgress, &out.tcxOut}} {
			r, err := link.QueryPrograms(link.QueryOptions{Target: lk.Attrs().Index, Attach: q.at})
			if err != nil {
				return err
			}
			for _, p := range r.Programs {
				*q.ids = append(*q.ids, p.ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out.features = map[string]bool{}
	for _, f := range []nf.Feature{nf.GRO, nf.TxChecksum} {
		on, err := nf.FeatureOn(ep, f)
		if err != nil {
			t.Fatal(err)
		}
		out.features[f.String()] = on
	}
	return out
}

// pins lists what is pinned in dir.
func pins(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// waitFreed fails unless the kernel frees the programs within a few seconds (nothing holds
// them any more).
func waitFreed(t *testing.T, ids []ebpf.ProgramID) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err == nil {
				_ = p.Close()
			}
			if time.Now().After(deadline) {
				t.Errorf("program %d still loaded after Close (err %v)", id, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// capture is a kind that records the instance and env of the NF it starts.
type capture struct {
	nf.Kind
	inst nf.Instance
	env  nf.Env
	// before holds the hooks and features of the NF's interfaces and their peers before Start.
	before map[nf.Endpoint]hooks
	t      *testing.T
}

func (c *capture) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (nf.Instance, error) {
	c.env = env
	c.before = map[nf.Endpoint]hooks{}
	for _, ep := range endpoints(env) {
		c.before[ep] = hooksOf(c.t, ep)
	}
	inst, err := c.Kind.Start(ctx, env, rules)
	c.inst = inst
	return inst, err
}

// endpoints are the NF's interfaces and their peers.
func endpoints(env nf.Env) []nf.Endpoint {
	return []nf.Endpoint{{NS: env.NS, Dev: env.In}, {NS: env.NS, Dev: env.Out}, env.InPeer, env.OutPeer}
}

// stubKind names traffic checks that run without a kind (nftest's messages name it).
type stubKind string

func (s stubKind) Name() string    { return string(s) }
func (s stubKind) Summary() string { return "" }
func (s stubKind) Layer() nf.Layer { return nf.Transparent }
func (s stubKind) Usable() error   { return nil }
func (s stubKind) Start(context.Context, nf.Env, nf.RuleSet) (nf.Instance, error) {
	return nil, errors.New("stub")
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o700) }

// needUsable skips the test when kind k cannot run on this host, or fails it when
// CNIBENCH_REQUIRE_TOOLS is set (as nftest does for the chain tests).
func needUsable(t *testing.T, k nf.Kind) {
	t.Helper()
	nftest.NeedRoot(t)
	if err := k.Usable(); err != nil {
		if os.Getenv("CNIBENCH_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s not usable on this host: %v", k.Name(), err)
		}
		t.Skipf("%s not usable on this host: %v", k.Name(), err)
	}
}
