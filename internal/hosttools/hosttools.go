// Package hosttools is the one list of the executables cnibench runs: for each, the Debian
// package that installs it and how to ask it its version. Who needs which tool is said by its
// user (a driver's Tools, a data-plane part's "tool X" needs, the lab's base tools); doctor,
// preflight, the tools image, the run's environment record and scripts/install-deps.sh (checked
// by a test) read this table for everything else.
package hosttools

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// Tool is one executable.
type Tool struct {
	Name    string   // as run (a bare name found on PATH, or an absolute path)
	Package string   // the Debian package that installs it
	Version []string // arguments that make it print its version (nil: it has no such option)
	// NonFree marks a package of Debian's non-free component (install-deps.sh enables it).
	NonFree bool
	// Core marks a tool every default run needs (the default scenarios' measurement tools and
	// the lab's own): doctor reports its absence as a failure.
	Core bool
	// NF marks a tool only the network functions of chains and the OVS-DPDK data plane run
	// (Open vSwitch, DPDK): large packages the demo does not need, installed by
	// `scripts/install-deps.sh --nf` (and by `make test`), not by `make deps`.
	NF bool
}

// CNIPackage installs the CNI reference plugins the lab attaches pods with.
const CNIPackage = "containernetworking-plugins"

var table = []Tool{
	{Name: "iperf3", Core: true, Package: "iperf3", Version: []string{"--version"}},
	{Name: "netperf", Core: true, Package: "netperf", Version: []string{"-V"}, NonFree: true},
	{Name: "netserver", Core: true, Package: "netperf", Version: []string{"-V"}, NonFree: true},
	{Name: "curl", Package: "curl", Version: []string{"--version"}},
	{Name: "nginx", Package: "nginx-light", Version: []string{"-v"}},
	{Name: "/bin/busybox", Package: "busybox-static"},
	{Name: "ip", Core: true, Package: "iproute2", Version: []string{"-V"}},
	{Name: "nsenter", Core: true, Package: "util-linux", Version: []string{"--version"}},
	{Name: "taskset", Core: true, Package: "util-linux", Version: []string{"--version"}},
	{Name: "nft", Package: "nftables", Version: []string{"--version"}},
	{Name: "iptables", Package: "iptables", Version: []string{"--version"}},
	{Name: "iptables-legacy", Package: "iptables", Version: []string{"--version"}},
	{Name: "iptables-restore", Package: "iptables", Version: []string{"--version"}},
	{Name: "ip6tables-restore", Package: "iptables", Version: []string{"--version"}},
	{Name: "iptables-save", Package: "iptables", Version: []string{"--version"}},
	{Name: "ipset", Package: "ipset", Version: []string{"--version"}},
	{Name: "tcpdump", Package: "tcpdump", Version: []string{"--version"}},
	{Name: "ovs-vswitchd", Package: "openvswitch-switch", Version: []string{"--version"}, NF: true},
	{Name: "ovs-vswitchd-dpdk", Package: "openvswitch-switch-dpdk", Version: []string{"--version"}, NF: true},
	{Name: "ovs-vsctl", Package: "openvswitch-switch", Version: []string{"--version"}, NF: true},
	{Name: "ovsdb-server", Package: "openvswitch-common", Version: []string{"--version"}, NF: true},
	{Name: "ovsdb-tool", Package: "openvswitch-common", Version: []string{"--version"}, NF: true},
	{Name: "ovs-ofctl", Package: "openvswitch-common", Version: []string{"--version"}, NF: true},
	{Name: "dpdk-testpmd", Package: "dpdk-dev", NF: true},
}

// Get returns the facts of a tool. A tool missing from the table is a programming error: the
// test of every user's tools keeps the table complete.
func Get(name string) (Tool, error) {
	for _, t := range table {
		if t.Name == name {
			return t, nil
		}
	}
	return Tool{}, fmt.Errorf("hosttools: %q is not in the tools table (internal/hosttools)", name)
}

// All returns every tool of the table, in table order.
func All() []Tool { return append([]Tool(nil), table...) }

// Install says how to get a missing tool, for error messages.
func (t Tool) Install() string {
	where := ""
	if t.NonFree {
		where = ", in Debian's non-free component"
	}
	if t.NF {
		return fmt.Sprintf("install the Debian package %s%s (`bash scripts/install-deps.sh --nf` installs the network functions' packages; `make test` does too)", t.Package, where)
	}
	return fmt.Sprintf("install the Debian package %s%s (`make deps` runs scripts/install-deps.sh)", t.Package, where)
}

// Base is a tool's file name ("/bin/busybox" -> "busybox").
func (t Tool) Base() string { return filepath.Base(t.Name) }

// sbinDirs are searched after PATH: the sbin directories are often missing from the PATH of
// non-login shells, and Debian puts several of the tools there.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin", "/bin",
	"/usr/lib/openvswitch-switch-dpdk"} // ovs-vswitchd-dpdk: an alternative, not on PATH

// Look finds an executable on PATH or in the usual sbin and bin directories. The error names
// it and, for a tool of the table, says how to install it.
func Look(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			return p, nil
		}
	}
	if t, err := Get(name); err == nil {
		return "", fmt.Errorf("%s not found in PATH: %s", name, t.Install())
	}
	return "", fmt.Errorf("%s not found in PATH", name)
}
