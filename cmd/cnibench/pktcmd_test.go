package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/pktengine"
)

// Bad flags of pkt gen / pkt recv are usage errors (exit 2) that name the flag, on one line,
// before anything is opened or sent.
func TestPktUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pkt", "gen"}, "--dst"},
		{[]string{"pkt", "gen", "--dst", "fe80::1"}, "--dst"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--size", "64"}, "--size: frame size 64 out of range for mode gtpu (100..1518"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--mode", "udp", "--size", "63"}, "--size"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--size", "jumbo"}, "--size"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--mode", "vxlan"}, "--mode"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--rate", "-5"}, "--rate -5"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--rate", "fast"}, "--rate"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--duration", "0s"}, "--duration"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--streams", "0"}, "--streams"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--teid", "4294967295", "--streams", "2"}, "--teid"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--rotate", "-1s"}, "--rotate"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--probe-rate", "-1"}, "--probe-rate"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--dst-mac", "02:00"}, "--dst-mac"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--dst-port", "0"}, "--dst-port"},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--engine", "dpdk"}, `--engine: unknown packet engine "dpdk" (valid: af_xdp, af_packet)`},
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--cpu", "4096"}, "--cpu"},
		{[]string{"pkt", "recv", "--duration", "-1s"}, "--duration"},
		{[]string{"pkt", "recv", "--engine", "x"}, "--engine"},
		{[]string{"pkt", "recv", "--cpu", "-2"}, "--cpu"},
		{[]string{"pkt", "recv", "--sink-port", "70000"}, "--sink-port"},
		{[]string{"pkt", "recv", "extra"}, "takes no arguments"},
		{[]string{"pkt", "fwd"}, "--to"},
		{[]string{"pkt", "fwd", "--to", "10.0.0.2"}, "--to"},
		{[]string{"pkt", "fwd", "--to", "10.0.0.2:2152", "--port", "0"}, "--port 0"},
		{[]string{"pkt", "fwd", "--to", "10.0.0.2:2152", "--rcvbuf", "-1"}, "--rcvbuf"},
		{[]string{"pkt", "knf"}, "--to"},
		{[]string{"pkt", "knf", "--to", "10.0.0.2"}, "--to"},
		{[]string{"pkt", "knf", "--to", "10.0.0.2:2152,fe80::1"}, "--to"},
		{[]string{"pkt", "knf", "--to", "10.0.0.2:2152", "--port", "70000"}, "--port 70000"},
		{[]string{"pkt", "knf", "--to", "10.0.0.2:2152", "--duration", "-1s"}, "--duration"},
		{[]string{"pkt", "knf", "--to", "10.0.0.2:2152", "--rules", "ebpf"}, "--rules"},
		{[]string{"pkt", "knf", "extra"}, "takes no arguments"},
		{[]string{"pkt", "xfwd"}, "--to"},
		{[]string{"pkt", "xfwd", "--to", "10.0.0.2"}, "--to"},
		{[]string{"pkt", "xfwd", "--to", "10.0.0.2:2152,fe80::1"}, "--to"},
		{[]string{"pkt", "xfwd", "--to", "10.0.0.2:2152", "--port", "70000"}, "--port 70000"},
		{[]string{"pkt", "xfwd", "--to", "10.0.0.2:2152", "--duration", "-1s"}, "--duration"},
		{[]string{"pkt", "xfwd", "--to", "10.0.0.2:2152", "--mode", "offload"}, "--mode"},
		{[]string{"pkt", "xfwd", "extra"}, "takes no arguments"},
		{[]string{"pkt", "nosuch"}, "unknown command"},
	} {
		code, stderr := captureStderr(t, func() int { return execute(c.args) })
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cnibench %s: exit %d, stderr %q; want exit 2 and one line with %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

func TestPktHelpShowsDefaults(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"pkt", "gen", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`--mode string`, `(default "gtpu")`, `(default "256")`, "(default 10000)", "(default 2s)", "--probe-rate", "(default 1)", "(default 2152)", "af_packet"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("pkt gen --help lacks %q:\n%s", want, out.String())
		}
	}
}

// captureStderr runs fn with os.Stderr going to a pipe and returns fn's result and what it
// wrote there.
func captureStderr(t *testing.T, fn func() int) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	code := fn()
	os.Stderr = orig
	w.Close()
	return code, <-got
}

