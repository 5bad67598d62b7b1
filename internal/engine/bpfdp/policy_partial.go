package bpfdp

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/engine/policy"
)

// ChangePolicy applies a change (policy.DiffBPF) to the node's policy engine, touching only the
// entries it names (changePolicy): its cost is the change's, whatever the number of pods and
// rules. The engine must be loaded already: a change is meaningful only against the policy it
// was computed from, which a node without one does not hold.
func (n Node) ChangePolicy(c policy.BPFChange) error {
	defer n.lock()()
	if !n.pinned(polProg) {
		return fmt.Errorf("node %s has no policy engine to change", n.NS)
	}
	ms, err := n.policyMaps()
	if err != nil {
		return err
	}
	defer closeMaps(ms)
	return changePolicy(ms[0], ms[1], ms[2], c)
}

// PolycubeChangePolicy applies a change to the node's firewall cube as ChangePolicy does to
// pol_check's maps. The provider must be there; the cube is connected by PolycubeSetPolicy,
// which the policy the change was computed from went through.
func (n Node) PolycubeChangePolicy(c policy.BPFChange) error {
	defer n.lock()()
	if _, ok := n.pcBuild(); !ok {
		return fmt.Errorf("node %s has no polycube provider", n.NS)
	}
	ms, err := n.pcPolicyMaps()
	if err != nil {
		return err
	}
	defer closeMaps(ms)
	return changePolicy(ms[0], ms[1], ms[2], c)
}

// changePolicy writes and deletes the entries c names in the policy maps (pol.h's layout, as
// writePolicy), and no other: no map is walked. The order is writePolicy's, so that a packet
// meets no state admitting what neither the old nor the new policy admits as long as the
// change keeps the numbering: the IP cache entries and the rules first, then the endpoints
// (which turn the checks on and say which rules apply); endpoints deleted first (the rules
// they used are then no endpoint's), then the rules, then the IP cache entries no rule needs.
// A key both written and deleted, or a prefix or address that is not IPv4, is an error, and
// nothing is written then.
func changePolicy(ipc, rules, eps *ebpf.Map, c policy.BPFChange) error {
	ck := make([]polCheckIpcKey, len(c.IPCache))
	cv := make([]uint32, len(c.IPCache))
	wroteC := make(map[polCheckIpcKey]bool, len(c.IPCache))
	for i, e := range c.IPCache {
		k, err := ipcKey(e.Prefix)
		if err != nil {
			return err
		}
		ck[i], cv[i] = k, e.Identity
		wroteC[k] = true
	}
	goneC := make([]polCheckIpcKey, len(c.GoneIPCache))
	for i, p := range c.GoneIPCache {
		k, err := ipcKey(p)
		if err != nil {
			return err
		}
		if wroteC[k] {
			return fmt.Errorf("ip cache entry %s written and deleted at once", p)
		}
		goneC[i] = k
	}

	rk := make([]polCheckRuleKey, len(c.Rules))
	rv := make([]uint8, len(c.Rules))
	wroteR := make(map[polCheckRuleKey]bool, len(c.Rules))
	for i, r := range c.Rules {
		rk[i], rv[i] = ruleKey(r), 1
		wroteR[rk[i]] = true
	}
	goneR := make([]polCheckRuleKey, len(c.GoneRules))
	for i, r := range c.GoneRules {
		goneR[i] = ruleKey(r)
		if wroteR[goneR[i]] {
			return fmt.Errorf("rule %+v added and deleted at once", r)
		}
	}

	ek := make([]uint32, len(c.Endpoints))
	ev := make([]polCheckPolEp, len(c.Endpoints))
	wroteE := make(map[uint32]bool, len(c.Endpoints))
	for i, e := range c.Endpoints {
		if !e.IP.Is4() {
			return fmt.Errorf("endpoint %s is not IPv4", e.IP)
		}
		ek[i], ev[i] = be32(e.IP), polEp(e)
		wroteE[ek[i]] = true
	}
	goneE := make([]uint32, len(c.GoneEndpoints))
	for i, a := range c.GoneEndpoints {
		if !a.Is4() {
			return fmt.Errorf("endpoint %s is not IPv4", a)
		}
		goneE[i] = be32(a)
		if wroteE[goneE[i]] {
			return fmt.Errorf("endpoint %s written and deleted at once", a)
		}
	}

	if err := batchUpdate(ipc, ck, cv); err != nil {
		return fmt.Errorf("ip cache: %w", err)
	}
	if err := batchUpdate(rules, rk, rv); err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	if err := batchUpdate(eps, ek, ev); err != nil {
		return fmt.Errorf("endpoints: %w", err)
	}
	// Deleted in this order, each only once the previous is done: an error stops it.
	if err := deleteKeys(eps, goneE); err != nil {
		return fmt.Errorf("endpoints: %w", err)
	}
	if err := deleteKeys(rules, goneR); err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	if err := deleteKeys(ipc, goneC); err != nil {
		return fmt.Errorf("ip cache: %w", err)
	}
	return nil
}

// ipcKey is an IP cache prefix as the LPM key of the IP cache.
func ipcKey(p netip.Prefix) (polCheckIpcKey, error) {
	if !p.Addr().Is4() || !p.IsValid() {
		return polCheckIpcKey{}, fmt.Errorf("ip cache entry %s is not IPv4", p)
	}
	return polCheckIpcKey{Prefixlen: uint32(p.Bits()), Addr: be32(p.Masked().Addr())}, nil
}

// polEp is an endpoint's value in the endpoint map.
func polEp(e policy.BPFEndpoint) polCheckPolEp {
	v := polCheckPolEp{Id: e.ID}
	if e.Ingress {
		v.Ingress = 1
	}
	if e.Egress {
		v.Egress = 1
	}
	return v
}
