// Package lab is the lab backend: a whole cluster built from Linux network namespaces on one
// host. A fabric namespace holds the underlay bridge; every node is a namespace with one
// underlay address; every pod is a namespace attached by the real CNI reference plugins, the way
// a kubelet attaches it. Everything carries the run's prefix; the root network namespace is never
// reconfigured (links are created directly inside the lab's namespaces).
//
// The lab keeps what builds and runs the namespaces; its data-plane parts (internal/lab/dataplane)
// program them through the engines below it in internal/engine (proxy, policy, bpfdp), which
// need none of the lab's namespaces.
package lab

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
	"github.com/cnibench/cnibench/internal/nf"
)

// StateRoot holds per-lab state (IPAM allocations, CNI cache); removed with the lab.
const StateRoot = "/run/cnibench"

// TempRoot holds per-lab scratch files of the pods (nginx's content: 10 MB per replica, so on
// disk rather than in /run's memory); removed with the lab.
const TempRoot = "/var/tmp/cnibench"

// TempDir is a lab's scratch directory (Facts.TempDir).
func TempDir(prefix string) string { return filepath.Join(TempRoot, prefix) }

// node is one lab node.
type node struct {
	name    string // cluster node name: node0, node1, ...
	ns      string // namespace name
	ip      net.IP // underlay address
	index   int
	podCIDR *net.IPNet
	// silentCIDR holds the node's silent pods (see silent.go); nil when the cluster CIDR has no
	// room for it.
	silentCIDR *net.IPNet
}

// pod is one lab pod.
type pod struct {
	cluster.Pod
	ns       string // namespace (the node's for host-network pods, the holder's for silent ones)
	attached bool   // attached through CNI (needs CNI DEL)
	silent   bool   // an address in the node's silent-pod holder
	veth     string // an external client's link in the fabric namespace (see external.go)
	// readyAt is when the pod was ready to serve (attached, answering: see endpoints.go).
	readyAt time.Time
	answer  net.Listener // the pod's answer listener (PodSpec.AnswerPort), closed on delete
	cpu     podCPU       // its CPU resources (PodSpec.CPU: see podcpu.go)
}

// Lab is a running lab cluster; it implements cluster.Cluster.
type Lab struct {
	cfg    Config
	dp     dataplane.Parts
	fabric string
	nodes  []*node
	gw     net.IP // underlay gateway address (on the fabric bridge)
	ulMask net.IPMask

	mu   sync.Mutex
	pods map[string]*pod
	// byLabel are the pods by label ("key=value"), to resolve Service selectors.
	byLabel map[string]map[*pod]bool
	procs   map[*proc]bool
	cpus    cpuState // exclusive CPUs and the shared pool (podcpu.go)
	// agentCPUs are the CPUs the nodes' agents run on (agents.go).
	agentCPUs []int
	bare      int
	// chains are the service-function chains, by their client's and their server's pod name.
	chains   map[string]*nf.Chain
	chainSeq int

	services   map[string]*service
	svcOrder   []*service   // the same Services, by name (what the proxy is given, in order)
	svcSeq     int          // ClusterIPs handed out so far (offsets into the service range)
	nodePorts  map[int]bool // NodePorts in use
	svcFree    []int        // offsets of deleted Services, reused oldest first once the range is used up
	svcChains  [][]string   // per node (by index), the chains of its last applied rendering
	svcState   []any        // per node (by index), the partial proxy's state of its last applied rendering
	polState   []any        // per node (by index), the partial policy engine's state of its last applied rendering
	filtering  bool         // the nodes are ready for filtering (Attach.Filtered)
	progMu     sync.Mutex
	programmed map[string]float64 // what the last Service/policy programming installed
	policies   map[string]networkingv1.NetworkPolicy
	// svcProg makes programmings of the Services follow one another: each applies the state
	// it rendered, so two at once could leave the older one applied last.
	svcProg sync.Mutex
	tracks  map[*endpointTrack]bool // the Services' endpoint tracks (see endpoints.go), under mu

	holdMu  sync.Mutex
	holders map[string]*holder // node name -> silent-pod holder

	extIPs map[string]bool // underlay addresses of external clients (see external.go)
	extSeq int             // fabric links of external clients made so far

	acctMu  sync.Mutex
	windows map[*acctWindow]bool // the open accounting windows (account.go)
}

