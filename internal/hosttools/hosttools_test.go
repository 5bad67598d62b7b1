package hosttools

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// install-deps.sh installs every package of the table (and the CNI plugins): `make deps` and
// the table cannot drift apart. The network functions' packages (NF) are installed with --nf
// (and --test), the others always.
func TestInstallDepsInstallsEveryPackage(t *testing.T) {
	b, err := os.ReadFile("../../scripts/install-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	list := func(name string) []string {
		m := regexp.MustCompile(`(?m)^` + name + `=\(([^)]*)\)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("install-deps.sh has no %s=(...) line", name)
		}
		return strings.Fields(string(m[1]))
	}
	pkgs, nf := list("PKGS"), list("NF_PKGS")
	for _, p := range append(packages(false), CNIPackage) {
		if !slices.Contains(pkgs, p) {
			t.Errorf("install-deps.sh does not install %s (PKGS: %v)", p, pkgs)
		}
	}
	for _, p := range packages(true) {
		if !slices.Contains(nf, p) || slices.Contains(pkgs, p) {
			t.Errorf("install-deps.sh: %s belongs in NF_PKGS only (PKGS: %v, NF_PKGS: %v)", p, pkgs, nf)
		}
	}
	for _, opt := range []string{"--nf", "--test"} {
		if !regexp.MustCompile(`(?m)^\s*` + opt + `\)[^;]*NF_PKGS`).Match(b) {
			t.Errorf("install-deps.sh %s does not install NF_PKGS", opt)
		}
	}
	for _, tl := range table {
		if tl.NonFree && !strings.Contains(string(b), "if [ \"$p\" = "+tl.Package+" ]; then enable_nonfree") {
			t.Errorf("install-deps.sh does not enable the non-free component for %s", tl.Package)
		}
	}
}

func TestGet(t *testing.T) {
	tl, err := Get("netserver")
	if err != nil || tl.Package != "netperf" || !tl.NonFree || !tl.Core {
		t.Errorf("Get(netserver) = %+v, %v", tl, err)
	}
	if _, err := Get("nosuch"); err == nil || !strings.Contains(err.Error(), "not in the tools table") {
		t.Errorf("Get(nosuch) = %v", err)
	}
	if b := (Tool{Name: "/bin/busybox"}).Base(); b != "busybox" {
		t.Errorf("Base = %q", b)
	}
	if got := (Tool{Package: "netperf", NonFree: true}).Install(); !strings.Contains(got, "netperf, in Debian's non-free component") {
		t.Errorf("Install = %q", got)
	}
}

// packages returns the Debian packages of the network functions' tools (nf) or of the others,
// sorted, each once.
func packages(nf bool) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range table {
		if t.NF == nf && !seen[t.Package] {
			seen[t.Package] = true
			out = append(out, t.Package)
		}
	}
	sort.Strings(out)
	return out
}
