// Package doctor checks what this host can do: privileges, the external tools
// cnibench drives, and the kernel features its data planes need. Kernel
// features are tried for real inside a throw-away network namespace, so the
// root network namespace is never touched.
package doctor

import (
	"github.com/cnibench/cnibench/internal/hosttools"

	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// Check is the outcome of one probe.
type Check struct {
	Name     string // e.g. "root", "tool iperf3", "vxlan"
	Kind     string // "privilege" | "tool" | "kernel"
	OK       bool
	Detail   string // version for tools, or the reason/error for failures (one line)
	Required bool   // needed by a default preset (flannel, calico) or the default scenarios
}

// Report is the list of checks in the order they ran.
type Report struct{ Checks []Check }

// skipped prefixes the Detail of checks that could not be attempted; Table
// shows them with status "-".
const skipped = "skipped: "

// Run performs every check: privilege first, then tools, then kernel
// features inside one scratch network namespace.
func Run(ctx context.Context) Report {
	root := os.Geteuid() == 0
	r := Report{Checks: []Check{{Name: "root", Kind: "privilege", OK: root, Required: true, Detail: fmt.Sprintf("euid %d", os.Geteuid())}}}
	if !root {
		r.Checks[0].Detail += " (cnibench needs root)"
	}
	r.Checks = append(r.Checks, toolChecks(ctx)...)
	r.Checks = append(r.Checks, kernelChecks(ctx, root)...)
	return r
}

// OK reports whether every required check passed.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if c.Required && !c.OK {
			return false
		}
	}
	return true
}

// Has reports whether a feature or tool is available and, if not, why.
// name is a check name ("vxlan", "tool nft") or a bare tool or CNI plugin
// name ("nft", "host-local"); exact check names win. A "tool X" the report did
// not check (an engine's own tool) is looked up on PATH now.
func (r Report) Has(name string) (bool, string) {
	for _, n := range []string{name, "tool " + name, "cni " + name} {
		for _, c := range r.Checks {
			if c.Name == n {
				if c.OK {
					return true, ""
				}
				return false, c.Detail
			}
		}
	}
	if tool, ok := strings.CutPrefix(name, "tool "); ok {
		if _, err := hosttools.Look(tool); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
	return false, name + ": not checked"
}

// Table renders the report as an aligned text table.
func (r Report) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "CHECK\tSTATUS\tREQUIRED\tDETAIL")
	for _, c := range r.Checks {
		status, req := "ok", "no"
		if !c.OK {
			status = "MISSING"
			if strings.HasPrefix(c.Detail, skipped) {
				status = "-"
			}
		}
		if c.Required {
			req = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Name, status, req, c.Detail)
	}
	w.Flush()
	return b.String()
}

// oneLine trims s to its first non-empty line.
func oneLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// Known reports whether name is a check Run makes, resolved as Has resolves it ("vxlan",
// "tool nft", "nft", "host-local"), or an engine's own "tool X" (looked up when asked): what a
// part may list among its needs.
func Known(name string) bool {
	known := []string{"root"}
	for _, t := range hosttools.All() {
		known = append(known, "tool "+t.Name)
	}
	for _, p := range cniPlugins {
		known = append(known, "cni "+p)
	}
	for _, f := range kernelFeatures {
		known = append(known, f.name)
	}
	for _, n := range []string{name, "tool " + name, "cni " + name} {
		if slices.Contains(known, n) {
			return true
		}
	}
	return strings.HasPrefix(name, "tool ")
}
