package bpfdp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
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

func (s Service) key() string { return s.Key().String() }

// ServiceKey names a Service in a load balancer's table, as the table's map key does: writing a
// Service of the same key replaces the entry, NodePort or not.
type ServiceKey struct {
	Addr  netip.Addr
	Port  uint16
	Proto string // "tcp" or "udp"
}

// Key is the Service's key in its table.
func (s Service) Key() ServiceKey { return ServiceKey{Addr: s.Addr, Port: s.Port, Proto: s.Proto} }

func (k ServiceKey) String() string { return fmt.Sprintf("%s %s %d", k.Proto, k.Addr, k.Port) }

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
	err := eachLine(b, func(n int, f []string, line string) error {
		s, err := parseService(n, f, line)
		out = append(out, s)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachLine calls fn with the fields of each non-blank line of b, numbered from 1.
func eachLine(b []byte, fn func(n int, f []string, line string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for n := 1; sc.Scan(); n++ {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			if err := fn(n, f, sc.Text()); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// parseKey reads the "tcp|udp ADDR PORT" a Service's line starts with (line n, fields f).
func parseKey(n int, f []string, line string) (ServiceKey, error) {
	if len(f) < 3 || (f[0] != "tcp" && f[0] != "udp") {
		return ServiceKey{}, fmt.Errorf("line %d: want \"tcp|udp ADDR PORT [nodeport] [BACKEND:PORT[/remote] ...]\", got %q", n, line)
	}
	addr, err := netip.ParseAddr(f[1])
	if err != nil || !addr.Is4() {
		return ServiceKey{}, fmt.Errorf("line %d: %q is not an IPv4 address", n, f[1])
	}
	port, err := strconv.ParseUint(f[2], 10, 16)
	if err != nil {
		return ServiceKey{}, fmt.Errorf("line %d: port %q: %w", n, f[2], err)
	}
	return ServiceKey{Addr: addr, Port: uint16(port), Proto: f[0]}, nil
}

// parseService reads one Service line of EncodeServices' text.
func parseService(n int, f []string, line string) (Service, error) {
	k, err := parseKey(n, f, line)
	if err != nil {
		return Service{}, err
	}
	s := Service{Addr: k.Addr, Port: k.Port, Proto: k.Proto}
	bes := f[3:]
	if len(bes) > 0 && bes[0] == "nodeport" {
		s.NodePort, bes = true, bes[1:]
	}
	for _, e := range bes {
		be := Backend{}
		e, be.Remote = strings.CutSuffix(e, "/remote")
		ap, err := netip.ParseAddrPort(e)
		if err != nil || !ap.Addr().Is4() {
			return Service{}, fmt.Errorf("line %d: backend %q is not IPv4ADDR:PORT[/remote]", n, e)
		}
		be.AddrPort = ap
		s.Backends = append(s.Backends, be)
	}
	return s, nil
}

// ServiceChange is a change to a load balancer's table, what a partial rendering programs:
// the Services of Upsert are written whole (their entry and every backend slot, slots beyond
// their backends deleted), the Services Remove names are deleted with their slots. The rest
// of the table is left alone.
type ServiceChange struct {
	Upsert []Service
	Remove []ServiceKey
}

// partialHeader is the first line of EncodeServiceChange's text: what tells it from a full
// table, and what DecodeServices (which wants a Service on every line) refuses.
const partialHeader = "partial"

// EncodeServiceChange is a change as text: a first line "partial", then the upserted Services
// in EncodeServices' format and a line "- tcp|udp ADDR PORT" per removed Service, sorted.
func EncodeServiceChange(c ServiceChange) []byte {
	var out bytes.Buffer
	out.WriteString(partialHeader + "\n")
	lines := make([]string, 0, len(c.Remove))
	for _, k := range c.Remove {
		lines = append(lines, "- "+k.String()+"\n")
	}
	sort.Strings(lines)
	for _, l := range lines {
		out.WriteString(l)
	}
	out.Write(EncodeServices(c.Upsert))
	return out.Bytes()
}

// DecodeServiceInput reads either text the proxy engine applies: a full table
// (EncodeServices; partial false, the Services in c.Upsert) or a change (EncodeServiceChange;
// partial true).
func DecodeServiceInput(b []byte) (c ServiceChange, partial bool, err error) {
	first := true
	err = eachLine(b, func(n int, f []string, line string) error {
		if first {
			first = false
			if len(f) == 1 && f[0] == partialHeader {
				partial = true
				return nil
			}
		}
		if partial && f[0] == "-" {
			if len(f) != 4 {
				return fmt.Errorf("line %d: want \"- tcp|udp ADDR PORT\", got %q", n, line)
			}
			k, err := parseKey(n, f[1:], line)
			c.Remove = append(c.Remove, k)
			return err
		}
		s, err := parseService(n, f, line)
		c.Upsert = append(c.Upsert, s)
		return err
	})
	if err != nil {
		return ServiceChange{}, false, err
	}
	return c, partial, nil
}

// ServiceTable is a load balancer's table as a rendering left it, by key: what the next
// partial rendering is the difference from.
type ServiceTable map[ServiceKey]Service

// NewServiceTable is the table of svcs; an error when a key comes twice (SetServices refuses
// such a table).
func NewServiceTable(svcs []Service) (ServiceTable, error) {
	t := make(ServiceTable, len(svcs))
	for _, s := range svcs {
		if _, dup := t[s.Key()]; dup {
			return nil, fmt.Errorf("service %s twice", s.key())
		}
		t[s.Key()] = s
	}
	return t, nil
}

// Diff is the change that turns t into svcs, svcs' table, and the map elements the change
// writes or deletes (an upserted Service's entry and backend slots, the slots it no longer
// has; a removed Service's entry and slots). A Service whose NodePort flag or backends (in
// their order: backend i is slot i) differ is upserted; upserts come in svcs' order,
// removals sorted. An error when a key of svcs comes twice.
func (t ServiceTable) Diff(svcs []Service) (c ServiceChange, next ServiceTable, touched int, err error) {
	next, err = NewServiceTable(svcs)
	if err != nil {
		return ServiceChange{}, nil, 0, err
	}
	for _, s := range svcs {
		old, ok := t[s.Key()]
		if ok && old.NodePort == s.NodePort && slices.Equal(old.Backends, s.Backends) {
			continue
		}
		c.Upsert = append(c.Upsert, s)
		touched += 1 + max(len(s.Backends), len(old.Backends))
	}
	for k, old := range t {
		if _, ok := next[k]; !ok {
			c.Remove = append(c.Remove, k)
			touched += 1 + len(old.Backends)
		}
	}
	slices.SortFunc(c.Remove, ServiceKey.compare)
	return c, next, touched, nil
}

func (k ServiceKey) compare(o ServiceKey) int {
	if c := strings.Compare(k.Proto, o.Proto); c != 0 {
		return c
	}
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	return int(k.Port) - int(o.Port)
}

// ServiceLoopback is the source address the eBPF Service load balancers (svc_lb, bpf/lb.h; the
// polycube ILB, bpf/polycube.h) give a hairpin connection, a pod reaching a Service that picked
// that pod itself as the backend: with its own address as both source and destination the
// pod's stack would drop the packet as a martian. It is Cilium's default service loopback
// address (--ipv4-service-loopback-address): its tc load balancer source-NATs hairpin traffic
// to it the same way. The pods route it by their default route, so the replies come back
// through the load balancer, which turns them into Service -> pod again. The loaders write it
// into the programs (lb_loopback, svc_loopback).
var ServiceLoopback = netip.AddrFrom4([4]byte{169, 254, 42, 1})

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
	if err := spec.Variables["lb_loopback"].Set(be32(ServiceLoopback)); err != nil {
		return fmt.Errorf("set lb_loopback: %w", err)
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

// SetServices makes the node's load balancer hold exactly svcs (loading it if need be):
// backends are written before the Services that count them, then what is no longer wanted is
// deleted (setTable). Connections already in the connection table keep their backend. Its
// cost grows with the whole table (every entry is written, both maps are walked); a change of
// a few Services is ChangeServices'.
func (n Node) SetServices(svcs []Service) error {
	defer n.lock()()
	if err := n.loadLB(); err != nil {
		return err
	}
	sm, bm, err := n.lbMaps()
	if err != nil {
		return err
	}
	defer sm.Close()
	defer bm.Close()
	return setTable(sm, bm, lbTable, svcs)
}

// ChangeServices applies a change to the node's load balancer (changeTable): only the
// Services it names are written or deleted, so its cost is the change's, whatever the size of
// the table. The load balancer must be loaded already: a change is meaningful only against
// the table it was rendered from, which a node without one does not hold.
func (n Node) ChangeServices(c ServiceChange) error {
	defer n.lock()()
	if !n.pinned(lbProg) {
		return fmt.Errorf("node %s has no Service load balancer to change", n.NS)
	}
	sm, bm, err := n.lbMaps()
	if err != nil {
		return err
	}
	defer sm.Close()
	defer bm.Close()
	return changeTable(sm, bm, lbTable, c.Upsert, c.Remove)
}

// lbMaps opens the node's Service and backend maps.
func (n Node) lbMaps() (sm, bm *ebpf.Map, err error) {
	if sm, err = n.lbMap(lbServices); err != nil {
		return nil, nil, err
	}
	if bm, err = n.lbMap(lbBackends); err != nil {
		sm.Close()
		return nil, nil, err
	}
	return sm, bm, nil
}

// tableLayout is how a load balancer's two maps hold Services: an entry per Service (its
// backend count, flags) and one per backend slot (0..count-1), picked at random per
// connection. The svc_lb's maps (bpf/lb_maps.h) and the polycube ILB's and ELB's
// (bpf/polycube.h) differ in their Go types and flags only, so that one writer of each kind
// (setTable, changeTable) serves them all.
type tableLayout[SK comparable, SV, BK, BV any] struct {
	key     func(ServiceKey) SK
	svc     func(Service) SV
	count   func(SV) uint32
	slot    func(k SK, i uint32) BK
	unslot  func(BK) (SK, uint32)
	backend func(Backend) BV
}

// lbTable is the svc_lb's layout.
var lbTable = tableLayout[svcLbLbSvcKey, svcLbLbSvc, svcLbLbBackendKey, svcLbLbAddr]{
	key: func(k ServiceKey) svcLbLbSvcKey { return svcKey(k.Addr, k.Port, k.Proto) },
	svc: func(s Service) svcLbLbSvc {
		v := svcLbLbSvc{Count: uint32(len(s.Backends))}
		if s.NodePort {
			v.Flags = lbSvcNodePort
		}
		return v
	},
	count:  func(v svcLbLbSvc) uint32 { return v.Count },
	slot:   func(k svcLbLbSvcKey, i uint32) svcLbLbBackendKey { return svcLbLbBackendKey{Svc: k, Slot: i} },
	unslot: func(b svcLbLbBackendKey) (svcLbLbSvcKey, uint32) { return b.Svc, b.Slot },
	backend: func(b Backend) svcLbLbAddr {
		a := svcLbLbAddr{Addr: be32(b.Addr()), Port: be16(b.Port())}
		if b.Remote {
			a.Flags = lbBackendRemote
		}
		return a
	},
}

// setTable makes a load balancer's maps hold exactly svcs. The order keeps packets in flight
// from picking a slot that is not there: backends first, then the Services whose counts now
// cover them; then the Services no longer wanted (their packets are no Service's any more),
// and last the slots no count covers.
func setTable[SK comparable, SV, BK, BV any](sm, bm *ebpf.Map, l tableLayout[SK, SV, BK, BV], svcs []Service) error {
	var (
		sk   = make([]SK, 0, len(svcs))
		sv   = make([]SV, 0, len(svcs))
		bk   []BK
		bv   []BV
		want = make(map[SK]uint32, len(svcs))
	)
	for _, s := range svcs {
		k := l.key(s.Key())
		if _, dup := want[k]; dup {
			return fmt.Errorf("service %s twice", s.key())
		}
		want[k] = uint32(len(s.Backends))
		sk, sv = append(sk, k), append(sv, l.svc(s))
		for i, b := range s.Backends {
			bk, bv = append(bk, l.slot(k, uint32(i))), append(bv, l.backend(b))
		}
	}
	if err := batchUpdate(bm, bk, bv); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	if err := batchUpdate(sm, sk, sv); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := deleteWhere(sm, func(k SK) bool { _, ok := want[k]; return !ok }); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := deleteWhere(bm, func(b BK) bool { k, i := l.unslot(b); c, ok := want[k]; return !ok || i >= c }); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	return nil
}

// changeTable writes the Services of upsert and deletes those remove names, touching no other
// entry: the maps are never walked, the counts of the Services changed are read from the
// Service map (one lookup each), so that the slots a Service no longer has are known. The
// order is setTable's: the backend slots, then the Services whose counts now cover them; then
// the removed Services, and last the slots no count covers any more (the slots beyond a
// shrunk count, those of the removed Services). A key named twice is an error, and nothing is
// written then.
func changeTable[SK comparable, SV, BK, BV any](sm, bm *ebpf.Map, l tableLayout[SK, SV, BK, BV], upsert []Service, remove []ServiceKey) error {
	var (
		sk    = make([]SK, 0, len(upsert))
		sv    = make([]SV, 0, len(upsert))
		gone  = make([]SK, 0, len(remove))
		bk    []BK
		bv    []BV
		stale []BK
		seen  = make(map[SK]bool, len(upsert)+len(remove))
	)
	count := func(k SK) (uint32, error) {
		var v SV
		if err := sm.Lookup(&k, &v); errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, nil
		} else if err != nil {
			return 0, fmt.Errorf("services: lookup: %w", err)
		}
		return l.count(v), nil
	}
	for _, s := range upsert {
		k := l.key(s.Key())
		if seen[k] {
			return fmt.Errorf("service %s twice", s.key())
		}
		seen[k] = true
		had, err := count(k)
		if err != nil {
			return err
		}
		sk, sv = append(sk, k), append(sv, l.svc(s))
		for i, b := range s.Backends {
			bk, bv = append(bk, l.slot(k, uint32(i))), append(bv, l.backend(b))
		}
		for i := uint32(len(s.Backends)); i < had; i++ {
			stale = append(stale, l.slot(k, i))
		}
	}
	for _, r := range remove {
		k := l.key(r)
		if seen[k] {
			return fmt.Errorf("service %s twice", r)
		}
		seen[k] = true
		had, err := count(k)
		if err != nil {
			return err
		}
		gone = append(gone, k)
		for i := range had {
			stale = append(stale, l.slot(k, i))
		}
	}
	if err := batchUpdate(bm, bk, bv); err != nil {
		return fmt.Errorf("backends: %w", err)
	}
	if err := batchUpdate(sm, sk, sv); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := deleteKeys(sm, gone); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := deleteKeys(bm, stale); err != nil {
		return fmt.Errorf("backends: %w", err)
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
	Hairpin   uint64 // connections of a pod to itself through a Service (source ServiceLoopback)
}

// HasLB and HasSockLB say whether the node's load balancers are loaded.
func (n Node) HasLB() bool     { return n.pinned(lbProg) }
func (n Node) HasSockLB() bool { return n.pinned(sockStats) }

// LBStats reads the node's counters.
func (n Node) LBStats() (LBStats, error) {
	v, err := n.counters(lbStats, 7)
	if err != nil {
		return LBStats{}, err
	}
	return LBStats{Packets: v[0], New: v[1], Forward: v[2], Reply: v[3], NoBackend: v[4], NodePort: v[5], Hairpin: v[6]}, nil
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
