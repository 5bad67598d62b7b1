package bpfdp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/cnibench/cnibench/internal/mounts"
	"github.com/cnibench/cnibench/internal/nf"
)

// Service is one Service port as the load balancer holds it: packets to Addr:Port over Proto
// go to one of the backends, picked at random per connection. A NodePort entry has a node's
// address and a NodePort: its packets are sent on by the FIB, and those to a Remote backend
// get the node's address as their source.
type Service struct {
	Addr     netip.Addr
	Port     uint16
	Proto    string // "tcp" or "udp"
	NodePort bool
	Backends []Backend
}

// Backend is one backend of a Service; Remote says it is on another node.
type Backend struct {
	netip.AddrPort
	Remote bool
}

func (s Service) key() string { return fmt.Sprintf("%s %s %d", s.Proto, s.Addr, s.Port) }

// EncodeServices is the load balancer's table as text, one Service per line, sorted
// ("tcp 10.96.0.10 80 10.244.0.2:8080 10.244.1.2:8080"; a NodePort entry has "nodeport" after
// its port, a remote backend "/remote" after its address): what the proxy engine renders and
// applies in a node.
func EncodeServices(svcs []Service) []byte {
	lines := make([]string, 0, len(svcs))
	for _, s := range svcs {
		var b strings.Builder
		b.WriteString(s.key())
		if s.NodePort {
			b.WriteString(" nodeport")
		}
		for _, be := range s.Backends {
			b.WriteByte(' ')
			b.WriteString(be.String())
			if be.Remote {
				b.WriteString("/remote")
			}
		}
		lines = append(lines, b.String())
	}
	sort.Strings(lines)
	var out bytes.Buffer
	for _, l := range lines {
		out.WriteString(l)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// DecodeServices reads EncodeServices' text.
func DecodeServices(b []byte) ([]Service, error) {
	var out []Service
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 || (f[0] != "tcp" && f[0] != "udp") {
			return nil, fmt.Errorf("line %d: want \"tcp|udp ADDR PORT [nodeport] [BACKEND:PORT[/remote] ...]\", got %q", n, sc.Text())
		}
		addr, err := netip.ParseAddr(f[1])
		if err != nil || !addr.Is4() {
			return nil, fmt.Errorf("line %d: %q is not an IPv4 address", n, f[1])
		}
		port, err := strconv.ParseUint(f[2], 10, 16)
		if err != nil {
			return nil, fmt.Errorf("line %d: port %q: %w", n, f[2], err)
		}
		s := Service{Addr: addr, Port: uint16(port), Proto: f[0]}
		bes := f[3:]
		if len(bes) > 0 && bes[0] == "nodeport" {
			s.NodePort, bes = true, bes[1:]
		}
		for _, e := range bes {
			be := Backend{}
			e, be.Remote = strings.CutSuffix(e, "/remote")
			ap, err := netip.ParseAddrPort(e)
			if err != nil || !ap.Addr().Is4() {
				return nil, fmt.Errorf("line %d: backend %q is not IPv4ADDR:PORT[/remote]", n, e)
			}
			be.AddrPort = ap
			s.Backends = append(s.Backends, be)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// Flags of bpf/lb_maps.h.
const (
	lbSvcNodePort   = 1 // LB_SVC_NODEPORT
	lbBackendRemote = 1 // LB_BE_REMOTE
)

// Pins of the load balancer in a node's directory.
const (
	lbProg     = "svc_lb"
	lbServices = "svc_lb_services"
	lbBackends = "svc_lb_backends"
	lbCT       = "svc_lb_ct4"
	lbRNAT     = "svc_lb_rnat4"
	lbStats    = "svc_lb_stats"
)

// LBUsable says why the load balancer cannot run here (nil when it can): tc programs, tcx
// links (Linux 6.6) and the program loading.
var LBUsable = sync.OnceValue(func() error {
	if err := features.HaveProgramType(ebpf.SchedCLS); err != nil {
		return fmt.Errorf("the kernel cannot load tc BPF programs: %w (needs root, or CAP_BPF and CAP_NET_ADMIN)", err)
	}
	if err := nf.HaveTCX(); err != nil {
		return err
	}
	var objs svcLbObjects
	if err := loadSvcLbObjects(&objs, nil); err != nil {
		return fmt.Errorf("the Service load balancer does not load on this kernel: %w", err)
	}
	return objs.Close()
})

// loadLB loads the node's load balancer and pins it, unless it is pinned already. Caller holds
// the node's lock.
func (n Node) loadLB() error {
	if err := n.mounted(); err != nil {
		return err
	}
	if n.pinned(lbProg) {
		return nil
	}
	spec, err := loadSvcLb()
	if err != nil {
		return err
	}
	var objs svcLbObjects
	if err := loadSpec(spec, &objs); err != nil {
		return err
	}
	defer objs.Close()
	// The program last: its pin says the rest is there.
	if err := n.pinAll(map[string]interface{ Pin(string) error }{lbServices: objs.Services, lbBackends: objs.Backends,
		lbCT: objs.Ct4, lbRNAT: objs.Rnat4, lbStats: objs.LbStats}); err != nil {
		return err
	}
	return objs.SvcLb.Pin(n.path(lbProg))
}

// AttachLB loads the node's load balancer if need be and attaches it first at the tcx ingress
// of the interfaces devs (every interface but loopback and bridges when none is named) that do
// not have it yet.
func (n Node) AttachLB(devs ...string) error {
	defer n.lock()()
	if err := n.loadLB(); err != nil {
		return err
	}
	return n.attachIngress(lbProg, devs)
}

func (n Node) lbMap(name string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(n.path(name), nil)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", name, err)
	}
	return m, nil
}

// svcKey and friends are the C structs of bpf/lb.h (bpf2go's types), in network byte order.
func svcKey(addr netip.Addr, port uint16, proto string) svcLbLbSvcKey {
	k := svcLbLbSvcKey{Addr: be32(addr), Port: be16(port), Proto: 6}
	if proto == "udp" {
		k.Proto = 17
	}
	return k
}

func be32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

func be16(v uint16) uint16 { return binary.NativeEndian.Uint16([]byte{byte(v >> 8), byte(v)}) }

// SetServices makes the node's load balancer hold exactly svcs (loading it if need be):
// backends are written before the Services that count them, then what is no longer wanted is
// deleted. Connections already in the connection table keep their backend.
func (n Node) SetServices(svcs []Service) error {
	defer n.lock()()
	if err := n.loadLB(); err != nil {
		return err
	}
	sm, err := n.lbMap(lbServices)
	if err != nil {
		return err
	}
	defer sm.Close()
	bm, err := n.lbMap(lbBackends)
	if err != nil {
		return err
	}
	defer bm.Close()
	var (
		sk   []svcLbLbSvcKey
		sv   []svcLbLbSvc
		bk   []svcLbLbBackendKey
		bv   []svcLbLbAddr
		want = map[svcLbLbSvcKey]uint32{}
	)
	for _, s := range svcs {
		k := svcKey(s.Addr, s.Port, s.Proto)
		if _, dup := want[k]; dup {
			return fmt.Errorf("service %s twice", s.key())
		}
		want[k] = uint32(len(s.Backends))
		v := svcLbLbSvc{Count: uint32(len(s.Backends))}
		if s.NodePort {
			v.Flags = lbSvcNodePort
		}
		sk, sv = append(sk, k), append(sv, v)
		for i, b := range s.Backends {
			bk = append(bk, svcLbLbBackendKey{Svc: k, Slot: uint32(i)})
			a := svcLbLbAddr{Addr: be32(b.Addr()), Port: be16(b.Port())}
			if b.Remote {
				a.Flags = lbBackendRemote
			}
			bv = append(bv, a)
		}
	}
	if err := batchUpdate(bm, bk, bv); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	if err := batchUpdate(sm, sk, sv); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := deleteWhere(bm, func(b svcLbLbBackendKey) bool { c, ok := want[b.Svc]; return !ok || b.Slot >= c }); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	if err := deleteWhere(sm, func(k svcLbLbSvcKey) bool { _, ok := want[k]; return !ok }); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	return nil
}

// deleteWhere deletes the keys of m for which stale is true.
func deleteWhere[K any](m *ebpf.Map, stale func(K) bool) error {
	var gone []K
	var k K
	var v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		if stale(k) {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk: %w", err)
	}
	for _, k := range gone {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete: %w", err)
		}
	}
	return nil
}

// batchUpdate writes keys/values in one call (element by element where batches are not
// supported).
func batchUpdate[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	n, err := m.BatchUpdate(keys, vals, nil)
	if err == nil && n == len(keys) {
		return nil
	}
	if err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Update(&keys[i], &vals[i], ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return nil
}

// LBStats are the load balancer's counters in one node, summed over CPUs.
type LBStats struct {
	Packets   uint64 // IPv4 TCP/UDP packets looked at
	New       uint64 // connections given a backend
	Forward   uint64 // later packets of those connections DNATed
	Reply     uint64 // replies SNATed back to the Service address
	NoBackend uint64 // packets dropped: their Service has no backend
	NodePort  uint64 // NodePort packets sent on by the FIB (forward and reply)
}

// HasLB and HasSockLB say whether the node's load balancers are loaded.
func (n Node) HasLB() bool     { return n.pinned(lbProg) }
func (n Node) HasSockLB() bool { return n.pinned(sockStats) }

// LBStats reads the node's counters.
func (n Node) LBStats() (LBStats, error) {
	v, err := n.counters(lbStats, 6)
	if err != nil {
		return LBStats{}, err
	}
	return LBStats{Packets: v[0], New: v[1], Forward: v[2], Reply: v[3], NoBackend: v[4], NodePort: v[5]}, nil
}

// Pins of the socket load balancer (bpf/sock_lb.c).
const (
	sockRev   = "sock_lb_rev"
	sockStats = "sock_lb_stats"
)

// Cgroup2 is where the host's cgroup v2 hierarchy is mounted ("" when it is not): the
// cgroups socket programs attach to live there.
var Cgroup2 = sync.OnceValue(func() string {
	for _, m := range mounts.List() {
		if m.Type == "cgroup2" && m.Root == "/" {
			return m.Point
		}
	}
	return ""
})

// SockLBUsable says why the socket load balancer cannot run here (nil when it can).
var SockLBUsable = sync.OnceValue(func() error {
	if Cgroup2() == "" {
		return errors.New("no cgroup v2 hierarchy is mounted (socket load balancing attaches to the cgroup of the pods' processes)")
	}
	if err := features.HaveProgramType(ebpf.CGroupSockAddr); err != nil {
		return fmt.Errorf("the kernel cannot load cgroup/connect4 BPF programs: %w", err)
	}
	var objs sockLbObjects
	if err := loadSockLbObjects(&objs, nil); err != nil {
		return fmt.Errorf("the socket load balancer does not load on this kernel: %w", err)
	}
	return objs.Close()
})

// AttachSockLB loads the node's socket load balancer on the node's Service table (loading the
// per-packet one first if need be) and attaches it to the cgroup v2 directory of the node's
// pod processes, unless it is attached already.
func (n Node) AttachSockLB(cgroup string) error {
	if cgroup == "" {
		return errors.New("no cgroup v2 hierarchy on this host: socket load balancing needs one")
	}
	defer n.lock()()
	if err := n.loadLB(); err != nil {
		return err
	}
	if n.pinned(sockStats) {
		return nil
	}
	spec, err := loadSockLb()
	if err != nil {
		return err
	}
	repl := map[string]*ebpf.Map{}
	for name, pin := range map[string]string{"services": lbServices, "backends": lbBackends} {
		m, err := n.lbMap(pin)
		if err != nil {
			return err
		}
		defer m.Close()
		repl[name] = m
	}
	var objs sockLbObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return fmt.Errorf("load the socket load balancer: %w", err)
	}
	defer objs.Close()
	for _, a := range []struct {
		prog *ebpf.Program
		at   ebpf.AttachType
		name string
	}{{objs.SockConnect4, ebpf.AttachCGroupInet4Connect, "connect4"}, {objs.SockSendmsg4, ebpf.AttachCGroupUDP4Sendmsg, "sendmsg4"},
		{objs.SockRecvmsg4, ebpf.AttachCGroupUDP4Recvmsg, "recvmsg4"}, {objs.SockGetpeername4, ebpf.AttachCgroupInet4GetPeername, "getpeername4"}} {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: a.at, Program: a.prog})
		if err != nil {
			return fmt.Errorf("attach %s to %s: %w", a.name, cgroup, err)
		}
		err = l.Pin(n.path("sock_lb_link_" + a.name))
		_ = l.Close()
		if err != nil {
			return err
		}
	}
	// The counters last: their pin says the rest is there.
	if err := objs.SockRev.Pin(n.path(sockRev)); err != nil {
		return err
	}
	return objs.SockStats.Pin(n.path(sockStats))
}

// SockLBStats are the socket load balancer's counters in one node.
type SockLBStats struct {
	Picked    uint64 // connect()/sendto() to a Service given a backend
	NoBackend uint64 // refused: the Service has no backend
}

// SockLBStats reads the node's counters.
func (n Node) SockLBStats() (SockLBStats, error) {
	v, err := n.counters(sockStats, 2)
	if err != nil {
		return SockLBStats{}, err
	}
	return SockLBStats{Picked: v[0], NoBackend: v[1]}, nil
}
