// Package connprobe is a fixed-rate TCP connection prober. It starts a new connection attempt
// to one address every interval, on an absolute schedule and whatever became of the earlier
// attempts (a dropped SYN must not stall the probe), and prints one line per attempt with its
// wall-clock start and end. A scenario uses it to measure how long a change (a Service added
// or removed, a NetworkPolicy that starts to deny or allow) takes to reach the data plane: the
// change shows as the first attempt whose result differs, to within one interval.
//
// `cnibench probe` runs it inside the client pod; internal/driver builds that command's argv
// and parses its output. This package owns the output format (the line tags and the result
// names below).
package connprobe

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The output, one line each, fields separated by one space:
//
//	# probe target IP:PORT interval_ns N timeout_ns M t0_ns T
//	c SEQ START_NS END_NS RESULT ANSWER
//	...
//	# end attempts N missed M late L
//
// The header comes first. Attempt lines come in completion order (a reader sorts them by
// SEQ): attempt SEQ was due at t0 + SEQ*interval; START_NS and END_NS are unix nanoseconds
// (wall clock), taken just before the connect system call and when the result was known; the
// starts increase with SEQ. ANSWER is the line the endpoint sent (ok) or a short reason, with
// blanks turned into '_'; "-" for none. The end line comes last, once every attempt started
// has been printed: attempts started, slots skipped because MaxInflight attempts were open,
// attempts started more than one interval after their slot.
const (
	HeaderTag  = "# probe"
	EndTag     = "# end"
	AttemptTag = "c"
)

// Result is what became of one attempt.
type Result uint8

const (
	OK          Result = iota // connected and a non-empty line read
	NoAnswer                  // connected, but EOF, a reset or the deadline came before a line
	Refused                   // the connection was refused (RST, ICMP port unreachable)
	Timeout                   // no connection by the deadline (SYN or SYN-ACK dropped)
	Unreachable               // ICMP host/net unreachable or prohibited, no route
	Error                     // anything else (the answer says what)
)

var resultNames = [...]string{OK: "ok", NoAnswer: "noanswer", Refused: "refused", Timeout: "timeout", Unreachable: "unreachable", Error: "error"}

func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "result" + strconv.Itoa(int(r))
}

// ResultNames are the RESULT words of the output, in the order of the constants.
func ResultNames() []string { return append([]string(nil), resultNames[:]...) }

// Defaults and bounds of the options (the command's flags show them).
const (
	DefaultInterval    = time.Millisecond
	DefaultTimeout     = 250 * time.Millisecond
	DefaultMaxInflight = 4096
	// MinInterval is the shortest interval accepted: one CPU completes at most about 20,000
	// attempts per second (50 µs each, measured on loopback), and a much shorter interval
	// would only make every attempt late.
	MinInterval = 10 * time.Microsecond
)

// Options are one prober run.
type Options struct {
	// Targets are IPv4 addresses and ports (tcp4): attempt SEQ goes to Targets[SEQ mod
	// len(Targets)]. Several ports of one Service multiply the connection tuples the prober
	// has (see SrcPortLo).
	Targets  []netip.AddrPort
	Interval time.Duration // attempt k is due at t0 + k*Interval
	Timeout  time.Duration // per attempt: connect and read the answer by start+Timeout
	Duration time.Duration // how long to start attempts; 0: until the context ends
	// MaxInflight is how many attempts may be open at once; a slot that finds that many
	// open is skipped (counted as missed) rather than queued, so that a black hole cannot
	// exhaust the process's file descriptors.
	MaxInflight int
	// SrcPortLo..SrcPortHi are the source ports attempts bind, in turn (a port in use is
	// passed over); 0, 0: the kernel picks them. Taking them in turn puts the longest time
	// between two attempts with the same connection tuple: an attempt that was not answered
	// leaves a connection-tracking entry in SYN_SENT on the nodes it crossed, which the
	// kernel keeps for 120 s (nf_conntrack_tcp_timeout_syn_sent), and a later SYN with the
	// same tuple follows that entry, NAT and all, instead of the rules of its time. A run
	// begins at the port of its start time's slot (firstSrcOffset), so runs that follow one
	// another go on through the range instead of starting over. The kernel's own choice walks its ephemeral range (28,232 ports by default) and comes back
	// to a port within 30 s at 1,000 attempts/s: after a Service was added, attempts whose
	// tuple had been tried while it was missing still failed. 1024-65535 with two target
	// ports give 129,024 tuples, 129 s at 1,000 attempts/s.
	SrcPortLo, SrcPortHi uint16
}

