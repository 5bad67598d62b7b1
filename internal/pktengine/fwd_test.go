package pktengine

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
)

// The forwarder takes every datagram sent to its port and sends the same payload on to its
// targets in turn: 2,000 datagrams from one namespace to the forwarder in the other come back,
// each intact, the even ones to the first target's socket and the odd ones to the second's
// (a user-space load balancer's round robin), and the result counts them.
func TestFwd(t *testing.T) {
	p := netnstest.NewPair(t, [2]string{"c", "f"}, [2]string{"eth0", "eth0"}, netip.MustParsePrefix("10.254.0.0/24"))
	const n = 2000
	conns := make([]*net.UDPConn, 2)
	for i := range conns {
		if err := netns.Do(p.NS[0], func() (err error) {
			conns[i], err = net.ListenUDP("udp4", &net.UDPAddr{Port: 2153 + i})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		_ = conns[i].SetReadBuffer(4 << 20)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan FwdResult, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- netns.Do(p.NS[1], func() error {
			res, err := RunFwd(ctx, FwdOptions{Port: GTPPort, To: []netip.AddrPort{netip.AddrPortFrom(p.IP[0], 2153), netip.AddrPortFrom(p.IP[0], 2154)}, CPU: -1, RcvBuf: 4 << 20})
			done <- res
			return err
		})
	}()
	time.Sleep(200 * time.Millisecond) // bound before anything is sent
	var out *net.UDPConn
	if err := netns.Do(p.NS[0], func() (err error) {
		out, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.IP[1].AsSlice(), Port: GTPPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for i := 0; i < n; i++ {
		if _, err := fmt.Fprintf(out, "datagram %d", i); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 { // a pace the forwarder keeps: this test is about what it forwards
			time.Sleep(2 * time.Millisecond)
		}
	}
	got := make([]map[string]bool, 2)
	buf := make([]byte, 2048)
	for i, conn := range conns {
		got[i] = map[string]bool{}
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		for len(got[i]) < n/2 {
			k, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if !from.IP.Equal(p.IP[1].AsSlice()) {
				t.Errorf("datagram from %s, want the forwarder's address %s", from, p.IP[1])
			}
			got[i][string(buf[:k])] = true
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	res := <-done
	for i := 0; i < n; i++ {
		if !got[i%2][fmt.Sprintf("datagram %d", i)] {
			t.Fatalf("datagram %d not forwarded intact to target %d (%d and %d of %d arrived)", i, i%2, len(got[0]), len(got[1]), n)
		}
	}
	if res.Received != n || res.Sent != n || res.SendErrors != 0 || res.SocketDrops != 0 || len(res.SentTo) != 2 || res.SentTo[0] != n/2 ||
		res.To[1] != p.IP[0].String()+":2154" {
		t.Errorf("result %+v, want %d received and sent, half to each target", res, n)
	}
}
