package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/proxy"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

// serviceBase is the /16 the lab's ClusterIPs come from (they exist only in the rules).
const serviceBase = "10.96"

// The NodePort range, Kubernetes' default (--service-node-port-range).
const (
	nodePortMin = 30000
	nodePortMax = 32767
)

// allocNodePorts gives every port of a NodePort Service its NodePort (caller holds mu), as
// Kubernetes does: the one asked for when it is in range and no other Service has it, else,
// for a port whose number another port of the Service (another protocol) already has a
// NodePort for, that one, else the lowest free one. It returns the ports and the NodePorts it
// took; asking for a NodePort another Service has is an error wrapping
// cluster.ErrNodePortTaken.
func (l *Lab) allocNodePorts(spec cluster.ServiceSpec) ([]cluster.ServicePort, []int, error) {
	ports := append([]cluster.ServicePort(nil), spec.Ports...)
	if !spec.NodePort {
		for i := range ports {
			ports[i].NodePort = 0
		}
		return ports, nil, nil
	}
	var taken []int
	mine := map[int]bool{}  // NodePorts this Service holds
	byPort := map[int]int{} // Service port number -> its NodePort
	fail := func(err error) ([]cluster.ServicePort, []int, error) {
		for _, n := range taken {
			delete(l.nodePorts, n)
		}
		return nil, nil, fmt.Errorf("service %s: %w", spec.Name, err)
	}
	for i := range ports {
		n := ports[i].NodePort
		switch {
		case n != 0 && (n < nodePortMin || n > nodePortMax):
			return fail(fmt.Errorf("nodePort %d is outside %d-%d", n, nodePortMin, nodePortMax))
		case n != 0 && l.nodePorts[n] && !mine[n]:
			return fail(fmt.Errorf("nodePort %d: %w", n, cluster.ErrNodePortTaken))
		case n == 0 && byPort[ports[i].Port] != 0:
			n = byPort[ports[i].Port]
		case n == 0:
			for n = nodePortMin; n <= nodePortMax && l.nodePorts[n]; n++ {
			}
			if n > nodePortMax {
				return fail(fmt.Errorf("no free nodePort in %d-%d", nodePortMin, nodePortMax))
			}
		}
		if !mine[n] {
			mine[n] = true
			l.nodePorts[n] = true
			taken = append(taken, n)
		}
		byPort[ports[i].Port] = n
		ports[i].NodePort = n
	}
	return ports, taken, nil
}

// service is a lab Service: its spec, ClusterIP and its endpoints, the addresses of the pods
// its selector picks (sorted; kept up to date by endpoint following, endpoints.go).
type service struct {
	spec cluster.ServiceSpec
	n    int // offset of ip in the service range
	ip   string
	eps  []string
	// proxied is what the proxy is given for the Service (a proxy.Service per port) as of
	// proxiedEps; programServices makes it again when eps are others.
	proxied    []proxy.Service
	proxiedEps []string
}

// insertService adds s to l.svcOrder, in name order (caller holds mu).
func (l *Lab) insertService(s *service) {
	i, _ := slices.BinarySearchFunc(l.svcOrder, s.spec.Name, func(o *service, name string) int { return strings.Compare(o.spec.Name, name) })
	l.svcOrder = slices.Insert(l.svcOrder, i, s)
}

// proxiedFresh says whether s.proxied is up to date (caller holds mu).
func (s *service) proxiedFresh() bool { return s.proxied != nil && slices.Equal(s.proxiedEps, s.eps) }

