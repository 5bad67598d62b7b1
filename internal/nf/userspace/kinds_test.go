package userspace

import (
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/nf/nftest"
)

func TestUserspace(t *testing.T)      { nftest.Check(t, nftest.Kind(t, "userspace")) }
func TestUserspaceAFXDP(t *testing.T) { nftest.Check(t, nftest.Kind(t, "userspace-afxdp")) }

// TestGSOPassesThrough: the AF_PACKET forwarder takes the client's TSO super-packets whole
// (through the socket queue, as they do not fit a ring slot) and sends them on as GSO packets:
// 32 MB of TCP cross the NF in far fewer frames than MTU-sized segments would need, none is
// cut short, and all arrive intact.
func TestGSOPassesThrough(t *testing.T) {
	rec := &nftest.Recorder{Kind: nftest.Kind(t, "userspace")}
	ch := nftest.Build(t, rec, 1, 10)
	const size = 32 << 20
	if err := nftest.EchoTCP(ch, 5201, size, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	insts, _ := rec.Started()
	c := insts[0].(*packetNF).Counts()
	t.Logf("in->out %+v, out->in %+v", c[0], c[1])
	for i, d := range c {
		if d.Errors != 0 {
			t.Errorf("direction %d: %d frames lost (cut short or refused)", i, d.Errors)
		}
		if segments := uint64(size / 1448); d.Forwarded == 0 || d.Forwarded > segments/4 {
			t.Errorf("direction %d: %d frames carried %d bytes: GSO packets were not passed through whole (MTU-sized segments: %d)", i, d.Forwarded, size, segments)
		}
	}
}
