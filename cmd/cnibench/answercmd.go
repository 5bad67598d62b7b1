package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cnibench/cnibench/internal/connprobe"
)

// newAnswerCmd is the prober's other end in an endpoint pod of a cluster (the lab answers from
// cnibench's own process): every TCP connection on --port is answered with the address it
// was reached at and closed. Hidden: the kube backend runs it as an answering pod's command.
func newAnswerCmd() *cobra.Command {
	var port int
	cmd := &cobra.Command{
		Use:    "answer --port N",
		Short:  "Answer every TCP connection on --port with the address it was reached at, one line",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 1 || port > 65535 {
				return usagef("--port %d: give a TCP port 1-65535", port)
			}
			if _, err := connprobe.RaiseOpenFileLimit(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "cnibench answer: raising the open-file limit: %v\n", err)
			}
			ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
			if err != nil {
				return fmt.Errorf("answer: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			context.AfterFunc(ctx, func() { ln.Close() })
			return connprobe.Answer(ln)
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "TCP port to answer on (required)")
	return cmd
}
