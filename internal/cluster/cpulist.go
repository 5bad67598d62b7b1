package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseCPUList reads a Linux CPU list ("0-3,6", as cpuset.cpus and Cpus_allowed_list give it).
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q", s)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// FormatCPUList writes CPUs as a list of them, comma-separated ("0,1,3").
func FormatCPUList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// AllowedCPUs reads the CPUs a process may run on from its /proc/PID/status
// (Cpus_allowed_list).
func AllowedCPUs(status []byte) ([]int, error) {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return ParseCPUList(strings.TrimSpace(v))
		}
	}
	return nil, errors.New("no Cpus_allowed_list in the process status")
}
