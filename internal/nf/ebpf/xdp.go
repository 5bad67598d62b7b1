package ebpf

import (
	"context"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/nf"
)

type xdpKind struct{}

func init() { nf.Register(xdpKind{}) }

func (xdpKind) Name() string { return "xdp" }
func (xdpKind) Summary() string {
	return "transparent eBPF firewall in XDP (native, on the veths): allowed frames XDP_REDIRECT to the other interface"
}
func (xdpKind) Layer() nf.Layer { return nf.Transparent }

// Usable needs XDP programs with bpf_loop, and the firewall to load.
func (xdpKind) Usable() error { return xdpUsable() }

var xdpUsable = sync.OnceValue(func() error {
	if err := usableHelpers(ebpf.XDP); err != nil {
		return err
	}
	objs, err := loadXDP(oneRule, xdpFwFwModeMODE_REDIRECT, 1, 1)
	if err != nil {
		return fmt.Errorf("the XDP firewall does not load on this kernel: %w", err)
	}
	return objs.Close()
})

// loadXDP loads the XDP firewall with a rule set, in a mode, redirecting between the
// interfaces in and out (redirect mode).
func loadXDP(rs nf.RuleSet, mode xdpFwFwMode, in, out int) (*xdpFwObjects, error) {
	spec, err := loadXdpFw()
	if err != nil {
		return nil, err
	}
	if err := setRules(spec, rs); err != nil {
		return nil, err
	}
	for name, v := range map[string]any{"mode": mode, "in_ifindex": uint32(in), "out_ifindex": uint32(out)} {
		if err := setVar(spec, name, v); err != nil {
			return nil, err
		}
	}
	var objs xdpFwObjects
	if err := load(spec, &objs); err != nil {
		return nil, err
	}
	if err := fillRules(objs.Rules, rs); err != nil {
		_ = objs.Close()
		return nil, err
	}
	return &objs, nil
}

// startXDP loads the XDP firewall for the interfaces devs of env.NS (redirect mode: exactly
// in and out), pins it under prefix and attaches it to each.
func startXDP(env nf.Env, rs nf.RuleSet, mode xdpFwFwMode, prefix string, devs []string) (_ *instance, err error) {
	idx, err := ifindexes(env.NS, devs...)
	if err != nil {
		return nil, err
	}
	in, out := 0, 0
	if mode == xdpFwFwModeMODE_REDIRECT {
		in, out = idx[0], idx[1]
	}
	inst := newInstance(env.BPFDir, prefix)
	defer func() {
		if err != nil {
			_ = inst.Close()
		}
	}()
	objs, err := loadXDP(rs, mode, in, out)
	if err != nil {
		return nil, err
	}
	inst.keep(objs.XdpFw, objs.Rules)
	if err := inst.pin(objs.XdpFw, "prog"); err != nil {
		return nil, err
	}
	if err := inst.pin(objs.Rules, "rules"); err != nil {
		return nil, err
	}
	if mode == xdpFwFwModeMODE_REDIRECT {
		for _, peer := range []nf.Endpoint{env.InPeer, env.OutPeer} {
			if err := inst.prepareXDPPeer(peer); err != nil {
				return nil, err
			}
		}
	}
	for i, dev := range devs {
		if err := inst.attachXDP(env.NS, dev, idx[i], objs.XdpFw); err != nil {
			return nil, err
		}
	}
	return inst, nil
}

// Start attaches the firewall to env.In and env.Out, each redirecting what the rules allow to
// the other, after switching GRO on for their peers.
func (xdpKind) Start(ctx context.Context, env nf.Env, rules nf.RuleSet) (nf.Instance, error) {
	inst, err := startXDP(env, rules, xdpFwFwModeMODE_REDIRECT, "xdp", []string{env.In, env.Out})
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		_ = inst.Close()
		return nil, err
	}
	return inst, nil
}

// Filter attaches the XDP firewall in pass mode to the interfaces ifaces of env.NS: what the
// rules allow (and ARP) goes on to the stack, or to an AF_PACKET socket on the interface, the
// rest is dropped. It is for kinds that forward in user space (the forwarder then sees only
// allowed frames). Its pins, when env.BPFDir is set, are named filter_* (one Filter per env).
// Close detaches it.
func Filter(env nf.Env, rules nf.RuleSet, ifaces []string) (nf.Instance, error) {
	if len(ifaces) == 0 {
		return nil, fmt.Errorf("xdp filter: no interface")
	}
	if err := xdpUsable(); err != nil {
		return nil, err
	}
	return startXDP(env, rules, xdpFwFwModeMODE_PASS, "filter", ifaces)
}
