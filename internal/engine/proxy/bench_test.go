package proxy

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/nftnl/nftnltest"
)

// benchServices is the benchmark's Service count, each with one endpoint.
const benchServices = 10000

func benchSvcs(n int) []Service {
	svcs := make([]Service, n)
	for i := range svcs {
		ip := i + 10
		svcs[i] = Service{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i), ClusterIP: fmt.Sprintf("10.96.%d.%d", ip/256, ip%256),
			Port: 80, Protocol: "tcp", Endpoints: []Endpoint{{IP: fmt.Sprintf("10.244.%d.%d", i/256, i%256), Port: 8080}}}
	}
	return svcs
}

// benchNS creates a scratch namespace "cnbtqb" + 2 random digits (a lab prefix, so
// `cnibench lab clean` would find a leftover) and deletes it when the benchmark ends.
func benchNS(b *testing.B) string {
	b.Helper()
	for range 20 {
		name := fmt.Sprintf("cnbtqb%02d", rand.Intn(100))
		if _, err := os.Stat("/run/netns/" + name); err == nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			b.Fatalf("ip netns add %s: %v: %s", name, err, out)
		}
		b.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				b.Errorf("ip netns del %s: %v: %s", name, err, out)
			}
		})
		return "/run/netns/" + name
	}
	b.Fatal("no free cnbqbench namespace name")
	return ""
}

// benchEngine is one way of programming Services: render, apply, and count what the
// namespace holds afterwards (Service and endpoint chains: those the rendering declares).
type benchEngine struct {
	name   string
	render func([]Service, Options) ([]byte, Counts)
	apply  func(ns string, in []byte) error
	chains func(ns string) (int, error)
}

func iptablesChains(backend IPTablesBackend) func(string) (int, error) {
	return func(ns string) (int, error) {
		out, err := exec.Command("nsenter", "--net="+ns, backend.tool(false)+"-save", "-t", "nat").Output()
		return bytes.Count(out, []byte("\n:KUBE-")), err
	}
}

func nftChainCount(ns string) (int, error) {
	out, err := exec.Command("nsenter", "--net="+ns, "nft", "list", "chains", "ip").Output()
	return bytes.Count(out, []byte("\tchain ")), err
}

var benchEngines = []benchEngine{
	{"iptables-nft", RenderIPTables, func(ns string, in []byte) error { return ApplyIPTables(ns, "nft", "", in) }, iptablesChains("nft")},
	{"iptables-legacy", RenderIPTables, func(ns string, in []byte) error { return ApplyIPTables(ns, "legacy", "", in) }, iptablesChains("legacy")},
	{"nftables", RenderNFTables, ApplyNFTables, nftChainCount},
}

// BenchmarkProgram10kServices renders 10,000 Services with one endpoint each and applies them
// into a fresh namespace, for kube-proxy's iptables layout (iptables-nft and iptables-legacy,
// one iptables-restore --noflush) and its nftables layout (one nft -f transaction); then adds
// one Service and programs all 10,001 again, as the lab does on every change. Reported per
// iteration: render_s, apply_s, and update_render_s + update_apply_s for the +1 Service, plus
// what was installed (checked in the namespace after the update). Each iteration is seconds:
//
//	go test -run '^$' -bench Program10k -benchtime 1x ./internal/engine/proxy/
func BenchmarkProgram10kServices(b *testing.B) {
	for _, e := range benchEngines {
		b.Run(e.name, func(b *testing.B) { benchProgram(b, e, Options{ClusterCIDR: "10.244.0.0/16"}) })
	}
}

// BenchmarkNFTablesMod1Maps10k is the nftables case with kube-proxy <= 1.36's
// "numgen random mod 1 vmap" for single-endpoint Services: one anonymous map per Service,
// which the kernel creates in time proportional to the maps already in the table (about a
// minute for 10,000 on a 2-core machine; see RenderNFTables).
func BenchmarkNFTablesMod1Maps10k(b *testing.B) {
	benchProgram(b, benchEngines[2], Options{ClusterCIDR: "10.244.0.0/16", NFTMod1Maps: true})
}

func benchProgram(b *testing.B, e benchEngine, opt Options) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	svcs := benchSvcs(benchServices + 1)
	var render, apply, urender, uapply time.Duration
	var cnt Counts
	var size int
	for range b.N {
		ns := benchNS(b)
		t0 := time.Now()
		in, c := e.render(svcs[:benchServices], opt)
		t1 := time.Now()
		if err := e.apply(ns, in); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		o := opt
		o.Stale = c.Names // what the lab passes: the chains it installed last time
		in2, c2 := e.render(svcs, o)
		t3 := time.Now()
		if err := e.apply(ns, in2); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		render, apply, urender, uapply = render+t1.Sub(t0), apply+t2.Sub(t1), urender+t3.Sub(t2), uapply+t4.Sub(t3)
		cnt, size = c, len(in)
		if n, err := e.chains(ns); err != nil || n != c2.Chains || c2.Services != benchServices+1 {
			b.Fatalf("after the update: %d chains installed (%v), rendered %d chains for %d Services", n, err, c2.Chains, c2.Services)
		}
	}
	n := float64(b.N)
	b.ReportMetric(render.Seconds()/n, "render_s")
	b.ReportMetric(apply.Seconds()/n, "apply_s")
	b.ReportMetric(urender.Seconds()/n, "update_render_s")
	b.ReportMetric(uapply.Seconds()/n, "update_apply_s")
	b.ReportMetric(float64(cnt.Services), "services")
	b.ReportMetric(float64(cnt.Chains), "chains")
	b.ReportMetric(float64(cnt.Rules), "rules")
	b.ReportMetric(float64(cnt.Elements), "elements")
	b.ReportMetric(float64(size)/1e6, "input_MB")
	b.ReportMetric(0, "ns/op") // the seconds above say it better
}

// BenchmarkIPTNetlinkVsRestore programs kube-proxy's iptables rendering of 10,000 Services
// (one endpoint each: 20,003 chains, 50,004 rules; the endpoint chains' rules without comments,
// kube-proxy's large cluster mode) through netlink
// (applyIPTNetlink) and with iptables-nft-restore --noflush (applyIPTTools), paired
// (nftnltest.Paired). Run with -benchtime Nx:
//
//	go test -run '^$' -bench IPTNetlinkVsRestore -benchtime 6x ./internal/engine/proxy/
func BenchmarkIPTNetlinkVsRestore(b *testing.B) {
	in, c := RenderIPTables(benchSvcs(benchServices), Options{ClusterCIDR: "10.244.0.0/16"})
	nftnltest.Paired(b, "netlink", "tools", map[string]func(ns string) error{
		"netlink": func(ns string) error { return applyIPTNetlink(ns, in) },
		"tools":   func(ns string) error { return applyIPTTools(ns, "nft", "", in) },
	}, nil)
	b.ReportMetric(float64(c.Rules), "rules")
}
