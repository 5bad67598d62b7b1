package main

import (
	"fmt"
	"time"

	"github.com/cnibench/cnibench/internal/image"
	"github.com/spf13/cobra"
)

func newImageCmd() *cobra.Command {
	cmd := group("image", "Build the tools image used on real Kubernetes clusters")
	var out, tag, format string
	build := &cobra.Command{
		Use:   "build",
		Short: "Assemble the tools image (iperf3, netperf, nginx, curl, busybox, cnibench) as a tarball",
		Long: `Assemble the tools image from this host's binaries and the shared libraries they need:
iperf3, netperf/netserver, nginx (serving /srv on port 8080), curl, taskset, busybox and this
cnibench binary. The result is a docker-archive (default; 'docker load' or
'ctr -n k8s.io images import') or an OCI layout tarball, for users to push to their registry.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("--out FILE is required (e.g. --out cnibench-tools.tar)")
			}
			if format != image.FormatDocker && format != image.FormatOCI {
				return usagef("--format: unknown format %q (valid: %s, %s)", format, image.FormatDocker, image.FormatOCI)
			}
			start := time.Now()
			m, err := image.Build(out, image.Options{Tag: tag, Format: format})
			if err != nil {
				return usageError{err.Error()}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "image %s written to %s (%s): %d files, %.1f MiB, in %.1f s\n",
				tag, out, format, len(m.Files), float64(m.Bytes)/(1<<20), time.Since(start).Seconds())
			return nil
		},
	}
	build.Flags().StringVar(&out, "out", "", "output tarball (required)")
	build.Flags().StringVar(&tag, "tag", image.DefaultTag, "image reference recorded in the tarball")
	build.Flags().StringVar(&format, "format", image.FormatDocker, "docker (docker-archive) or oci (OCI layout tarball)")
	cmd.AddCommand(build)
	return cmd
}
