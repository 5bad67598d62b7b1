package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/netns"
)

// The lab's names for internal/netns, which owns entering, creating and deleting namespaces.

// nsPath is the file of a named namespace.
func nsPath(name string) string { return netns.Path(name) }

// inNS runs fn on a locked OS thread inside the named namespace (netns.Do).
func inNS(name string, fn func() error) error { return netns.Do(name, fn) }

// createNS creates a named network namespace without moving the caller into it, and brings
// its loopback up the way a container runtime does.
func createNS(name string) error {
	if err := netns.Create(name); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("network namespace %s already exists (run `cnibench lab clean`)", name)
	} else if err != nil {
		return err
	}
	return inNS(name, func() error { return linkUp("lo") })
}

// deleteNS unmounts and removes a named namespace; missing is not an error.
func deleteNS(name string) error { return netns.Delete(name) }

// startInNS starts cmd with the named namespace as its network namespace.
func startInNS(name string, cmd *exec.Cmd) error { return netns.Do(name, cmd.Start) }

// writeSysctl writes a sysctl, given as a path under /proc/sys (e.g. "net/ipv4/ip_forward",
// so interface names with dots stay intact), inside the named namespace (never the root one).
func writeSysctl(ns, key, value string) error { return netns.SetSysctl(ns, key, value) }

// nsPIDs lists the processes (other than this one) whose network namespace is the named one.
func nsPIDs(name string) []int { return netns.PIDs(name) }

// withHandle runs fn with a netlink handle in the named namespace.
func withHandle(name string, fn func(h *netlink.Handle) error) error {
	h, err := netns.Netlink(name)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

func linkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// killNSProcs kills every process in a namespace (netns.KillAll).
func killNSProcs(name string) error { return netns.KillAll(name) }
