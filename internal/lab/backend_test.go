package lab

import (
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

// Every executable a lab run uses has its package in the tools table (which doctor checks,
// preflight names in its errors and install-deps.sh installs).
func TestEveryToolIsInTheToolsTable(t *testing.T) {
	names := append(append([]string{}, baseTools...), driver.AllTools()...)
	var needs []string
	for _, a := range dataplane.AttachKinds() {
		needs = append(append(needs, a.Needs()...), a.FilterNeeds()...)
	}
	for _, o := range dataplane.OverlayKinds() {
		needs = append(needs, o.Needs()...)
	}
	for _, p := range dataplane.ProxyEngines() {
		needs = append(needs, p.Needs()...)
	}
	for _, p := range dataplane.PolicyEngineList() {
		needs = append(needs, p.Needs()...)
	}
	for _, n := range needs {
		if tool, ok := strings.CutPrefix(n, "tool "); ok {
			names = append(names, tool)
		}
	}
	for _, n := range names {
		if _, err := hosttools.Get(n); err != nil {
			t.Error(err)
		}
	}
}