// ConfigError names the option that is wrong (the command reports it as a usage error naming
// its flag).
type ConfigError struct{ Field, Msg string }

func (e *ConfigError) Error() string { return e.Field + " " + e.Msg }

// Check validates o.
func (o Options) Check() error {
	switch {
	case len(o.Targets) == 0:
		return &ConfigError{"target", "missing: an IPv4 address and a port are required, e.g. 10.96.0.10:80"}
	case o.SrcPortLo > o.SrcPortHi || (o.SrcPortLo == 0) != (o.SrcPortHi == 0):
		return &ConfigError{"src-ports", fmt.Sprintf("%d-%d: give LO-HI with 1 <= LO <= HI <= 65535, or 0 for the kernel's choice", o.SrcPortLo, o.SrcPortHi)}
	case o.Interval < MinInterval:
		return &ConfigError{"interval", fmt.Sprintf("%v must be at least %v", o.Interval, MinInterval)}
	case o.Timeout <= 0:
		return &ConfigError{"timeout", fmt.Sprintf("%v must be > 0", o.Timeout)}
	case o.Duration < 0:
		return &ConfigError{"duration", fmt.Sprintf("%v must be >= 0 (0: until SIGINT/SIGTERM)", o.Duration)}
	case o.MaxInflight < 1:
		return &ConfigError{"max-inflight", fmt.Sprintf("%d must be >= 1", o.MaxInflight)}
	}
	for _, t := range o.Targets {
		if !t.IsValid() || !t.Addr().Is4() || t.Port() == 0 {
			return &ConfigError{"target", fmt.Sprintf("%q: an IPv4 address and a port are required, e.g. 10.96.0.10:80", t)}
		}
	}
	return nil
}

// TargetsString is targets as the header and the command line write them, comma-separated.
func TargetsString(targets []netip.AddrPort) string {
	s := make([]string, len(targets))
	for i, t := range targets {
		s[i] = t.String()
	}
	return strings.Join(s, ",")
}

// Summary is what a run did: the numbers of its end line.
type Summary struct {
	Attempts int64 // attempts started (each printed one line)
	Missed   int64 // slots skipped because MaxInflight attempts were open
	Late     int64 // attempts started more than one interval after their slot
}

// RaiseOpenFileLimit raises the soft limit on open files to the hard one and returns it: each
// open attempt holds a socket, and at 2,000 attempts/s against a black hole with a 250 ms
// timeout 500 are open at once (Go's runtime already raises the limit at start; doing it
// here keeps the prober right should that change, and tells the caller the limit).
func RaiseOpenFileLimit() (uint64, error) {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}

// maxAnswer bounds the answer kept per attempt; a longer line is cut. Endpoints answer with
// their address, which fits many times over.
const maxAnswer = 96

// record is one finished attempt on its way to the writer: a value of fixed size, so that an
// attempt makes no strings or buffers of its own (dialing allocates enough: 30 objects).
type record struct {
	seq, start, end int64
	result          Result
	n               uint8
	answer          [maxAnswer]byte
}

type prober struct {
	targets  []string
	srcLo    uint32
	srcN     uint32        // ports in SrcPortLo..SrcPortHi; 0: the kernel picks
	srcNext  atomic.Uint32 // the next one to try, as an offset from srcLo
	t0       time.Time
	interval time.Duration
	timeout  time.Duration

	out      chan record
	stamped  chan struct{} // an attempt has taken its start (see attempt)
	wg       sync.WaitGroup
	inflight atomic.Int64
	late     atomic.Int64
}

