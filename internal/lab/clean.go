package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/doctor"
	"github.com/cnibench/cnibench/internal/netns"
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

// Leftovers lists what a prefix ("" = any) still has on this host: namespaces, processes
// inside them and state directories. Empty means clean.
func Leftovers(prefix string) []string {
	var out []string
	for _, ns := range Namespaces(prefix) {
		out = append(out, "netns "+ns)
		for _, pid := range nsPIDs(ns) {
			out = append(out, fmt.Sprintf("process %d in %s", pid, ns))
		}
	}
	ents, _ := os.ReadDir(StateRoot)
	for _, e := range ents {
		if owned(e.Name(), prefix) {
			out = append(out, "state "+filepath.Join(StateRoot, e.Name()))
		}
	}
	return out
}

// Clean removes everything of a prefix ("" = every lab prefix): processes inside its
// namespaces, the namespaces (their links go with them) and its state directory. Idempotent.
func Clean(prefix string) error {
	var errs []error
	nss := Namespaces(prefix)
	for _, ns := range nss {
		errs = append(errs, killNSProcs(ns))
	}
	for _, ns := range nss {
		errs = append(errs, deleteNS(ns))
	}
	ents, _ := os.ReadDir(StateRoot)
	for _, e := range ents {
		if owned(e.Name(), prefix) {
			errs = append(errs, os.RemoveAll(filepath.Join(StateRoot, e.Name())))
		}
	}
	if left, _ := os.ReadDir(StateRoot); len(left) == 0 {
		_ = os.Remove(StateRoot)
	}
	return errors.Join(errs...)
}
