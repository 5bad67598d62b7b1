package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/driver"
)

// Bad flags of probe are usage errors (exit 2) that name the flag, on one line, before any
// attempt is made.
func TestProbeUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"probe"}, "--target"},
		{[]string{"probe", "--target", "10.0.0.1"}, "--target"},
		{[]string{"probe", "--target", "10.0.0.1:0"}, "--target"},
		{[]string{"probe", "--target", "[fe80::1]:80"}, "--target"},
		{[]string{"probe", "--target", "svc.ns:80"}, "--target"},
		{[]string{"probe", "--target", "10.0.0.1:80", "--interval", "1us"}, "--interval 1µs must be at least 10µs"},
		{[]string{"probe", "--target", "10.0.0.1:80", "--interval", "fast"}, "--interval"},
		{[]string{"probe", "--target", "10.0.0.1:80", "--timeout", "0s"}, "--timeout"},
		{[]string{"probe", "--target", "10.0.0.1:80", "--duration", "-1s"}, "--duration"},
		{[]string{"probe", "--target", "10.0.0.1:80", "--max-inflight", "0"}, "--max-inflight"},
		{[]string{"probe", "--target", "10.0.0.1:80", "extra"}, "takes no arguments"},
		{[]string{"answer"}, "--port 0"},
		{[]string{"answer", "--port", "70000"}, "--port 70000"},
		{[]string{"answer", "--port", "80", "extra"}, "takes no arguments"},
	} {
		code, stderr := captureStderr(t, func() int { return execute(c.args) })
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cnibench %s: exit %d, stderr %q; want exit 2 and one line with %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// The command ProbeCommand builds runs: against a closed loopback port every attempt of
// --duration is refused, and the output ends with the end line.
func TestProbeRuns(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	argv := driver.ProbeCommand("cnibench", driver.ProbeSpec{Target: target, Interval: 2e6, Timeout: 1e8, Duration: 40e6})
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(argv[1:])
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	r, err := driver.ParseProbe(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if r.Target != target || !r.Ended || r.End.Attempts != 20 || r.Count(driver.ProbeRefused) != 20 {
		t.Errorf("target %s, ended %v %+v, %d refused; want 20 refused:\n%s", r.Target, r.Ended, r.End, r.Count(driver.ProbeRefused), out.String())
	}
}

// probe is for scenarios, not people: the help does not list it.
func TestProbeHidden(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{"probe", "answer"} {
		if strings.Contains(out.String(), hidden) {
			t.Errorf("cnibench --help lists %s:\n%s", hidden, out.String())
		}
	}
}
