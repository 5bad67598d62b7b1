package ebpf

import (
	"context"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/nf"
)

type redirectKind struct{}

func init() { nf.Register(redirectKind{}) }

func (redirectKind) Name() string { return "ebpf-redirect" }
func (redirectKind) Summary() string {
	return "seed 003's Polycube firewall + pbforwarder: a tc firewall tail-calls a separate forwarder program that redirects by a forwarding map"
}
func (redirectKind) Layer() nf.Layer { return nf.Transparent }

// Usable needs tc programs with bpf_loop, tcx links, and both programs to load and chain.
func (redirectKind) Usable() error { return redirectUsable() }

var redirectUsable = sync.OnceValue(func() error {
	if err := usableHelpers(ebpf.SchedCLS); err != nil {
		return err
	}
	if err := nf.HaveTCX(); err != nil {
		return err
	}
	fw, fwd, err := loadRedirect(oneRule, map[uint32]uint32{1: 1})
	if err != nil {
		return fmt.Errorf("the firewall and forwarder programs do not load on this kernel: %w", err)
	}
	return closeAll(fw, fwd)
})

func closeAll(fw *redirectFwObjects, fwd *redirectFwdObjects) error {
	err1, err2 := fw.Close(), fwd.Close()
	if err1 != nil {
		return err1
	}
	return err2
}

// loadRedirect loads the firewall with a rule set and the forwarder with its forwarding map
// (ingress ifindex -> egress ifindex), and puts the forwarder in the firewall's tail-call slot.
func loadRedirect(rs nf.RuleSet, fwdMap map[uint32]uint32) (*redirectFwObjects, *redirectFwdObjects, error) {
	spec, err := loadRedirectFw()
	if err != nil {
		return nil, nil, err
	}
	if err := setRules(spec, rs); err != nil {
		return nil, nil, err
	}
	var fw redirectFwObjects
	if err := load(spec, &fw); err != nil {
		return nil, nil, fmt.Errorf("firewall: %w", err)
	}
	fwdSpec, err := loadRedirectFwd()
	if err != nil {
		_ = fw.Close()
		return nil, nil, err
	}
	var fwd redirectFwdObjects
	if err := load(fwdSpec, &fwd); err != nil {
		_ = fw.Close()
		return nil, nil, fmt.Errorf("forwarder: %w", err)
	}
	err = fillRules(fw.Rules, rs)
	for in, out := range fwdMap {
		if err == nil {
			err = fwd.Fwd.Update(in, out, ebpf.UpdateAny)
		}
	}
	if err == nil {
		err = fw.Next.Update(uint32(0), fwd.RedirectFwd, ebpf.UpdateAny)
	}
	if err != nil {
		_ = closeAll(&fw, &fwd)
		return nil, nil, err
	}
	return &fw, &fwd, nil
}

// Start loads both programs, maps In to Out and Out to In in the forwarding map, and attaches
// the firewall to the tcx ingress of both.
func (redirectKind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	idx, err := ifindexes(env.NS, env.In, env.Out)
	if err != nil {
		return nil, err
	}
	inst := newInstance(env.BPFDir, "redirect")
	defer func() {
		if err != nil {
			_ = inst.Close()
		}
	}()
	in, out := uint32(idx[0]), uint32(idx[1])
	fw, fwd, err := loadRedirect(rules, map[uint32]uint32{in: out, out: in})
	if err != nil {
		return nil, err
	}
	inst.keep(fw.RedirectFw, fw.Rules, fw.Next, fwd.RedirectFwd, fwd.Fwd)
	for _, p := range []struct {
		o    object
		name string
	}{{fw.RedirectFw, "fw"}, {fw.Rules, "rules"}, {fw.Next, "next"}, {fwd.RedirectFwd, "fwd"}, {fwd.Fwd, "fwd_map"}} {
		if err := inst.pin(p.o, p.name); err != nil {
			return nil, err
		}
	}
	for i, dev := range []string{env.In, env.Out} {
		if err := inst.attachTCX(env.NS, dev, idx[i], fw.RedirectFw); err != nil {
			return nil, err
		}
	}
	if err = ctx.Err(); err != nil {
		return nil, err
	}
	return inst, nil
}
