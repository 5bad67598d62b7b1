package kubeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/kube"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/testing/nodedump"
)

// The subnet file as flanneld v0.28.10 wrote it on node0 of the test cluster (--ip-masq, VXLAN
// backend), read as flannel's CNI plugin reads it, and the CNI configuration made from it:
// the bridge plugin as the plugin delegates to it with kube-flannel.yml's options.
func TestFlannelSubnetEnvAndConflist(t *testing.T) {
	env, err := readSubnetEnv("testdata/flannel-subnet.env")
	if err != nil {
		t.Fatal(err)
	}
	if env.Network.String() != "10.244.0.0/16" || env.Subnet.String() != "10.244.0.0/24" || env.MTU != 1450 || !env.IPMasq {
		t.Fatalf("subnet env %+v", env)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(flannelConflist(env, "/x/ipam")), &got); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	_ = json.Unmarshal([]byte(`{"cniVersion":"0.3.1","name":"cbr0","plugins":[
		{"type":"bridge","hairpinMode":true,"isDefaultGateway":true,"isGateway":true,"ipMasq":false,"mtu":1450,
		 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}],"dataDir":"/x/ipam"}},
		{"type":"portmap","capabilities":{"portMappings":true}}]}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("conflist\n%v\nwant\n%v", got, want)
	}

	dir := t.TempDir()
	for name, body := range map[string]string{
		"partial":   "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.0.1/24\n",
		"bad mtu":   "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.0.1/24\nFLANNEL_MTU=x\nFLANNEL_IPMASQ=true\n",
		"bad cidr":  "FLANNEL_NETWORK=10.244.0.0\nFLANNEL_SUBNET=10.244.0.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
		"no ipmasq": "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.0.1/24\nFLANNEL_MTU=1450\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readSubnetEnv(p); err == nil {
			t.Errorf("%s: read without error", name)
		}
	}
	if _, err := readSubnetEnv(filepath.Join(dir, "absent")); err == nil {
		t.Error("an absent file read")
	}
}

// flannelOnCluster checks what the real flanneld of each node programmed (the harness adds no
// route of its own with Flannel, so pods of different nodes reach each other only through it):
// its Node annotations and subnet file; with VXLAN the device (VNI 1, port 8472, learning off,
// the node's address, MTU 1450, the subnet's network address), and per other node the onlink
// route via its VTEP address, the permanent neighbour with its VTEP's MAC and the FDB entry to
// its node address; with host-gw the route via the other node's address; its iptables chains.
func flannelOnCluster(t *testing.T, h *Harness) {
	backend := flannelBackend(h.cfg.CNI)
	fn := flannelLeases(t, h)
	for _, l := range fn {
		a, n := l.annotations, l.info
		if a["flannel.alpha.coreos.com/backend-type"] != backend || a["flannel.alpha.coreos.com/public-ip"] != n.ip || a["flannel.alpha.coreos.com/kube-subnet-manager"] != "true" {
			t.Errorf("node %s: flannel annotations %v, want backend %s, public IP %s", n.name, a, backend, n.ip)
		}
		env, err := readSubnetEnv(filepath.Join(n.dir, "flannel", "subnet.env"))
		if err != nil || env.Subnet.String() != l.subnet.String() {
			t.Errorf("node %s: subnet file %+v (%v), want subnet %s", n.name, env, err, l.subnet)
		}
	}
	for _, a := range fn {
		err := netns.WithNetlink(a.info.ns, func(nh *netlink.Handle) error {
			var vtep netlink.Link
			if backend == "vxlan" {
				l, err := nh.LinkByName("flannel.1")
				if err != nil {
					return err
				}
				vx, ok := l.(*netlink.Vxlan)
				if !ok || vx.VxlanId != 1 || vx.Port != 8472 || vx.Learning || !vx.SrcAddr.Equal(net.ParseIP(a.info.ip)) || vx.MTU != 1450 ||
					vx.HardwareAddr.String() != a.mac {
					t.Errorf("%s: flannel.1 %+v", a.info.name, l)
				}
				addrs, _ := nh.AddrList(l, unix.AF_INET)
				if len(addrs) != 1 || addrs[0].IPNet.String() != a.subnet.IP.String()+"/32" {
					t.Errorf("%s: flannel.1 addresses %v, want %s/32", a.info.name, addrs, a.subnet.IP)
				}
				vtep = l
			}
			routes, err := nh.RouteList(nil, unix.AF_INET)
			if err != nil {
				return err
			}
			for _, b := range fn {
				if b.info.name == a.info.name {
					continue
				}
				i := slices.IndexFunc(routes, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == b.subnet.String() })
				if i < 0 {
					t.Errorf("%s: no route to %s (%s)", a.info.name, b.subnet, b.info.name)
					continue
				}
				r := routes[i]
				if backend == "host-gw" {
					if !r.Gw.Equal(net.ParseIP(b.info.ip)) {
						t.Errorf("%s: route %s, want via %s", a.info.name, r, b.info.ip)
					}
					continue
				}
				if r.LinkIndex != vtep.Attrs().Index || !r.Gw.Equal(b.subnet.IP) || r.Flags&int(netlink.FLAG_ONLINK) == 0 {
					t.Errorf("%s: route %s, want via %s dev flannel.1 onlink", a.info.name, r, b.subnet.IP)
				}
				neighs, _ := nh.NeighList(vtep.Attrs().Index, unix.AF_INET)
				if !slices.ContainsFunc(neighs, func(n netlink.Neigh) bool {
					return n.IP.Equal(b.subnet.IP) && n.HardwareAddr.String() == b.mac && n.State&netlink.NUD_PERMANENT != 0
				}) {
					t.Errorf("%s: neighbours %v, want %s lladdr %s permanent", a.info.name, neighs, b.subnet.IP, b.mac)
				}
				fdb, _ := nh.NeighList(vtep.Attrs().Index, unix.AF_BRIDGE)
				if !slices.ContainsFunc(fdb, func(n netlink.Neigh) bool {
					return n.IP.Equal(net.ParseIP(b.info.ip)) && n.HardwareAddr.String() == b.mac
				}) {
					t.Errorf("%s: fdb %v, want %s dst %s", a.info.name, fdb, b.mac, b.info.ip)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", a.info.name, err)
		}
		out, err := netns.Output(netns.Path(a.info.ns), "iptables-save", nil, nil)
		if err != nil {
			t.Fatalf("%s: iptables-save: %v", a.info.name, err)
		}
		for _, want := range []string{"-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD", "-A FLANNEL-POSTRTG"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: iptables has no %q", a.info.name, want)
			}
		}
		t.Logf("%s: subnet %s, VTEP MAC %q", a.info.name, a.subnet, a.mac)
	}
}

// flannelObjects dumps node0 of the cluster (real flanneld, one pod on each node) as the lab's
// fidelity test reads it (internal/lab/testdata/real-flannel-BACKEND.txt): with
// CNIBENCH_RECORD_FLANNEL=DIR it writes the dump there; otherwise the live dump must be the
// recorded one, so that the lab is compared with what flanneld does today.
func flannelObjects(t *testing.T, h *Harness) {
	ctx := context.Background()
	cl, err := kube.New(ctx, kube.Config{Kubeconfig: h.Kubeconfig, RunID: "flannel-dump"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	if _, err := cl.CreatePods(ctx, []cluster.PodSpec{{Name: "fid-a", Node: h.nodes[0].name}, {Name: "fid-b", Node: h.nodes[1].name}}); err != nil {
		t.Fatal(err)
	}
	fn := flannelLeases(t, h)
	_, cc, _ := net.ParseCIDR(clusterCIDR)
	roles := nodedump.Roles{Node: net.ParseIP(fn[0].info.ip), Peer: net.ParseIP(fn[1].info.ip), Subnet: fn[0].subnet, PeerSubnet: fn[1].subnet,
		Cluster: cc, VTEPMAC: fn[0].mac, PeerMAC: fn[1].mac}
	d, err := nodedump.Take(h.nodes[0].ns, roles, nodedump.Flannel)
	if err != nil {
		t.Fatal(err)
	}
	name := "real-flannel-" + flannelBackend(h.cfg.CNI) + ".txt"
	if dir := os.Getenv("CNIBENCH_RECORD_FLANNEL"); dir != "" {
		version, err := exec.Command(filepath.Join(binDir(), "flanneld"), "--version").Output()
		if err != nil {
			t.Fatal(err)
		}
		head := fmt.Sprintf("# node0 of the project's test cluster: flanneld %s (--ip-masq --kube-subnet-mgr, backend %s), kube-proxy %s,\n"+
			"# one pod on each node; addresses named by role (internal/testing/nodedump). Recorded %s.\n",
			strings.TrimSpace(string(version)), flannelBackend(h.cfg.CNI), h.cfg.ProxyMode, time.Now().UTC().Format("2006-01-02"))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(head+d.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(filepath.Join("../../lab/testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if live, rec := nodedump.Diff(d, nodedump.Parse(string(b))); len(live)+len(rec) > 0 {
		t.Errorf("node0 of the real cluster differs from the recording %s (record it again with CNIBENCH_RECORD_FLANNEL=DIR if flanneld changed):\nonly live:\n  %s\nonly recorded:\n  %s",
			name, strings.Join(live, "\n  "), strings.Join(rec, "\n  "))
	}
}

// flannelLease is what flanneld registered for a node: its Node's pod CIDR, annotations and
// the VTEP MAC of its backend data ("" with host-gw).
type flannelLease struct {
	info        nodeInfo
	subnet      *net.IPNet
	mac         string
	annotations map[string]string
}

// flannelLeases reads every harness node's lease from its Node object, in node order.
func flannelLeases(t *testing.T, h *Harness) []flannelLease {
	t.Helper()
	nodes, err := clientset(t, h.Kubeconfig).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []flannelLease
	for _, n := range h.nodes {
		for _, o := range nodes.Items {
			if o.Name != n.name {
				continue
			}
			_, sn, err := net.ParseCIDR(o.Spec.PodCIDR)
			if err != nil {
				t.Fatalf("node %s: pod CIDR %q: %v", n.name, o.Spec.PodCIDR, err)
			}
			var bd struct{ VtepMAC string }
			_ = json.Unmarshal([]byte(o.Annotations["flannel.alpha.coreos.com/backend-data"]), &bd)
			out = append(out, flannelLease{info: n, subnet: sn, mac: bd.VtepMAC, annotations: o.Annotations})
		}
	}
	if len(out) != len(h.nodes) {
		t.Fatalf("%d of %d nodes found", len(out), len(h.nodes))
	}
	return out
}
