package bpfdp

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/netns"
)

func key(proto, addrPort string) ServiceKey {
	a := ap(addrPort)
	return ServiceKey{Addr: a.Addr(), Port: a.Port(), Proto: proto}
}

// EncodeServiceChange's text starts with "partial", lists the removed Services ("- " and their
// key) and the upserted ones in EncodeServices' format, sorted; DecodeServiceInput reads it
// back as a change, and reads EncodeServices' text as a full table. DecodeServices refuses a
// change (it is not a table), and bad removal lines are errors naming the line.
func TestServiceChangeRoundTrip(t *testing.T) {
	c := ServiceChange{
		Upsert: []Service{
			{Addr: netip.MustParseAddr("10.96.0.11"), Port: 53, Proto: "udp", Backends: bes(ap("10.244.1.3:5353"))},
			{Addr: netip.MustParseAddr("172.30.0.10"), Port: 30080, Proto: "tcp", NodePort: true,
				Backends: []Backend{{AddrPort: ap("10.244.1.9:8080"), Remote: true}}},
			{Addr: netip.MustParseAddr("10.96.0.12"), Port: 443, Proto: "tcp"},
		},
		Remove: []ServiceKey{key("udp", "10.96.0.20:53"), key("tcp", "10.96.0.9:80")},
	}
	text := EncodeServiceChange(c)
	want := "partial\n" +
		"- tcp 10.96.0.9 80\n" +
		"- udp 10.96.0.20 53\n" +
		"tcp 10.96.0.12 443\n" +
		"tcp 172.30.0.10 30080 nodeport 10.244.1.9:8080/remote\n" +
		"udp 10.96.0.11 53 10.244.1.3:5353\n"
	if string(text) != want {
		t.Fatalf("EncodeServiceChange:\n%s\nwant\n%s", text, want)
	}
	got, partial, err := DecodeServiceInput(text)
	if err != nil || !partial {
		t.Fatalf("DecodeServiceInput(change) = partial %v, %v", partial, err)
	}
	wantC := ServiceChange{Upsert: []Service{c.Upsert[2], c.Upsert[1], c.Upsert[0]}, Remove: []ServiceKey{c.Remove[1], c.Remove[0]}}
	if !reflect.DeepEqual(got, wantC) {
		t.Errorf("DecodeServiceInput(change):\n%+v\nwant\n%+v", got, wantC)
	}
	if got, partial, err := DecodeServiceInput(EncodeServiceChange(ServiceChange{})); err != nil || !partial || len(got.Upsert)+len(got.Remove) != 0 {
		t.Errorf("an empty change decodes to %+v, partial %v, %v", got, partial, err)
	}
	full := EncodeServices(c.Upsert)
	got, partial, err = DecodeServiceInput(full)
	if err != nil || partial || !reflect.DeepEqual(got, ServiceChange{Upsert: wantC.Upsert}) {
		t.Errorf("DecodeServiceInput(full) = %+v, partial %v, %v", got, partial, err)
	}
	if _, err := DecodeServices(text); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("DecodeServices(a change) = %v, want an error on line 1", err)
	}
	for _, c := range []struct{ text, want string }{
		{"partial\n- tcp 10.96.0.9\n", `line 2: want "- tcp|udp ADDR PORT"`},
		{"partial\n- tcp 10.96.0.9 80 10.244.0.2:80\n", `line 2: want "- tcp|udp ADDR PORT"`},
		{"partial\n- sctp 10.96.0.9 80\n", `line 2: want "tcp|udp ADDR PORT`},
		{"partial\ntcp 10.96.0.9 80 nope\n", `line 2: backend "nope"`},
		{"tcp 10.96.0.9 80\n- tcp 10.96.0.9 80\n", `line 2: want "tcp|udp ADDR PORT`}, // no removals in a full table
		{"tcp 10.96.0.9 80\npartial\n", `line 2: want "tcp|udp ADDR PORT`},
	} {
		if got, _, err := DecodeServiceInput([]byte(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeServiceInput(%q) = %+v, %v; want an error containing %q", c.text, got, err, c.want)
		}
	}
}

