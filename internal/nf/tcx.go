package nf

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// HaveTCX says why tcx links (Linux 6.6), on which the tc programs of the eBPF network
// functions and of the lab's eBPF data paths hang, cannot be attached here (nil when they can).
func HaveTCX() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		return fmt.Errorf("load a tc program: %w", err)
	}
	defer prog.Close()
	// No interface has this index: a kernel with tcx says ENODEV, one without says it does not
	// know the attach type.
	l, err := link.AttachTCX(link.TCXOptions{Program: prog, Interface: math.MaxInt32, Attach: ebpf.AttachTCXIngress})
	if err == nil {
		return l.Close()
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("the kernel has no tcx links (needs Linux 6.6+): %w", err)
	}
	return nil
}
