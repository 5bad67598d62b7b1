package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cnibench/cnibench/internal/doctor"
	"github.com/cnibench/cnibench/internal/mounts"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/nf"
	"github.com/cnibench/cnibench/internal/owner"
)

// anyPrefixRe matches the objects of every lab, whatever its prefix.
var anyPrefixRe = regexp.MustCompile(`^cnb[a-z0-9]{1,8}(-|$)`)

func owned(name, prefix string) bool {
	if prefix == "" {
		// A doctor (or a run's preflight) may be using a fresh scratch namespace right now;
		// one older than a minute is a leftover of a killed doctor.
		if doctor.ScratchName.MatchString(name) {
			st, err := os.Stat(nsPath(name))
			return err == nil && time.Since(st.ModTime()) > time.Minute
		}
		return anyPrefixRe.MatchString(name)
	}
	return name == prefix || strings.HasPrefix(name, prefix+"-")
}

// OwnerFile is the owner record in a lab's state directory: who made the lab, so that
// `lab clean` leaves the labs of live processes alone.
const OwnerFile = "owner.json"

// writeOwner records this process as the owner of a lab (before anything of it exists but
// its state directory).
func writeOwner(prefix string) error {
	cmd := "cnibench"
	if len(os.Args) > 1 {
		cmd += " " + os.Args[1]
	}
	if filepath.Ext(os.Args[0]) == ".test" {
		cmd = filepath.Base(os.Args[0])
	}
	return owner.Write(filepath.Join(StateRoot, prefix, OwnerFile), owner.Self(cmd))
}

// Owner reads a lab's owner record.
func Owner(prefix string) (owner.Record, error) {
	return owner.Read(filepath.Join(StateRoot, prefix, OwnerFile))
}

// MarkKept records that a lab stands on purpose (cnibench lab up, whose process ends while the
// lab stays): `lab clean` leaves it alone; `lab down` removes it.
func MarkKept(prefix string) error {
	r, err := Owner(prefix)
	if err != nil {
		return err
	}
	r.Kept = true
	return owner.Write(filepath.Join(StateRoot, prefix, OwnerFile), r)
}

// Namespaces lists the named network namespaces of a prefix ("" = every lab prefix).
func Namespaces(prefix string) []string {
	ents, _ := os.ReadDir(netns.Dir)
	var out []string
	for _, e := range ents {
		if owned(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// dirsOf lists the entries of root that belong to a prefix ("" = any lab).
func dirsOf(root, prefix string) []string {
	ents, _ := os.ReadDir(root)
	var out []string
	for _, e := range ents {
		if owned(e.Name(), prefix) {
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	return out
}

// Leftovers lists what a prefix ("" = any) still has on this host: namespaces, processes
// inside them, state and scratch directories. Empty means clean.
func Leftovers(prefix string) []string {
	var out []string
	for _, ns := range Namespaces(prefix) {
		out = append(out, "netns "+ns)
		for _, pid := range nsPIDs(ns) {
			out = append(out, fmt.Sprintf("process %d in %s", pid, ns))
		}
	}
	for _, d := range dirsOf(StateRoot, prefix) {
		out = append(out, "state "+d)
	}
	for _, d := range dirsOf(TempRoot, prefix) {
		out = append(out, "scratch "+d)
	}
	for _, m := range mountsUnder(StateRoot, prefix) {
		out = append(out, "mount "+m)
	}
	for _, root := range cgroupRoots() {
		for _, d := range dirsOf(root, prefix) {
			out = append(out, "cgroup "+d)
		}
	}
	for _, c := range nf.Cleaners() {
		out = append(out, c.Leftovers(prefix)...)
	}
	return out
}

// mountsUnder lists the mount points (bpf file systems of chains) inside root's entries that
// belong to a prefix, deepest first.
func mountsUnder(root, prefix string) []string {
	var out []string
	for _, mp := range mounts.Under(root) {
		rel, err := filepath.Rel(root, mp)
		if err == nil && rel != "." && owned(strings.Split(rel, "/")[0], prefix) {
			out = append(out, mp)
		}
	}
	return out
}

// Clean removes everything of a prefix, whoever owns it ("" = every lab prefix): processes
// inside its namespaces, the namespaces (their links go with them), the bpf file systems its
// nodes and chains mounted, its nodes' and pods' cgroups, what network-function kinds left outside (nf.Cleaner), its state and scratch
// directories. Idempotent. Lab.Close and `lab down` use it; `lab clean` uses CleanAll, which
// spares the labs of live owners.
func Clean(prefix string) error {
	var errs []error
	nss := Namespaces(prefix)
	for _, ns := range nss {
		errs = append(errs, killNSProcs(ns))
	}
	for _, ns := range nss {
		errs = append(errs, deleteNS(ns))
	}
	for _, m := range mountsUnder(StateRoot, prefix) {
		errs = append(errs, nf.Unmount(m))
	}
	for _, root := range cgroupRoots() {
		for _, d := range dirsOf(root, prefix) {
			errs = append(errs, removeCgroup(d))
		}
		_ = syscall.Rmdir(root) // the cnibench directory, once no lab has anything in it
	}
	for _, c := range nf.Cleaners() {
		errs = append(errs, c.Clean(prefix))
	}
	for _, root := range []string{StateRoot, TempRoot} {
		for _, d := range dirsOf(root, prefix) {
			errs = append(errs, os.RemoveAll(d))
		}
		if left, _ := os.ReadDir(root); len(left) == 0 {
			_ = os.Remove(root)
		}
	}
	return errors.Join(errs...)
}

// prefixOf is the lab prefix of one of its objects' names ("cnbab12c-n0" -> "cnbab12c").
func prefixOf(name string) string {
	p, _, _ := strings.Cut(name, "-")
	return p
}

// CleanAll removes the leftovers of every lab whose owner is gone: labs whose owner record
// names a live process, or that were kept on purpose (lab up), are skipped unless force,
// and said why; a lab without an owner record (its maker was killed before writing it, or
// predates owner records) is a leftover. It returns what it removed (as Leftovers names it)
// and one line per skipped prefix.
func CleanAll(force bool) (removed, skipped []string, err error) {
	var prefixes []string
	seen := map[string]bool{}
	for _, l := range Leftovers("") {
		name := l[strings.LastIndexAny(l, " /")+1:]
		if p := prefixOf(name); !seen[p] {
			seen[p] = true
			prefixes = append(prefixes, p)
		}
	}
	sort.Strings(prefixes)
	return cleanLabs(prefixes, force)
}

// cleanLabs is CleanAll for the given prefixes.
func cleanLabs(prefixes []string, force bool) (removed, skipped []string, err error) {
	var errs []error
	for _, p := range prefixes {
		if r, rerr := Owner(p); rerr == nil && r.Live() && !force {
			why := fmt.Sprintf("owned by %s, still running (--force removes it anyway)", r)
			if r.Kept {
				why = fmt.Sprintf("%s: remove it with cnibench lab down --prefix %s", r, p)
			}
			skipped = append(skipped, p+": "+why)
			continue
		}
		left := Leftovers(p)
		if err := Clean(p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		removed = append(removed, left...)
	}
	return removed, skipped, errors.Join(errs...)
}
