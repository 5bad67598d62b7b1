package lab

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cnibench/cnibench/internal/account"
	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/netns"
	"github.com/cnibench/cnibench/internal/procs"
)

// accountAround opens an accounting window of the lab, runs fn and returns what it accounted.
func accountAround(t *testing.T, l *Lab, client, server string, fn func()) *account.Trial {
	t.Helper()
	return accountPath(t, l, cluster.AccountPath{Client: client, Server: server}, fn)
}

// accountTraced is accountAround with --trace hops.
func accountTraced(t *testing.T, l *Lab, client, server string, fn func()) *account.Trial {
	t.Helper()
	return accountPath(t, l, cluster.AccountPath{Client: client, Server: server, Trace: cluster.TraceHops}, fn)
}

// accountPath opens an accounting window of the lab for path, runs fn and returns what it
// accounted.
func accountPath(t *testing.T, l *Lab, path cluster.AccountPath, fn func()) *account.Trial {
	t.Helper()
	ctx := context.Background()
	w, err := l.Account(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	fn()
	a, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// acctPathCase is a path the accounting tests measure: intra node on the routed data plane
// (client -> node -> server), inter node over VXLAN (client -> bridge -> vxlan -> underlay ->
// fabric -> the other node ...).
type acctPathCase struct {
	dataplane, placement string
	wantWhere            []string // the namespaces the path crosses
}

var accountPaths = []acctPathCase{
	{"calico", "intra", []string{"client", "node0", "server"}},
	{"flannel", "inter", []string{"client", "node0", "fabric", "node1", "server"}},
}

// up brings the case's lab up with a client pod on node0 and a server pod on the node the
// placement says.
func (tc acctPathCase) up(t *testing.T) (*Lab, []cluster.Pod) {
	t.Helper()
	l := upLab(t, Config{Dataplane: tc.dataplane})
	server := "node0"
	if tc.placement == "inter" {
		server = "node1"
	}
	pods, err := l.CreatePods(context.Background(), []cluster.PodSpec{{Name: "client", Node: "node0"}, {Name: "server", Node: server}})
	if err != nil {
		t.Fatal(err)
	}
	return l, pods
}

// TestAccountHopsAddUp sends a known number of packets (200 pings: 200 requests, 200 replies)
// from a pod to another and checks that every device on the path counted exactly those,
// whichever way they went, and nothing dropped them: intra node on the routed data plane
// (client -> node -> server), inter node over VXLAN (client -> bridge -> vxlan -> underlay ->
// fabric -> the other node ...), where the underlay carries each packet with 64 bytes more than
// the tunnel device counts.
func TestAccountHopsAddUp(t *testing.T) {
	const pings, strays = 200, 3
	for _, tc := range accountPaths {
		t.Run(tc.dataplane+"-"+tc.placement, func(t *testing.T) {
			l, pods := tc.up(t)
			// IPv6 off in every namespace (its link-up chatter, router solicitations and
			// MLD reports, would fall in the window: a fresh vxlan device even drops them,
			// having no one to send multicast to), neighbours resolved before the window: it
			// holds only the pings.
			for _, ns := range l.acctScope(cluster.AccountPath{}) {
				if ns.name == "" {
					continue // cnibench itself: no namespace of its own
				}
				if err := netns.SetSysctl(ns.name, "net/ipv6/conf/all/disable_ipv6", "1"); err != nil {
					t.Fatal(err)
				}
			}
			if err := ping(t, l, "client", pods[1].IP, 56); err != nil {
				t.Fatal(err)
			}
			a := accountAround(t, l, "client", "server", func() {
				execOK(t, l, "client", "ping", "-q", "-c", fmt.Sprint(pings), "-i", "0.002", "-W", "1", pods[1].IP)
			})
			if len(a.Hosts) != 1 || len(a.Hosts[0].CPUs) == 0 {
				t.Fatalf("no CPUs accounted: %+v", a.Hosts)
			}
			where := map[string]bool{}
			var path []account.Hop
			for _, h := range a.Hops {
				if h.RxPackets+h.TxPackets < pings {
					continue // off the path (a stray neighbour probe)
				}
				path = append(path, h)
				where[h.Where] = true
				// The same pings each way at every hop (a device sends the requests one way and
				// the replies the other), give or take a neighbour probe (ARP keeps checking
				// an entry that only pings use).
				if h.RxPackets < pings || h.TxPackets < pings || h.RxPackets > pings+strays || h.TxPackets > pings+strays {
					t.Errorf("%s %s (%s): rx %v tx %v packets, want %d each way (up to %d more)", h.Where, h.Dev, h.Kind, h.RxPackets, h.TxPackets, pings, strays)
				}
				if h.Drops() != 0 {
					t.Errorf("%s %s dropped %v packets", h.Where, h.Dev, h.Drops())
				}
			}
			for _, w := range tc.wantWhere {
				if !where[w] {
					t.Errorf("the path does not cross %s: hops %+v", w, a.Hops)
				}
			}
			// In path order: the client first, the server last.
			if len(path) < 2 || path[0].Where != "client" || path[len(path)-1].Where != "server" {
				t.Errorf("hops not in path order: %+v", path)
			}
			for i := 1; i < len(path); i++ {
				if path[i].Order < path[i-1].Order {
					t.Errorf("hop %s %s (order %d) after %s %s (order %d)", path[i].Where, path[i].Dev, path[i].Order, path[i-1].Where, path[i-1].Dev, path[i-1].Order)
				}
			}
			if tc.placement == "inter" {
				var vx, under *account.Hop
				for i, h := range path {
					if h.Where == "node0" && h.Kind == "vxlan" {
						vx = &path[i]
					}
					if h.Where == "node0" && h.Dev == "eth0" {
						under = &path[i]
					}
				}
				if vx == nil || under == nil {
					t.Fatalf("node0 has no vxlan device or underlay eth0 on the path: %+v", path)
				}
				// A tunnel device counts the inner packets from their IP header (iptunnel_xmit),
				// so the underlay carries each with 64 bytes more: the inner Ethernet header
				// (14) and VXLAN's own (outer Ethernet, IP, UDP, VXLAN: 50); an ARP frame
				// (42 bytes) of the underlay's own may come on top.
				if extra := under.TxBytes - vx.TxBytes - 64*vx.TxPackets; extra < 0 || extra > strays*42 {
					t.Errorf("underlay eth0 sent %v bytes for the vxlan device's %v packets of %v bytes: %v more than 64 bytes each", under.TxBytes, vx.TxPackets, vx.TxBytes, extra)
				}
			}
			for _, k := range a.Kernel {
				for _, c := range []string{"IpInDiscards", "IpOutDiscards", "IpOutNoRoutes"} {
					if k.Counters[c] != 0 {
						t.Errorf("%s: %s %v", k.Where, c, k.Counters[c])
					}
				}
			}
		})
	}
}

// TestAccountVerdictNamesBottleneck makes two known bottlenecks and checks the verdict names
// each: a qdisc that drops (a token bucket far slower than the UDP stream sent through it) and
// the server's CPU kept busy by a spinner outside the run.
func TestAccountVerdictNamesBottleneck(t *testing.T) {
	l := upLab(t, Config{Dataplane: "calico"})
	ctx := context.Background()
	pods, err := l.CreatePods(ctx, []cluster.PodSpec{{Name: "client", Node: "node0"}, {Name: "server", Node: "node0"}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := l.Start(ctx, "server", []string{"taskset", "-c", "1", "iperf3", "-s", "-p", "5201"}, cluster.Ready{TCPPort: 5201})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cns, err := l.PodNS("client")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("qdisc drops", func(t *testing.T) {
		if out, err := nsenter(t, cns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "5mbit", "burst", "5kb", "limit", "10kb"); err != nil {
			t.Fatalf("tc: %v: %s", err, out)
		}
		defer nsenter(t, cns, "tc", "qdisc", "del", "dev", "eth0", "root")
		a := accountAround(t, l, "client", "server", func() {
			execOK(t, l, "client", "taskset", "-c", "0", "iperf3", "-c", pods[1].IP, "-u", "-b", "100M", "-t", "1", "-J")
		})
		var eth0 *account.Hop
		for i, h := range a.Hops {
			if h.Where == "client" && h.Dev == "eth0" {
				eth0 = &a.Hops[i]
			}
		}
		if eth0 == nil || eth0.QdiscDrops < 100 {
			t.Fatalf("client eth0 counted no qdisc drops: %+v", a.Hops)
		}
		v := account.Judge(a)
		if all := v.Bottleneck + "\n" + strings.Join(v.Findings, "\n"); !strings.Contains(all, "drops at client eth0") || !strings.Contains(all, "qdisc drops") {
			t.Errorf("the verdict does not name the qdisc: %q %q", v.Bottleneck, v.Findings)
		}
	})

	t.Run("server CPU taken by a spinner", func(t *testing.T) {
		spin := exec.Command("taskset", "-c", "1", "sh", "-c", "while :; do :; done")
		spin.SysProcAttr = procs.Attr()
		if err := spin.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = spin.Wait(); close(done) }()
		defer procs.Stop(spin.Process.Pid, done, time.Second)
		a := accountAround(t, l, "client", "server", func() {
			execOK(t, l, "client", "taskset", "-c", "0", "iperf3", "-c", pods[1].IP, "-t", "2", "-J")
		})
		var cpu1 *account.CPU
		for i, c := range a.Hosts[0].CPUs {
			if c.CPU == 1 {
				cpu1 = &a.Hosts[0].CPUs[i]
			}
		}
		if cpu1 == nil {
			t.Fatalf("CPU 1 not accounted: %+v", a.Hosts)
		}
		// Busy or stolen: a burst of steal takes its share from the spinner (81 % busy in a
		// CI run), not from the idle time the CPU does not have.
		if cpu1.BusyPct()+cpu1.StealPct < account.SaturatedPct {
			t.Errorf("CPU 1 %.0f %% busy and %.0f %% stolen with a spinner on it", cpu1.BusyPct(), cpu1.StealPct)
		}
		var server *account.Role
		for i, r := range a.Roles {
			if r.Name == "server" {
				server = &a.Roles[i]
			}
		}
		if server == nil || len(server.RanOn) != 1 || server.RanOn[0].CPU != 1 || !strings.Contains(strings.Join(server.Commands, ","), "iperf3") {
			t.Errorf("server role %+v: want iperf3 on CPU 1 only", server)
		}
		v := account.Judge(a)
		if !strings.Contains(v.Bottleneck, "CPU 1 at") || !strings.Contains(v.Bottleneck, "processes outside the run") {
			t.Errorf("the verdict does not blame CPU 1's outside work: %q", v.Bottleneck)
		}
	})
}

// TestAccountTraceHops traces a TCP stream from pod to pod (--trace hops): the sampled
// segments are stamped along the whole path, the client's data from its eth0 to the server's
// eth0 and the server's acknowledgements back, over VXLAN too (the tracer looks into the
// underlay's frames: the fabric stamps them); every step takes a time of its own, none
// negative; a token bucket on the client's eth0 (20 Mbit/s) makes the step from there to the
// node the slowest by far, and the verdict names it; the tracer leaves nothing attached.
func TestAccountTraceHops(t *testing.T) {
	for _, tc := range accountPaths {
		t.Run(tc.dataplane+"-"+tc.placement, func(t *testing.T) {
			l, pods := tc.up(t)
			ctx := context.Background()
			srv, err := l.Start(ctx, "server", []string{"iperf3", "-s", "-p", "5201"}, cluster.Ready{TCPPort: 5201})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			a := accountTraced(t, l, "client", "server", func() {
				execOK(t, l, "client", "iperf3", "-c", pods[1].IP, "-t", "1", "-J")
			})
			if a.Traced < 50 || len(a.Latency) == 0 {
				t.Fatalf("%v segments traced, %d steps; notes %q", a.Traced, len(a.Latency), a.Notes)
			}
			logSteps(t, a)
			data := map[string]bool{}
			stamped := map[string]bool{}
			acks := false
			for _, s := range a.Latency {
				if s.P50US < 0 || s.P99US < s.P50US || s.Packets < 1 {
					t.Errorf("step %+v", s)
				}
				if s.Start == "client eth0 egress" {
					data[s.From+" -> "+s.To] = true
					stamped[strings.Fields(s.From)[0]], stamped[strings.Fields(s.To)[0]] = true, true
				}
				acks = acks || s.Start == "server eth0 egress" && s.To == "client eth0 ingress"
			}
			for _, w := range tc.wantWhere {
				if !stamped[w] {
					t.Errorf("the client's data were not stamped in %s: steps %v", w, data)
				}
			}
			reached := false
			for k := range data {
				reached = reached || strings.HasSuffix(k, "-> server eth0 ingress")
			}
			if !reached || !acks {
				t.Errorf("data reached the server's eth0 %v, acknowledgements reached the client's %v: %+v", reached, acks, a.Latency)
			}
			if t.Failed() {
				return
			}
			cns, err := l.PodNS("client")
			if err != nil {
				t.Fatal(err)
			}
			if out, err := nsenter(t, cns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "20mbit", "burst", "20kb", "latency", "30ms"); err != nil {
				t.Fatalf("tc: %v: %s", err, out)
			}
			defer nsenter(t, cns, "tc", "qdisc", "del", "dev", "eth0", "root")
			a = accountTraced(t, l, "client", "server", func() {
				execOK(t, l, "client", "iperf3", "-c", pods[1].IP, "-t", "2", "-J")
			})
			var first *account.HopLatency
			slowest := 0.0
			for i, s := range a.Latency {
				if s.Start != "client eth0 egress" {
					continue
				}
				if s.From == "client eth0 egress" && (first == nil || s.Packets > first.Packets) {
					first = &a.Latency[i]
				} else if s.From != "client eth0 egress" {
					slowest = max(slowest, s.MeanUS)
				}
			}
			// 20 Mbit/s drains 2.5 kB a millisecond: a segment waits for what is queued
			// before it, up to the 30 ms the bucket holds (in the mean: the first segments of
			// the stream find the bucket full of tokens and pass at once; 2 s of the stream
			// give some 25-50 sampled segments).
			if first == nil || first.MeanUS < 1000 || first.MeanUS < 10*slowest {
				t.Fatalf("the step out of the shaped eth0 %+v, the slowest other %.1f us: %+v", first, slowest, a.Latency)
			}
			logSteps(t, a)
			v := account.Judge(a)
			if all := strings.Join(v.Findings, "\n"); !strings.Contains(all, "most time from client eth0 egress to "+first.To) {
				t.Errorf("the verdict does not name the shaped step: %q", v.Findings)
			}
			// Nothing of the tracer stays: no program in the hooks of the client's eth0.
			if err := netns.Do(cns, func() error {
				lk, err := net.InterfaceByName("eth0")
				if err != nil {
					return err
				}
				for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
					r, err := link.QueryPrograms(link.QueryOptions{Target: lk.Index, Attach: at})
					if err != nil {
						return err
					}
					if len(r.Programs) > 0 {
						t.Errorf("%d programs left in eth0's %v hook", len(r.Programs), at)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// logSteps logs a traced trial's steps.
func logSteps(t *testing.T, a *account.Trial) {
	t.Helper()
	t.Logf("%.0f segments traced", a.Traced)
	for _, s := range a.Latency {
		t.Logf("  from %s: %s -> %s: %.0f segments, P50 %.1f us, P99 %.1f us, at %.1f us", s.Start, s.From, s.To, s.Packets, s.P50US, s.P99US, s.AtUS)
	}
}