// `pkt knf` and `pkt xfwd` run in a namespace: each says it is ready on stderr, forwards a
// datagram to its target from its own address, and when --duration has passed prints its
// result as one JSON object, its rules (nftables table, XDP program) gone.
func TestPktKernelForwardersRun(t *testing.T) {
	xdpOn := func(ns string) bool {
		h, err := netns.Netlink(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		lk, err := h.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		return lk.Attrs().Xdp != nil && lk.Attrs().Xdp.Attached
	}
	for i, c := range []struct {
		verb, ready string
		// check checks the result (stdout) and what is left in the VNF's namespace ns.
		check func(t *testing.T, stdout []byte, ns string)
	}{
		{"knf", pktengine.KnfReadyLine, func(t *testing.T, stdout []byte, ns string) {
			var res pktengine.KnfResult
			if err := json.Unmarshal(stdout, &res); err != nil || res.Packets != 1 || res.Port != pktengine.GTPPort || len(res.To) != 1 || res.Rules != pktengine.KnfNFTables || res.DurationS < 1.4 {
				t.Errorf("result %+v (%v), want 1 datagram forwarded by nftables in 1.5 s", res, err)
			}
			if out, err := netns.Output(netns.Path(ns), "nft", []string{"list", "tables"}, nil); err != nil || strings.Contains(string(out), pktengine.KnfTable) {
				t.Errorf("nft list tables after the run: %q, %v", out, err)
			}
		}},
		{"xfwd", pktengine.XfwdReadyLine, func(t *testing.T, stdout []byte, ns string) {
			var res pktengine.XfwdResult
			if err := json.Unmarshal(stdout, &res); err != nil || res.Packets != 1 || len(res.PacketsTo) != 1 || res.PacketsTo[0] != 1 || res.Port != pktengine.GTPPort ||
				len(res.To) != 1 || res.Mode != pktengine.XfwdGeneric || res.DurationS < 1.4 {
				t.Errorf("result %+v (%v), want 1 datagram forwarded in generic mode in 1.5 s", res, err)
			}
			if xdpOn(ns) {
				t.Error("the XDP program is still attached after pkt xfwd ended")
			}
		}},
	} {
		t.Run(c.verb, func(t *testing.T) {
			p := netnstest.NewPair(t, [2]string{"c", c.verb[:1]}, [2]string{"eth0", "eth0"}, netip.MustParsePrefix(fmt.Sprintf("10.254.%d.0/24", i+1)))
			var target *net.UDPConn
			if err := netns.Do(p.NS[0], func() (err error) {
				target, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 2153})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer target.Close()
			root := newRoot()
			var stdout bytes.Buffer
			stderr := &cluster.LockedBuffer{}
			root.SetOut(&stdout)
			root.SetErr(stderr)
			root.SetArgs([]string{"pkt", c.verb, "--to", netip.AddrPortFrom(p.IP[0], 2153).String(), "--duration", "1500ms"})
			done := make(chan error, 1)
			go func() { done <- netns.Do(p.NS[1], root.Execute) }()
			for deadline := time.Now().Add(5 * time.Second); !strings.Contains(string(stderr.Bytes()), c.ready); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q on stderr after 5 s: %q", c.ready, string(stderr.Bytes()))
				}
			}
			if c.verb == "xfwd" && !xdpOn(p.NS[1]) {
				t.Error("no XDP program on the VNF's eth0 once it is ready")
			}
			msg := "through pkt " + c.verb
			if err := netns.Do(p.NS[0], func() error {
				conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.IP[1].AsSlice(), Port: pktengine.GTPPort})
				if err != nil {
					return err
				}
				defer conn.Close()
				_, err = conn.Write([]byte(msg))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			_ = target.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, from, err := target.ReadFromUDP(buf)
			if err != nil || string(buf[:n]) != msg || !from.IP.Equal(p.IP[1].AsSlice()) {
				t.Errorf("at the target: %q from %v, %v; want the datagram from the VNF's address %s", buf[:n], from, err, p.IP[1])
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if strings.Count(stdout.String(), "\n") != 1 {
				t.Fatalf("stdout %q is not one JSON object", stdout.String())
			}
			c.check(t, stdout.Bytes(), p.NS[1])
		})
	}
}
