// Command cnibench benchmarks container network data planes.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// usageError is a user mistake: one line on stderr, exit code 2, host untouched (backends
// report theirs as cluster.ErrBadInput, which exits the same way).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError carries an exit code without a message of its own (already printed).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "cnibench",
		Short: "Benchmark container network data planes (pod-to-pod, Services, policies, chains, VNFs)",
		Long: `cnibench benchmarks container network data planes. On the lab backend (the default) it builds
a whole cluster from Linux network namespaces on this host, wires pods the way Flannel or
Calico wire them (with the real CNI reference plugins), and measures pod-to-pod TCP/UDP
throughput, request/response latency and connection rate next to bare baselines.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see 'cnibench %s --help')", err, c.Name())
	})
	root.AddCommand(newRunCmd(), newListCmd(), newDoctorCmd(), newLabCmd(), newImageCmd(), newKubeCmd(), newReportCmd(), newExportCmd(), newPktCmd(), newVersionCmd())
	root.AddCommand(newProbeCmd())  // hidden: the connection prober of the change-propagation scenario
	root.AddCommand(newAnswerCmd()) // hidden: its other end in a cluster's endpoint pod
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the cnibench version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			build := ""
			if leftOut != "" {
				build = ", lab backend only: -tags labonly"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cnibench %s (%s, %s/%s%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH, build)
			return nil
		},
	}
}

// group is a command that only holds subcommands: without one it prints its help, with an
// unknown one it fails as a usage error (cobra checks names only on the root).
func group(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				var valid []string
				for _, c := range cmd.Commands() {
					valid = append(valid, c.Name())
				}
				return usagef("unknown command %q for \"%s\" (valid: %s)", args[0], cmd.CommandPath(), strings.Join(valid, ", "))
			}
			return cmd.Help()
		},
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q (see 'cnibench %s --help')", cmd.CommandPath(), args[0], cmd.Name())
	}
	return nil
}

func main() {
	// A closed pipe on stdout (`cnibench run ... | head`) must not kill a run with SIGPIPE
	// half-way, its lab standing: writes to it fail instead, and the run goes on to the end
	// and tears down what it built.
	signal.Ignore(syscall.SIGPIPE)
	os.Exit(execute(os.Args[1:]))
}

func execute(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	// An unknown command is the user's mistake; find it before running anything (cobra's own
	// error for it is untyped).
	if _, _, err := root.Find(args); err != nil {
		return fail(usageError{err.Error() + " (see 'cnibench --help')"})
	}
	return fail(root.Execute())
}

// fail prints err on one line and returns the exit code: 0 without an error, 2 for a user's
// mistake (usageError or a backend's cluster.ErrBadInput: recognised by type, never by the
// words of a message), 1 for anything else.
func fail(err error) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(os.Stderr, "cnibench: %s\n", strings.Join(strings.Fields(err.Error()), " ")) // one line, even for cobra suggestions and joined errors
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, cluster.ErrBadInput) {
		return 2
	}
	return 1
}
