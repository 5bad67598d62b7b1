package connprobe

import (
	"net"
	"testing"
	"time"
)

// benchAttempts runs b.N attempts one after the other against target, as the scheduler
// starts them, and reports the allocations of each: the cost the prober pays per slot.
func benchAttempts(b *testing.B, target string) {
	p := &prober{targets: []string{target}, t0: time.Now(), interval: time.Hour, timeout: time.Second,
		out: make(chan record, 1), stamped: make(chan struct{}, 1)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.wg.Add(1)
		p.inflight.Add(1)
		go p.attempt(0)
		<-p.stamped
		<-p.out
		p.wg.Wait()
	}
}

// BenchmarkAttemptRefused is an attempt to a closed loopback port: the dial alone.
func BenchmarkAttemptRefused(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	benchAttempts(b, target)
}

// BenchmarkAttemptOK is an answered attempt; the loopback listener's own allocations (about
// 6 per connection: Accept's conn and the close) are in the figures too.
func BenchmarkAttemptOK(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		line := []byte("10.0.0.5\n")
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write(line)
			c.Close()
		}
	}()
	benchAttempts(b, ln.Addr().String())
}
