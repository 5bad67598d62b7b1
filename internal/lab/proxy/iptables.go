// Package proxy programs Services in lab nodes the way kube-proxy does:
//   - iptables mode (RenderIPTables, ApplyIPTables): KUBE-SERVICES -> KUBE-SVC-<hash> ->
//     KUBE-SEP-<hash>, statistic-mode random per endpoint, masquerade marking for hairpin and
//     off-cluster sources, as one iptables-restore input so that 10,000 Services are one call;
//   - nftables mode (RenderNFTables, ApplyNFTables): table ip kube-proxy,
//     the service-ips verdict map, service-/endpoint- chains with numgen load balancing, as one
//     nft transaction;
//   - IPVS mode (RenderIPVS): ipvsadm, ipset and address text only, since the lab's kernel has
//     no IPVS (IPVSAvailable says why).
package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"sort"
	"strings"
)

// Endpoint is one backend of a Service port.
type Endpoint struct {
	IP   string
	Port int
}

func (e Endpoint) String() string { return fmt.Sprintf("%s:%d", e.IP, e.Port) }

// Service is one port of a ClusterIP Service with its ready endpoints.
type Service struct {
	Namespace, Name string
	PortName        string // the Service port's name ("" for an unnamed port)
	ClusterIP       string
	Port            int
	Protocol        string // "tcp" or "udp"
	Endpoints       []Endpoint
}

// PortKey is kube-proxy's ServicePortName string: "namespace/name:portname", or
// "namespace/name" for an unnamed port.
func (s Service) PortKey() string {
	if s.PortName == "" {
		return s.Namespace + "/" + s.Name
	}
	return s.Namespace + "/" + s.Name + ":" + s.PortName
}

// portProtoHash is kube-proxy's chain-name hash: the first 16 characters of the base32
// encoding of SHA-256(servicePortName + protocol [+ endpoint]).
func portProtoHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "")))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// SvcChain is the Service port's chain, KUBE-SVC-<hash>.
func (s Service) SvcChain() string { return "KUBE-SVC-" + portProtoHash(s.PortKey(), s.Protocol) }

// SepChain is the chain of one of its endpoints, KUBE-SEP-<hash>.
func (s Service) SepChain(e Endpoint) string {
	return "KUBE-SEP-" + portProtoHash(s.PortKey(), s.Protocol, e.String())
}

// Options of the iptables rendering.
type Options struct {
	// ClusterCIDR: traffic to a Service from outside it is masqueraded (kube-proxy's
	// --cluster-cidr); "" = no such rule.
	ClusterCIDR string
	// Stale are chains of an earlier rendering to remove (flushed, then deleted), as
	// kube-proxy does for Services and endpoints that went away.
	Stale []string
	// ServiceCIDR (nftables only): new connections to an address of it that is no
	// ClusterIP are dropped, as kube-proxy does when it knows the service CIDR; "" = no
	// such rule.
	ServiceCIDR string
	// NFTMod1Maps makes RenderNFTables dispatch a Service with a single endpoint through
	// "numgen random mod 1 vmap { 0 : goto ... }" as kube-proxy up to 1.36 did, instead of a
	// plain goto (kube-proxy 1.37+): each such rule is an anonymous map, and the kernel
	// scans every map of the table when it creates one, so 10,000 of them cost minutes.
	NFTMod1Maps bool
}

// MasqMark is kube-proxy's default masquerade mark bit.
const MasqMark = "0x4000"

// Hooks are the rules that send traffic into kube-proxy's chains, one argv each (after
// "iptables"); kube-proxy ensures them one by one, outside the restore input.
func Hooks() [][]string {
	return [][]string{
		{"-t", "nat", "-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
		{"-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
		{"-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING"},
	}
}

// Counts are what a rendering holds, for the case record.
type Counts struct {
	Services, Endpoints, Chains, Rules int
	// Elements are the set and map elements (nftables maps and sets, ipset entries); 0 for
	// the iptables rendering, which has none.
	Elements int
	Names    []string // the chains declared
}

// RenderIPTables returns the nat table's kube-proxy chains for svcs as iptables-restore input
// (to be applied with --noflush: the declared chains are replaced, the rest of the table is
// left alone) and what it holds. Services are ordered by their port key, endpoints by address,
// so the output is deterministic.
func RenderIPTables(svcs []Service, opt Options) ([]byte, Counts) {
	svcs = append([]Service(nil), svcs...)
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].PortKey()+svcs[i].Protocol < svcs[j].PortKey()+svcs[j].Protocol })
	var chains, rules strings.Builder
	cnt := Counts{Services: len(svcs)}
	chain := func(name string) {
		fmt.Fprintf(&chains, ":%s - [0:0]\n", name)
		cnt.Chains++
		cnt.Names = append(cnt.Names, name)
	}
	rule := func(format string, args ...any) {
		fmt.Fprintf(&rules, format+"\n", args...)
		cnt.Rules++
	}
	for _, c := range []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"} {
		chain(c)
	}
	rule("-A KUBE-POSTROUTING -m mark ! --mark %s/%s -j RETURN", MasqMark, MasqMark)
	rule("-A KUBE-POSTROUTING -j MARK --xor-mark %s", MasqMark)
	rule(`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`)
	rule("-A KUBE-MARK-MASQ -j MARK --or-mark %s", MasqMark)
	for _, s := range svcs {
		key, p := s.PortKey(), s.Protocol
		svc := s.SvcChain()
		match := fmt.Sprintf("-m %s -p %s -d %s/32 --dport %d", p, p, s.ClusterIP, s.Port)
		if len(s.Endpoints) == 0 {
			continue // kube-proxy rejects in the filter table; the lab leaves it unreachable
		}
		chain(svc)
		rule(`-A KUBE-SERVICES -m comment --comment "%s cluster IP" %s -j %s`, key, match, svc)
		if opt.ClusterCIDR != "" {
			rule(`-A %s -m comment --comment "%s cluster IP" %s ! -s %s -j KUBE-MARK-MASQ`, svc, key, match, opt.ClusterCIDR)
		}
		eps := append([]Endpoint(nil), s.Endpoints...)
		sort.Slice(eps, func(i, j int) bool { return eps[i].String() < eps[j].String() })
		for i, e := range eps {
			sep := s.SepChain(e)
			chain(sep)
			cnt.Endpoints++
			if n := len(eps) - i; n > 1 {
				rule(`-A %s -m comment --comment "%s -> %s" -m statistic --mode random --probability %.10f -j %s`, svc, key, e, 1/float64(n), sep)
			} else {
				rule(`-A %s -m comment --comment "%s -> %s" -j %s`, svc, key, e, sep)
			}
			rule(`-A %s -m comment --comment %s -s %s/32 -j KUBE-MARK-MASQ`, sep, key, e.IP)
			rule(`-A %s -m comment --comment %s -m %s -p %s -j DNAT --to-destination %s`, sep, key, p, p, e)
		}
	}
	declared := map[string]bool{}
	for _, n := range cnt.Names {
		declared[n] = true
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	b.WriteString(chains.String())
	for _, s := range opt.Stale {
		if !declared[s] {
			fmt.Fprintf(&b, ":%s - [0:0]\n", s)
		}
	}
	b.WriteString(rules.String())
	for _, s := range opt.Stale {
		if !declared[s] {
			fmt.Fprintf(&b, "-X %s\n", s)
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String()), cnt
}
