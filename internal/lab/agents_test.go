package lab

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/cpupin"
)

// Node i's agent runs on the i-th free CPU, round robin; CPUs a pod holds are skipped; with
// none free the agents run anywhere.
func TestAgentCPU(t *testing.T) {
	l := &Lab{agentCPUs: []int{0, 1, 3}, cpus: cpuState{held: map[int]string{}}, nodes: make([]*node, 4)}
	got := func() []int {
		var out []int
		for i := range l.nodes {
			out = append(out, l.agentCPU(i))
		}
		return out
	}
	if g := got(); !slices.Equal(g, []int{0, 1, 3, 0}) {
		t.Errorf("no CPU held: agents on %v, want [0 1 3 0]", g)
	}
	l.cpus.held[1] = "vnf"
	if g := got(); !slices.Equal(g, []int{0, 3, 0, 3}) {
		t.Errorf("CPU 1 held: agents on %v, want [0 3 0 3]", g)
	}
	l.cpus.held[0], l.cpus.held[3] = "a", "b"
	if g := got(); !slices.Equal(g, []int{-1, -1, -1, -1}) {
		t.Errorf("every CPU held: agents on %v, want anywhere (-1)", g)
	}
}

// agentsDo runs each node's work on that node's CPU.
func TestAgentsDoPins(t *testing.T) {
	all, err := cpupin.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	l := &Lab{agentCPUs: all, cpus: cpuState{held: map[int]string{}}, nodes: make([]*node, 3)}
	var mu sync.Mutex
	ran := map[int][]int{}
	err = l.agentsDo(func(i int) error {
		cpus, err := cpupin.Allowed()
		mu.Lock()
		ran[i] = cpus
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.nodes {
		if want := []int{l.agentCPU(i)}; !slices.Equal(ran[i], want) {
			t.Errorf("node %d's work ran on a thread allowed on %v, want %v", i, ran[i], want)
		}
	}
}

// Selectors are resolved through the label index, which follows pods as they come and go;
// only pods with an address on the pod network are endpoints.
func TestSelectIPsIndex(t *testing.T) {
	l := &Lab{pods: map[string]*pod{}, byLabel: map[string]map[*pod]bool{}, cpus: cpuState{held: map[int]string{}}}
	add := func(name, ip string, labels map[string]string, host bool) {
		p := &pod{Pod: cluster.Pod{Name: name, IP: ip, Labels: labels, HostNetwork: host}}
		l.pods[name] = p
		l.indexLabels(p, true)
	}
	add("a", "10.244.0.3", map[string]string{"app": "web", "tier": "x"}, false)
	add("b", "10.244.1.2", map[string]string{"app": "web"}, false)
	add("c", "10.244.0.4", map[string]string{"app": "db"}, false)
	add("h", "192.168.0.2", map[string]string{"app": "web"}, true) // host network: never an endpoint
	add("u", "", map[string]string{"app": "web"}, false)           // not attached yet
	for _, c := range []struct {
		sel  map[string]string
		want []string
	}{
		{map[string]string{"app": "web"}, []string{"10.244.0.3", "10.244.1.2"}},
		{map[string]string{"app": "web", "tier": "x"}, []string{"10.244.0.3"}},
		{map[string]string{"app": "db", "tier": "x"}, nil},
		{map[string]string{"app": "none"}, nil},
		{nil, nil},
	} {
		if got := l.selectIPs(c.sel); !slices.Equal(got, c.want) {
			t.Errorf("selector %v: %v, want %v", c.sel, got, c.want)
		}
	}
	l.forget("a")
	if got := l.selectIPs(map[string]string{"app": "web"}); !slices.Equal(got, []string{"10.244.1.2"}) {
		t.Errorf("after pod a went: %v, want [10.244.1.2]", got)
	}
	if _, left := l.byLabel["tier=x"]; left {
		t.Error("the index keeps a label no pod has")
	}
}

// An endpoint's node is the node whose pod or silent-pod block holds its address.
func TestNodeOfIP(t *testing.T) {
	_, cc, _ := net.ParseCIDR("10.244.0.0/16")
	l := &Lab{}
	for i := range 2 {
		l.nodes = append(l.nodes, &node{name: fmt.Sprintf("node%d", i), podCIDR: nodePodCIDR(cc, 24, i),
			silentCIDR: silentBlock(cc, 2, 24, i)})
	}
	for ip, want := range map[string]string{"10.244.0.9": "node0", "10.244.1.9": "node1", "10.244.2.9": "",
		nthIP(l.nodes[1].silentCIDR.IP, 5).String(): "node1", nthIP(l.nodes[0].silentCIDR.IP, 5).String(): "node0", "bad": ""} {
		if got := l.nodeOfIP(ip); got != want {
			t.Errorf("nodeOfIP(%s) = %q, want %q", ip, got, want)
		}
	}
}
