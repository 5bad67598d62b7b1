package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
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
		{[]string{"pkt", "gen", "--dst", "10.0.0.2", "--engine", "dpdk"}, `--engine: unknown packet engine "dpdk" (valid: af_packet)`},
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
