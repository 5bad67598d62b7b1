package bpfdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/cnibench/cnibench/internal/engine/policy"
)

// PolycubeBuild is how seed 003's provider (bpf/polycube.h) is built in a node.
type PolycubeBuild int

const (
	// PolycubeChain is the disaggregated build (bpf/polycube_chain.c): one program per cube,
	// chained by tail calls through the node's patch panel as each cube's forward-chain map
	// says.
	PolycubeChain PolycubeBuild = iota
	// PolycubeMono is the monolithic build (bpf/polycube_mono.c): the same functions and maps
	// called in sequence by one program per hook.
	PolycubeMono
)

func (b PolycubeBuild) String() string {
	if b == PolycubeMono {
		return "mono"
	}
	return "chain"
}

// pcEntry are a build's programs at the node's hooks: each pod's host veth, the overlay
// device, the underlay device.
type pcEntry struct{ pod, ovl, net string }

var pcEntries = map[PolycubeBuild]pcEntry{
	PolycubeChain: {pod: "pc_ilb", ovl: "pc_router", net: "pc_discnat"},
	PolycubeMono:  {pod: "pcm_from_pod", ovl: "pcm_from_ovl", net: "pcm_from_net"},
}

// The cubes, their index in the patch panel (enum pc_cube) and their ports (bpf/polycube.h).
const (
	pcILB, pcFW, pcRouter, pcELB, pcNAT = 0, 1, 2, 3, 4

	ilbServer              = 0
	fwPods, fwNet          = 0, 1
	rtPods, rtPhys, rtHost = 0, 1, 2
	rtVXLAN                = 3
	elbInt, elbExt         = 0, 1
	natInt, natExt         = 0, 1
	ilbMaxPort             = 65536 // ilb_fwd's size: edge ports are host veth ifindexes
)

// Forward-chain actions (enum pc_action of bpf/polycube_chain.c).
const (
	pcTail          = 1
	pcRedirectPeer  = 2
	pcRedirectNeigh = 3
	pcPass          = 4
)

// pcCubes name each cube's counters (the slots of its <cube>_stats map) as PolycubeCounters
// reports them ("<cube>_<counter>").
var pcCubes = []struct {
	name, stats string
	slots       []string
}{
	{"ilb", "ilb_stats", []string{"packets", "drops", "new", "forward", "reply", "delivered", "to_stack", "hairpin"}},
	{"fw", "fw_stats", []string{"packets", "drops", "judged", "skipped"}},
	{"router", "rt_stats", []string{"packets", "drops", "to_pods", "to_phys", "to_host", "to_vxlan", "ttl_expired"}},
	{"elb", "elb_stats", []string{"packets", "drops", "new", "forward", "reply"}},
	{"discnat", "nat_stats", []string{"packets", "drops", "snat_new", "snat", "rnat", "nodeport_local", "to_stack", "out"}},
}

// pcPin is where a map of the provider is pinned in a node's directory (programs are pinned
// under their own name, which starts with "pc").
func pcPin(mapName string) string { return "pc_" + mapName }

// PolycubeUsable says why the provider cannot run here (nil when it can): tc programs, tcx
// links, and both builds through the verifier.
var PolycubeUsable = sync.OnceValue(func() error {
	if err := LBUsable(); err != nil {
		return err
	}
	for _, load := range []func() (*ebpf.CollectionSpec, error){loadPcChain, loadPcMono} {
		spec, err := load()
		if err != nil {
			return err
		}
		coll, err := newCollection(spec)
		if err != nil {
			return fmt.Errorf("seed 003's eBPF provider does not load on this kernel: %w", err)
		}
		coll.Close()
	}
	return nil
})

// newCollection loads a collection, with the verifier's log in the error.
func newCollection(spec *ebpf.CollectionSpec) (*ebpf.Collection, error) {
	coll, err := ebpf.NewCollection(spec)
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("load: %+v", ve)
	}
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return coll, nil
}