// Run probes o.Target until o.Duration has passed (counted from the first slot) or ctx ends,
// writing the output to w, then waits for the attempts still open (each ends by its own
// deadline, at most o.Timeout later), prints the end line and returns. An error is returned
// only if the prober could not run or its output could not be written (writing stops the
// run); a run ended by ctx is a normal end.
//
// The schedule is kept by a periodic timerfd (CLOCK_MONOTONIC) read through Go's poller: the
// runtime's own timers wake a sleeping process with a 1 ms granularity (epoll_wait's timeout
// is in milliseconds), which would turn a 0.5 ms schedule into pairs of attempts 1 ms apart,
// while a timerfd becoming readable wakes epoll at once. Its expiration count also tells how
// many slots passed while the scheduler was held up, so the schedule never drifts.
func Run(ctx context.Context, w io.Writer, o Options) (Summary, error) {
	var sum Summary
	if err := o.Check(); err != nil {
		return sum, err
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return sum, fmt.Errorf("timerfd_create: %w", err)
	}
	tf := os.NewFile(uintptr(fd), "timerfd")
	defer tf.Close()
	// A non-blocking descriptor makes a pollable File; only a pollable one takes deadlines,
	// which is how ctx interrupts the wait below.
	if err := tf.SetReadDeadline(time.Time{}); err != nil {
		return sum, fmt.Errorf("timerfd is not pollable: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatch := context.AfterFunc(ctx, func() { tf.SetReadDeadline(time.Unix(1, 0)) })
	defer stopWatch()

	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return sum, fmt.Errorf("clock_gettime: %w", err)
	}
	p := &prober{
		srcLo:    uint32(o.SrcPortLo),
		t0:       time.Now(), // the same instant as mono, within a few ns
		interval: o.Interval,
		timeout:  o.Timeout,
		out:      make(chan record, 1024),
		stamped:  make(chan struct{}, 1),
	}
	for _, t := range o.Targets {
		p.targets = append(p.targets, t.String())
	}
	if o.SrcPortLo != 0 {
		p.srcN = uint32(o.SrcPortHi) - uint32(o.SrcPortLo) + 1
		p.srcNext.Store(firstSrcOffset(p.t0, o.Interval, p.srcN))
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(bw, "%s target %s interval_ns %d timeout_ns %d t0_ns %d\n", HeaderTag, TargetsString(o.Targets), o.Interval.Nanoseconds(), o.Timeout.Nanoseconds(), p.t0.UnixNano())
	if err := bw.Flush(); err != nil {
		return sum, fmt.Errorf("writing the output: %w", err)
	}
	// First expiration at t0 itself (already past, so at once), then one per interval.
	spec := unix.ItimerSpec{Value: mono, Interval: unix.NsecToTimespec(o.Interval.Nanoseconds())}
	if err := unix.TimerfdSettime(fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return sum, fmt.Errorf("timerfd_settime: %w", err)
	}

	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		werr = p.write(bw, cancel)
	}()

	slots := int64(-1) // no end
	if o.Duration > 0 {
		slots = int64((o.Duration + o.Interval - 1) / o.Interval)
	}
	var (
		next    int64 // the next slot
		buf     [8]byte
		loopErr error
	)
	for (slots < 0 || next < slots) && ctx.Err() == nil {
		if _, err := tf.Read(buf[:]); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				loopErr = fmt.Errorf("reading the timerfd: %w", err)
			}
			break
		}
		for n := binary.NativeEndian.Uint64(buf[:]); n > 0 && (slots < 0 || next < slots) && ctx.Err() == nil; n-- {
			if p.inflight.Load() >= int64(o.MaxInflight) {
				sum.Missed++
			} else {
				sum.Attempts++
				p.inflight.Add(1)
				p.wg.Add(1)
				go p.attempt(next)
				<-p.stamped
			}
			next++
		}
	}

	p.wg.Wait()
	close(p.out)
	<-written
	sum.Late = p.late.Load()
	if werr != nil {
		return sum, fmt.Errorf("writing the output: %w", werr)
	}
	fmt.Fprintf(bw, "%s attempts %d missed %d late %d\n", EndTag, sum.Attempts, sum.Missed, sum.Late)
	if err := bw.Flush(); err != nil {
		return sum, fmt.Errorf("writing the output: %w", err)
	}
	return sum, loopErr
}

