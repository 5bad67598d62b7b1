package main

// The backends register themselves (cluster.RegisterBackend) when their package is linked in:
// this file and backends_kube.go are the only places the CLI names them for runs. Their own
// housekeeping commands are in labcmd.go and kubecmd.go.
import (
	_ "github.com/cnibench/cnibench/internal/lab"
)

// leftOut says which backends this build left out and how to get them ("": none).
var leftOut string
