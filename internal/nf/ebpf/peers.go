package ebpf

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/nf"
)

// The xdp kind prepares the veth peers of its interfaces (the previous and next hop) and
// restores them on Close:
//
//   - GRO on. A veth hands the frames another interface redirects to it with XDP
//     (ndo_xdp_xmit) to its peer's receive ring, which only exists while the peer runs NAPI:
//     when the peer has an XDP program or GRO switched on. GRO also merges the redirected
//     frames into large packets again for the receiving stack.
//   - TX checksumming off. A veth leaves the checksum of what it sends to be completed later
//     (CHECKSUM_PARTIAL); an XDP frame cannot carry that state, so a redirected packet would
//     arrive with a wrong TCP/UDP checksum and be dropped. Without it the sender computes the
//     checksums (and segments large TCP sends itself: no TSO, software GSO).

// prepareXDPPeer switches GRO on and TX checksumming off on ep (an endpoint without a namespace
// is left alone) and adds what restores them to inst.
func (in *instance) prepareXDPPeer(ep nf.Endpoint) error {
	if ep.NS == "" || ep.Dev == "" {
		return nil
	}
	for _, s := range []struct {
		f  nf.Feature
		on bool
	}{{nf.GRO, true}, {nf.TxChecksum, false}} {
		undo, err := nf.SwitchFeature(ep, s.f, s.on)
		if err != nil {
			return fmt.Errorf("prepare %s in %s for XDP redirects: %w", ep.Dev, ep.NS, err)
		}
		in.undo = append(in.undo, undo)
	}
	return nil
}