// ServiceTable.Diff: adding one Service to many is a change of that one (its entry and
// backend); removing one names its key; a Service whose backends change (added, dropped,
// reordered: slot i is backend i) or whose NodePort or Remote flags change is upserted whole;
// an unchanged table is an empty change. The elements touched count the slots a shrunk
// Service loses and a removed Service's slots. A key twice is an error.
func TestServiceTableDiff(t *testing.T) {
	var svcs []Service
	for i := range 100 {
		svcs = append(svcs, Service{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(i)}), Port: 80, Proto: "tcp",
			Backends: bes(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(i)}), 8080))})
	}
	t0, err := NewServiceTable(svcs)
	if err != nil || len(t0) != 100 {
		t.Fatalf("NewServiceTable: %d entries, %v", len(t0), err)
	}
	diff := func(from ServiceTable, to []Service) (ServiceChange, ServiceTable, int) {
		t.Helper()
		c, next, touched, err := from.Diff(to)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := NewServiceTable(to); !reflect.DeepEqual(next, want) {
			t.Errorf("Diff's next table is not the new Services' table")
		}
		return c, next, touched
	}
	if c, _, n := diff(t0, svcs); len(c.Upsert)+len(c.Remove) != 0 || n != 0 {
		t.Errorf("no change: %+v, %d touched", c, n)
	}
	added := Service{Addr: netip.MustParseAddr("10.96.1.1"), Port: 443, Proto: "tcp", Backends: bes(ap("10.244.1.1:8443"))}
	plus := append(append([]Service(nil), svcs...), added)
	c, t1, n := diff(t0, plus)
	if !reflect.DeepEqual(c, ServiceChange{Upsert: []Service{added}}) || n != 2 {
		t.Errorf("one Service added to 100: %+v, %d touched; want it alone, 2 elements", c, n)
	}
	if c, _, n := diff(t1, svcs); !reflect.DeepEqual(c, ServiceChange{Remove: []ServiceKey{added.Key()}}) || n != 2 {
		t.Errorf("one Service removed: %+v, %d touched; want its key, 2 elements", c, n)
	}

	changed := func(i int, f func(*Service)) []Service {
		out := append([]Service(nil), svcs...)
		out[i].Backends = append([]Backend(nil), out[i].Backends...)
		f(&out[i])
		return out
	}
	two := changed(7, func(s *Service) { s.Backends = append(s.Backends, Backend{AddrPort: ap("10.244.9.9:8080")}) })
	c, t2, n := diff(t0, two)
	if len(c.Remove) != 0 || len(c.Upsert) != 1 || !reflect.DeepEqual(c.Upsert[0], two[7]) || n != 3 {
		t.Errorf("an endpoint added: %+v, %d touched; want the Service with both backends, 3 elements", c, n)
	}
	if c, _, n := diff(t2, svcs); len(c.Upsert) != 1 || len(c.Upsert[0].Backends) != 1 || n != 3 {
		t.Errorf("an endpoint removed: %+v, %d touched; want the Service with its one backend, 3 elements (the slot gone too)", c, n)
	}
	swapped := append([]Service(nil), two...)
	swapped[7].Backends = []Backend{two[7].Backends[1], two[7].Backends[0]}
	if c, _, n := diff(t2, swapped); len(c.Upsert) != 1 || c.Upsert[0].Key() != svcs[7].Key() || n != 3 {
		t.Errorf("backends reordered: %+v, %d touched", c, n)
	}
	for what, f := range map[string]func(*Service){
		"no backend": func(s *Service) { s.Backends = nil },
		"NodePort":   func(s *Service) { s.NodePort = true },
		"remote":     func(s *Service) { s.Backends[0].Remote = true },
	} {
		to := changed(3, f)
		if c, _, _ := diff(t0, to); len(c.Remove) != 0 || len(c.Upsert) != 1 || !reflect.DeepEqual(c.Upsert[0], to[3]) {
			t.Errorf("%s: %+v, want Service 3 upserted", what, c)
		}
	}
	if _, _, _, err := t0.Diff(append(plus, added)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a Service twice: %v", err)
	}
}

