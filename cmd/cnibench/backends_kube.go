//go:build !labonly

package main

// The kube backend links client-go, most of a cold build's time: `go build -tags labonly`
// (make demo) leaves it out, and kubecmd_labonly.go says so.
import (
	_ "github.com/cnibench/cnibench/internal/kube"
)
