package kernel

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

func TestRouteIPTables(t *testing.T)  { nftest.Check(t, nftest.Kind(t, "route-iptables")) }
func TestBridgeIPTables(t *testing.T) { nftest.Check(t, nftest.Kind(t, "bridge-iptables")) }

func TestRenderOrderAndPolicy(t *testing.T) {
	flow := nf.Flow{Client: netip.MustParseAddr("10.250.0.1"), Server: netip.MustParseAddr("10.250.1.2"), Ports: []nf.Port{{Proto: nf.TCP, Port: 5201}}}
	rs, err := nf.Build(flow, 5)
	if err != nil {
		t.Fatal(err)
	}
	out := string(Render(rs))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
		"-A FORWARD -s 198.18.0.1/32 -d 10.250.1.2/32 -p tcp --dport 5201 -j DROP",
		"-A FORWARD -s 198.18.0.2/32 -d 10.250.1.2/32 -p tcp --dport 5201 -j DROP",
		"-A FORWARD -s 198.18.0.3/32 -d 10.250.1.2/32 -p tcp --dport 5201 -j DROP",
		"-A FORWARD -s 10.250.0.1/32 -d 10.250.1.2/32 -p tcp --dport 5201 -j ACCEPT",
		"-A FORWARD -s 10.250.1.2/32 -d 10.250.0.1/32 -p tcp --sport 5201 -j ACCEPT",
		"COMMIT",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("render:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}

// TestForwardDrops reads a real `iptables-save -c -t filter` (testdata: recorded from a
// forwarding namespace after 3 pings the FORWARD policy dropped, 2 UDP datagrams a DROP rule
// dropped and one allowed TCP exchange).
func TestForwardDrops(t *testing.T) {
	b, err := os.ReadFile("testdata/iptables-save-c.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ForwardDrops(b)
	if err != nil || got != 5 {
		t.Fatalf("ForwardDrops = %d, %v; want 5 (3 by the policy, 2 by a rule)", got, err)
	}
	accept := strings.ReplaceAll(string(b), ":FORWARD DROP", ":FORWARD ACCEPT")
	if got, err := ForwardDrops([]byte(accept)); err != nil || got != 2 {
		t.Fatalf("with an ACCEPT policy: %d, %v; want 2 (the rule's only)", got, err)
	}
	if _, err := ForwardDrops([]byte("*nat\nCOMMIT\n")); err == nil {
		t.Fatal("no FORWARD chain: want an error")
	}
	if _, err := ForwardDrops([]byte(":FORWARD DROP [x:1]\n")); err == nil {
		t.Fatal("a bad counter: want an error")
	}
	if n, ok, err := RulePackets(b, "-p tcp -m tcp --dport 5201 -j ACCEPT"); err != nil || !ok || n != 4 {
		t.Fatalf("RulePackets of the allowed TCP rule: %d %v %v; want 4", n, ok, err)
	}
	if _, ok, err := RulePackets(b, "--dport 9999"); err != nil || ok {
		t.Fatalf("RulePackets of no rule: found %v, %v", ok, err)
	}
	if n, by, ok, err := RuleCounters(b, "-p tcp -m tcp --dport 5201 -j ACCEPT"); err != nil || !ok || n != 4 || by != 219 {
		t.Fatalf("RuleCounters of the allowed TCP rule: %d packets, %d bytes, %v %v; want 4, 219", n, by, ok, err)
	}
}

// TestRouteIPTablesInPod runs the pod form of route-iptables in a namespace with a PodRunner
// that execs there: the rules it loads drop what they should and Dropped counts it.
func TestRouteIPTablesInPod(t *testing.T) {
	nftest.CheckInPod(t, nftest.Kind(t, "route-iptables").(nf.PodKind))
}