// PolycubeTable.Diff: a NodePort at two node addresses shares DISC-NAT's port; removing one
// of them deletes its ELB entry only, removing the last deletes the port too; changing
// externalTrafficPolicy upserts every entry of the port; ClusterIPs diff as ServiceTable's.
// A port Local and Cluster at once is an error.
func TestPolycubeTableDiff(t *testing.T) {
	a1, a2 := netip.MustParseAddr("172.30.0.10"), netip.MustParseAddr("172.30.0.11")
	np := func(a netip.Addr, port uint16, local bool, b ...netip.AddrPort) PolycubeNodePort {
		return PolycubeNodePort{Addr: a, Port: port, Proto: "tcp", Local: local, Backends: b}
	}
	web := Service{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: "tcp", Backends: bes(ap("10.244.0.2:8080"))}
	s0 := PolycubeServices{ClusterIPs: []Service{web},
		NodePorts: []PolycubeNodePort{np(a1, 30080, false, ap("10.244.0.2:8080")), np(a2, 30080, false, ap("10.244.0.2:8080"))}}
	t0, err := NewPolycubeTable(s0)
	if err != nil {
		t.Fatal(err)
	}
	diff := func(from PolycubeTable, to PolycubeServices) (PolycubeChange, PolycubeTable, int) {
		t.Helper()
		c, next, n, err := from.Diff(to)
		if err != nil {
			t.Fatal(err)
		}
		return c, next, n
	}
	if c, _, n := diff(t0, s0); !reflect.DeepEqual(c, PolycubeChange{}) || n != 0 {
		t.Errorf("no change: %+v, %d", c, n)
	}
	one := PolycubeServices{ClusterIPs: s0.ClusterIPs, NodePorts: s0.NodePorts[:1]}
	c, t1, n := diff(t0, one)
	if !reflect.DeepEqual(c, PolycubeChange{GoneNodePorts: []ServiceKey{s0.NodePorts[1].Key()}}) || n != 2 {
		t.Errorf("one address of two gone: %+v, %d touched; want its ELB entry only, 2 elements", c, n)
	}
	none := PolycubeServices{ClusterIPs: s0.ClusterIPs}
	c, _, n = diff(t1, none)
	if !reflect.DeepEqual(c, PolycubeChange{GoneNodePorts: []ServiceKey{s0.NodePorts[0].Key()},
		GoneNATPorts: []PolycubeNATPort{{Port: 30080, Proto: "tcp"}}}) || n != 3 {
		t.Errorf("the last address gone: %+v, %d touched; want its ELB entry and DISC-NAT's port, 3 elements", c, n)
	}
	c, _, n = diff(t0, none)
	if len(c.GoneNodePorts) != 2 || len(c.GoneNATPorts) != 1 || n != 5 {
		t.Errorf("both gone: %+v, %d touched; want 2 ELB entries and one port, 5 elements", c, n)
	}
	local := PolycubeServices{ClusterIPs: s0.ClusterIPs, NodePorts: []PolycubeNodePort{np(a1, 30080, true), np(a2, 30080, true)}}
	c, _, n = diff(t0, local)
	if !reflect.DeepEqual(c, PolycubeChange{NodePorts: local.NodePorts}) || n != 6 {
		t.Errorf("Local now, no local endpoint: %+v, %d touched; want both entries, 6 elements (2 ELB entries, their slots, 2 ports)", c, n)
	}
	web2 := web
	web2.Backends = bes(ap("10.244.0.2:8080"), ap("10.244.1.2:8080"))
	c, _, n = diff(t0, PolycubeServices{ClusterIPs: []Service{web2}, NodePorts: s0.NodePorts})
	if !reflect.DeepEqual(c, PolycubeChange{ClusterIPs: []Service{web2}}) || n != 3 {
		t.Errorf("a ClusterIP's endpoint added: %+v, %d touched", c, n)
	}
	bad := PolycubeServices{NodePorts: []PolycubeNodePort{np(a1, 30080, true), np(a2, 30080, false)}}
	if _, _, _, err := t0.Diff(bad); err == nil || !strings.Contains(err.Error(), "Local and Cluster") {
		t.Errorf("a port Local and Cluster at once: %v", err)
	}
	if _, _, _, err := t0.Diff(PolycubeServices{NodePorts: []PolycubeNodePort{s0.NodePorts[0], s0.NodePorts[0]}}); err == nil {
		t.Error("a NodePort twice: no error")
	}
}

