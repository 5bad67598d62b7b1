package lab

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab/proxy"
)

// serviceBase is the /16 the lab's ClusterIPs come from (they exist only in the rules).
const serviceBase = "10.96"

// service is a lab Service: its spec, ClusterIP and the endpoint pod IPs it was given.
type service struct {
	spec cluster.ServiceSpec
	n    int // offset of ip in the service range
	ip   string
	eps  []string
}

// allocClusterIP picks a ClusterIP offset (caller holds mu): fresh ones first, then those of
// deleted Services, oldest first, so an address is reused as late as possible (connections
// to a deleted Service may linger in conntrack for a while). The range's first 10 and last
// addresses are kept back, as a cluster keeps .1 for the API server and .10 for DNS.
func (l *Lab) allocClusterIP() (int, bool) {
	if n := 10 + l.svcSeq; n < 1<<16-1 {
		l.svcSeq++
		return n, true
	}
	if len(l.svcFree) == 0 {
		return 0, false
	}
	n := l.svcFree[0]
	l.svcFree = l.svcFree[1:]
	return n, true
}

// CreateServices implements cluster.Cluster: the Services are programmed in every node the
// way the lab's proxy does it, with one rendering and one apply per node, and are ready when it
// returns. Endpoints are the pods matching each selector now.
func (l *Lab) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	if err := l.proxyUsable(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	byLabel := map[string][]*pod{} // "key=value" -> pods, to resolve 10,000 selectors quickly
	for _, p := range l.pods {
		if p.HostNetwork || p.IP == "" {
			continue
		}
		for k, v := range p.Labels {
			byLabel[k+"="+v] = append(byLabel[k+"="+v], p)
		}
	}
	out := make([]cluster.Service, len(specs))
	var added []string
	var err error
	for i, spec := range specs {
		if len(spec.Ports) == 0 {
			err = fmt.Errorf("service %s: no ports", spec.Name)
			break
		}
		if _, dup := l.services[spec.Name]; dup {
			err = fmt.Errorf("service %q already exists", spec.Name)
			break
		}
		n, ok := l.allocClusterIP()
		if !ok {
			err = fmt.Errorf("service %s: the lab's service range %s.0.0/16 is full (%d Services)", spec.Name, serviceBase, len(l.services))
			break
		}
		s := &service{spec: spec, n: n, ip: fmt.Sprintf("%s.%d.%d", serviceBase, n/256, n%256)}
		s.eps = selectIPs(byLabel, spec.Selector)
		l.services[spec.Name] = s
		added = append(added, spec.Name)
		out[i] = cluster.Service{Name: spec.Name, ClusterIP: s.ip, Ports: spec.Ports, Endpoints: s.eps}
	}
	l.mu.Unlock()
	if err == nil {
		err = l.programServices()
	}
	if err != nil {
		l.mu.Lock()
		for _, n := range added {
			l.svcFree = append(l.svcFree, l.services[n].n)
			delete(l.services, n)
		}
		l.mu.Unlock()
		if len(added) > 0 {
			err = errors.Join(err, l.programServices())
		}
		return nil, err
	}
	return out, nil
}

// selectIPs returns the sorted addresses of the pods whose labels include the selector.
func selectIPs(byLabel map[string][]*pod, sel map[string]string) []string {
	if len(sel) == 0 {
		return nil
	}
	var first string
	for k, v := range sel { // the rarest label narrows the candidates most
		if c := k + "=" + v; first == "" || len(byLabel[c]) < len(byLabel[first]) {
			first = c
		}
	}
	var ips []string
	for _, p := range byLabel[first] {
		if cluster.Selects(sel, p.Labels) {
			ips = append(ips, p.IP)
		}
	}
	sort.Strings(ips)
	return ips
}

// DeleteServices implements cluster.Cluster: one reprogramming for all of them.
func (l *Lab) DeleteServices(ctx context.Context, names []string) error {
	l.mu.Lock()
	gone := 0
	for _, n := range names {
		if s, ok := l.services[n]; ok {
			l.svcFree = append(l.svcFree, s.n)
			delete(l.services, n)
			gone++
		}
	}
	l.mu.Unlock()
	if gone == 0 {
		return nil
	}
	return l.programServices()
}

// proxyUsable says whether the lab's proxy can program Services here.
func (l *Lab) proxyUsable() error {
	if err := l.dp.Proxy.Usable(); err != nil {
		return cluster.Unsupported("dataplane %s %v", l.dp.Preset.Name, err)
	}
	return nil
}

// programServices renders every Service of the lab and applies it in every node: one
// iptables-restore (chains of Services gone since the last time are removed) or one nft
// transaction per node. It records what was installed and how long it took.
func (l *Lab) programServices() error {
	start := time.Now()
	l.mu.Lock()
	var svcs []proxy.Service
	for _, s := range l.services {
		for _, p := range s.spec.Ports {
			target := p.TargetPort
			if target == 0 {
				target = p.Port
			}
			ps := proxy.Service{Namespace: l.cfg.Prefix, Name: s.spec.Name, PortName: p.Name, ClusterIP: s.ip, Port: p.Port, Protocol: strings.ToLower(p.Protocol)}
			for _, ip := range s.eps {
				ps.Endpoints = append(ps.Endpoints, proxy.Endpoint{IP: ip, Port: target})
			}
			svcs = append(svcs, ps)
		}
	}
	stale := l.svcChains // what RenderIPTables declares again is not stale
	l.mu.Unlock()
	opt := proxy.Options{ClusterCIDR: l.cfg.ClusterCIDR, ServiceCIDR: serviceBase + ".0.0/16", Stale: stale}
	input, cnt := l.dp.Proxy.Render(svcs, opt)
	rendered := time.Since(start)
	if err := l.filtered(); err != nil {
		return err
	}
	err := cluster.Parallel(context.Background(), len(l.nodes), len(l.nodes), func(i int) error {
		n := l.nodes[i]
		if err := l.dp.Proxy.Apply(nsPath(n.ns), input); err != nil {
			return fmt.Errorf("program Services in %s: %w", n.name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.svcChains = cnt.Names // a rendering that replaces its state whole names none
	l.mu.Unlock()
	l.record(map[string]float64{
		"proxy_services_count": float64(cnt.Services), "proxy_endpoints_count": float64(cnt.Endpoints),
		"proxy_chains_count": float64(cnt.Chains), "proxy_rules_count": float64(cnt.Rules),
		"proxy_render_ms":  float64(rendered.Microseconds()) / 1000,
		"proxy_program_ms": float64(time.Since(start).Microseconds()) / 1000,
	})
	return nil
}

// filtered readies every node, once, for Services and policies that filter pod traffic (the
// attach kind knows what that takes: bridged traffic must pass the IP hooks).
func (l *Lab) filtered() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.filtering {
		return nil
	}
	for _, n := range l.nodes {
		if err := l.dp.Attach.Filtered(l.view(n)); err != nil {
			return err
		}
	}
	l.filtering = true
	return nil
}

// record keeps figures of the last programming for Programmed.
func (l *Lab) record(m map[string]float64) {
	l.progMu.Lock()
	defer l.progMu.Unlock()
	for k, v := range m {
		l.programmed[k] = v
	}
}

// Programmed implements cluster.Cluster: what the last Service and policy programming
// installed in each node, and how long it took.
func (l *Lab) Programmed(ctx context.Context) map[string]float64 {
	l.progMu.Lock()
	defer l.progMu.Unlock()
	out := make(map[string]float64, len(l.programmed))
	for k, v := range l.programmed {
		out[k] = v
	}
	return out
}
