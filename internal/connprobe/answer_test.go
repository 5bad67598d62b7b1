package connprobe_test

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/connprobe"
	"github.com/cnibench/cnibench/internal/driver"
)

// Answer answers each connection with the address it was reached at (two loopback addresses
// here), the prober reads it as an answered attempt, and closing the listener ends Answer.
func TestAnswer(t *testing.T) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- connprobe.Answer(ln) }()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(ip, strconv.Itoa(port)), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != ip+"\n" {
			t.Errorf("answer through %s: %q, %v", ip, line, err)
		}
	}
	var out strings.Builder
	o := connprobe.Options{Targets: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))},
		Interval: time.Millisecond, Timeout: time.Second, Duration: 50 * time.Millisecond, MaxInflight: connprobe.DefaultMaxInflight}
	if _, err := connprobe.Run(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	r, err := driver.ParseProbe([]byte(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Count(driver.ProbeOK); n < 40 || n != len(r.Attempts) {
		t.Errorf("%d of %d attempts answered, want all of about 50", n, len(r.Attempts))
	}
	for _, a := range r.Attempts {
		if a.Answer != "127.0.0.1" {
			t.Fatalf("attempt %+v: want the answer 127.0.0.1", a)
		}
	}
	ln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Answer after the listener closed: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Answer did not return after the listener closed")
	}
}
