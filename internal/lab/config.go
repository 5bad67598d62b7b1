package lab

// A lab's configuration: its fields, defaults and validation, and the prefix rule.

import (
	"fmt"
	"net"
	"regexp"

	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

// Config describes a lab.
type Config struct {
	Prefix      string // every object's name starts with it; see ValidPrefix
	Dataplane   string // preset or baseline name
	Nodes       int    // default 2
	MTU         int    // underlay MTU, default 1500
	ClusterCIDR string // default 10.244.0.0/16; node i gets its i-th block of NodeCIDRMaskSize
	// NodeCIDRMaskSize is the prefix length of each node's pod CIDR (kube-controller-manager's
	// --node-cidr-mask-size), default 24: 254 attached pods per node; 22 holds 1,022.
	NodeCIDRMaskSize int
	UnderlayCIDR     string // default 172.30.0.0/24
	CNIPath          []string
	// Proxy and Policy override the preset's Service implementation and policy engine ("" =
	// the preset's); see dataplane.Proxies and dataplane.PolicyEngines.
	Proxy, Policy string
	// Sync is how the proxy and the policy engine program a change: "partial" (the default;
	// only what changed, where the engine can: dataplane.PartialProxy, PartialPolicy) or
	// "full" (every Service, every policy again).
	Sync string
}

// The sync modes of Config.Sync.
const (
	SyncPartial = "partial"
	SyncFull    = "full"
)

var prefixRe = regexp.MustCompile(`^cnb[a-z0-9]{1,8}$`)

// ValidPrefix checks a prefix: "cnb" and up to 8 lowercase letters or digits, so names stay
// within the kernel's 15-character interface limit and `lab clean` can recognise them.
func ValidPrefix(p string) error {
	if !prefixRe.MatchString(p) {
		return fmt.Errorf("invalid prefix %q: want \"cnb\" followed by 1-8 lowercase letters or digits", p)
	}
	return nil
}

// Validate fills in the defaults and checks the configuration (and the dataplane's MTU
// budget) without touching the host.
func (c *Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve validates the configuration and returns the data-plane parts it runs with.
func (c *Config) resolve() (dataplane.Parts, error) {
	if err := c.defaults(); err != nil {
		return dataplane.Parts{}, err
	}
	dp, err := dataplane.Resolve(c.Dataplane, c.Proxy, c.Policy)
	if err != nil {
		return dataplane.Parts{}, err
	}
	if oh := dp.Overlay.Overhead(); c.MTU-oh < 576 {
		return dataplane.Parts{}, fmt.Errorf("mtu %d leaves pods below 576 bytes after %d bytes of %s overhead (use --mtu %d or more)", c.MTU, oh, dp.Overlay.Name(), 576+oh)
	}
	return dp, nil
}

func (c *Config) defaults() error {
	if c.Nodes == 0 {
		c.Nodes = 2
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.NodeCIDRMaskSize == 0 {
		c.NodeCIDRMaskSize = 24
	}
	if c.ClusterCIDR == "" {
		c.ClusterCIDR = "10.244.0.0/16"
	}
	if c.UnderlayCIDR == "" {
		c.UnderlayCIDR = "172.30.0.0/24"
	}
	if len(c.CNIPath) == 0 {
		c.CNIPath = []string{"/usr/lib/cni", "/opt/cni/bin"}
	}
	if err := ValidPrefix(c.Prefix); err != nil {
		return err
	}
	switch c.Sync {
	case "":
		c.Sync = SyncPartial
	case SyncPartial, SyncFull:
	default:
		return fmt.Errorf("sync %q: want %s or %s", c.Sync, SyncPartial, SyncFull)
	}
	if c.Nodes < 1 || c.Nodes > 64 {
		return fmt.Errorf("nodes %d out of range (1..64)", c.Nodes)
	}
	if c.MTU < 576 || c.MTU > 9000 {
		return fmt.Errorf("mtu %d out of range (576..9000)", c.MTU)
	}
	_, cc, err := net.ParseCIDR(c.ClusterCIDR)
	if err != nil || cc.IP.To4() == nil {
		return fmt.Errorf("cluster CIDR %q is not an IPv4 CIDR (e.g. 10.244.0.0/16)", c.ClusterCIDR)
	}
	if c.NodeCIDRMaskSize < 16 || c.NodeCIDRMaskSize > 28 {
		return fmt.Errorf("node CIDR mask size %d out of range (16..28)", c.NodeCIDRMaskSize)
	}
	if ones, _ := cc.Mask.Size(); ones > c.NodeCIDRMaskSize-bitsFor(c.Nodes) {
		return fmt.Errorf("cluster CIDR %s too small for %d nodes with a /%d each", c.ClusterCIDR, c.Nodes, c.NodeCIDRMaskSize)
	}
	_, uc, err := net.ParseCIDR(c.UnderlayCIDR)
	if err != nil || uc.IP.To4() == nil {
		return fmt.Errorf("underlay CIDR %q is not an IPv4 CIDR (e.g. 172.30.0.0/24)", c.UnderlayCIDR)
	}
	if ones, _ := uc.Mask.Size(); ones > 24 {
		return fmt.Errorf("underlay CIDR %s: want /24 or larger", c.UnderlayCIDR)
	}
	if cc.Contains(uc.IP) || uc.Contains(cc.IP) {
		return fmt.Errorf("underlay CIDR %s overlaps cluster CIDR %s", c.UnderlayCIDR, c.ClusterCIDR)
	}
	return nil
}

func bitsFor(n int) int {
	b := 0
	for (1 << b) < n {
		b++
	}
	return b
}