// proxiedNow returns s.proxied, made again if s's endpoints changed since (caller holds mu);
// nodeOf gives an endpoint's node by its address.
func (s *service) proxiedNow(prefix string, nodeOf func(ip string) string) []proxy.Service {
	if s.proxiedFresh() {
		return s.proxied
	}
	out := make([]proxy.Service, 0, len(s.spec.Ports))
	for _, p := range s.spec.Ports {
		target := p.TargetPort
		if target == 0 {
			target = p.Port
		}
		ps := proxy.Service{Namespace: prefix, Name: s.spec.Name, PortName: p.Name, ClusterIP: s.ip, Port: p.Port,
			Protocol: strings.ToLower(p.Protocol), NodePort: p.NodePort, ExternalLocal: s.spec.NodePort && s.spec.ExternalLocal}
		for _, ip := range s.eps {
			ps.Endpoints = append(ps.Endpoints, proxy.Endpoint{IP: ip, Port: target, Node: nodeOf(ip)})
		}
		out = append(out, ps)
	}
	s.proxied, s.proxiedEps = out, s.eps
	return out
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

// takeClusterIP gives a Service the ClusterIP it asks for (caller holds mu): one the lab
// handed out before and no Service holds now (a deleted Service's), so that the sequential
// allocation never hands it out again while it is in use.
func (l *Lab) takeClusterIP(ip string) (int, error) {
	var a, b int
	if _, err := fmt.Sscanf(ip, serviceBase+".%d.%d", &a, &b); err != nil || a > 255 || b > 255 || fmt.Sprintf("%s.%d.%d", serviceBase, a, b) != ip {
		return 0, fmt.Errorf("ClusterIP %q is not in the lab's service range %s.0.0/16", ip, serviceBase)
	}
	n := a*256 + b
	i := slices.Index(l.svcFree, n)
	if i < 0 {
		return 0, fmt.Errorf("ClusterIP %s is not free: ask only for the address of a deleted Service", ip)
	}
	l.svcFree = slices.Delete(l.svcFree, i, i+1)
	return n, nil
}

// CreateServices implements cluster.Cluster: the Services are programmed in every node the
// way the lab's proxy does it, with one rendering and one apply per node, and are ready when it
// returns. Endpoints are the pods matching each selector now; pods created or deleted later
// join or leave them (endpoint following, endpoints.go).
func (l *Lab) CreateServices(ctx context.Context, specs []cluster.ServiceSpec) ([]cluster.Service, error) {
	if err := l.proxyUsable(); err != nil {
		return nil, err
	}
	for _, spec := range specs {
		if spec.NodePort {
			if err := l.NodePorts(); err != nil {
				return nil, err
			}
			break
		}
	}
	l.mu.Lock()
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
		var n int
		var ok bool
		if spec.ClusterIP != "" {
			var terr error
			if n, terr = l.takeClusterIP(spec.ClusterIP); terr != nil {
				err = fmt.Errorf("service %s: %w", spec.Name, terr)
				break
			}
		} else if n, ok = l.allocClusterIP(); !ok {
			err = fmt.Errorf("service %s: the lab's service range %s.0.0/16 is full (%d Services)", spec.Name, serviceBase, len(l.services))
			break
		}
		ports, _, perr := l.allocNodePorts(spec)
		if perr != nil {
			l.svcFree = append(l.svcFree, n)
			err = perr
			break
		}
		spec.Ports = ports
		s := &service{spec: spec, n: n, ip: fmt.Sprintf("%s.%d.%d", serviceBase, n/256, n%256)}
		s.eps = l.selectIPs(spec.Selector)
		l.services[spec.Name] = s
		l.insertService(s)
		added = append(added, spec.Name)
		out[i] = cluster.Service{Name: spec.Name, ClusterIP: s.ip, Ports: ports, Endpoints: s.eps}
	}
	l.mu.Unlock()
	if err == nil {
		err = l.programServices()
	}
	if err != nil {
		l.mu.Lock()
		for _, n := range added {
			l.forgetService(n)
		}
		l.mu.Unlock()
		if len(added) > 0 {
			err = errors.Join(err, l.programServices())
		}
		return nil, err
	}
	return out, nil
}

// forgetService removes a Service and frees its ClusterIP and NodePorts (caller holds mu);
// false when there is no such Service.
func (l *Lab) forgetService(name string) bool {
	s, ok := l.services[name]
	if !ok {
		return false
	}
	l.svcFree = append(l.svcFree, s.n)
	for _, p := range s.spec.Ports {
		delete(l.nodePorts, p.NodePort)
	}
	delete(l.services, name)
	if i := slices.Index(l.svcOrder, s); i >= 0 {
		l.svcOrder = slices.Delete(l.svcOrder, i, i+1)
	}
	return true
}

// selectIPs returns the sorted addresses of the endpoint candidates whose labels include the
// selector, looked for among the pods with the selector's rarest label (caller holds mu).
func (l *Lab) selectIPs(sel map[string]string) []string {
	if len(sel) == 0 {
		return nil
	}
	var rarest map[*pod]bool
	for k, v := range sel {
		c := l.byLabel[k+"="+v]
		if len(c) == 0 {
			return nil // no pod has this label
		}
		if rarest == nil || len(c) < len(rarest) {
			rarest = c
		}
	}
	var ips []string
	for p := range rarest {
		if endpointCandidate(p) && cluster.Selects(sel, p.Labels) {
			ips = append(ips, p.IP)
		}
	}
	sort.Strings(ips)
	return ips
}

// indexLabels adds p to l.byLabel (add) or takes it out (caller holds mu).
func (l *Lab) indexLabels(p *pod, add bool) {
	for k, v := range p.Labels {
		kv := k + "=" + v
		switch {
		case add && l.byLabel[kv] == nil:
			l.byLabel[kv] = map[*pod]bool{p: true}
		case add:
			l.byLabel[kv][p] = true
		default:
			if delete(l.byLabel[kv], p); len(l.byLabel[kv]) == 0 {
				delete(l.byLabel, kv)
			}
		}
	}
}

