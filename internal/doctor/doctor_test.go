package doctor

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func TestReportOKHas(t *testing.T) {
	r := Report{Checks: []Check{
		{Name: "root", Kind: "privilege", OK: true, Required: true},
		{Name: "tool nft", Kind: "tool", OK: true, Detail: "nftables v1.0.6"},
		{Name: "cni host-local", Kind: "tool", OK: true, Required: true},
		{Name: "geneve", Kind: "kernel", Detail: "geneve: operation not supported"},
		{Name: "ipset", Kind: "kernel", Detail: skipped + "ipset not installed"},
	}}
	if !r.OK() {
		t.Error("OK() = false with only optional failures")
	}
	for name, want := range map[string]bool{"root": true, "nft": true, "tool nft": true, "host-local": true, "geneve": false, "ipset": false, "nope": false} {
		if got, why := r.Has(name); got != want || got != (why == "") {
			t.Errorf("Has(%q) = %v, %q; want %v", name, got, why, want)
		}
	}
	if _, why := r.Has("geneve"); why != "geneve: operation not supported" {
		t.Errorf("Has(geneve) reason = %q", why)
	}
	tab := r.Table()
	for _, want := range []string{"CHECK", "STATUS", "REQUIRED", "DETAIL", "MISSING", "ok"} {
		if !strings.Contains(tab, want) {
			t.Errorf("Table() lacks %q:\n%s", want, tab)
		}
	}
	for _, l := range strings.Split(tab, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "ipset" && f[1] != "-" {
			t.Errorf("skipped check has status %q, want -", f[1])
		}
	}

	r.Checks = append(r.Checks, Check{Name: "vxlan", Kind: "kernel", Required: true, Detail: "vxlan: boom"})
	if r.OK() {
		t.Error("OK() = true with a required failure")
	}
}

func scratchNamespaces(t *testing.T) []string {
	t.Helper()
	var names []string
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), "cnbdoc") {
			names = append(names, e.Name())
		}
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "cnbdoc") {
				names = append(names, "ip netns list: "+l)
			}
		}
	}
	return names
}

func TestRunAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if stale := scratchNamespaces(t); len(stale) > 0 {
		t.Fatalf("stale scratch namespaces before Run: %v", stale)
	}
	r := Run(context.Background())
	t.Logf("\n%s", r.Table())
	for _, name := range []string{"root", "veth", "bridge", "vxlan"} {
		if ok, why := r.Has(name); !ok {
			t.Errorf("%s not OK: %s", name, why)
		}
	}
	tab := r.Table()
	for _, c := range r.Checks {
		if !strings.Contains(tab, c.Name) {
			t.Errorf("Table() lacks %q", c.Name)
		}
		if strings.Contains(c.Detail, "\n") {
			t.Errorf("%s: multi-line detail %q", c.Name, c.Detail)
		}
	}
	if left := scratchNamespaces(t); len(left) > 0 {
		t.Errorf("scratch namespace left behind: %v", left)
	}
}

// TestScratchAsRoot: the scratch namespace has the name `cnibench lab clean` knows, is used
// through netns (a panic inside is raised in the caller, whose cleanup still deletes it), and
// leaves nothing behind.
func TestScratchAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	s, err := newScratch()
	if err != nil {
		t.Fatal(err)
	}
	if !ScratchName.MatchString(s.name) || !regexp.MustCompile(`^cnbdoc[a-z0-9]{5}-scratch$`).MatchString(s.name) || s.path != "/run/netns/"+s.name {
		t.Errorf("scratch name %q, path %q", s.name, s.path)
	}
	if _, err := os.Stat(s.path); err != nil {
		t.Errorf("scratch namespace missing: %v", err)
	}
	if v, err := s.sysctl("net/ipv4/ip_forward"); err != nil || (v != "0" && v != "1") {
		t.Errorf("sysctl in scratch = %q, %v", v, err)
	}
	if links, err := s.h.LinkList(); err != nil || len(links) != 1 {
		t.Errorf("scratch netlink handle sees %d links (%v), want lo only", len(links), err)
	}
	got := func() (r any) {
		defer s.close()
		defer func() { r = recover() }()
		_ = s.do(func() error { panic("probe") })
		return nil
	}()
	if got != "probe" {
		t.Errorf("recovered %v, want the probe's panic", got)
	}
	if left := scratchNamespaces(t); len(left) > 0 {
		t.Errorf("scratch namespace left behind: %v", left)
	}
}
