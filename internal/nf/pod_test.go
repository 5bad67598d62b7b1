package nf

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestPodRoutes(t *testing.T) {
	a := netip.MustParseAddr
	c, s := a("10.244.0.2"), a("10.244.0.3")
	n1, n2, n3 := a("10.244.0.4"), a("10.244.0.5"), a("10.244.0.6")
	cr, sr, nr, err := PodRoutes(c, s, []netip.Addr{n1, n2, n3})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cr, []Route{{s, n1}}) || !reflect.DeepEqual(sr, []Route{{c, n3}}) {
		t.Errorf("client %v server %v", cr, sr)
	}
	want := [][]Route{{{s, n2}}, {{s, n3}, {c, n1}}, {{c, n2}}}
	if !reflect.DeepEqual(nr, want) {
		t.Errorf("NF routes %v, want %v", nr, want)
	}
	if got := strings.Join(cr[0].Args(), " "); got != "ip route replace 10.244.0.3/32 via 10.244.0.4 dev eth0" {
		t.Errorf("args %q", got)
	}
	_, _, one, _ := PodRoutes(c, s, []netip.Addr{n1})
	if len(one) != 1 || len(one[0]) != 0 {
		t.Errorf("a single NF reaches both ends directly: %v", one)
	}
	for _, bad := range [][]netip.Addr{nil, {c}, {n1, n1}, {a("fd00::1")}} {
		if _, _, _, err := PodRoutes(c, s, bad); err == nil {
			t.Errorf("NFs %v: no error", bad)
		}
	}
	if _, _, _, err := PodRoutes(c, c, []netip.Addr{n1}); err == nil {
		t.Error("client = server: no error")
	}
}

func TestRouteVia(t *testing.T) {
	for out, want := range map[string]string{
		"10.251.0.12 via 10.251.0.11 dev eth0 src 10.251.0.10 uid 0 \n    cache \n": "10.251.0.11", // iproute2
		"10.251.0.12 via 10.251.0.11 dev eth0  src 10.251.0.10 \n":                  "10.251.0.11", // busybox
		"10.251.0.12 dev eth0 src 10.251.0.10 uid 0 \n    cache \n":                 "",
	} {
		if got := routeVia([]byte(out)); got != want {
			t.Errorf("routeVia(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestPodSysctlNames(t *testing.T) {
	got := PodSysctlNames()
	want := []string{"net.ipv4.conf.all.send_redirects", "net.ipv4.conf.eth0.send_redirects", "net.ipv4.ip_forward"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PodSysctlNames = %v", got)
	}
}
