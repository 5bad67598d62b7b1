package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/policy"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

// CreateNetworkPolicies implements cluster.Cluster: the policies (all in the lab's one
// namespace, named after the prefix) are compiled for every node against the pods of the lab
// now and applied, one transaction per node and engine. Pods created later are not covered
// until policies are programmed again.
func (l *Lab) CreateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	if err := l.policyUsable(); err != nil {
		return err
	}
	l.mu.Lock()
	var added []string
	var err error
	for _, p := range pols {
		if err = l.inLab(&p); err != nil {
			break
		}
		if _, dup := l.policies[p.Name]; dup {
			err = fmt.Errorf("network policy %q already exists", p.Name)
			break
		}
		l.policies[p.Name] = p
		added = append(added, p.Name)
	}
	l.mu.Unlock()
	if err == nil {
		err = l.programPolicies()
	}
	if err != nil {
		l.mu.Lock()
		for _, n := range added {
			delete(l.policies, n)
		}
		l.mu.Unlock()
		if len(added) > 0 {
			_ = l.programPolicies()
		}
		return err
	}
	return nil
}

// policyUsable says whether the lab's policy engine can program policies here.
func (l *Lab) policyUsable() error {
	if err := l.dp.Policy.Usable(); err != nil {
		return cluster.Unsupported("dataplane %s %v", l.dp.Preset.Name, err)
	}
	return nil
}

// inLab gives p the lab's namespace when it names none, and refuses another.
func (l *Lab) inLab(p *networkingv1.NetworkPolicy) error {
	if p.Namespace == "" {
		p.Namespace = l.cfg.Prefix
	}
	if p.Namespace != l.cfg.Prefix {
		return fmt.Errorf("network policy %s: namespace %q: the lab has one namespace (leave it empty)", p.Name, p.Namespace)
	}
	return nil
}

// DeleteNetworkPolicies implements cluster.Cluster.
func (l *Lab) DeleteNetworkPolicies(ctx context.Context, names []string) error {
	l.mu.Lock()
	gone := 0
	for _, n := range names {
		if _, ok := l.policies[n]; ok {
			delete(l.policies, n)
			gone++
		}
	}
	l.mu.Unlock()
	if gone == 0 {
		return nil
	}
	return l.programPolicies()
}

// UpdateNetworkPolicies implements cluster.Cluster: the policies are replaced and programmed
// again, once for the call; if that fails the old ones are put back and programmed again.
func (l *Lab) UpdateNetworkPolicies(ctx context.Context, pols []networkingv1.NetworkPolicy) error {
	if err := l.policyUsable(); err != nil {
		return err
	}
	l.mu.Lock()
	old := map[string]networkingv1.NetworkPolicy{}
	pols = slices.Clone(pols)
	for i := range pols {
		p := &pols[i]
		prev, ok := l.policies[p.Name]
		if err := l.inLab(p); err != nil || !ok {
			l.mu.Unlock()
			return cmp.Or(err, fmt.Errorf("network policy %q does not exist: create it first", p.Name))
		}
		if _, seen := old[p.Name]; !seen {
			old[p.Name] = prev
		}
	}
	for _, p := range pols {
		l.policies[p.Name] = p
	}
	l.mu.Unlock()
	err := l.programPolicies()
	if err != nil {
		l.mu.Lock()
		maps.Copy(l.policies, old)
		l.mu.Unlock()
		err = errors.Join(err, l.programPolicies())
	}
	return err
}

