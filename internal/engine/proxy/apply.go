package proxy

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/netns"
)

// IPTablesBackend names the iptables flavour rules are applied with: "nft" (iptables-nft,
// Debian's default) or "legacy" (iptables-legacy, x_tables).
type IPTablesBackend string

func (b IPTablesBackend) tool(restore bool) string {
	name := "iptables"
	if b == "legacy" {
		name = "iptables-legacy"
	}
	if restore {
		name += "-restore"
	}
	return name
}

// ApplyIPTables programs the rendering in the network namespace at nsPath with one
// iptables-restore --noflush call. The hooks of the tables the input has come first, those
// the namespace lacks (checked with -C, as kube-proxy ensures its jumps), each table's in a
// section of its own that declares the chains they jump to; then the input's chains.
// --noflush keeps re-applying idempotent in both tables: each declared chain is flushed and
// refilled, the built-in chains and every other chain are left alone.
//
// lock is the xtables lock file the tools take (XTABLES_LOCKFILE; "" for the host's
// /run/xtables.lock). iptables-legacy locks that one file whatever the network namespace, so
// lab nodes sharing the host's /run would program one after the other; a lock file per node,
// as every real node has, lets them program at once.
//
// With iptables-nft the same is written without the tools where the input allows (nearly
// always): applyIPTNetlink; the tools' way (applyIPTTools) is what is left for the rest and
// for iptables-legacy.
func ApplyIPTables(nsPath string, backend IPTablesBackend, lock string, input []byte) error {
	if backend != "legacy" {
		if err := applyIPTNetlink(nsPath, input); !errors.Is(err, errIPTUntranslated) {
			return err
		}
	}
	return applyIPTTools(nsPath, backend, lock, input)
}

// applyIPTTools is ApplyIPTables with the backend's tools.
func applyIPTTools(nsPath string, backend IPTablesBackend, lock string, input []byte) error {
	var env []string
	if lock != "" {
		env = []string{"XTABLES_LOCKFILE=" + lock}
	}
	tables := restoreTables(input)
	var hooks bytes.Buffer
	var chains, rules []string // of the table being written
	table := ""
	endTable := func() {
		if table != "" {
			hooks.WriteString("*" + table + "\n" + strings.Join(chains, "") + strings.Join(rules, "") + "COMMIT\n")
		}
		chains, rules = nil, nil
	}
	for _, h := range Hooks() {
		if !tables[h[1]] {
			continue
		}
		check := slices.Clone(h)
		check[slices.Index(check, "-A")] = "-C"
		if runEnv(nsPath, env, backend.tool(false), check, nil) == nil {
			continue
		}
		if h[1] != table {
			endTable()
			table = h[1]
		}
		// The chain must exist before a rule can jump to it.
		if decl := ":" + h[len(h)-1] + " - [0:0]\n"; !slices.Contains(chains, decl) {
			chains = append(chains, decl)
		}
		rules = append(rules, restoreRule(h[2:])+"\n")
	}
	endTable()
	if backend != "legacy" {
		input = wholeTableCache(input)
	}
	return runEnv(nsPath, env, backend.tool(true), []string{"--noflush"}, append(hooks.Bytes(), input...))
}

// restoreRule writes a rule's arguments as an iptables-restore line: those with a blank or
// a quote in double quotes.
func restoreRule(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// restoreTables are the tables an iptables-restore input has a section ("*table") for.
func restoreTables(input []byte) map[string]bool {
	tables := map[string]bool{}
	for _, l := range bytes.Split(input, []byte("\n")) {
		if t, ok := bytes.CutPrefix(l, []byte("*")); ok {
			tables[string(bytes.TrimSpace(t))] = true
		}
	}
	return tables
}

// wholeTableCache puts a "-Z" (zero the table's counters) first in every table of an
// iptables-restore input. iptables-nft-restore (1.8.9) keeps the chains its commands name
// in a sorted linked list, so that it can fetch just those from the kernel; inserting into
// it is linear, and 10,000 Services (20,000 chains) made iptables-restore spend minutes in
// strcmp: 175 s instead of 2.3 s on this project's machine. A command naming no chain makes
// it fetch the whole table instead and stop recording names; -Z is the one without other
// effect than resetting the table's packet counters (the chains the input declares are
// flushed and lose theirs anyway).
func wholeTableCache(input []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(input) + 16)
	for len(input) > 0 {
		line := input
		if i := bytes.IndexByte(input, '\n'); i >= 0 {
			line = input[:i+1]
		}
		input = input[len(line):]
		b.Write(line)
		if bytes.HasPrefix(line, []byte("*")) {
			if !bytes.HasSuffix(line, []byte("\n")) {
				b.WriteByte('\n')
			}
			b.WriteString("-Z\n")
		}
	}
	return b.Bytes()
}

func run(nsPath, tool string, args []string, stdin []byte) error {
	return runEnv(nsPath, nil, tool, args, stdin)
}

// runEnv runs tool inside the namespace at nsPath with env ("KEY=value") added to its
// environment (netns.OutputEnv).
func runEnv(nsPath string, env []string, tool string, args []string, stdin []byte) error {
	_, err := netns.OutputEnv(nsPath, env, tool, args, stdin)
	return err
}

// ApplyNFTables programs an nftables rendering (RenderNFTables, RenderNFTablesPartial) in the
// network namespace at nsPath as one transaction, which the kernel commits atomically or not
// at all: through netlink if applyNFTNetlink translates it (no nft to start, no parsing of
// the text in nft, no listing of the table's chains before a deletion), else with `nft -f -`
// (a rendering with a numgen vmap of a multi-endpoint Service).
func ApplyNFTables(nsPath string, input []byte) error {
	if err := applyNFTNetlink(nsPath, input); !errors.Is(err, errNFTUntranslated) {
		return err
	}
	return run(nsPath, "nft", []string{"-f", "-"}, input)
}
