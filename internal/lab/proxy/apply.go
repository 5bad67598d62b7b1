package proxy

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
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

// ApplyIPTables programs the rendering in the network namespace at nsPath: the hooks (added
// once: checked with -C first), then the chains in one iptables-restore --noflush call.
func ApplyIPTables(nsPath string, backend IPTablesBackend, input []byte) error {
	for _, h := range Hooks() {
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
		if err := run(nsPath, backend.tool(true), []string{"--noflush"}, []byte("*nat\n:"+h[len(h)-1]+" - [0:0]\nCOMMIT\n")); err != nil {
			return err
		}
		if err := run(nsPath, backend.tool(false), h, nil); err != nil {
			return err
		}
	}
	return run(nsPath, backend.tool(true), []string{"--noflush"}, input)
}

func run(nsPath, tool string, args []string, stdin []byte) error {
	argv := append([]string{"--net=" + nsPath, tool}, args...)
	cmd := exec.Command("nsenter", argv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
