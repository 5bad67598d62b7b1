package ebpf

import (
	"context"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/nf"
)

type tcKind struct{}

func init() { nf.Register(tcKind{}) }

func (tcKind) Name() string { return "ebpf-tc" }
func (tcKind) Summary() string {
	return "transparent eBPF firewall at tc ingress (tcx): allowed packets bpf_redirect to the other interface"
}
func (tcKind) Layer() nf.Layer { return nf.Transparent }

// Usable needs tc programs with bpf_loop, tcx links, and the firewall to load.
func (tcKind) Usable() error { return tcUsable() }

var tcUsable = sync.OnceValue(func() error {
	if err := usableHelpers(ebpf.SchedCLS); err != nil {
		return err
	}
	if err := nf.HaveTCX(); err != nil {
		return err
	}
	objs, err := loadTC(oneRule, 1, 1)
	if err != nil {
		return fmt.Errorf("the tc firewall does not load on this kernel: %w", err)
	}
	return objs.Close()
})

// loadTC loads the tc firewall with a rule set, redirecting between the interfaces in and out.
func loadTC(rs nf.RuleSet, in, out int) (*tcFwObjects, error) {
	spec, err := loadTcFw()
	if err != nil {
		return nil, err
	}
	if err := setRules(spec, rs); err != nil {
		return nil, err
	}
	if err := setVar(spec, "in_ifindex", uint32(in)); err != nil {
		return nil, err
	}
	if err := setVar(spec, "out_ifindex", uint32(out)); err != nil {
		return nil, err
	}
	var objs tcFwObjects
	if err := load(spec, &objs); err != nil {
		return nil, err
	}
	if err := fillRules(objs.Rules, rs); err != nil {
		_ = objs.Close()
		return nil, err
	}
	return &objs, nil
}

// Start attaches the firewall to the tcx ingress of env.In and env.Out.
func (tcKind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (_ nf.Instance, err error) {
	idx, err := ifindexes(env.NS, env.In, env.Out)
	if err != nil {
		return nil, err
	}
	inst := newInstance(env.BPFDir, "tc")
	defer func() {
		if err != nil {
			_ = inst.Close()
		}
	}()
	objs, err := loadTC(rules, idx[0], idx[1])
	if err != nil {
		return nil, err
	}
	inst.keep(objs.TcFw, objs.Rules)
	if err := inst.pin(objs.TcFw, "prog"); err != nil {
		return nil, err
	}
	if err := inst.pin(objs.Rules, "rules"); err != nil {
		return nil, err
	}
	for i, dev := range []string{env.In, env.Out} {
		if err := inst.attachTCX(env.NS, dev, idx[i], objs.TcFw); err != nil {
			return nil, err
		}
	}
	if err = ctx.Err(); err != nil {
		return nil, err
	}
	return inst, nil
}
