package procs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Children returns the PIDs of pid's children (its main thread's, /proc/PID/task/PID/children).
func Children(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// switches is pid's count of context switches (voluntary and not) and whether it is asleep
// (state S: blocked in a system call), from /proc/PID/status.
func switches(pid int) (n uint64, asleep bool, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			asleep = strings.HasPrefix(v, "S")
		case "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches":
			c, _ := strconv.ParseUint(v, 10, 64)
			n += c
		}
	}
	return n, asleep, nil
}

// SignalIdleChildren sends sig to each child of pid that stayed asleep, without running once,
// for quiet (it sleeps quiet between two looks), and returns the PIDs it signalled. A child
// that ran in between, or that is gone, is left alone.
func SignalIdleChildren(pid int, sig syscall.Signal, quiet time.Duration) ([]int, error) {
	kids, err := Children(pid)
	if err != nil || len(kids) == 0 {
		return nil, err
	}
	before := make(map[int]uint64, len(kids))
	for _, c := range kids {
		if n, asleep, err := switches(c); err == nil && asleep {
			before[c] = n
		}
	}
	if len(before) == 0 {
		return nil, nil
	}
	time.Sleep(quiet)
	var sent []int
	for c, n0 := range before {
		if n, asleep, err := switches(c); err == nil && asleep && n == n0 {
			if syscall.Kill(c, sig) == nil {
				sent = append(sent, c)
			}
		}
	}
	return sent, nil
}
