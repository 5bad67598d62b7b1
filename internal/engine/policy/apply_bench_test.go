package policy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl"
	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"
)

// benchName is a kube-router-like name: prefix + 16 base32 characters of a hash of s.
func benchName(prefix, s string) string {
	sum := sha256.Sum256([]byte(s))
	return prefix + base32.StdEncoding.EncodeToString(sum[:10])
}

// applyBenchProgram is a node's Program at scale: pods local pods, each isolated both ways by a
// policy of its own (ingress from a shared 2-member set on TCP 8080, egress to it on TCP 53),
// plus idle policies no local pod uses (those of the other nodes' pods, which kube-router
// renders on every node too).
func applyBenchProgram(pods, idle int) *Program {
	shared := "KUBE-SRC-SHARED0000000000"
	p := &Program{Sets: []Set{{Name: shared, Kind: SetAddrs, Members: []Member{{Addr: "10.244.200.1"}, {Addr: "10.244.200.2"}}}}}
	peers := []Peer{{Set: shared}}
	pol := func(i int, ingress bool) string {
		name := benchName("KUBE-NWPLCY-", fmt.Sprint("pol", i))
		pc := PolicyChain{Name: name, Namespace: "bench", Policy: fmt.Sprint("pol", i)}
		if ingress {
			pc.Ingress = []Rule{{Peers: peers, Ports: []PortMatch{{Protocol: "TCP", Port: 8080, EndPort: 8080}}}}
		} else {
			pc.Egress = []Rule{{Peers: peers, Ports: []PortMatch{{Protocol: "TCP", Port: 53, EndPort: 53}}}}
		}
		p.Policies = append(p.Policies, pc)
		return name
	}
	for k := 0; k < pods; k++ {
		in, out := pol(2*k, true), pol(2*k+1, false)
		p.Pods = append(p.Pods, PodFirewall{
			Pod: fmt.Sprintf("bench/pod%d", k), IP: fmt.Sprintf("10.244.%d.%d", k/250, k%250+2),
			Chain: benchName("KUBE-POD-FW-", fmt.Sprint("pod", k)), IngressOf: []string{in}, EgressOf: []string{out},
		})
	}
	for i := 0; i < idle; i++ {
		pol(2*pods+i, i%2 == 0)
	}
	return p
}

// scratchNS creates a namespace for a benchmark and removes it afterwards (its iptables
// rules, nftables tables and ipsets go with it).
func scratchNS(b *testing.B) string {
	b.Helper()
	ns, _ := netnstest.Scratch(b)
	return ns
}

// BenchmarkApply renders and applies 5,000 local pods with a policy each way (10,000 policy
// chains) with each engine, in a scratch namespace: with the other nodes' 10,000 policies as
// idle chains (20,000 policies in all, kube-router's way) and without them (what Compile
// produces: only the policies local pods use). Each case is a first apply into an empty
// namespace, then a second one of the same rendering (a full resync, as kube-router does
// periodically). Run with -benchtime 1x:
//
//	go test -run '^$' -bench Apply -benchtime 1x ./internal/engine/policy/
func BenchmarkApply(b *testing.B) {
	const pods = 5000
	for _, bc := range []struct {
		engine string
		idle   int
	}{
		{"iptables-nft", 10000}, {"iptables-legacy", 10000}, {"nftables", 10000},
		{"iptables-nft", 0}, {"iptables-legacy", 0}, {"nftables", 0},
	} {
		engine, idle := bc.engine, bc.idle
		b.Run(fmt.Sprintf("%s/idle=%d", engine, idle), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ns := scratchNS(b)
				p := applyBenchProgram(pods, idle)
				var c Counts
				var apply func() error
				t0 := time.Now()
				switch engine {
				case "nftables":
					var input []byte
					input, c = RenderNFTables(p)
					apply = func() error { return ApplyNFTables(ns, input) }
				default:
					backend := strings.TrimPrefix(engine, "iptables-")
					sets, filter, cnt := RenderIPTables(p)
					c = cnt
					apply = func() error { return ApplyIPTables(ns, backend, sets, filter) }
				}
				render := time.Since(t0)
				t1 := time.Now()
				if err := apply(); err != nil {
					b.Fatal(err)
				}
				first := time.Since(t1)
				t2 := time.Now()
				if err := apply(); err != nil {
					b.Fatal(err)
				}
				again := time.Since(t2)
				b.ReportMetric(render.Seconds(), "render-s")
				b.ReportMetric(first.Seconds(), "apply-s")
				b.ReportMetric(again.Seconds(), "reapply-s")
				b.ReportMetric(float64(c.Policies), "policies")
				b.ReportMetric(float64(c.PodChains), "podchains")
				b.ReportMetric(float64(c.Rules), "rules")
				b.ReportMetric(float64(c.Sets), "sets")
				b.Logf("%s idle=%d: render %.2fs, apply %.2fs, re-apply %.2fs, %+v", engine, idle, render.Seconds(), first.Seconds(), again.Seconds(), c)
			}
		})
	}
}

