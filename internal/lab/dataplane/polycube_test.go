package dataplane

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/bpfdp"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// The polycube presets resolve to their own parts; the provider's attach kinds, proxy and
// policy engine refuse every other Service, policy and overlay part, and are refused by the
// other attach kinds.
func TestPolycubeParts(t *testing.T) {
	for dp, attach := range map[string]string{"polycube": "ebpf-chain", "polycube-mono": "ebpf-mono"} {
		p, err := Resolve(dp, "", "")
		if err != nil {
			t.Fatalf("Resolve(%s): %v", dp, err)
		}
		a, o, x, y := p.Labels()
		if got, want := [4]string{a, o, x, y}, [4]string{attach, "vxlan", "polycube", "polycube"}; got != want {
			t.Errorf("Resolve(%s) = %v, want %v", dp, got, want)
		}
		if p.StackFiltered() {
			t.Errorf("%s: Services and policies in the node's IP stack", dp)
		}
		if _, err := Resolve(dp, None, None); err != nil {
			t.Errorf("Resolve(%s, none, none): %v", dp, err)
		}
	}
	for _, tc := range []struct{ dataplane, proxy, policy, want string }{
		{"polycube", "iptables", "", "not proxy iptables"},
		{"polycube-mono", "ebpf", "", "not proxy ebpf"},
		{"polycube", "", "ebpf", "not policy ebpf"},
		{"polycube", "", "nftables", "not policy nftables"},
		{"calico", "polycube", "", "needs attach ebpf-chain or ebpf-mono, not routed"},
		{"cilium", "", "polycube", "needs attach ebpf-chain or ebpf-mono, not ebpf"},
	} {
		_, err := Resolve(tc.dataplane, tc.proxy, tc.policy)
		if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%s, %q, %q) = %v, want unsupported: %s", tc.dataplane, tc.proxy, tc.policy, err, tc.want)
		}
	}
	p, _ := Resolve("polycube", "", "")
	p.Overlay = native{}
	if err := (ebpfChain{}).Combines(p); err == nil || !strings.Contains(err.Error(), "needs the vxlan overlay") {
		t.Errorf("ebpf-chain without VXLAN: %v", err)
	}
}

// The polycube proxy renders every ClusterIP for the ILB and, per node, each NodePort with the
// endpoints its externalTrafficPolicy gives that node and the policy for DISC-NAT.
func TestPolycubeRender(t *testing.T) {
	eps := []proxy.Endpoint{{IP: "10.244.0.5", Port: 8080, Node: "node0"}, {IP: "10.244.1.5", Port: 8080, Node: "node1"}}
	svcs := []proxy.Service{
		{Name: "web", ClusterIP: "10.96.0.10", Port: 80, Protocol: "tcp", Endpoints: eps},
		{Name: "np", ClusterIP: "10.96.0.11", Port: 81, Protocol: "tcp", Endpoints: eps, NodePort: 30001},
		{Name: "npl", ClusterIP: "10.96.0.12", Port: 82, Protocol: "udp", Endpoints: eps, NodePort: 30002, ExternalLocal: true},
	}
	data, cnt := polycubeProxy{}.Render(svcs, proxy.Options{NodeName: "node1", NodeIPs: []string{"172.30.0.11"}})
	var got bpfdp.PolycubeServices
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if cnt.Services != 3 || cnt.Endpoints != 6 || len(got.ClusterIPs) != 3 || len(got.NodePorts) != 2 {
		t.Fatalf("rendering %+v, counts %+v", got, cnt)
	}
	for _, c := range got.ClusterIPs {
		if len(c.Backends) != 2 || c.NodePort {
			t.Errorf("ClusterIP entry %+v: want both endpoints", c)
		}
	}
	node := netip.MustParseAddr("172.30.0.11")
	np, npl := got.NodePorts[0], got.NodePorts[1]
	if np.Addr != node || np.Port != 30001 || np.Proto != "tcp" || np.Local || len(np.Backends) != 2 {
		t.Errorf("Cluster NodePort %+v: want node1's address, every endpoint", np)
	}
	if npl.Addr != node || npl.Port != 30002 || npl.Proto != "udp" || !npl.Local || len(npl.Backends) != 1 || npl.Backends[0].String() != "10.244.1.5:8080" {
		t.Errorf("Local NodePort %+v: want node1's own endpoint only", npl)
	}
}