// PolycubeConfig is what a node's provider is loaded with.
type PolycubeConfig struct {
	NodeIP      netip.Addr     // the node's underlay address: NodePorts are served on it
	PodCIDR     netip.Prefix   // the node's pod CIDR: its first address is the fictitious pod
	ClusterCIDR netip.Prefix   // every node's pods: the router sends them to the overlay
	Blocks      []netip.Prefix // the node's own blocks (pod CIDR, silent pods): to the pods
	Overlay     string         // the VXLAN device (the router's VXLAN port)
	Underlay    string         // the underlay device (DISC-NAT's external port)
}

// pcBuild reports which build the node holds (ok false: none yet). Caller holds the lock.
func (n Node) pcBuild() (PolycubeBuild, bool) {
	for _, b := range []PolycubeBuild{PolycubeChain, PolycubeMono} {
		if n.pinned(pcEntries[b].net) {
			return b, true
		}
	}
	return 0, false
}

// PolycubeBuildOf reports which build of the provider the node holds (ok false: none).
func (n Node) PolycubeBuildOf() (PolycubeBuild, bool) {
	defer n.lock()()
	return n.pcBuild()
}

func (n Node) pcMap(name string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(n.path(pcPin(name)), nil)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", pcPin(name), err)
	}
	return m, nil
}

// SetupPolycube loads the node's provider in build b, pins it and attaches its entries to the
// overlay and underlay devices (call it once they exist and before any pod). The
// disaggregated build's cubes are wired as seed 003 draws them, without the firewall (the
// policy engine connects it: PolycubeFirewall).
func (n Node) SetupPolycube(b PolycubeBuild, c PolycubeConfig) error {
	defer n.lock()()
	if err := n.mounted(); err != nil {
		return err
	}
	e := pcEntries[b]
	if have, ok := n.pcBuild(); ok {
		if have != b {
			return fmt.Errorf("node %s holds the %s build of the polycube provider, not %s", n.NS, have, b)
		}
	} else if err := n.loadPolycube(b, c); err != nil {
		return err
	}
	if err := n.attachIngress(e.ovl, []string{c.Overlay}); err != nil {
		return err
	}
	return n.attachIngress(e.net, []string{c.Underlay})
}

