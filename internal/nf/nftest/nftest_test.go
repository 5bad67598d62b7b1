package nftest

import (
	"context"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
)

// passAll is a transparent NF without a firewall: a bridge that forwards everything.
type passAll struct{}

func (passAll) Name() string    { return "test-pass-all" }
func (passAll) Summary() string { return "bridge, no rules" }
func (passAll) Layer() nf.Layer { return nf.Transparent }
func (passAll) Usable() error   { return nil }
func (passAll) Close() error    { return nil }
func (p passAll) Start(_ context.Context, env nf.Env, _ nf.RuleSet) (nf.Instance, error) {
	h, err := netns.Netlink(env.NS)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		return nil, err
	}
	for _, dev := range []string{env.In, env.Out} {
		lk, err := h.LinkByName(dev)
		if err != nil {
			return nil, err
		}
		if err := h.LinkSetMaster(lk, br); err != nil {
			return nil, err
		}
	}
	return p, h.LinkSetUp(br)
}

// The harness can fail: a chain that forwards everything passes the allowed traffic and is
// caught letting the denied through.
func TestVerifyCatchesAnNFThatDropsNothing(t *testing.T) {
	ch := Build(t, passAll{}, 1, 10)
	err := Verify(ch)
	if err == nil || !strings.Contains(err.Error(), "denied TCP 5299 went through test-pass-all") {
		t.Fatalf("Verify on a pass-all chain: %v", err)
	}
}
