package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseProcStat parses the aggregate "cpu" line (the first) of /proc/stat, which every backend
// reads for node CPU accounting.
func ParseProcStat(b []byte) (CPUSample, error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return CPUSample{}, fmt.Errorf("unexpected /proc/stat first line %q", line)
	}
	v := make([]uint64, 8)
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return CPUSample{}, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	return CPUSample{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
}

// ListeningPorts parses /proc/net/tcp and /proc/net/tcp6 text (concatenated) into the set of
// local ports in LISTEN state (st 0A): how every backend tells that a server is ready.
func ListeningPorts(b []byte) map[int]bool {
	ports := map[int]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		if port, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil {
			ports[int(port)] = true
		}
	}
	return ports
}