// dumpMap reads a pinned map of the node whole, as hex key -> hex value.
func dumpMap(t testing.TB, n Node, pin string) map[string]string {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(n.path(pin), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := map[string]string{}
	k := make([]byte, m.KeySize())
	v := make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[hex.EncodeToString(k)] = hex.EncodeToString(v)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameMaps fails the test unless the maps pinned as pins hold the same entries in both nodes.
func sameMaps(t testing.TB, step string, got, want Node, pins ...string) {
	t.Helper()
	for _, pin := range pins {
		g, w := dumpMap(t, got, pin), dumpMap(t, want, pin)
		if !reflect.DeepEqual(g, w) {
			var diffs []string
			for k, v := range w {
				if g[k] != v {
					diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", k, g[k], v))
				}
			}
			for k, v := range g {
				if _, ok := w[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s: %q, want none", k, v))
				}
			}
			if len(diffs) > 5 {
				diffs = append(diffs[:5], "...")
			}
			t.Fatalf("%s: %s holds %d entries, a full write %d: %s", step, pin, len(g), len(w), strings.Join(diffs, "; "))
		}
	}
}

// randomBackends are up to max random backends (some of them remote, when remote).
func randomBackends(r *rand.Rand, max int, remote bool) []Backend {
	out := make([]Backend, r.IntN(max+1))
	for i := range out {
		out[i] = Backend{AddrPort: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(r.IntN(4)), byte(r.IntN(250))}), uint16(8080+r.IntN(3))),
			Remote: remote && r.IntN(2) == 0}
	}
	return out
}

// mutate changes a table at random, as Services and endpoints come and go: some Services
// added (keys from a small space, so that a key comes back after it went), some removed, some
// with their backends grown, shrunk, replaced or reordered, and with nodePorts some turned
// NodePort or back (a NodePort's backends may be remote).
func mutate(r *rand.Rand, svcs []Service, nodePorts bool) []Service {
	byKey := map[ServiceKey]Service{}
	for _, s := range svcs {
		byKey[s.Key()] = s
	}
	for range r.IntN(6) {
		s := Service{Addr: netip.AddrFrom4([4]byte{10, 96, byte(r.IntN(2)), byte(r.IntN(200))}), Port: uint16(80 + r.IntN(2)),
			Proto: []string{"tcp", "udp"}[r.IntN(2)], NodePort: nodePorts && r.IntN(3) == 0}
		s.Backends = randomBackends(r, 5, s.NodePort)
		byKey[s.Key()] = s
	}
	out := make([]Service, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, s)
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	drop := r.IntN(min(len(out), 2) + 1)
	if len(out) > 60 { // around 60 Services: enough to change, few enough to compare often
		drop = r.IntN(min(len(out), 10) + 1)
	}
	out = out[drop:]
	for range r.IntN(8) {
		if len(out) == 0 {
			break
		}
		s := &out[r.IntN(len(out))]
		bs := append([]Backend(nil), s.Backends...)
		switch r.IntN(5) {
		case 0: // grown
			bs = append(bs, randomBackends(r, 3, s.NodePort)...)
		case 1: // shrunk
			bs = bs[:r.IntN(len(bs)+1)]
		case 2: // replaced
			bs = randomBackends(r, 5, s.NodePort)
		case 3: // reordered
			r.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		case 4:
			if nodePorts {
				s.NodePort = !s.NodePort
			}
		}
		s.Backends = bs
	}
	return out
}

