package main

// The backends register themselves (cluster.RegisterBackend) when their package is linked in:
// this file is the only place the CLI names them for runs. Their own housekeeping commands
// are in labcmd.go and kubecmd.go.
import (
	_ "github.com/cnibench/cnibench/internal/kube"
	_ "github.com/cnibench/cnibench/internal/lab"
)
