package nodedump

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

func cidr(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// Addresses are named by role: the nodes, their subnets (network, gateway, pods), the cluster
// CIDR, VTEP MACs; anything else stays as it is; random veth names fold into one.
func TestNames(t *testing.T) {
	r := Roles{Node: net.ParseIP("192.168.0.1"), Peer: net.ParseIP("192.168.0.2"), Subnet: cidr("10.244.0.0/24"),
		PeerSubnet: cidr("10.244.1.0/24"), Cluster: cidr("10.244.0.0/16"), VTEPMAC: "0a:cb:00:00:00:00", PeerMAC: "6e:41:02:9a:11:c3"}
	for in, want := range map[string]string{
		"route 10.244.1.0/24 via 10.244.1.0 dev flannel.1 onlink":                                        "route PEER_SUBNET/24 via PEER_SUBNET+0 dev flannel.1 onlink",
		"addr flannel.1 10.244.0.0/32":                                                                   "addr flannel.1 SUBNET+0/32",
		"addr cni0 10.244.0.1/24":                                                                        "addr cni0 SUBNET+1/24",
		"route 10.244.0.0/24 dev cni0 proto kernel scope link src 10.244.0.1":                            "route SUBNET/24 dev cni0 proto kernel scope link src SUBNET+1",
		"neigh 10.244.1.0 dev flannel.1 lladdr 6e:41:02:9a:11:c3 permanent":                              "neigh PEER_SUBNET+0 dev flannel.1 lladdr PEER_VTEP_MAC permanent",
		"fdb 6e:41:02:9a:11:c3 dev flannel.1 dst 192.168.0.2 permanent":                                  "fdb PEER_VTEP_MAC dev flannel.1 dst PEER permanent",
		"link flannel.1 type vxlan local 192.168.0.1 address 0a:cb:00:00:00:00":                          "link flannel.1 type vxlan local NODE address VTEP_MAC",
		"link veth1a2b3c4d type veth mtu 1450 up master cni0":                                            "link veth* type veth mtu 1450 up master cni0",
		"iptables nat -A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -j MASQUERADE --random-fully": "iptables nat -A FLANNEL-POSTRTG -s CLUSTER/16 ! -d 224.0.0.0/4 -j MASQUERADE --random-fully",
		"pod 10.244.0.7 and 10.244.1.9 and 10.244.9.3 lladdr aa:bb:cc:dd:ee:ff":                          "pod SUBNET+pod and PEER_SUBNET+pod and CLUSTER+2307 lladdr MAC",
	} {
		if got := r.name(in); got != want {
			t.Errorf("%q\n got %q\nwant %q", in, got, want)
		}
	}
}

// The pod network's rules from iptables-save output (recorded: flanneld v0.28.10 and
// kube-proxy on the project's test cluster): flanneld's chains and the jumps to them, nothing
// of kube-proxy's.
func TestIptablesLines(t *testing.T) {
	save, err := os.ReadFile("testdata/iptables-save-flannel.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := IptablesLines(string(save), []string{"FLANNEL"})
	if len(got) == 0 {
		t.Fatal("no rule")
	}
	for _, want := range []string{"iptables filter :FLANNEL-FWD", "iptables nat :FLANNEL-POSTRTG",
		`iptables nat #1 -A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN`,
		`iptables nat #6 -A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`,
		`iptables nat #1 -A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG`} {
		if !slices.Contains(got, want) {
			t.Errorf("no %q in %q", want, got)
		}
	}
	for _, l := range got {
		if !slices.ContainsFunc([]string{"iptables filter ", "iptables nat "}, func(p string) bool { return len(l) > len(p) && l[:len(p)] == p }) {
			t.Errorf("line %q: want a table and a rule", l)
		}
		if strings.Contains(l, "KUBE-") {
			t.Errorf("kube-proxy's line %q", l)
		}
	}
}

func TestDiffAndParse(t *testing.T) {
	a := Parse("# comment\nb\na\n\nc\n")
	if !slices.Equal(a, Dump{"a", "b", "c"}) || a.String() != "a\nb\nc\n" {
		t.Fatalf("parse %q", a)
	}
	onlyA, onlyB := Diff(a, Dump{"b", "d"})
	if !slices.Equal(onlyA, []string{"a", "c"}) || !slices.Equal(onlyB, []string{"d"}) {
		t.Errorf("diff %q %q", onlyA, onlyB)
	}
}
