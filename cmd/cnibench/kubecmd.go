//go:build !labonly

package main

import (
	"fmt"

	"github.com/cnibench/cnibench/internal/kube"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
)

func newKubeCmd() *cobra.Command {
	cmd := group("kube", "Kube backend housekeeping")
	var kubeconfig string
	var force bool
	clean := &cobra.Command{
		Use:   "clean",
		Short: "Delete the namespaces and kwok fake nodes of cnibench runs that are over (label " + kube.ManagedBy + "=" + kube.ManagedByValue + "); nothing else is touched",
		Long: `Delete what cnibench runs left on a cluster: their namespaces (label ` + kube.ManagedBy + `=` + kube.ManagedByValue + `)
and kwok fake nodes. A namespace whose run still goes is skipped and named: a run on this host
is asked by its PID and start time, a run on another host by its heartbeat (refreshed every
30 s, stale after 3 minutes). --force deletes them too.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := kube.LoadConfig(kubeconfig)
			if err != nil {
				return usagef("%v (give --kubeconfig FILE)", err)
			}
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			names, skipped, err := kube.Clean(cmd.Context(), cs, force)
			for _, n := range names {
				fmt.Fprintf(w, "deleting namespace %s\n", n)
			}
			for _, s := range skipped {
				fmt.Fprintf(w, "skipped namespace %s\n", s)
			}
			if err != nil {
				return err
			}
			fake, err := kube.CleanFakeNodes(cmd.Context(), cs, force)
			for _, n := range fake {
				fmt.Fprintf(w, "deleting fake node %s\n", n)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "kube clean: %d namespaces deleted, %d fake nodes deleted, %d namespaces skipped\n", len(names), len(fake), len(skipped))
			return nil
		},
	}
	clean.Flags().BoolVar(&force, "force", false, "also delete the namespaces of runs that still go")
	clean.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default $KUBECONFIG, then ~/.kube/config)")
	cmd.AddCommand(clean)
	return cmd
}
