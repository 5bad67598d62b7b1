package policy

import "strings"

// What the iptables and nftables renderings (iptables.go, nftables.go and their partial forms)
// share.

// MarkAdmit is the bit a policy rule sets when it admits the packet.
const MarkAdmit = 0x10000

// iptProto is a Kubernetes protocol in iptables / ipset spelling ("" = TCP, the default).
func iptProto(p string) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(p)
}
