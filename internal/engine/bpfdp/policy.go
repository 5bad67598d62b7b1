package bpfdp

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cnibench/cnibench/internal/engine/policy"
)

// Pins of the policy engine (bpf/policy.c) in a node's directory.
const (
	polProg    = "pol_check"
	polEps     = "pol_check_eps"
	polIPCache = "pol_check_ipcache"
	polRules   = "pol_check_rules"
	polCT      = "pol_check_ct"
	polStats   = "pol_check_stats"
)

// PolicyUsable says why the eBPF policy engine cannot run here (nil when it can).
var PolicyUsable = sync.OnceValue(func() error {
	if err := LBUsable(); err != nil { // tc programs and tcx links, as the load balancer
		return err
	}
	var objs polCheckObjects
	if err := loadPolCheckObjects(&objs, nil); err != nil {
		return fmt.Errorf("the eBPF policy engine does not load on this kernel: %w", err)
	}
	return objs.Close()
})

// loadPolicy loads the node's policy engine and pins it, unless it is pinned already. Caller
// holds the node's lock.
func (n Node) loadPolicy() error {
	if err := n.mounted(); err != nil {
		return err
	}
	if n.pinned(polProg) {
		return nil
	}
	var objs polCheckObjects
	if err := loadSpecOf(loadPolCheck, &objs); err != nil {
		return err
	}
	defer objs.Close()
	if err := n.pinAll(map[string]interface{ Pin(string) error }{polEps: objs.PolEps, polIPCache: objs.Ipcache,
		polRules: objs.PolRules, polCT: objs.PolCt, polStats: objs.PolStats}); err != nil {
		return err
	}
	return objs.PolCheck.Pin(n.path(polProg)) // last: its pin says the rest is there
}

// loadSpecOf loads a bpf2go collection into objs.
func loadSpecOf(spec func() (*ebpf.CollectionSpec, error), objs any) error {
	s, err := spec()
	if err != nil {
		return err
	}
	return loadSpec(s, objs)
}

// AttachPolicy loads the node's policy engine if need be and attaches it to the tcx ingress
// of the interfaces devs (every interface but loopback and bridges when none is named), after
// the Service load balancer and before the pod forwarding.
func (n Node) AttachPolicy(devs ...string) error {
	defer n.lock()()
	if err := n.loadPolicy(); err != nil {
		return err
	}
	return n.attachIngress(polProg, devs)
}

// ruleKey is a BPFRule as the LPM key of pol_rules (bpf/policy.c): endpoint, identity and
// direction always, then the protocol and PortBits bits of the port in network byte order.
func ruleKey(r policy.BPFRule) polCheckRuleKey {
	k := polCheckRuleKey{Prefixlen: 72, Ep: r.Endpoint, Identity: r.Identity, Proto: r.Proto, Port: be16(r.Port)}
	if r.Egress {
		k.Egress = 1
	}
	if r.Proto != 0 {
		k.Prefixlen = 80 + uint32(r.PortBits)
	}
	return k
}

// SetPolicy makes the node's policy engine hold exactly b (loading it if need be): the IP
// cache and the rules first, the endpoints (which turn the checks on) last, then what is no
// longer wanted is deleted. Connections already admitted stay admitted.
func (n Node) SetPolicy(b *policy.BPFPolicy) error {
	defer n.lock()()
	if err := n.loadPolicy(); err != nil {
		return err
	}
	ms, err := n.policyMaps()
	if err != nil {
		return err
	}
	defer closeMaps(ms)
	return writePolicy(ms[0], ms[1], ms[2], b)
}

// PolicyStats are the policy engine's counters in one node, summed over CPUs.
type PolicyStats struct {
	Admitted    uint64 // first packets a rule admitted
	Denied      uint64 // first packets dropped
	Established uint64 // packets of admitted connections and their replies
}

// HasPolicy says whether the node's policy engine is loaded.
func (n Node) HasPolicy() bool { return n.pinned(polProg) }

// PolicyStats reads the node's counters.
func (n Node) PolicyStats() (PolicyStats, error) {
	v, err := n.counters(polStats, 3)
	if err != nil {
		return PolicyStats{}, err
	}
	return PolicyStats{Admitted: v[0], Denied: v[1], Established: v[2]}, nil
}

// policyMaps opens the policy engine's maps of the node (pol.h's layout: IP cache, rules,
// endpoints); closeMaps closes them.
func (n Node) policyMaps() ([3]*ebpf.Map, error) {
	var ms [3]*ebpf.Map
	for i, pin := range []string{polIPCache, polRules, polEps} {
		m, err := ebpf.LoadPinnedMap(n.path(pin), nil)
		if err != nil {
			closeMaps(ms)
			return ms, fmt.Errorf("map %s: %w", pin, err)
		}
		ms[i] = m
	}
	return ms, nil
}

// pcPolicyMaps opens the polycube firewall cube's maps of the node (the same layout).
func (n Node) pcPolicyMaps() ([3]*ebpf.Map, error) {
	var ms [3]*ebpf.Map
	for i, name := range []string{"ipcache", "pol_rules", "pol_eps"} {
		m, err := n.pcMap(name)
		if err != nil {
			closeMaps(ms)
			return ms, err
		}
		ms[i] = m
	}
	return ms, nil
}

func closeMaps(ms [3]*ebpf.Map) {
	for _, m := range ms {
		if m != nil {
			m.Close()
		}
	}
}

// writePolicy makes the policy maps (pol.h's layout: an IP cache, rules, endpoints) hold
// exactly b: the IP cache and the rules first, the endpoints (which turn the checks on) last,
// then what is no longer wanted is deleted. The policy engine's and the polycube firewall's
// maps are written by it.
func writePolicy(ipc, rules, eps *ebpf.Map, b *policy.BPFPolicy) error {
	ck := make([]polCheckIpcKey, len(b.IPCache))
	cv := make([]uint32, len(b.IPCache))
	wantC := make(map[polCheckIpcKey]bool, len(b.IPCache))
	for i, e := range b.IPCache {
		k, err := ipcKey(e.Prefix)
		if err != nil {
			return err
		}
		ck[i], cv[i] = k, e.Identity
		wantC[k] = true
	}
	rk := make([]polCheckRuleKey, len(b.Rules))
	rv := make([]uint8, len(b.Rules))
	wantR := make(map[polCheckRuleKey]bool, len(b.Rules))
	for i, r := range b.Rules {
		rk[i], rv[i] = ruleKey(r), 1
		wantR[rk[i]] = true
	}
	ek := make([]uint32, len(b.Endpoints))
	ev := make([]polCheckPolEp, len(b.Endpoints))
	wantE := make(map[uint32]bool, len(b.Endpoints))
	for i, e := range b.Endpoints {
		ek[i], ev[i] = be32(e.IP), polEp(e)
		wantE[ek[i]] = true
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
	return errors.Join(deleteWhere(eps, func(k uint32) bool { return !wantE[k] }),
		deleteWhere(rules, func(k polCheckRuleKey) bool { return !wantR[k] }),
		deleteWhere(ipc, func(k polCheckIpcKey) bool { return !wantC[k] }))
}