// The real maps: a node given a full table and then a random sequence of changes
// (ServiceTable.Diff applied with ChangeServices) holds after each step exactly what a node
// given the same Services whole (SetServices) holds, entry for entry, backend slots included.
// ChangeServices refuses a node without a load balancer, and a change naming a key twice
// (writing nothing).
func TestChangeServicesMatchesSetServices(t *testing.T) {
	needLB(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	part, full := scratchNode(t, false), scratchNode(t, false)
	if err := part.ChangeServices(ServiceChange{}); err == nil || !strings.Contains(err.Error(), "no Service load balancer") {
		t.Errorf("a change of a node without a load balancer: %v", err)
	}
	var svcs []Service
	for len(svcs) < 60 {
		svcs = mutate(r, svcs, true)
	}
	for _, n := range []Node{part, full} {
		if err := n.SetServices(svcs); err != nil {
			t.Fatal(err)
		}
	}
	table, err := NewServiceTable(svcs)
	if err != nil {
		t.Fatal(err)
	}
	pins := []string{lbServices, lbBackends}
	sameMaps(t, "full", part, full, pins...)
	changes := 0
	for step := range 150 {
		svcs = mutate(r, svcs, true)
		c, next, _, err := table.Diff(svcs)
		if err != nil {
			t.Fatal(err)
		}
		changes += len(c.Upsert) + len(c.Remove)
		// Through the text the proxy engine renders.
		dc, partial, err := DecodeServiceInput(EncodeServiceChange(c))
		if err != nil || !partial {
			t.Fatalf("step %d: decode the change: partial %v, %v", step, partial, err)
		}
		if err := part.ChangeServices(dc); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if err := full.SetServices(svcs); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		table = next
		sameMaps(t, fmt.Sprintf("step %d (%d Services, %d upserted, %d removed)", step, len(svcs), len(c.Upsert), len(c.Remove)), part, full, pins...)
	}
	t.Logf("%d Services changed in %d steps, %d left", changes, 150, len(svcs))
	if changes < 300 || len(svcs) < 20 {
		t.Errorf("the sequence changed %d Services and ended with %d: too little to say much", changes, len(svcs))
	}
	before := dumpMap(t, part, lbServices)
	twice := ServiceChange{Upsert: []Service{{Addr: netip.MustParseAddr("10.96.9.9"), Port: 80, Proto: "tcp"}},
		Remove: []ServiceKey{key("tcp", "10.96.9.9:80")}}
	if err := part.ChangeServices(twice); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a key upserted and removed at once: %v", err)
	}
	if after := dumpMap(t, part, lbServices); !reflect.DeepEqual(before, after) {
		t.Error("a refused change wrote to the Service map")
	}
}

// needPolycube skips a test that needs the kernel to load seed 003's provider.
func needPolycube(t *testing.T) {
	t.Helper()
	needLB(t)
	if err := PolycubeUsable(); err != nil {
		t.Skipf("the polycube provider cannot run here: %v", err)
	}
}

// scratchPolycube is a scratch node (namespace "cnbtlb...") holding the provider's build b.
func scratchPolycube(t *testing.T, b PolycubeBuild) Node {
	t.Helper()
	n := scratchNode(t, true)
	setupScratchPolycube(t, n, b)
	return n
}

