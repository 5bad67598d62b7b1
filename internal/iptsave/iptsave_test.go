package iptsave

import (
	"os"
	"strings"
	"testing"
)

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
