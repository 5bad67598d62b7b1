package lab

import (
	"context"
	"fmt"
	"sort"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab/proxy"
)

// serviceBase is the /16 the lab's ClusterIPs come from (they exist only in the rules).
const serviceBase = "10.96"

// service is a lab Service: its spec, ClusterIP and the endpoint pod IPs it was given.
type service struct {
	spec cluster.ServiceSpec
	ip   string
	eps  []string
}

// CreateService implements cluster.Cluster: the Service is programmed in every node the way
// the preset's proxy does it (kube-proxy's iptables layout) and is ready when it returns.
func (l *Lab) CreateService(ctx context.Context, spec cluster.ServiceSpec) (cluster.Service, error) {
	if l.preset.Proxy != "iptables" {
		return cluster.Service{}, cluster.Unsupported("dataplane %s: Service implementation %q is not built in the lab yet", l.preset.Name, l.preset.Proxy)
	}
	if len(spec.Ports) == 0 {
		return cluster.Service{}, fmt.Errorf("service %s: no ports", spec.Name)
	}
	l.mu.Lock()
	if _, dup := l.services[spec.Name]; dup {
		l.mu.Unlock()
		return cluster.Service{}, fmt.Errorf("service %q already exists", spec.Name)
	}
	n := 10 + l.svcSeq
	l.svcSeq++
	s := &service{spec: spec, ip: fmt.Sprintf("%s.%d.%d", serviceBase, n/256, n%256)}
	for _, p := range l.pods {
		if !p.HostNetwork && p.IP != "" && cluster.Selects(spec.Selector, p.Labels) {
			s.eps = append(s.eps, p.IP)
		}
	}
	sort.Strings(s.eps)
	l.services[spec.Name] = s
	l.mu.Unlock()
	if err := l.programServices(); err != nil {
		l.mu.Lock()
		delete(l.services, spec.Name)
		l.mu.Unlock()
		return cluster.Service{}, err
	}
	return cluster.Service{Name: spec.Name, ClusterIP: s.ip, Ports: spec.Ports, Endpoints: s.eps}, nil
}

// DeleteService implements cluster.Cluster.
func (l *Lab) DeleteService(ctx context.Context, name string) error {
	l.mu.Lock()
	_, ok := l.services[name]
	delete(l.services, name)
	l.mu.Unlock()
	if !ok {
		return nil
	}
	return l.programServices()
}

// programServices renders every Service of the lab and applies it in every node with one
// iptables-restore (chains of Services gone since the last time are removed).
func (l *Lab) programServices() error {
	l.mu.Lock()
	var svcs []proxy.Service
	for _, s := range l.services {
		for _, p := range s.spec.Ports {
			target := p.TargetPort
			if target == 0 {
				target = p.Port
			}
			ps := proxy.Service{Namespace: l.cfg.Prefix, Name: s.spec.Name, PortName: p.Name, ClusterIP: s.ip, Port: p.Port, Protocol: p.Protocol}
			for _, ip := range s.eps {
				ps.Endpoints = append(ps.Endpoints, proxy.Endpoint{IP: ip, Port: target})
			}
			svcs = append(svcs, ps)
		}
	}
	stale := l.svcChains // what RenderIPTables declares again is not stale
	l.mu.Unlock()
	input, cnt := proxy.RenderIPTables(svcs, proxy.Options{ClusterCIDR: l.cfg.ClusterCIDR, Stale: stale})
	for _, n := range l.nodes {
		if l.preset.Attach == "bridge" && !l.brNetfilter {
			// kube-proxy needs bridged pod-to-pod traffic to pass iptables (replies of DNATed
			// connections between pods on one bridge).
			if err := writeSysctl(n.ns, "net/bridge/bridge-nf-call-iptables", "1"); err != nil {
				return err
			}
		}
		if err := proxy.ApplyIPTables(nsPath(n.ns), "nft", input); err != nil {
			return fmt.Errorf("program Services in %s: %w", n.name, err)
		}
	}
	l.mu.Lock()
	l.brNetfilter = true
	l.svcChains = cnt.Names
	l.mu.Unlock()
	return nil
}