// DeleteServices implements cluster.Cluster: one reprogramming for all of them.
func (l *Lab) DeleteServices(ctx context.Context, names []string) error {
	l.mu.Lock()
	gone := 0
	for _, n := range names {
		if l.forgetService(n) {
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

// programServices renders the lab's Services for every node and applies each rendering in
// its node: one iptables-restore (chains of Services gone since the last time are removed) or
// one nft transaction per node. A rendering is per node: NodePorts are served on the node's
// address, and externalTrafficPolicy Local sends them only to the node's own endpoints. It
// records what node0 holds and how long it all took, and tells the endpoint tracks when each
// node holds their Service's endpoints. Programmings follow one another.
func (l *Lab) programServices() error {
	l.svcProg.Lock()
	defer l.svcProg.Unlock()
	start := time.Now()
	l.mu.Lock()
	tracked := l.trackedEndpoints()
	// Services in name order, each as it was last time unless its endpoints changed: the
	// partial renderings sort them (already sorted, that is a pass) and compare them with
	// their previous ones, and a change of one Service among 10,000 costs little.
	svcs := make([]proxy.Service, 0, len(l.svcOrder))
	for _, s := range l.svcOrder {
		svcs = append(svcs, s.proxiedNow(l.cfg.Prefix, l.nodeOfIP)...)
	}
	if len(l.svcChains) != len(l.nodes) {
		l.svcChains = make([][]string, len(l.nodes))
	}
	stale := slices.Clone(l.svcChains) // a node's chains that a rendering does not declare again are stale
	l.mu.Unlock()
	if err := l.filtered(); err != nil {
		return err
	}
	counts := make([]proxy.Counts, len(l.nodes))
	var renderMS float64
	var mu sync.Mutex
	partial, _ := l.dp.Proxy.(dataplane.PartialProxy)
	if l.cfg.Sync == SyncFull {
		partial = nil
	}
	if l.svcState == nil {
		l.svcState = make([]any, len(l.nodes))
	}
	err := l.agentsDo(func(i int) error {
		n := l.nodes[i]
		t0 := time.Now()
		opt := proxy.Options{ClusterCIDR: l.cfg.ClusterCIDR, ServiceCIDR: serviceBase + ".0.0/16", Stale: stale[i],
			NodeName: n.name, NodeIPs: []string{n.ip.String()}}
		var input []byte
		var cnt proxy.Counts
		var next any
		if partial != nil {
			input, next, cnt = partial.RenderPartial(l.svcState[i], svcs, opt)
		} else {
			input, cnt = l.dp.Proxy.Render(svcs, opt)
		}
		mu.Lock()
		renderMS = max(renderMS, float64(time.Since(t0).Microseconds())/1000)
		counts[i] = cnt
		mu.Unlock()
		l.svcState[i] = nil // until the rendering is applied, the node's state is unknown
		if err := l.dp.Proxy.Apply(l.view(n), input); err != nil {
			return fmt.Errorf("program Services in %s: %w", n.name, err)
		}
		l.svcState[i] = next
		l.mu.Lock()
		l.svcChains[i] = cnt.Names
		l.mu.Unlock()
		at := time.Now()
		for tr, eps := range tracked {
			tr.programmed(n.name, eps, at)
		}
		return nil
	})
	if err != nil {
		return err
	}
	cnt := counts[0]
	l.record(map[string]float64{
		"proxy_services_count": float64(cnt.Services), "proxy_endpoints_count": float64(cnt.Endpoints),
		"proxy_chains_count": float64(cnt.Chains), "proxy_rules_count": float64(cnt.Rules),
		"proxy_changed_count": float64(cnt.Changed),
		"proxy_render_ms":     renderMS,
		"proxy_program_ms":    float64(time.Since(start).Microseconds()) / 1000,
	})
	return nil
}

// proxySync is how the lab's proxy programs changes (Facts): partial only where the proxy can.
func (l *Lab) proxySync() string {
	if _, ok := l.dp.Proxy.(dataplane.PartialProxy); !ok && l.cfg.Sync == SyncPartial {
		return SyncFull + " (the " + l.dp.Proxy.Name() + " proxy has no partial sync)"
	}
	return l.cfg.Sync
}

// nodePortServer is what a proxy engine that may not serve NodePort Services says about it. An
// engine without the method serves them (kube-proxy's iptables and nftables layouts program
// them on every node); one whose method says false programs ClusterIPs only, and the lab
// reports NodePort cases on it as skipped.
type nodePortServer interface {
	ServesNodePorts() bool
}

var _ cluster.NodePortChecker = (*Lab)(nil)

// NodePorts implements cluster.NodePortChecker: the lab serves NodePort Services where its
// proxy engine programs Services here at all and does not say it lacks NodePorts.
func (l *Lab) NodePorts() error {
	if err := l.proxyUsable(); err != nil {
		return err
	}
	if s, ok := l.dp.Proxy.(nodePortServer); ok && !s.ServesNodePorts() {
		return cluster.Unsupported("proxy %s does not serve NodePorts (yet): it programs ClusterIPs only", l.dp.Proxy.Name())
	}
	return nil
}
