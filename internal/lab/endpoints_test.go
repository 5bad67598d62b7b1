package lab

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/cnibench/cnibench/internal/cluster"
)

// answers makes n connections from pod to ip:port and returns the distinct answers (the last
// line each endpoint wrote: its address) and how many connections failed.
func answers(t *testing.T, l *Lab, pod, ip string, port, n int) ([]string, int) {
	t.Helper()
	got, failed, err := tryAnswers(l, pod, ip, port, n)
	if err != nil {
		t.Fatal(err)
	}
	return got, failed
}

// tryAnswers is answers without the test (for another goroutine).
func tryAnswers(l *Lab, pod, ip string, port, n int) ([]string, int, error) {
	script := fmt.Sprintf(`for i in $(seq %d); do /bin/busybox nc -w 1 %s %d </dev/null 2>&1 | tail -n 1; echo; done`, n, ip, port)
	res, err := l.Exec(context.Background(), pod, []string{"sh", "-c", script})
	if err != nil {
		return nil, 0, err
	}
	seen := map[string]bool{}
	failed := 0
	for _, a := range strings.Split(string(res.Stdout), "\n") {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case net.ParseIP(a) == nil:
			failed++
		default:
			seen[a] = true
		}
	}
	var out []string
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out, failed, nil
}

// udpFlowsTo counts the UDP conntrack entries in the node's namespace whose reply comes from ip
// (connections translated to that endpoint).
func udpFlowsTo(t *testing.T, l *Lab, node, ip string) int {
	t.Helper()
	ns, err := l.NodeNS(node)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = withHandle(ns, func(h *netlink.Handle) error {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		for _, f := range flows {
			if f.Forward.Protocol == 17 && f.Reverse.SrcIP.String() == ip {
				n++
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEndpointFollowing: a Service follows its selector's pods after it is made, as a
// cluster's endpoint controller and proxy make it: a pod created later (a running one and a
// silent one) receives its traffic, a pod deleted stops receiving it, with one programming per
// call; Programmed counts the endpoints now there; the track records the pods becoming ready
// or being deleted and when each node was programmed; the UDP connections translated to a
// removed endpoint leave conntrack (with the proxies that translate in the kernel), the others
// stay; pods nobody selects change nothing.
func TestEndpointFollowing(t *testing.T) {
	for _, proxy := range []string{"iptables", "nftables", "ebpf"} {
		t.Run(proxy, func(t *testing.T) {
			l := upLab(t, Config{Dataplane: "calico", Proxy: proxy})
			ctx := context.Background()
			web := map[string]string{"app": "web"}
			ans := []cluster.ContainerPort{{Name: "answer", Port: 8080, Protocol: "tcp"}}
			pods, err := l.CreatePods(ctx, []cluster.PodSpec{{Name: "client", Node: "node0"}, {Name: "ep0", Node: "node1", Labels: web, AnswerPort: 8080, Ports: ans}})
			if err != nil {
				t.Fatal(err)
			}
			ep0 := pods[1]
			svc, err := l.CreateServices(ctx, []cluster.ServiceSpec{{Name: "web", Selector: web, Ports: []cluster.ServicePort{
				{Name: "answer", Port: 80, TargetPort: 8080, Protocol: "tcp"}, {Name: "dns", Port: 53, TargetPort: 5353, Protocol: "udp"}}}})
			if err != nil {
				t.Fatal(err)
			}
			ip := svc[0].ClusterIP
			if got, failed := answers(t, l, "client", ip, 80, 10); !slices.Equal(got, []string{ep0.IP}) || failed > 0 {
				t.Fatalf("answers %v (%d failed), want %s", got, failed, ep0.IP)
			}
			tr, err := l.TrackEndpoints(ctx, "web")
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Stop()
			if n := l.Programmed(ctx)["proxy_endpoints_count"]; n != 2 {
				t.Errorf("programmed %v endpoints (2 ports x 1), want 2", n)
			}

			// Pods nobody selects: nothing is programmed again.
			before := l.Programmed(ctx)["proxy_program_ms"]
			if _, err := l.CreatePod(ctx, cluster.PodSpec{Name: "other", Node: "node1", Labels: map[string]string{"app": "other"}}); err != nil {
				t.Fatal(err)
			}
			if err := l.DeletePod(ctx, "other"); err != nil {
				t.Fatal(err)
			}
			if len(tr.Events()) != 0 || l.Programmed(ctx)["proxy_program_ms"] != before {
				t.Errorf("a pod no Service selects: events %+v, programmed again", tr.Events())
			}

			// Scale up: a running pod and a silent one, one programming.
			more, err := l.CreatePods(ctx, []cluster.PodSpec{{Name: "ep1", Node: "node1", Labels: web, AnswerPort: 8080, Ports: ans},
				{Name: "quiet", Node: "node0", Labels: web, Silent: true, Ports: ans}})
			if err != nil {
				t.Fatal(err)
			}
			ep1, quiet := more[0], more[1]
			all := []string{ep0.IP, ep1.IP, quiet.IP}
			sort.Strings(all)
			if got, failed := answers(t, l, "client", ip, 80, 60); !slices.Equal(got, all) || failed > 0 {
				t.Errorf("after scale up: answers %v (%d failed), want %v", got, failed, all)
			}
			if n := l.Programmed(ctx)["proxy_endpoints_count"]; n != 6 {
				t.Errorf("after scale up: %v endpoints programmed, want 6", n)
			}
			evs := tr.Events()
			var kinds []string
			for _, e := range evs {
				kinds = append(kinds, e.Kind+" "+e.IP+e.Node)
				if e.Kind == cluster.EndpointsSet && !slices.Equal(e.Endpoints, all) {
					t.Errorf("event %+v, want endpoints %v", e, all)
				}
			}
			slices.Sort(kinds)
			if want := []string{"endpoints node0", "endpoints node1", "pod-ready " + ep1.IP, "pod-ready " + quiet.IP}; !slices.Equal(kinds, want) {
				t.Errorf("events %q, want %q", kinds, want)
			}

			// UDP flows translated to each endpoint (kube-proxy's business when one goes away).
			if proxy != "ebpf" {
				cns, _ := l.PodNS("client")
				err := inNS(cns, func() error {
					for i := 0; i < 30; i++ {
						c, err := net.Dial("udp4", ip+":53")
						if err != nil {
							return err
						}
						_, _ = c.Write([]byte("x"))
						_ = c.Close()
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if udpFlowsTo(t, l, "node0", ep1.IP) == 0 || udpFlowsTo(t, l, "node0", ep0.IP) == 0 {
					t.Fatalf("30 UDP flows to the Service: %d to ep1, %d to ep0 in node0's conntrack", udpFlowsTo(t, l, "node0", ep1.IP), udpFlowsTo(t, l, "node0", ep0.IP))
				}
			}

			// Scale down, while traffic flows: none of it fails.
			n0 := len(tr.Events())
			done := make(chan []string)
			go func() {
				got, failed, err := tryAnswers(l, "client", ip, 80, 300)
				done <- append(got, fmt.Sprint(failed, err))
			}()
			if err := l.DeletePods(ctx, []string{"ep1"}); err != nil {
				t.Fatal(err)
			}
			if got := <-done; got[len(got)-1] != "0 <nil>" {
				t.Errorf("during scale down: answers %v, the last being how many failed", got)
			}
			rest := []string{ep0.IP, quiet.IP}
			sort.Strings(rest)
			if got, failed := answers(t, l, "client", ip, 80, 40); !slices.Equal(got, rest) || failed > 0 {
				t.Errorf("after scale down: answers %v (%d failed), want %v", got, failed, rest)
			}
			if n := l.Programmed(ctx)["proxy_endpoints_count"]; n != 4 {
				t.Errorf("after scale down: %v endpoints programmed, want 4", n)
			}
			evs = tr.Events()[n0:]
			if len(evs) != 3 || evs[0].Kind != cluster.EndpointPodDeleting || evs[0].IP != ep1.IP ||
				!slices.Equal(evs[1].Endpoints, rest) || !slices.Equal(evs[2].Endpoints, rest) || evs[1].At.Before(evs[0].At) {
				t.Errorf("scale down events %+v", evs)
			}
			if proxy != "ebpf" {
				if n := udpFlowsTo(t, l, "node0", ep1.IP); n != 0 {
					t.Errorf("%d UDP flows to the removed endpoint left in conntrack", n)
				}
				if udpFlowsTo(t, l, "node0", ep0.IP) == 0 {
					t.Error("the UDP flows to the endpoint that stays went too")
				}
			}
			if err := l.DeletePods(ctx, []string{"quiet"}); err != nil {
				t.Fatal(err)
			}
			if got, _ := answers(t, l, "client", ip, 80, 10); !slices.Equal(got, []string{ep0.IP}) {
				t.Errorf("after the silent pod went: answers %v", got)
			}
		})
	}
}
