package lab

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
)

// fabricCounters installs nftables counters on the underlay bridge (inside the lab's fabric
// namespace) for VXLAN on both ports and for plain ICMP from a pod address, and returns a
// function that reads them.
func fabricCounters(t *testing.T, l *Lab, podIP string) func() map[string]int {
	t.Helper()
	rules := fmt.Sprintf(`table bridge cnbtest {
	chain cnbcount {
		type filter hook forward priority 0; policy accept;
		udp dport 8472 counter comment "vxlan8472"
		udp dport 4789 counter comment "vxlan4789"
		ip saddr %s ip protocol icmp counter comment "plainicmp"
	}
}
`, podIP)
	out, err := nsenterStdin(t, l.FabricNS(), rules, "nft", "-f", "-")
	if err != nil {
		t.Fatalf("nft in fabric: %v: %s", err, out)
	}
	re := regexp.MustCompile(`counter packets (\d+) bytes \d+ comment "(\w+)"`)
	return func() map[string]int {
		out, err := nsenter(t, l.FabricNS(), "nft", "list", "table", "bridge", "cnbtest")
		if err != nil {
			t.Fatalf("nft list counters: %v: %s", err, out)
		}
		m := map[string]int{}
		for _, g := range re.FindAllStringSubmatch(out, -1) {
			m[g[2]], _ = strconv.Atoi(g[1])
		}
		return m
	}
}

// TestInterNodeEncapsulation proves on the fabric what each preset puts on the wire between
// nodes: VXLAN (UDP 8472 for flannel, 4789 for calico-vxlan) or plainly routed pod packets.
func TestInterNodeEncapsulation(t *testing.T) {
	cases := []struct {
		preset string
		want   string // counter that must count the pings
		zero   []string
	}{
		{"flannel", "vxlan8472", []string{"plainicmp", "vxlan4789"}},
		{"calico", "plainicmp", []string{"vxlan8472", "vxlan4789"}},
		{"flannel-hostgw", "plainicmp", []string{"vxlan8472", "vxlan4789"}},
		{"calico-vxlan", "vxlan4789", []string{"plainicmp", "vxlan8472"}},
	}
	for _, tc := range cases {
		t.Run(tc.preset, func(t *testing.T) {
			l := upLab(t, Config{Dataplane: tc.preset})
			ctx := context.Background()
			a, err := l.CreatePod(ctx, cluster.PodSpec{Name: "a", Node: "node0"})
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.CreatePod(ctx, cluster.PodSpec{Name: "b", Node: "node1"})
			if err != nil {
				t.Fatal(err)
			}
			read := fabricCounters(t, l, a.IP)
			if err := ping(t, l, "a", b.IP, 56); err != nil {
				t.Fatal(err)
			}
			got := read()
			if got[tc.want] < 3 {
				t.Errorf("%s: counter %s = %d, want >= 3 (the 3 echo requests): %v", tc.preset, tc.want, got[tc.want], got)
			}
			for _, z := range tc.zero {
				if got[z] != 0 {
					t.Errorf("%s: counter %s = %d, want 0: %v", tc.preset, z, got[z], got)
				}
			}
		})
	}
}

// TestUnderlayMTU9000 checks a jumbo underlay: pods get 9000 less the overlay overhead and
// full-size packets cross nodes unfragmented.
func TestUnderlayMTU9000(t *testing.T) {
	l := upLab(t, Config{Dataplane: "flannel", MTU: 9000})
	if l.PodMTU() != 8950 {
		t.Fatalf("pod MTU %d, want 8950", l.PodMTU())
	}
	ctx := context.Background()
	if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "a", Node: "node0"}); err != nil {
		t.Fatal(err)
	}
	b, err := l.CreatePod(ctx, cluster.PodSpec{Name: "b", Node: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(t, l, "a", b.IP, 8950-28); err != nil {
		t.Fatal(err)
	}
	// One byte more must not pass with DF set.
	if err := ping(t, l, "a", b.IP, 8950-27); err == nil {
		t.Fatal("a packet larger than the pod MTU passed with DF set")
	}
	ns, _ := l.NodeNS("node0")
	out, _ := nsenter(t, ns, "ip", "-o", "link", "show", "eth0")
	if !strings.Contains(out, "mtu 9000 ") {
		t.Errorf("node underlay MTU: %s", out)
	}
}

// TestCalicoLayout checks the routed preset's addressing: the pod's default route goes via
// 169.254.1.1, the node routes the pod /32 to a veth that has no address and proxy ARP on.
func TestCalicoLayout(t *testing.T) {
	l := upLab(t, Config{Dataplane: "calico"})
	ctx := context.Background()
	a, err := l.CreatePod(ctx, cluster.PodSpec{Name: "a", Node: "node0"})
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := l.PodNS("a")
	out, _ := nsenter(t, ns, "ip", "route")
	if !strings.Contains(out, "default via 169.254.1.1 dev eth0") {
		t.Errorf("pod routes:\n%s", out)
	}
	nn, _ := l.NodeNS("node0")
	out, _ = nsenter(t, nn, "ip", "route", "get", a.IP)
	dev := regexp.MustCompile(`dev (\S+)`).FindStringSubmatch(out)
	if dev == nil || dev[1] == "eth0" {
		t.Fatalf("node route to pod: %s", out)
	}
	addr, _ := nsenter(t, nn, "ip", "-4", "addr", "show", "dev", dev[1])
	if strings.Contains(addr, "inet ") {
		t.Errorf("host veth %s has an address: %s", dev[1], addr)
	}
	pa, _ := nsenter(t, nn, "cat", "/proc/sys/net/ipv4/conf/"+dev[1]+"/proxy_arp")
	if strings.TrimSpace(pa) != "1" {
		t.Errorf("proxy_arp on %s = %q", dev[1], pa)
	}
	bh, _ := nsenter(t, nn, "ip", "route", "show", "type", "blackhole")
	if !strings.Contains(bh, "10.244.0.0/24") {
		t.Errorf("no blackhole for the node's block: %q", bh)
	}
}