var _ cluster.Cluster = (*Lab)(nil)

// StateDir is the lab's state directory.
func (l *Lab) StateDir() string { return filepath.Join(StateRoot, l.cfg.Prefix) }

// Prefix returns the lab's prefix.
func (l *Lab) Prefix() string { return l.cfg.Prefix }

// Parts returns the lab's data-plane parts.
func (l *Lab) Parts() dataplane.Parts { return l.dp }

// PodMTU is the MTU pods get: the underlay MTU less the overlay overhead.
func (l *Lab) PodMTU() int { return l.cfg.MTU - l.dp.Overlay.Overhead() }

// Up builds a lab. On error everything created so far is removed.
func Up(ctx context.Context, cfg Config) (l *Lab, err error) {
	dp, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the lab backend needs root (network namespaces): run as root")
	}
	l = &Lab{cfg: cfg, dp: dp, fabric: cfg.Prefix + "-fab", pods: map[string]*pod{}, byLabel: map[string]map[*pod]bool{}, procs: map[*proc]bool{}, cpus: cpuState{held: map[int]string{}}, agentCPUs: agentCPUs(), chains: map[string]*nf.Chain{}, services: map[string]*service{}, nodePorts: map[int]bool{},
		holders: map[string]*holder{}, programmed: map[string]float64{}, policies: map[string]networkingv1.NetworkPolicy{}, extIPs: map[string]bool{},
		tracks: map[*endpointTrack]bool{}}
	defer func() {
		if err != nil {
			_ = l.Close(context.Background())
			l = nil
		}
	}()
	if err := os.MkdirAll(l.StateDir(), 0o755); err != nil {
		return nil, err
	}
	// The owner first: a lab never has a namespace without a record of who made it.
	if err := writeOwner(cfg.Prefix); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(TempDir(cfg.Prefix), 0o755); err != nil {
		return nil, err
	}
	if err := l.buildUnderlay(); err != nil {
		return nil, err
	}
	if dp.Attach.PodNetwork() {
		if err := l.buildPodNetwork(); err != nil {
			return nil, err
		}
	}
	return l, ctx.Err()
}

// Facts implements cluster.Cluster.
func (l *Lab) Facts() cluster.Facts {
	attach, overlay, proxy, policy := l.dp.Labels()
	details := map[string]any{
		"attach": attach, "overlay": overlay, "proxy": proxy, "policy": policy,
		"emulates": l.dp.Preset.Emulates, "underlay_mtu": l.cfg.MTU, "nodes": l.cfg.Nodes,
		"proxy_sync": l.proxySync(), "policy_sync": l.policySync(), "cluster_cidr": l.cfg.ClusterCIDR, "underlay_cidr": l.cfg.UnderlayCIDR, "prefix": l.cfg.Prefix,
		"cpu_accounting": "lab nodes share the host kernel: node CPU figures are host-wide /proc/stat",
		"agent_cpus":     l.agentFacts(),
	}
	for k, v := range l.dp.Overlay.Facts(l.dp.Preset) {
		details[k] = v
	}
	return cluster.Facts{Backend: "lab", Dataplane: l.dp.Preset.Name, PodMTU: l.PodMTU(), Name: l.cfg.Prefix, TempDir: TempDir(l.cfg.Prefix), Self: SelfExecutable(), Details: details}
}

// Close implements cluster.Cluster: idempotent removal of everything with the lab's prefix.
func (l *Lab) Close(ctx context.Context) error {
	l.endWindows()
	l.stopProcs("")
	l.closeHolders()
	l.closeAnswers()
	return errors.Join(l.closeChains(), Clean(l.cfg.Prefix))
}
