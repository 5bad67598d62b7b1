package cluster

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
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

// LockedBuffer is a bytes.Buffer safe for one writer and concurrent readers: the output of a
// command still running.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Bytes returns a copy of the contents.
func (b *LockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.b.Bytes()...)
}
