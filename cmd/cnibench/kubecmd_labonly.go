//go:build labonly

package main

import "github.com/spf13/cobra"

// A lab-only build (go build -tags labonly: what make demo builds, in a third of a cold full
// build's time) has no kube backend: its run and kube commands say so and how to get it.
func init() {
	leftOut = "this cnibench was built with -tags labonly (make demo) and has the lab backend only: `make build` builds it with the kube backend"
}

func newKubeCmd() *cobra.Command {
	cmd := group("kube", "Kube backend housekeeping (not in this lab-only build)")
	cmd.AddCommand(&cobra.Command{
		Use:   "clean",
		Short: "Delete what cnibench runs left on a cluster (not in this lab-only build)",
		Args:  noArgs,
		RunE:  func(*cobra.Command, []string) error { return usagef("kube clean: %s", leftOut) },
	})
	return cmd
}
