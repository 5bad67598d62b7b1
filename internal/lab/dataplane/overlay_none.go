package dataplane

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// native: no overlay; every node routes a remote node's blocks via that node's underlay
// address (flannel host-gw, Calico BGP mode).
type native struct{}

func init() { RegisterOverlay(native{}) }

func (native) Name() string                      { return None }
func (native) Summary() string                   { return "native routes via the nodes' underlay addresses" }
func (native) Needs() []string                   { return nil }
func (native) Overhead() int                     { return 0 }
func (native) SetupNode(Node, Preset, int) error { return nil }
func (native) Facts(Preset) map[string]any       { return nil }

func (native) Remote(n, m Node, _ Preset) error {
	return n.Netlink(func(h *netlink.Handle) error {
		eth, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, dst := range m.Blocks {
			if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: dst, Gw: m.IP}); err != nil {
				return fmt.Errorf("route %s via %s: %w", dst, m.IP, err)
			}
		}
		return nil
	})
}
