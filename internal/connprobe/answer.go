package connprobe

import (
	"errors"
	"net"
	"time"
)

// AnswerTimeout bounds each answered connection: a peer that never reads cannot hold it.
const AnswerTimeout = 5 * time.Second

// Answer is the prober's other end: it answers every connection accepted on ln with the
// address it was reached at, one line ("10.244.1.4\n"), and closes it, until ln is closed
// (nil then). Each connection is served in a goroutine of its own, so a thousand connections a
// second are answered at once (busybox nc, which forks for each, falls behind long before).
// The address tells the prober which endpoint answered.
func Answer(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: wait a little rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			_ = c.SetDeadline(time.Now().Add(AnswerTimeout))
			ip := "-"
			if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
				ip = a.IP.String()
			}
			_, _ = c.Write([]byte(ip + "\n"))
			_ = c.Close()
		}()
	}
}
