// Package cpupin runs code on one CPU: it pins the calling OS thread (locked to its
// goroutine) to a CPU and gives it its former CPU set back afterwards. The kernel runs a
// system call's work (an nftables commit, a bpf map update) on the CPU of the thread that
// makes it, and a child process starts with its parent thread's CPU set, so pinning the
// thread pins that work too. Threads the Go runtime starts later (netns.Do's) are not pinned.
package cpupin

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Pin allows the calling thread only on cpu (nothing happens when cpu < 0); the caller must
// have locked its goroutine to the thread (runtime.LockOSThread). restore gives the thread its
// former CPU set back.
func Pin(cpu int) (restore func() error, err error) {
	if cpu < 0 {
		return func() error { return nil }, nil
	}
	var orig, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return nil, fmt.Errorf("read the thread's CPU set: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pin the thread to CPU %d: %w", cpu, err)
	}
	return func() error {
		if err := unix.SchedSetaffinity(0, &orig); err != nil {
			return fmt.Errorf("give the thread its CPU set back: %w", err)
		}
		return nil
	}, nil
}

// Run runs fn on the calling goroutine, locked to its thread and pinned to cpu (any CPU when
// cpu < 0), and returns fn's error. If the thread cannot get its former CPU set back it stays
// locked, so the runtime ends it with the goroutine rather than give a pinned thread to other
// goroutines, and Run returns that error too.
func Run(cpu int, fn func() error) error {
	runtime.LockOSThread()
	restore, err := Pin(cpu)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if rerr := restore(); rerr != nil {
		return errors.Join(ferr, rerr)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Allowed lists the CPUs the calling thread may run on, in order.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read the CPU set: %w", err)
	}
	var cpus []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) == 0 {
		return nil, errors.New("no CPU in this thread's CPU set")
	}
	return cpus, nil
}