// programPolicies compiles the lab's policies for each node (its own pods get firewall
// chains; sets hold every pod) and applies them there, nodes in parallel.
func (l *Lab) programPolicies() error {
	start := time.Now()
	l.mu.Lock()
	ns := policy.Namespace{Name: l.cfg.Prefix, Labels: map[string]string{"kubernetes.io/metadata.name": l.cfg.Prefix}}
	pols := make([]networkingv1.NetworkPolicy, 0, len(l.policies))
	for _, p := range l.policies {
		pols = append(pols, p)
	}
	sort.Slice(pols, func(i, j int) bool { return pols[i].Name < pols[j].Name })
	pods := make([]policy.Pod, 0, len(l.pods))
	nodeOf := make([]string, 0, len(l.pods))
	for _, p := range l.pods {
		if p.HostNetwork || p.External || p.IP == "" {
			continue
		}
		pp := policy.Pod{Name: p.Name, Namespace: l.cfg.Prefix, IP: p.IP, Labels: p.Labels}
		for _, cp := range p.Ports {
			pp.Ports = append(pp.Ports, policy.NamedPort{Name: cp.Name, Protocol: strings.ToUpper(orDefault(cp.Protocol, "tcp")), Port: cp.Port})
		}
		pods = append(pods, pp)
		nodeOf = append(nodeOf, p.Node)
	}
	l.mu.Unlock()
	if err := l.filtered(); err != nil {
		return err
	}
	var compileMS, renderMS float64
	var total policy.Counts
	partial, _ := l.dp.Policy.(dataplane.PartialPolicy)
	if l.cfg.Sync == SyncFull {
		partial = nil
	}
	if l.polState == nil {
		l.polState = make([]any, len(l.nodes))
	}
	err := l.agentsDo(func(i int) error {
		n := l.nodes[i]
		local := make([]policy.Pod, len(pods))
		for j, p := range pods {
			p.Local = nodeOf[j] == n.name
			local[j] = p
		}
		t0 := time.Now()
		prog, err := policy.Compile(local, []policy.Namespace{ns}, pols)
		if err != nil {
			return err
		}
		t1 := time.Now()
		var r dataplane.Rendering
		var cnt policy.Counts
		var next any
		if partial != nil {
			r, next, cnt = partial.RenderPartial(l.polState[i], prog)
		} else {
			r, cnt = l.dp.Policy.Render(prog)
		}
		t2 := time.Now()
		l.polState[i] = nil // until the rendering is applied, the node's state is unknown
		err = l.dp.Policy.Apply(l.view(n), r)
		l.addTimes(&compileMS, &renderMS, t1.Sub(t0), t2.Sub(t1))
		if err != nil {
			return fmt.Errorf("program policies in %s: %w", n.name, err)
		}
		l.polState[i] = next
		l.progMu.Lock()
		total.Policies += cnt.Policies
		total.PodChains += cnt.PodChains
		total.Sets += cnt.Sets
		total.SetMembers += cnt.SetMembers
		total.Rules += cnt.Rules
		total.Changed += cnt.Changed
		l.progMu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	l.record(map[string]float64{
		"policy_count": float64(len(pols)),
		// Summed over the nodes: each node holds the chains of its own pods.
		"policy_chains_count": float64(total.Policies + total.PodChains), "policy_rules_count": float64(total.Rules),
		"policy_sets_count": float64(total.Sets), "policy_set_members_count": float64(total.SetMembers),
		"policy_changed_count": float64(total.Changed),
		"policy_compile_ms":    compileMS, "policy_render_ms": renderMS,
		"policy_program_ms": float64(time.Since(start).Microseconds()) / 1000,
	})
	return nil
}

// addTimes keeps the slowest node's compile and render times.
func (l *Lab) addTimes(compileMS, renderMS *float64, c, r time.Duration) {
	l.progMu.Lock()
	defer l.progMu.Unlock()
	if ms := float64(c.Microseconds()) / 1000; ms > *compileMS {
		*compileMS = ms
	}
	if ms := float64(r.Microseconds()) / 1000; ms > *renderMS {
		*renderMS = ms
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// policySync is how the lab's policy engine programs changes (Facts): partial only where the
// engine can.
func (l *Lab) policySync() string {
	if _, ok := l.dp.Policy.(dataplane.PartialPolicy); !ok && l.cfg.Sync == SyncPartial {
		return SyncFull + " (the " + l.dp.Policy.Name() + " policy engine has no partial sync)"
	}
	return l.cfg.Sync
}
