// Package kinds links every network-function kind into a binary: the kinds register
// themselves with package nf from init, and whoever needs them all (the lab, the CLI, the
// kind-by-kind tests and benchmarks) imports this package for its side effects.
package kinds

import (
	// Each kind's package, one line each.
	_ "github.com/cnibench/cnibench/internal/nf/dpdk"
	_ "github.com/cnibench/cnibench/internal/nf/ebpf"
	_ "github.com/cnibench/cnibench/internal/nf/kernel"
	_ "github.com/cnibench/cnibench/internal/nf/ovs"
	_ "github.com/cnibench/cnibench/internal/nf/userspace"
)
