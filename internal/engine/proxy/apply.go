package proxy

import (
	"bytes"
	"errors"

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

// ApplyIPTables programs the rendering in the network namespace at nsPath: the hooks of the
// tables the input has (added once: checked with -C first), then the chains in one
// iptables-restore --noflush call. --noflush keeps re-applying idempotent in both tables:
// each declared chain is flushed and refilled, the built-in chains and every other chain
// are left alone.
func ApplyIPTables(nsPath string, backend IPTablesBackend, input []byte) error {
	tables := restoreTables(input)
	for _, h := range Hooks() {
		table := h[1]
		if !tables[table] {
			continue
		}
		check := append([]string(nil), h...)
		for i, a := range check {
			if a == "-A" {
				check[i] = "-C"
			}
		}
		if run(nsPath, backend.tool(false), check, nil) == nil {
			continue
		}
		// The chain must exist before a rule can jump to it.
		if err := run(nsPath, backend.tool(true), []string{"--noflush"}, []byte("*"+table+"\n:"+h[len(h)-1]+" - [0:0]\nCOMMIT\n")); err != nil {
			return err
		}
		if err := run(nsPath, backend.tool(false), h, nil); err != nil {
			return err
		}
	}
	if backend != "legacy" {
		input = wholeTableCache(input)
	}
	return run(nsPath, backend.tool(true), []string{"--noflush"}, input)
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
	_, err := netns.Output(nsPath, tool, args, stdin)
	return err
}

// ApplyNFTables programs an nftables rendering (RenderNFTables, RenderNFTablesPartial) in the
// network namespace at nsPath as one transaction, which the kernel commits atomically or not
// at all: through netlink if applyNFTNetlink translates it (a partial rendering of a small
// change: no nft to start, no listing of the table's chains before a deletion), else with
// `nft -f -` (a full rendering, whose "add table" it does not translate, or a large change).
func ApplyNFTables(nsPath string, input []byte) error {
	if err := applyNFTNetlink(nsPath, input); !errors.Is(err, errNFTUntranslated) {
		return err
	}
	return run(nsPath, "nft", []string{"-f", "-"}, input)
}
