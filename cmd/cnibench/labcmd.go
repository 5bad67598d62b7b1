package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/spf13/cobra"
)

func newLabCmd() *cobra.Command {
	cmd := group("lab", "Keep a lab cluster standing for exploration, or remove leftovers")
	var dp, prefix string
	var nodes, mtu, pods int
	up := &cobra.Command{
		Use:   "up",
		Short: "Build a lab (nodes, underlay, pods) and leave it standing; prints its namespaces",
		Long: `Build a lab cluster and leave it standing. Explore it with
  nsenter --net=/run/netns/<namespace> ip route
and remove it with 'cnibench lab down --prefix PREFIX'. The lab is marked as kept: 'cnibench lab
clean' leaves it alone (unless --force). The build time printed is the time to build the nodes,
the underlay and all pods.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usagef("lab up needs root (it creates network namespaces): run as root")
			}
			if pods < 0 || pods > 5000 {
				return usagef("--pods %d out of range (0..5000)", pods)
			}
			if prefix == "" {
				prefix = lab.NewPrefix()
			}
			if err := lab.ValidPrefix(prefix); err != nil {
				return usagef("--prefix: %v", err)
			}
			parts, err := dataplane.Resolve(dp, "", "")
			if err != nil {
				return usagef("--dataplane: %v", err)
			}
			if pods > 0 && !parts.Attach.PodNetwork() {
				return usagef("--dataplane %s has no pod network: use --pods 0 or a preset such as flannel", dp)
			}
			if len(lab.Namespaces(prefix)) > 0 {
				return usagef("--prefix %s is in use: pick another or run 'cnibench lab down --prefix %s'", prefix, prefix)
			}
			cfg := lab.Config{Prefix: prefix, Dataplane: dp, Nodes: nodes, MTU: mtu}
			if err := cfg.Validate(); err != nil {
				return usageError{err.Error()}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			l, err := lab.Up(ctx, cfg)
			if err != nil {
				return err
			}
			specs := scenario.SilentPods(pods, "pod", nil)
			for i := range specs {
				specs[i].Silent = false // pods to explore: namespaces attached through CNI
			}
			if _, err := l.CreatePods(ctx, specs); err != nil {
				_ = l.Close(context.Background())
				return err
			}
			if err := lab.MarkKept(prefix); err != nil {
				_ = l.Close(context.Background())
				return err
			}
			el := time.Since(start)
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "lab %s up: dataplane %s, %d nodes, %d pods, pod MTU %d, built in %.2f s\n", prefix, dp, len(mustNodes(l)), pods, l.PodMTU(), el.Seconds())
			fmt.Fprintf(w, "namespaces: %v\n", nsSummary(prefix))
			fmt.Fprintf(w, "explore: nsenter --net=/run/netns/%s-n0 ip route\nremove:  cnibench lab down --prefix %s\n", prefix, prefix)
			return nil
		},
	}
	up.Flags().StringVar(&dp, "dataplane", "flannel", "preset or baseline: "+strings.Join(append(dataplane.PresetNames(), dataplane.BaselineNames()...), ", "))
	up.Flags().IntVar(&nodes, "nodes", 2, "nodes (1..64)")
	up.Flags().IntVar(&mtu, "mtu", 1500, "underlay MTU (576..9000)")
	up.Flags().IntVar(&pods, "pods", 2, "pods, spread over the nodes round-robin")
	up.Flags().StringVar(&prefix, "prefix", "", "object prefix (default: random cnbXXXXX)")

	var downPrefix string
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove the lab with the given prefix",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lab.ValidPrefix(downPrefix); err != nil {
				return usagef("--prefix: %v", err)
			}
			if os.Geteuid() != 0 {
				return usagef("lab down needs root: run as root")
			}
			n := len(lab.Namespaces(downPrefix))
			if err := lab.Clean(downPrefix); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s removed (%d namespaces)\n", downPrefix, n)
			return nil
		},
	}
	down.Flags().StringVar(&downPrefix, "prefix", "", "prefix of the lab to remove (required)")

	var force bool
	clean := &cobra.Command{
		Use:   "clean",
		Short: "Remove the leftovers of labs whose owner is gone (any cnb* prefix): processes, namespaces, state",
		Long: `Remove what labs left on this host (processes inside their namespaces, the namespaces, state
and scratch directories) when the process that made them is gone (killed, crashed). Labs of a
run or test still going, and labs kept by 'cnibench lab up', are skipped and named; --force
removes them too.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usagef("lab clean needs root: run as root")
			}
			removed, skipped, err := lab.CleanAll(force)
			w := cmd.OutOrStdout()
			for _, l := range removed {
				fmt.Fprintf(w, "removed %s\n", l)
			}
			for _, s := range skipped {
				fmt.Fprintf(w, "skipped %s\n", s)
			}
			fmt.Fprintf(w, "clean: %d objects removed, %d labs skipped\n", len(removed), len(skipped))
			return err
		},
	}
	clean.Flags().BoolVar(&force, "force", false, "also remove labs whose owner still runs and labs kept by lab up")
	cmd.AddCommand(up, down, clean)
	return cmd
}

func mustNodes(l *lab.Lab) []cluster.Node {
	n, _ := l.Nodes(context.Background())
	return n
}

func nsSummary(prefix string) string {
	ns := lab.Namespaces(prefix)
	if len(ns) > 6 {
		return fmt.Sprintf("%v ... (%d in all)", ns[:6], len(ns))
	}
	return fmt.Sprint(ns)
}
