package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cnibench/cnibench/internal/connprobe"
)

// newProbeCmd is the connection prober a scenario runs inside the client pod (the lab runs
// this executable in the pod's network namespace; a cluster runs it from the tools image). It
// is hidden: users do not run it by hand, the scenario that measures how long a change takes
// to reach the data plane does, and reads its output with driver.ParseProbe.
func newProbeCmd() *cobra.Command {
	var (
		o        connprobe.Options
		target   string
		srcPorts string
	)
	cmd := &cobra.Command{
		Use:    "probe --target IP:PORT[,IP:PORT...]",
		Short:  "Start a TCP connection attempt to IP:PORT every --interval and print one line per attempt",
		Hidden: true,
		Long: `Start a new TCP connection attempt to --target every --interval, on an absolute schedule (attempt
k is due at t0 + k*interval) and whatever became of the earlier ones, each with its own
deadline (--timeout); a connected attempt reads the one line the endpoint answers with. Several
targets are tried in turn; source ports are taken in turn from --src-ports. Prints
a header, then one line per attempt as it finishes:

  # probe target IP:PORT interval_ns N timeout_ns M t0_ns T
  c SEQ START_NS END_NS RESULT ANSWER
  # end attempts N missed M late L

START_NS and END_NS are unix nanoseconds; RESULT is one of ok, noanswer, refused, timeout,
unreachable, error; ANSWER is the line read (ok) or a short reason. A slot that finds
--max-inflight attempts open is skipped (missed). Runs for --duration, or until SIGINT/SIGTERM;
then it waits for the open attempts, prints the end line and exits 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, t := range strings.Split(target, ",") {
				ap, err := netip.ParseAddrPort(t)
				if err != nil {
					return usagef("--target %q: an IPv4 address and a port are required, e.g. 10.96.0.10:80 (several: comma-separated)", t)
				}
				o.Targets = append(o.Targets, ap)
			}
			if srcPorts != "0" {
				lo, hi, ok := strings.Cut(srcPorts, "-")
				l, err1 := strconv.ParseUint(lo, 10, 16)
				h, err2 := strconv.ParseUint(hi, 10, 16)
				if !ok || err1 != nil || err2 != nil {
					return usagef("--src-ports %q: give LO-HI (e.g. 1024-65535), or 0 for the kernel's choice", srcPorts)
				}
				o.SrcPortLo, o.SrcPortHi = uint16(l), uint16(h)
			}
			if err := o.Check(); err != nil {
				var ce *connprobe.ConfigError
				if errors.As(err, &ce) {
					return usagef("--%s %s", ce.Field, ce.Msg)
				}
				return usageError{err.Error()}
			}
			// Warnings are '#' lines, which a reader of the output (stdout and stderr
			// together, as a pod's exec returns them) takes for comments.
			if limit, err := connprobe.RaiseOpenFileLimit(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "# warning: cnibench probe: raising the open-file limit: %v\n", err)
			} else if uint64(o.MaxInflight)+64 > limit {
				fmt.Fprintf(cmd.ErrOrStderr(), "# warning: cnibench probe: --max-inflight %d is near the open-file limit %d: attempts beyond it fail with \"too many open files\"\n", o.MaxInflight, limit)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if _, err := connprobe.Run(ctx, cmd.OutOrStdout(), o); err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "IPv4 address:port to connect to (required); several, comma-separated, are tried in turn")
	f.StringVar(&srcPorts, "src-ports", "1024-65535", "source ports the attempts bind, in turn, so that a connection tuple comes back as late as possible (0: the kernel picks them)")
	f.DurationVar(&o.Interval, "interval", connprobe.DefaultInterval, fmt.Sprintf("time between the starts of two attempts (at least %v)", connprobe.MinInterval))
	f.DurationVar(&o.Timeout, "timeout", connprobe.DefaultTimeout, "deadline of each attempt, from its start: connected and answered by then")
	f.DurationVar(&o.Duration, "duration", 0, "how long to start attempts (0: until SIGINT/SIGTERM)")
	f.IntVar(&o.MaxInflight, "max-inflight", connprobe.DefaultMaxInflight, "attempts open at once at most; a slot that finds them all open is skipped and counted as missed")
	return cmd
}
