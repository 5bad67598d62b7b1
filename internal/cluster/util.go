package cluster

import (
	"bytes"
	"context"
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

// Parallel calls fn(i) for i in [0, n) on at most workers goroutines and returns the first
// error (the remaining items are not started once one failed or ctx ended).
func Parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	if workers < 1 {
		workers = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for w := 0; w < workers && w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := fn(i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case work <- i:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// SilentPods returns n silent pod specs named prefix0, prefix1, ... with the given labels,
// for the backend to spread over its nodes.
func SilentPods(n int, prefix string, labels map[string]string) []PodSpec {
	specs := make([]PodSpec, n)
	for i := range specs {
		specs[i] = PodSpec{Name: fmt.Sprintf("%s%d", prefix, i), Labels: labels, Silent: true}
	}
	return specs
}

// ServicesWithEndpoints returns n silent pods and n Services (prefix0.., each Service
// selecting its own pod alone), the pods declaring TCP targetPort named "http" and each
// Service forwarding port 80 to it: seed 001's extra Services, each with its own endpoint.
func ServicesWithEndpoints(n int, prefix string, labels map[string]string, targetPort int) ([]PodSpec, []ServiceSpec) {
	pods := SilentPods(n, prefix, nil)
	svcs := make([]ServiceSpec, n)
	for i := range pods {
		sel := map[string]string{"cnibench.io/" + prefix: strconv.Itoa(i)}
		for k, v := range labels {
			sel[k] = v
		}
		pods[i].Labels = sel
		pods[i].Ports = []ContainerPort{{Name: "http", Port: targetPort, Protocol: "tcp"}}
		svcs[i] = ServiceSpec{Name: fmt.Sprintf("%s%d", prefix, i), Selector: sel,
			Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: targetPort, Protocol: "tcp"}}}
	}
	return pods, svcs
}

// Selects reports whether a Service selector picks a pod with these labels (every selector
// label present with its value; an empty selector picks nothing, as a Service without
// selector has no endpoints of its own).
func Selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
