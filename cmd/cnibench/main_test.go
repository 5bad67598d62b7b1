package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Exit codes come from the error's type, never from its words: a runtime error that happens to
// say "requires " or "invalid argument" (as cobra's usage errors do) exits 1, not 2.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("netperf requires a running netserver"), 1},
		{errors.New("write /run/x: invalid argument"), 1},
		{errors.New("unknown command in the tool's output"), 1},
		{usagef("--repeat: 0 out of range"), 2},
		{fmt.Errorf("plan: %w", usageError{"bad"}), 2},
		{cluster.BadInput("missing tool iperf3"), 2},
		{exitError{130}, 130},
	} {
		if got := fail(tc.err); got != tc.want {
			t.Errorf("fail(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	for _, args := range [][]string{{"nosuchcmd"}, {"run", "--nosuchflag"}, {"version", "extra"}, {"lab", "nosuch"}, {"run", "--order", "random", "--scenario", "p2p"}} {
		if got := execute(args); got != 2 {
			t.Errorf("cnibench %v exits %d, want 2", args, got)
		}
	}
}