// BenchmarkNFTNetlinkVsNft programs the nftables rendering of 20,000 policies (5,000 local
// pods with a policy each way, 10,000 idle policies: BenchmarkApply's nftables/idle=10000)
// through netlink (applyNFTNetlink) and with `nft -f`, paired (nftnltest.Paired). Reported besides:
// the netlink way's parts (translation, marshalling, the sendmsg with the kernel's work).
// Run with -benchtime Nx (N >= 3 for an interval):
//
//	go test -run '^$' -bench NFTNetlinkVsNft -benchtime 6x ./internal/engine/policy/
func BenchmarkNFTNetlinkVsNft(b *testing.B) {
	in, c := RenderNFTables(applyBenchProgram(5000, 10000))
	var parse, marshal, send float64
	nftnltest.Paired(b, "netlink", "nft", map[string]func(ns string) error{
		"netlink": func(ns string) error { return applyNFTNetlink(ns, in) },
		"nft": func(ns string) error {
			_, err := output(ns, "nft", []string{"-f", "-"}, in)
			return err
		},
	}, func() {
		tr, ma, se := nftnltest.Parts(b, scratchNS(b), func() (*nftnl.Batch, error) { return translateNFT(in) })
		parse, marshal, send = parse+tr, marshal+ma, send+se
	})
	n := float64(b.N)
	b.ReportMetric(parse/n, "nl_translate_s")
	b.ReportMetric(marshal/n, "nl_marshal_s")
	b.ReportMetric(send/n, "nl_send_s")
	b.ReportMetric(float64(c.Policies), "policies")
}

// BenchmarkIPTNetlinkVsRestore programs the iptables rendering of 20,000 policies (as
// BenchmarkNFTNetlinkVsNft: 5,000 local pods, 90,000 rules, 25,000 chains) through netlink
// (applyIPTNetlink) and with the tools (applyIPTTools: iptables-nft-save, ipset restore,
// iptables-nft-restore of the whole table), paired (nftnltest.Paired). Run with -benchtime Nx:
//
//	go test -run '^$' -bench IPTNetlinkVsRestore -benchtime 6x ./internal/engine/policy/
func BenchmarkIPTNetlinkVsRestore(b *testing.B) {
	sets, filter, c := RenderIPTables(applyBenchProgram(5000, 10000))
	nftnltest.Paired(b, "netlink", "tools", map[string]func(ns string) error{
		"netlink": func(ns string) error { return applyIPTNetlink(ns, sets, filter) },
		"tools":   func(ns string) error { return applyIPTTools(ns, "nft", sets, filter) },
	}, nil)
	b.ReportMetric(float64(c.Policies), "policies")
	b.ReportMetric(float64(c.Rules), "rules")
}
