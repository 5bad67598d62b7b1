package kernel

import (
	"net/netip"
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

// TestRouteIPTablesInPod runs the pod form of route-iptables in a namespace with a PodRunner
// that execs there: the rules it loads drop what they should and Dropped counts it.
func TestRouteIPTablesInPod(t *testing.T) {
	nftest.CheckInPod(t, nftest.Kind(t, "route-iptables").(nf.PodKind))
}
