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
	clean := &cobra.Command{
		Use:   "clean",
		Short: "Delete every namespace and kwok fake node cnibench created (label " + kube.ManagedBy + "=" + kube.ManagedByValue + "); nothing else is touched",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := kube.LoadConfig(kubeconfig)
			if err != nil {
				return usagef("%v (give --kubeconfig FILE)", err)
			}
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			names, err := kube.Clean(cmd.Context(), cs)
			for _, n := range names {
				fmt.Fprintf(cmd.OutOrStdout(), "deleting namespace %s\n", n)
			}
			if err != nil {
				return err
			}
			fake, err := kube.CleanFakeNodes(cmd.Context(), cs)
			for _, n := range fake {
				fmt.Fprintf(cmd.OutOrStdout(), "deleting fake node %s\n", n)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kube clean: %d namespaces deleted, %d fake nodes deleted\n", len(names), len(fake))
			return nil
		},
	}
	clean.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default $KUBECONFIG, then ~/.kube/config)")
	cmd.AddCommand(clean)
	return cmd
}
