package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnibench/cnibench/internal/doctor"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/scenario"
	"github.com/spf13/cobra"
)

func newDoctorCmd() *cobra.Command {
	var noise noiseFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check root, tools and kernel features (tried for real in a scratch namespace); --noise measures the host's noise floor",
		Long: `Check what this host can do: root, each tool and its version, and each kernel feature the
presets use, each tried for real in a scratch network namespace and removed. Exits 1 when
something a default preset (flannel, calico) needs is missing.

With --noise it measures instead how noisy this host is: one case (--noise-case) as two
identical copies, interleaved in rounds, and the interval of their ratio says the smallest
difference two cases can show here at that trial count. The figure is kept in
` + NoiseFile + ` and every later run records it.

With --account-cost it measures what accounting each trial costs (per CPU, per role, per hop):
the case as two copies in rounds, the first accounted and the second not, and prints their
paired ratio with its interval. A cost below this host's noise cannot be resolved that way:
--account-amplify K makes the accounted copy's sampler look K times as often, so its cost is K
times as large, and the bound found is divided back by K. --trace-cost does the same for run
--trace hops: both copies accounted, the first traced.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case b2i(noise.on)+b2i(noise.cost)+b2i(noise.traceCost) > 1:
				return usagef("--noise, --account-cost and --trace-cost: give one of them")
			case cmd.Flags().Changed("account-amplify") && !noise.cost:
				return usagef("--account-amplify needs --account-cost")
			case noise.on:
				return runNoise(cmd, &noise)
			case noise.cost:
				return runAccountCost(cmd, &noise)
			case noise.traceCost:
				return runTraceCost(cmd, &noise)
			}
			for _, f := range []string{"noise-case", "noise-repeat", "noise-duration", "max-steal"} {
				if cmd.Flags().Changed(f) {
					return usagef("--%s needs --noise, --account-cost or --trace-cost", f)
				}
			}
			rep := doctor.Run(cmd.Context())
			fmt.Fprint(cmd.OutOrStdout(), rep.Table())
			if !rep.OK() {
				fmt.Fprintln(cmd.ErrOrStderr(), "cnibench: something a default preset needs is missing (REQUIRED yes, STATUS MISSING)")
				return exitError{1}
			}
			return nil
		},
	}
	noise.register(cmd)
	return cmd
}

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List dataplane presets, their parts, and scenarios, and which can run on this host (with reasons)",
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
			for _, p := range dataplane.Presets() {
				ok, why := presetRunsHere(p, rep)
				proxy, policy := p.Effective()
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Attach, p.Overlay, part(p.Proxy, proxy), part(p.Policy, policy), yesNo(ok), orStr(why, p.Emulates))
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "PART\tNAME\t\t\t\tRUNS HERE\tWHAT / REASON")
			for _, k := range partKinds() {
				for _, e := range k.parts {
					ok, why := partRunsHere(e, rep)
					fmt.Fprintf(w, "%s\t%s\t\t\t\t%s\t%s\n", k.kind, e.Name(), yesNo(ok), orStr(why, e.Summary()))
				}
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "SCENARIO\tPROTOCOLS\t\t\t\tRUNS HERE\tDESCRIPTION")
			for _, n := range scenario.Names() {
				sc, _ := scenario.Get(n)
				i := sc.Info()
				fmt.Fprintf(w, "%s\t%s\t\t\t\tyes\t%s\n", n, strings.Join(i.Protocols, ","), i.Summary)
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "VNF KIND\t\t\t\t\tRUNS HERE\tWHAT (vnf scenario: --vnf)")
			for _, n := range scenario.VNFKinds() {
				fmt.Fprintf(w, "%s\t\t\t\t\tyes\t%s\n", n, scenario.VNFSummary(n))
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "VNF SEARCH\t\t\t\t\tRUNS HERE\tWHAT (vnf scenario: --search)")
			for _, n := range scenario.VNFSearches() {
				fmt.Fprintf(w, "%s\t\t\t\t\tyes\t%s\n", n, scenario.VNFSearchSummary(n))
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "CHANGE\t\t\t\t\tRUNS HERE\tWHAT (change scenario: --change)")
			for _, n := range scenario.ChangeKinds() {
				fmt.Fprintf(w, "%s\t\t\t\t\tyes\t%s\n", n, scenario.ChangeKindSummary(n))
			}
			fmt.Fprintln(w, "\t\t\t\t\t\t")
			fmt.Fprintln(w, "NF KIND\tLAYER\t\t\t\tRUNS HERE\tWHAT / REASON (chain scenario: --nf)")
			for _, n := range nf.Names() {
				k, _ := nf.Get(n)
				why := ""
				if rep != nil {
					if err := k.Usable(); err != nil {
						why = err.Error()
					}
				} else {
					why = "not checked (not root)"
				}
				layer := k.Layer().String()
				if _, ok := k.(nf.PodKind); ok {
					layer += "; kube too"
				}
				fmt.Fprintf(w, "%s\t%s\t\t\t\t%s\t%s\n", n, layer, yesNo(why == ""), orStr(why, k.Summary()))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\n* the preset's Service proxy or policy engine is not built yet: its cases run with none\n")
			fmt.Fprintf(out, "  (built: proxies %s; policy engines %s).\n", strings.Join(dataplane.Proxies(), ", "), strings.Join(dataplane.PolicyEngines(), ", "))
			if rep == nil {
				fmt.Fprintln(out, "(not root: host capabilities not checked; every lab case needs root)")
			}
			return nil
		},
	}
}

type partKind struct {
	kind  string
	parts []dataplane.Part
}

// partKinds are the lab's engine registries, in the order list shows them.
func partKinds() []partKind {
	return []partKind{{"attach", asParts(dataplane.AttachKinds())}, {"overlay", asParts(dataplane.OverlayKinds())},
		{"proxy", asParts(dataplane.ProxyEngines())}, {"policy", asParts(dataplane.PolicyEngineList())}, {"agent", asParts(dataplane.Agents())}}
}

func asParts[T dataplane.Part](ts []T) []dataplane.Part {
	out := make([]dataplane.Part, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// presetRunsHere says whether a preset can run on this host, and why not.
func presetRunsHere(p dataplane.Preset, rep *doctor.Report) (bool, string) {
	if m := p.Missing(); m != "" {
		return false, m
	}
	if rep == nil {
		return false, "needs root"
	}
	dp, err := dataplane.Resolve(p.Name, "", "")
	if err != nil {
		return false, err.Error()
	}
	if who, need, why := dp.Lacks(rep.Has); need != "" {
		return false, fmt.Sprintf("%s needs %s: %s", who, need, why)
	}
	return true, ""
}

// partRunsHere says whether the host has what an engine needs, and why not.
func partRunsHere(e dataplane.Part, rep *doctor.Report) (bool, string) {
	if u, ok := e.(interface{ Usable() error }); ok && e.Name() != dataplane.None {
		if err := u.Usable(); err != nil {
			return false, err.Error()
		}
	}
	if rep == nil {
		return false, "needs root"
	}
	for _, n := range e.Needs() {
		if ok, why := rep.Has(n); !ok {
			return false, fmt.Sprintf("needs %s: %s", n, why)
		}
	}
	return true, ""
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// part shows a preset's part, starred when the lab does not build it yet.
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