// write prints the records as they come and flushes whenever none is queued, so that a reader
// polling the output while the prober runs sees every finished attempt within moments. On a
// write error it stops the run (stop) and drains the rest unwritten.
func (p *prober) write(bw *bufio.Writer, stop func()) error {
	var (
		line []byte = make([]byte, 0, 64+maxAnswer)
		err  error
	)
	for r := range p.out {
		if err != nil {
			continue
		}
		line = r.appendLine(line[:0])
		if _, err = bw.Write(line); err == nil && len(p.out) == 0 {
			err = bw.Flush()
		}
		if err != nil {
			stop()
		}
	}
	return err
}

func (r *record) appendLine(b []byte) []byte {
	b = append(b, AttemptTag...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.seq, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.start, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.end, 10)
	b = append(b, ' ')
	b = append(b, r.result.String()...)
	b = append(b, ' ')
	if r.n == 0 {
		b = append(b, '-')
	} else {
		b = append(b, r.answer[:r.n]...)
	}
	return append(b, '\n')
}

// firstSrcOffset is where in the source port range a run started at t0 begins: the slot of t0
// on the wall clock (t0 / interval) modulo the range, so that a run continues where the one
// before it left off (probers started one after another, as the change scenario starts one per
// change, would otherwise all begin at the first port and reuse each other's tuples at once: a
// run stopped while an attempt was half open leaves a tracked connection that the next run's
// SYN with the same tuple follows, answered whatever the rules now say).
func firstSrcOffset(t0 time.Time, interval time.Duration, n uint32) uint32 {
	return uint32(uint64(t0.UnixNano()/max(interval.Nanoseconds(), 1)) % uint64(n))
}

// bindNext binds the socket to the next source port of the range that is free (see
// Options.SrcPortLo), passing over at most 64 in use.
func (p *prober) bindNext(fd int) error {
	var err error
	for range 64 {
		port := p.srcLo + (p.srcNext.Add(1)-1)%p.srcN
		if err = unix.Bind(fd, &unix.SockaddrInet4{Port: int(port)}); err != unix.EADDRINUSE {
			return err
		}
	}
	return fmt.Errorf("bind: 64 source ports in a row in use: %w", err)
}

