package kinds_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	_ "github.com/cnibench/cnibench/internal/nf/kinds"
	"github.com/cnibench/cnibench/internal/nf/nftest"
)

// The user-space forwarders compared side by side at 64-byte frames.
var ppsKinds = []string{"userspace", "userspace-afxdp", "dpdk"}

const (
	ppsTrial   = 3 * time.Second
	ppsFrame   = 60  // a 64-byte Ethernet frame less its FCS (veth carries none)
	ppsBatch   = 256 // frames per sendmmsg
	ppsUDPPort = 5202
	senderCPU  = 0
	nfCPU      = 1
	settle     = 200 * time.Millisecond // for frames still in flight when the sender stops
)

// BenchmarkPPS measures how many 64-byte frames per second each user-space forwarder passes:
// a chain of one NF with 10 rules; the client blasts UDP frames of the allowed flow (to port
// 5202) from an AF_PACKET socket with sendmmsg, on CPU 0 for ppsTrial; the NF runs on CPU 1.
// offered_pps is what the client's socket sent, fwd_pps what reached the server's eth0 (its
// rx_packets counter, read over netlink in the server's namespace). Run it with
//
//	go test -run '^$' -bench PPS -benchtime 1x ./internal/nf/kinds/
//
// Kinds not registered in this build, or not usable on this host, are skipped with the reason.
func BenchmarkPPS(b *testing.B) {
	for _, name := range ppsKinds {
		b.Run(name, func(b *testing.B) {
			k, err := nf.Get(name)
			if err != nil {
				b.Skipf("kind %s is not registered: %v", name, err)
			}
			if err := k.Usable(); err != nil {
				b.Skipf("kind %s is not usable here: %v", name, err)
			}
			cpu := nfCPU
			if runtime.NumCPU() <= nfCPU {
				cpu = -1
			}
			ch := nftest.Build(b, &nftest.Recorder{Kind: k, CPU: &cpu}, 1, 10)
			frame, err := udpFrame(ch)
			if err != nil {
				b.Fatal(err)
			}
			// A socket on the server's port, never read: the server's stack drops what arrives
			// once its buffer is full, instead of answering every frame with an ICMP port
			// unreachable (whose route lookups, done before the rate limit, would run on the
			// NF's CPU: veth delivers in the sender's softirq).
			var sink net.PacketConn
			if err := netns.Do(ch.Spec.Server, func() (err error) {
				sink, err = net.ListenPacket("udp4", net.JoinHostPort(ch.ServerIP.String(), fmt.Sprint(ppsUDPPort)))
				return err
			}); err != nil {
				b.Fatal(err)
			}
			defer sink.Close()
			var offered, fwd float64
			b.ResetTimer()
			for range b.N {
				o, f, err := blast(ch, frame, ppsTrial)
				if err != nil {
					b.Fatal(err)
				}
				offered += o
				fwd += f
			}
			b.StopTimer()
			b.ReportMetric(fwd/float64(b.N), "fwd_pps")
			b.ReportMetric(offered/float64(b.N), "offered_pps")
		})
	}
}

func link(ns string) (index int, mac net.HardwareAddr, rx uint64, err error) {
	h, err := netns.Netlink(ns)
	if err != nil {
		return 0, nil, 0, err
	}
	defer h.Close()
	lk, err := h.LinkByName(nf.ClientIf)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s in %s: %w", nf.ClientIf, ns, err)
	}
	a := lk.Attrs()
	if a.Statistics != nil {
		rx = a.Statistics.RxPackets
	}
	return a.Index, a.HardwareAddr, rx, nil
}

// udpFrame is a 64-byte frame of the allowed UDP flow, client to server.
func udpFrame(ch *nf.Chain) ([]byte, error) {
	_, src, _, err := link(ch.Spec.Client)
	if err != nil {
		return nil, err
	}
	_, dst, _, err := link(ch.Spec.Server)
	if err != nil {
		return nil, err
	}
	f := make([]byte, ppsFrame)
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, nf.UDP
	binary.BigEndian.PutUint16(ip[2:], ppsFrame-14)
	s, d := ch.ClientIP.As4(), ch.ServerIP.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for i := 0; i < len(ip); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], ppsUDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp))) // checksum 0: none (IPv4)
	return f, nil
}

// blast sends frame from the client's eth0 as fast as one pinned thread can for d, and
// returns the offered and the forwarded rate (frames per second).
func blast(ch *nf.Chain, frame []byte, d time.Duration) (offered, fwd float64, err error) {
	ifindex, _, _, err := link(ch.Spec.Client)
	if err != nil {
		return 0, 0, err
	}
	fd := -1
	if err := netns.Do(ch.Spec.Client, func() (err error) {
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}) // protocol 0: send only
	}); err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return 0, 0, fmt.Errorf("sender socket: %w", err)
	}
	defer unix.Close(fd)

	iov := unix.Iovec{Base: &frame[0]}
	iov.SetLen(len(frame))
	msgs := make([]unix.Mmsghdr, ppsBatch)
	for i := range msgs {
		msgs[i].Hdr.Iov = &iov
		msgs[i].Hdr.Iovlen = 1
	}
	_, _, rx0, err := link(ch.Spec.Server)
	if err != nil {
		return 0, 0, err
	}
	type result struct {
		sent    uint64
		elapsed time.Duration
		err     error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread ends with the goroutine
		var r result
		if runtime.NumCPU() > senderCPU {
			var set unix.CPUSet
			set.Set(senderCPU)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				r.err = err
				done <- r
				return
			}
		}
		start := time.Now()
		end := start.Add(d)
		for i := 0; ; i++ {
			if i%16 == 0 && time.Now().After(end) {
				break
			}
			n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
			if errno != 0 && errno != unix.ENOBUFS && errno != unix.EAGAIN && errno != unix.EINTR {
				r.err = fmt.Errorf("sendmmsg: %w", errno)
				break
			}
			if errno == 0 {
				r.sent += uint64(n)
			}
		}
		r.elapsed = time.Since(start)
		done <- r
	}()
	r := <-done
	if r.err != nil {
		return 0, 0, r.err
	}
	time.Sleep(settle)
	_, _, rx1, err := link(ch.Spec.Server)
	if err != nil {
		return 0, 0, err
	}
	secs := r.elapsed.Seconds()
	return float64(r.sent) / secs, float64(rx1-rx0) / secs, nil
}
