package lab

// The lab's nodes as the cluster sees them: listing, lookup, namespaces, CPU samples.

import (
	"context"
	"fmt"
	"os"

	"github.com/cnibench/cnibench/internal/cluster"
)

// Nodes implements cluster.Cluster.
func (l *Lab) Nodes(ctx context.Context) ([]cluster.Node, error) {
	var out []cluster.Node
	for _, n := range l.nodes {
		out = append(out, cluster.Node{Name: n.name, IP: n.ip.String()})
	}
	return out, nil
}

func (l *Lab) node(name string) (*node, error) {
	for _, n := range l.nodes {
		if n.name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %q in this lab", name)
}

// NodeNS returns a node's namespace name.
func (l *Lab) NodeNS(name string) (string, error) {
	n, err := l.node(name)
	if err != nil {
		return "", err
	}
	return n.ns, nil
}

// FabricNS returns the underlay namespace name.
func (l *Lab) FabricNS() string { return l.fabric }

// NodeCPU implements cluster.Cluster. Lab nodes share the host kernel, so the sample is the
// host's /proc/stat "cpu" line (recorded as host-wide in the environment).
func (l *Lab) NodeCPU(ctx context.Context, nodeName string) (cluster.CPUSample, error) {
	if _, err := l.node(nodeName); err != nil {
		return cluster.CPUSample{}, err
	}
	return HostCPU()
}

// HostCPU reads the aggregate "cpu" line of /proc/stat.
func HostCPU() (cluster.CPUSample, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cluster.CPUSample{}, err
	}
	return cluster.ParseProcStat(b)
}
