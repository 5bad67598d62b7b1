package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnibench/cnibench/internal/doctor"
	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/spf13/cobra"
)

// planned scenarios that are not built yet, so `list` tells the whole story.
var upcoming = map[string]string{
	"chain": "service-function chains: not built yet",
	"vnf":   "packet-forwarding VNF (RFC 2544 search): not built yet",
}

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check root, tools and kernel features (tried for real in a scratch namespace)",
		Long: `Check what this host can do: root, each tool and its version, and each kernel feature the
presets use, each tried for real in a scratch network namespace and removed. Exits 1 when
something a default preset (flannel, calico) needs is missing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := doctor.Run(cmd.Context())
			fmt.Fprint(cmd.OutOrStdout(), rep.Table())
			if !rep.OK() {
				fmt.Fprintln(cmd.ErrOrStderr(), "cnibench: something a default preset needs is missing (REQUIRED yes, STATUS MISSING)")
				return exitError{1}
			}
			return nil
		},
	}
}

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List dataplane presets and scenarios, and which can run on this host (with reasons)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep *doctor.Report
			if os.Geteuid() == 0 {
				ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
				r := doctor.Run(ctx)
				cancel()
				rep = &r
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "DATAPLANE\tATTACH\tOVERLAY\tPROXY\tPOLICY\tRUNS HERE\tEMULATES / REASON")
			all := lab.Presets()
			for _, n := range lab.BaselineNames() {
				p, _ := lab.Lookup(n)
				all = append(all, p)
			}
			for _, p := range all {
				ok, why := runsHere(p, rep)
				yes := "yes"
				if !ok {
					yes = "no"
				}
				proxy, policy := p.Effective()
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Attach, p.Overlay, part(p.Proxy, proxy), part(p.Policy, policy), yes, orStr(why, p.Emulates))
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "SCENARIO\tPROTOCOLS\t\t\t\tRUNS HERE\tDESCRIPTION")
			for _, n := range scenario.Names() {
				sc, _ := scenario.Get(n)
				i := sc.Info()
				fmt.Fprintf(w, "%s\t%s\t\t\t\tyes\t%s\n", n, strings.Join(i.Protocols, ","), i.Summary)
			}
			for _, n := range []string{"chain", "vnf"} {
				fmt.Fprintf(w, "%s\t\t\t\t\tno\t%s\n", n, upcoming[n])
			}
			if err := w.Flush(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, "\n* the preset's Service proxy or policy engine is not programmed yet: its cases run with none")
			fmt.Fprintln(out, "  (Services: iptables, iptables-legacy, nftables; ipvs is rendered but needs a kernel with IPVS;")
			fmt.Fprintln(out, "  policies: iptables + ipset, nftables; eBPF parts come with the eBPF data planes).")
			if rep == nil {
				fmt.Fprintln(out, "(not root: host capabilities not checked; every lab case needs root)")
			}
			return nil
		},
	}
}

// runsHere says whether a preset can run on this host, and why not.
func runsHere(p lab.Preset, rep *doctor.Report) (bool, string) {
	if p.Missing != "" {
		return false, p.Missing
	}
	if rep == nil {
		return false, "needs root"
	}
	if need, why := lacks(p, *rep); need != "" {
		return false, fmt.Sprintf("needs %s: %s", need, why)
	}
	return true, ""
}

// lacks names the first host capability a preset needs that the doctor found missing, and why.
func lacks(p lab.Preset, rep doctor.Report) (need, why string) {
	for _, need := range p.Needs() {
		if ok, why := rep.Has(need); !ok {
			return need, why
		}
	}
	return "", ""
}

// part shows a preset's part, starred when the lab does not program it yet.
func part(target, effective string) string {
	if target != effective {
		return target + "*"
	}
	return target
}

func orStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