// loadPolycube loads, configures and pins a build. Caller holds the lock.
func (n Node) loadPolycube(b PolycubeBuild, c PolycubeConfig) error {
	if !c.NodeIP.Is4() || !c.PodCIDR.Addr().Is4() || !c.ClusterCIDR.Addr().Is4() {
		return fmt.Errorf("polycube provider: want IPv4 addresses (node %s, pod CIDR %s, cluster CIDR %s)", c.NodeIP, c.PodCIDR, c.ClusterCIDR)
	}
	h, err := n.netlink()
	if err != nil {
		return err
	}
	idx := map[string]int{}
	for _, d := range []string{c.Overlay, c.Underlay} {
		l, err := h.LinkByName(d)
		if err != nil {
			h.Close()
			return fmt.Errorf("interface %s in %s: %w", d, n.NS, err)
		}
		idx[d] = l.Attrs().Index
	}
	h.Close()
	load := loadPcChain
	if b == PolycubeMono {
		load = loadPcMono
	}
	spec, err := load()
	if err != nil {
		return err
	}
	fict := c.PodCIDR.Masked().Addr()
	vars := map[string]uint32{"node_ip": be32(c.NodeIP), "fict_ip": be32(fict), "svc_loopback": be32(ServiceLoopback)}
	if b == PolycubeMono {
		vars["vxlan_ifindex"] = uint32(idx[c.Overlay])
		vars["eth0_ifindex"] = uint32(idx[c.Underlay])
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	coll, err := newCollection(spec)
	if err != nil {
		return err
	}
	defer coll.Close()

	// The router's routes: the node's blocks to the pods, its own address to the host, the
	// rest of the cluster to the overlay, the fictitious pod and everything else to the
	// physical side (ELB, DISC-NAT).
	routes := map[netip.Prefix]uint32{
		netip.PrefixFrom(c.NodeIP, 32):     rtHost,
		netip.PrefixFrom(fict, 32):         rtPhys,
		c.ClusterCIDR.Masked():             rtVXLAN,
		netip.MustParsePrefix("0.0.0.0/0"): rtPhys,
	}
	for _, p := range append([]netip.Prefix{c.PodCIDR}, c.Blocks...) {
		routes[p.Masked()] = rtPods
	}
	for p, port := range routes {
		k := pcChainRtKey{Prefixlen: uint32(p.Bits()), Addr: be32(p.Addr())}
		if err := coll.Maps["rt_routes"].Update(&k, &pcChainRtRoute{Port: port}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("route %s: %w", p, err)
		}
	}
	if b == PolycubeChain {
		tail := func(cube, port int) pcChainPcPeer {
			return pcChainPcPeer{Action: pcTail, Port: uint16(port), Target: uint32(cube)}
		}
		fwd := map[string]map[uint32]pcChainPcPeer{
			"ilb_fwd": {ilbServer: tail(pcRouter, rtPods)},
			"fw_fwd":  {fwPods: tail(pcILB, ilbServer), fwNet: tail(pcRouter, rtPods)},
			"rt_fwd": {rtPods: tail(pcILB, ilbServer), rtPhys: tail(pcELB, elbInt), rtHost: {Action: pcPass},
				rtVXLAN: {Action: pcRedirectNeigh, Target: uint32(idx[c.Overlay])}},
			"elb_fwd": {elbInt: tail(pcRouter, rtPhys), elbExt: tail(pcNAT, natInt)},
			"nat_fwd": {natInt: tail(pcELB, elbExt), natExt: {Action: pcRedirectNeigh, Target: uint32(idx[c.Underlay])}},
		}
		for name, ports := range fwd {
			for port, peer := range ports {
				if err := coll.Maps[name].Update(port, &peer, ebpf.UpdateAny); err != nil {
					return fmt.Errorf("%s port %d: %w", name, port, err)
				}
			}
		}
		for i, name := range []string{"pc_ilb", "pc_fw", "pc_router", "pc_elb", "pc_discnat"} {
			if err := coll.Maps["panel"].Update(uint32(i), coll.Programs[name], ebpf.UpdateAny); err != nil {
				return fmt.Errorf("patch panel %d: %w", i, err)
			}
		}
	}

	for name, m := range coll.Maps {
		if name == "" || name[0] == '.' { // .rodata: the programs hold it
			continue
		}
		if err := m.Pin(n.path(pcPin(name))); err != nil {
			return fmt.Errorf("pin %s: %w", n.path(pcPin(name)), err)
		}
	}
	for name, p := range coll.Programs {
		if name == pcEntries[b].net {
			continue
		}
		if err := p.Pin(n.path(name)); err != nil {
			return fmt.Errorf("pin %s: %w", n.path(name), err)
		}
	}
	// Last: its pin says the rest is there.
	return coll.Programs[pcEntries[b].net].Pin(n.path(pcEntries[b].net))
}

// PolycubeAddPod gives a pod of the node an edge port of the ILB (its address, its host veth
// and the MACs the ILB writes into packets for it) and attaches the build's pod entry to its
// host veth.
func (n Node) PolycubeAddPod(ip netip.Addr, hostVeth string, podMAC net.HardwareAddr) error {
	defer n.lock()()
	b, ok := n.pcBuild()
	if !ok {
		return fmt.Errorf("node %s has no polycube provider", n.NS)
	}
	lk, err := n.hostPort(ip, hostVeth, podMAC)
	if err != nil {
		return err
	}
	ifindex := uint32(lk.Attrs().Index)
	if ifindex >= ilbMaxPort {
		return fmt.Errorf("host interface %s has index %d: the ILB's edge ports stop at %d", hostVeth, ifindex, ilbMaxPort-1)
	}
	if b == PolycubeChain {
		m, err := n.pcMap("ilb_fwd")
		if err != nil {
			return err
		}
		err = m.Update(ifindex, &pcChainPcPeer{Action: pcRedirectPeer, Target: ifindex}, ebpf.UpdateAny)
		m.Close()
		if err != nil {
			return fmt.Errorf("edge port %d: %w", ifindex, err)
		}
	}
	m, err := n.pcMap("ilb_edges")
	if err != nil {
		return err
	}
	defer m.Close()
	e := pcChainPcEdge{Ifindex: ifindex}
	copy(e.Mac[:], podMAC)
	copy(e.HostMac[:], lk.Attrs().HardwareAddr)
	if err := m.Update(be32(ip), &e, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("edge %s: %w", ip, err)
	}
	return n.attachIngress(pcEntries[b].pod, []string{hostVeth})
}

// PolycubeNodePort is a NodePort of the node as the ELB and DISC-NAT hold it: packets to
// Addr:Port over Proto go to one of Backends; Local (externalTrafficPolicy Local) keeps the
// client's address, else DISC-NAT replaces it with the node's fictitious pod.
type PolycubeNodePort struct {
	Addr     netip.Addr
	Port     uint16
	Proto    string
	Local    bool
	Backends []netip.AddrPort
}

// PolycubeServices are a node's Service tables: the ILB's ClusterIPs (their Backends' Remote
// flag unused) and the ELB's and DISC-NAT's NodePorts.
type PolycubeServices struct {
	ClusterIPs []Service
	NodePorts  []PolycubeNodePort
}

func protoNum(proto string) uint8 {
	if proto == "udp" {
		return 17
	}
	return 6
}

// pcTable is the layout of the polycube ILB's and ELB's maps (the Service's flags and the
// backends' Remote are unused: the cube says what a Service is).
var pcTable = tableLayout[pcChainPcSvcKey, pcChainPcSvc, pcChainPcBeKey, pcChainPcAddr]{
	key: func(k ServiceKey) pcChainPcSvcKey {
		return pcChainPcSvcKey{Addr: be32(k.Addr), Port: be16(k.Port), Proto: protoNum(k.Proto)}
	},
	svc:     func(s Service) pcChainPcSvc { return pcChainPcSvc{Count: uint32(len(s.Backends))} },
	count:   func(v pcChainPcSvc) uint32 { return v.Count },
	slot:    func(k pcChainPcSvcKey, i uint32) pcChainPcBeKey { return pcChainPcBeKey{Svc: k, Slot: i} },
	unslot:  func(b pcChainPcBeKey) (pcChainPcSvcKey, uint32) { return b.Svc, b.Slot },
	backend: func(b Backend) pcChainPcAddr { return pcChainPcAddr{Addr: be32(b.Addr()), Port: be16(b.Port())} },
}

// Key is the NodePort's key in the ELB.
func (np PolycubeNodePort) Key() ServiceKey {
	return ServiceKey{Addr: np.Addr, Port: np.Port, Proto: np.Proto}
}

// elbService is the NodePort's ELB entry.
func (np PolycubeNodePort) elbService() Service {
	s := Service{Addr: np.Addr, Port: np.Port, Proto: np.Proto, NodePort: true}
	for _, b := range np.Backends {
		s.Backends = append(s.Backends, Backend{AddrPort: b})
	}
	return s
}

// PolycubeNATPort is a NodePort as DISC-NAT's nat_ports holds it: by port and protocol only,
// whatever the node address (NodePorts at several addresses of a node share it).
type PolycubeNATPort struct {
	Port  uint16
	Proto string
}

func (p PolycubeNATPort) key() pcChainNatPortKey {
	return pcChainNatPortKey{Port: be16(p.Port), Proto: protoNum(p.Proto)}
}

// natPorts are DISC-NAT's entries for nps, sorted (natKeyCompare); an error when a port is
// Local at one address and Cluster at another: DISC-NAT cannot tell them apart.
func natPorts(nps []PolycubeNodePort) (keys []pcChainNatPortKey, vals []pcChainNatPort, err error) {
	ports := map[pcChainNatPortKey]pcChainNatPort{}
	for _, np := range nps {
		k := PolycubeNATPort{Port: np.Port, Proto: np.Proto}.key()
		v := pcChainNatPort{}
		if np.Local {
			v.Local = 1
		}
		if old, dup := ports[k]; dup && old != v {
			return nil, nil, fmt.Errorf("NodePort %s/%d: Local and Cluster at once", np.Proto, np.Port)
		}
		ports[k] = v
	}
	keys = make([]pcChainNatPortKey, 0, len(ports))
	for k := range ports {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, natKeyCompare)
	vals = make([]pcChainNatPort, len(keys))
	for i, k := range keys {
		vals[i] = ports[k]
	}
	return keys, vals, nil
}

func natKeyCompare(a, b pcChainNatPortKey) int {
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	return int(a.Proto) - int(b.Proto)
}

// pcServiceMaps opens the node's Service tables, closed by the function it returns (caller
// holds the lock; an error when the node has no provider).
func (n Node) pcServiceMaps() (map[string]*ebpf.Map, func(), error) {
	ms := map[string]*ebpf.Map{}
	closeAll := func() {
		for _, m := range ms {
			m.Close()
		}
	}
	if _, ok := n.pcBuild(); !ok {
		return nil, nil, fmt.Errorf("node %s has no polycube provider", n.NS)
	}
	for _, name := range []string{"ilb_svc", "ilb_be", "elb_svc", "elb_be", "nat_ports"} {
		m, err := n.pcMap(name)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ms[name] = m
	}
	return ms, closeAll, nil
}

// PolycubeSetServices makes the node's ILB, ELB and DISC-NAT hold exactly s. Sessions already
// in their tables keep their backend.
func (n Node) PolycubeSetServices(s PolycubeServices) error {
	defer n.lock()()
	ms, done, err := n.pcServiceMaps()
	if err != nil {
		return err
	}
	defer done()
	keys, vals, err := natPorts(s.NodePorts)
	if err != nil {
		return err
	}
	if err := setTable(ms["ilb_svc"], ms["ilb_be"], pcTable, s.ClusterIPs); err != nil {
		return fmt.Errorf("ILB: %w", err)
	}
	elb := make([]Service, 0, len(s.NodePorts))
	for _, np := range s.NodePorts {
		elb = append(elb, np.elbService())
	}
	// DISC-NAT's NodePorts after the ELB's: a NodePort the ELB knows but DISC-NAT does not goes
	// up the stack, which is what a NodePort being set up should do.
	if err := setTable(ms["elb_svc"], ms["elb_be"], pcTable, elb); err != nil {
		return fmt.Errorf("ELB: %w", err)
	}
	if err := batchUpdate(ms["nat_ports"], keys, vals); err != nil {
		return fmt.Errorf("DISC-NAT NodePorts: %w", err)
	}
	want := make(map[pcChainNatPortKey]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	if err := deleteWhere(ms["nat_ports"], func(k pcChainNatPortKey) bool { return !want[k] }); err != nil {
		return fmt.Errorf("DISC-NAT NodePorts: %w", err)
	}
	return nil
}

// PolycubeChange is a change to a node's Service tables, what a partial rendering programs:
// ILB entries written (each whole, with every backend) and deleted; NodePorts written (their
// ELB entry and DISC-NAT port) and deleted from the ELB; and DISC-NAT ports deleted, listed on
// their own because NodePorts at several addresses of the node share one: it goes with the
// last of them.
type PolycubeChange struct {
	ClusterIPs     []Service
	GoneClusterIPs []ServiceKey
	NodePorts      []PolycubeNodePort
	GoneNodePorts  []ServiceKey
	GoneNATPorts   []PolycubeNATPort
}

// PolycubeChangeServices applies a change to the node's tables, touching only the entries it
// names (changeTable). The NodePorts follow the order a packet from the network meets them in:
// the ELB's entries are written before DISC-NAT's ports, which send packets to them, and
// DISC-NAT's ports go before the ELB's entries do. A key named twice (upserted and deleted at
// once) is an error, and nothing is written then.
func (n Node) PolycubeChangeServices(c PolycubeChange) error {
	defer n.lock()()
	ms, done, err := n.pcServiceMaps()
	if err != nil {
		return err
	}
	defer done()
	elb := make([]Service, 0, len(c.NodePorts))
	upserted := make(map[ServiceKey]bool, len(c.NodePorts))
	for _, np := range c.NodePorts {
		elb = append(elb, np.elbService())
		upserted[np.Key()] = true
	}
	for _, k := range c.GoneNodePorts {
		if upserted[k] {
			return fmt.Errorf("ELB: service %s twice", k)
		}
	}
	keys, vals, err := natPorts(c.NodePorts)
	if err != nil {
		return err
	}
	gone := make([]pcChainNatPortKey, 0, len(c.GoneNATPorts))
	for _, p := range c.GoneNATPorts {
		gone = append(gone, p.key())
		if _, found := slices.BinarySearchFunc(keys, p.key(), natKeyCompare); found {
			return fmt.Errorf("DISC-NAT NodePort %s/%d written and deleted at once", p.Proto, p.Port)
		}
	}
	if err := changeTable(ms["ilb_svc"], ms["ilb_be"], pcTable, c.ClusterIPs, c.GoneClusterIPs); err != nil {
		return fmt.Errorf("ILB: %w", err)
	}
	if err := changeTable(ms["elb_svc"], ms["elb_be"], pcTable, elb, nil); err != nil {
		return fmt.Errorf("ELB: %w", err)
	}
	if err := batchUpdate(ms["nat_ports"], keys, vals); err != nil {
		return fmt.Errorf("DISC-NAT NodePorts: %w", err)
	}
	if err := deleteKeys(ms["nat_ports"], gone); err != nil {
		return fmt.Errorf("DISC-NAT NodePorts: %w", err)
	}
	if err := changeTable(ms["elb_svc"], ms["elb_be"], pcTable, nil, c.GoneNodePorts); err != nil {
		return fmt.Errorf("ELB: %w", err)
	}
	return nil
}

// PolycubeTable is a node's Service tables as a rendering left them, by key: what the next
// partial rendering is the difference from.
type PolycubeTable struct {
	ClusterIPs ServiceTable
	NodePorts  map[ServiceKey]PolycubeNodePort
}

// NewPolycubeTable is the table of s; an error when a key comes twice or a NodePort is Local
// and Cluster at once (PolycubeSetServices refuses such tables).
func NewPolycubeTable(s PolycubeServices) (PolycubeTable, error) {
	c, err := NewServiceTable(s.ClusterIPs)
	if err != nil {
		return PolycubeTable{}, fmt.Errorf("ILB: %w", err)
	}
	if _, _, err := natPorts(s.NodePorts); err != nil {
		return PolycubeTable{}, err
	}
	t := PolycubeTable{ClusterIPs: c, NodePorts: make(map[ServiceKey]PolycubeNodePort, len(s.NodePorts))}
	for _, np := range s.NodePorts {
		if _, dup := t.NodePorts[np.Key()]; dup {
			return PolycubeTable{}, fmt.Errorf("ELB: service %s twice", np.Key())
		}
		t.NodePorts[np.Key()] = np
	}
	return t, nil
}

// Diff is the change that turns t into s, s's table, and the map elements the change writes
// or deletes (as ServiceTable.Diff counts them, plus a DISC-NAT port per NodePort written and
// per port deleted). An error when s is not a table (NewPolycubeTable).
func (t PolycubeTable) Diff(s PolycubeServices) (c PolycubeChange, next PolycubeTable, touched int, err error) {
	next, err = NewPolycubeTable(s)
	if err != nil {
		return PolycubeChange{}, PolycubeTable{}, 0, err
	}
	ilb, _, touched, _ := t.ClusterIPs.Diff(s.ClusterIPs) // s.ClusterIPs is a table: no error
	c.ClusterIPs, c.GoneClusterIPs = ilb.Upsert, ilb.Remove
	nat := map[PolycubeNATPort]bool{}
	for _, np := range s.NodePorts {
		nat[PolycubeNATPort{Port: np.Port, Proto: np.Proto}] = true
		old, ok := t.NodePorts[np.Key()]
		if ok && old.Local == np.Local && slices.Equal(old.Backends, np.Backends) {
			continue
		}
		c.NodePorts = append(c.NodePorts, np)
		touched += 2 + max(len(np.Backends), len(old.Backends))
	}
	goneNAT := map[PolycubeNATPort]bool{}
	for k, old := range t.NodePorts {
		if _, ok := next.NodePorts[k]; ok {
			continue
		}
		c.GoneNodePorts = append(c.GoneNodePorts, k)
		touched += 1 + len(old.Backends)
		if p := (PolycubeNATPort{Port: k.Port, Proto: k.Proto}); !nat[p] && !goneNAT[p] {
			goneNAT[p] = true
			c.GoneNATPorts = append(c.GoneNATPorts, p)
			touched++
		}
	}
	slices.SortFunc(c.GoneNodePorts, ServiceKey.compare)
	slices.SortFunc(c.GoneNATPorts, func(a, b PolycubeNATPort) int {
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		return strings.Compare(a.Proto, b.Proto)
	})
	return c, next, touched, nil
}

// PolycubeFirewall puts the firewall cube in the node's chain, between the ILB and the router
// (idempotent): the disaggregated build rewires the two cubes' forward-chain maps, the
// monolithic one turns the firewall on in its configuration.
func (n Node) PolycubeFirewall() error {
	defer n.lock()()
	return n.pcFirewall()
}

func (n Node) pcFirewall() error {
	b, ok := n.pcBuild()
	if !ok {
		return fmt.Errorf("node %s has no polycube provider", n.NS)
	}
	if b == PolycubeMono {
		m, err := n.pcMap("mono_cfg")
		if err != nil {
			return err
		}
		defer m.Close()
		return m.Update(uint32(0), uint32(1), ebpf.UpdateAny)
	}
	for name, v := range map[string]struct {
		port uint32
		peer pcChainPcPeer
	}{
		"ilb_fwd": {ilbServer, pcChainPcPeer{Action: pcTail, Port: fwPods, Target: pcFW}},
		"rt_fwd":  {rtPods, pcChainPcPeer{Action: pcTail, Port: fwNet, Target: pcFW}},
	} {
		m, err := n.pcMap(name)
		if err != nil {
			return err
		}
		err = m.Update(v.port, &v.peer, ebpf.UpdateAny)
		m.Close()
		if err != nil {
			return fmt.Errorf("%s port %d: %w", name, v.port, err)
		}
	}
	return nil
}

// PolycubeSetPolicy puts the firewall cube in the node's chain and makes its maps hold
// exactly pol (as SetPolicy does for pol_check): the IP cache and the rules first, the
// endpoints (which turn the checks on) last, then what is no longer wanted is deleted.
func (n Node) PolycubeSetPolicy(pol *policy.BPFPolicy) error {
	defer n.lock()()
	if err := n.pcFirewall(); err != nil {
		return err
	}
	ms, err := n.pcPolicyMaps()
	if err != nil {
		return err
	}
	defer closeMaps(ms)
	return writePolicy(ms[0], ms[1], ms[2], pol)
}

// PolycubeCounters reads the node's per-cube counters, summed over CPUs, as
// "<cube>_<counter>" (ilb_packets, router_to_vxlan, discnat_snat_new, ...; the firewall's
// policy decisions as fw_admitted, fw_denied, fw_established). Both builds count the same way:
// a cube's packets are the packets its function was called on.
func (n Node) PolycubeCounters() (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, c := range pcCubes {
		v, err := n.counters(pcPin(c.stats), len(c.slots))
		if err != nil {
			return nil, err
		}
		for i, s := range c.slots {
			out[c.name+"_"+s] = v[i]
		}
	}
	v, err := n.counters(pcPin("pol_stats"), 3)
	if err != nil {
		return nil, err
	}
	out["fw_admitted"], out["fw_denied"], out["fw_established"] = v[0], v[1], v[2]
	return out, nil
}