// setupScratchPolycube loads the provider's build b into a scratch node, attached to two veths
// that stand for the overlay and underlay devices.
func setupScratchPolycube(tb testing.TB, n Node, b PolycubeBuild) {
	tb.Helper()
	h, err := netns.Netlink(n.NS)
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	for _, v := range []*netlink.Veth{
		{LinkAttrs: netlink.LinkAttrs{Name: "ovl"}, PeerName: "ovlp"},
		{LinkAttrs: netlink.LinkAttrs{Name: "ul"}, PeerName: "ulp"},
	} {
		if err := h.LinkAdd(v); err != nil {
			tb.Fatal(err)
		}
	}
	err = n.SetupPolycube(b, PolycubeConfig{NodeIP: netip.MustParseAddr("172.30.0.10"), PodCIDR: netip.MustParsePrefix("10.244.0.0/24"),
		ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"), Overlay: "ovl", Underlay: "ul"})
	if err != nil {
		tb.Fatal(err)
	}
}

// mutatePolycube changes a node's tables at random: the ClusterIPs as mutate does, and
// NodePorts (at one or both of two node addresses, so that DISC-NAT's port is shared) added,
// removed, with their backends changed, or turned Local or Cluster (at every address at once,
// as a Service's externalTrafficPolicy is).
func mutatePolycube(r *rand.Rand, s PolycubeServices) PolycubeServices {
	out := PolycubeServices{ClusterIPs: mutate(r, s.ClusterIPs, false)}
	addrs := []netip.Addr{netip.MustParseAddr("172.30.0.10"), netip.MustParseAddr("172.30.0.11")}
	type port struct {
		port  uint16
		proto string
	}
	local := map[port]bool{}
	byKey := map[ServiceKey]PolycubeNodePort{}
	for _, np := range s.NodePorts {
		local[port{np.Port, np.Proto}] = np.Local
		byKey[np.Key()] = np
	}
	backends := func() []netip.AddrPort {
		var out []netip.AddrPort
		for _, b := range randomBackends(r, 4, false) {
			out = append(out, b.AddrPort)
		}
		return out
	}
	for range r.IntN(3) { // added
		p := port{uint16(30000 + r.IntN(40)), []string{"tcp", "udp"}[r.IntN(2)]}
		if _, ok := local[p]; !ok {
			local[p] = r.IntN(2) == 0
		}
		a := addrs[r.IntN(2)]
		byKey[ServiceKey{Addr: a, Port: p.port, Proto: p.proto}] = PolycubeNodePort{Addr: a, Port: p.port, Proto: p.proto, Local: local[p], Backends: backends()}
	}
	for k := range byKey { // removed, changed
		switch r.IntN(12) {
		case 0:
			delete(byKey, k)
		case 1:
			np := byKey[k]
			np.Backends = backends()
			byKey[k] = np
		case 2:
			local[port{k.Port, k.Proto}] = !local[port{k.Port, k.Proto}]
		}
	}
	for k, np := range byKey {
		np.Local = local[port{k.Port, k.Proto}]
		out.NodePorts = append(out.NodePorts, np)
	}
	r.Shuffle(len(out.NodePorts), func(i, j int) { out.NodePorts[i], out.NodePorts[j] = out.NodePorts[j], out.NodePorts[i] })
	return out
}

// The real maps of seed 003's provider: a node given full tables and then a random sequence
// of changes (PolycubeTable.Diff applied with PolycubeChangeServices) holds after each step
// exactly what a node given the same tables whole (PolycubeSetServices) holds: the ILB's and
// ELB's Services and backend slots, DISC-NAT's NodePorts. A change deleting a DISC-NAT port it
// also writes is refused.
func TestPolycubeChangeServicesMatchesSetServices(t *testing.T) {
	needPolycube(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	part, full := scratchPolycube(t, PolycubeChain), scratchPolycube(t, PolycubeMono)
	var s PolycubeServices
	for len(s.ClusterIPs) < 60 {
		s = mutatePolycube(r, s)
	}
	for _, n := range []Node{part, full} {
		if err := n.PolycubeSetServices(s); err != nil {
			t.Fatal(err)
		}
	}
	table, err := NewPolycubeTable(s)
	if err != nil {
		t.Fatal(err)
	}
	pins := []string{pcPin("ilb_svc"), pcPin("ilb_be"), pcPin("elb_svc"), pcPin("elb_be"), pcPin("nat_ports")}
	sameMaps(t, "full", part, full, pins...)
	natGone := 0
	for step := range 120 {
		s = mutatePolycube(r, s)
		c, next, _, err := table.Diff(s)
		if err != nil {
			t.Fatal(err)
		}
		natGone += len(c.GoneNATPorts)
		if err := part.PolycubeChangeServices(c); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if err := full.PolycubeSetServices(s); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		table = next
		sameMaps(t, fmt.Sprintf("step %d (%d ClusterIPs, %d NodePorts; change %+v)", step, len(s.ClusterIPs), len(s.NodePorts), c), part, full, pins...)
	}
	t.Logf("%d ClusterIPs and %d NodePorts left, %d DISC-NAT ports deleted on the way", len(s.ClusterIPs), len(s.NodePorts), natGone)
	if natGone == 0 || len(s.NodePorts) == 0 {
		t.Errorf("the sequence deleted %d DISC-NAT ports and ended with %d NodePorts: it tried too little", natGone, len(s.NodePorts))
	}
	np := PolycubeNodePort{Addr: netip.MustParseAddr("172.30.0.10"), Port: 31999, Proto: "tcp"}
	err = part.PolycubeChangeServices(PolycubeChange{NodePorts: []PolycubeNodePort{np}, GoneNATPorts: []PolycubeNATPort{{Port: 31999, Proto: "tcp"}}})
	if err == nil || !strings.Contains(err.Error(), "written and deleted") {
		t.Errorf("a DISC-NAT port written and deleted at once: %v", err)
	}
	sameMaps(t, "after a refused change", part, full, pins...)
}