// attempt is slot seq's connection attempt, run in a goroutine of its own.
func (p *prober) attempt(seq int64) {
	defer p.wg.Done()
	r := record{seq: seq}
	start := time.Now()
	if start.Sub(p.t0)-time.Duration(seq)*p.interval > p.interval {
		p.late.Add(1)
	}
	r.start = start.UnixNano()
	deadline := start.Add(p.timeout)
	// The start is stamped again in Control, right before the connect system call sends the
	// SYN: getting there (address, socket, options) takes 13 µs typically but up to 300 µs
	// on a busy CPU, which would blur when the attempt met the data plane. The scheduler
	// waits for that stamp before it starts the next attempt, so that starts follow slots:
	// attempts started together after a stall would otherwise run in the Go scheduler's
	// order (the newest first), and an attempt of a later slot could meet the data plane
	// before an earlier one, a flap that never was. KeepAlive -1: a probe connection lives
	// for milliseconds; keep-alive options would only cost system calls.
	stamped := false
	d := net.Dialer{Deadline: deadline, KeepAlive: -1, Control: func(_, _ string, rc syscall.RawConn) error {
		var berr error
		if p.srcN > 0 {
			if err := rc.Control(func(fd uintptr) { berr = p.bindNext(int(fd)) }); err != nil {
				berr = err
			}
		}
		r.start = time.Now().UnixNano()
		if !stamped { // once: a literal address is dialed once, but say it only once anyway
			stamped = true
			p.stamped <- struct{}{}
		}
		return berr
	}}
	c, err := d.Dial("tcp4", p.targets[seq%int64(len(p.targets))])
	if !stamped { // no socket to connect (out of descriptors, say)
		p.stamped <- struct{}{}
	}
	if err != nil {
		r.end = time.Now().UnixNano()
		var why string
		r.result, why = classify(err)
		r.setAnswer(why)
	} else {
		tc := c.(*net.TCPConn)
		r.result = r.readAnswer(tc, deadline)
		r.end = time.Now().UnixNano()
		// Close with a reset (SO_LINGER 0): the endpoint has already answered, and a
		// normal close would leave this side in TIME_WAIT whenever its FIN goes out first,
		// holding the ephemeral port for 60 s; at 2,000 attempts/s to one address:port the
		// 28,000 ports of the default range would run out in 14 s.
		tc.SetLinger(0)
		tc.Close()
	}
	p.out <- r
	p.inflight.Add(-1)
}

// readAnswer reads the endpoint's line into r.answer: until the first '\n', EOF (what came
// before it is the line) or a full buffer (the line is cut).
func (r *record) readAnswer(c *net.TCPConn, deadline time.Time) Result {
	if err := c.SetDeadline(deadline); err != nil {
		r.setAnswer(errText(err))
		return NoAnswer
	}
	buf := r.answer[:]
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		for i := n; i < n+m; i++ {
			if buf[i] == '\n' {
				return r.setLine(buf[:i])
			}
		}
		n += m
		if err != nil {
			if err == io.EOF && n > 0 {
				break
			}
			if err == io.EOF {
				r.setAnswer("eof")
			} else {
				r.setAnswer(errText(err))
			}
			return NoAnswer
		}
	}
	return r.setLine(buf[:n])
}

// setLine makes line (which lies in r.answer) the answer, trimmed and with blanks and control
// characters turned into '_'; an empty line is no answer.
func (r *record) setLine(line []byte) Result {
	i, j := 0, len(line)
	for i < j && line[i] <= ' ' {
		i++
	}
	for j > i && line[j-1] <= ' ' {
		j--
	}
	if i == j {
		r.setAnswer("empty_line")
		return NoAnswer
	}
	n := copy(r.answer[:], line[i:j])
	for k := range n {
		if c := r.answer[k]; c <= ' ' || c == 0x7f {
			r.answer[k] = '_'
		}
	}
	r.n = uint8(n)
	return OK
}

// setAnswer makes s the answer, blanks turned into '_' and cut to fit.
func (r *record) setAnswer(s string) {
	n := copy(r.answer[:], s)
	for k := range n {
		if c := r.answer[k]; c <= ' ' || c == 0x7f {
			r.answer[k] = '_'
		}
	}
	r.n = uint8(n)
}

// classify says what a failed dial means, with a short reason: the errno's text where the
// kernel gave one ("connection refused", "no route to host": it tells a refusal from a reset,
// or a missing route from an ICMP), none for a timeout, else the innermost error's text.
func classify(err error) (Result, string) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ECONNREFUSED, syscall.ECONNRESET:
			return Refused, errno.Error()
		case syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN, syscall.ENETDOWN, syscall.ENONET:
			return Unreachable, errno.Error()
		case syscall.ETIMEDOUT:
			return Timeout, ""
		}
		return Error, errno.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Timeout, "" // the result says it all
	}
	return Error, errText(err)
}

// errText is the innermost error's text ("i/o timeout", "connection reset by peer"), without
// the operation and addresses the outer ones add.
func errText(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}
