// Package archtest holds the module's layers as data and, in its test, the check that the
// import graph keeps to them (docs/design.md, Layers: data flows top to bottom; imports only
// point down). A package may import packages of its own layer or of lower ones, never of a
// higher one; the CLI may not depend on the test tools under internal/testing/.
//
// Every package of the module must be in the table: a new package is placed in the layer of
// what it serves (the test fails until it is).
package archtest

// The layers, lowest first.
const (
	// Vocabulary: names, the result schema and store, aggregates, accounting, the rate search.
	// Plain data and arithmetic on it: nothing here touches the host.
	Vocabulary = iota
	// Host: the host primitives every part above builds on (network namespaces, processes,
	// mounts, CPU pinning, the tool list, owner records and locks, sockets, Open vSwitch).
	Host
	// Engines: the network functions of the chains, the packet engine, the hop tracer and the
	// data-plane engines that need no namespace (internal/engine: proxy, policy, eBPF data path).
	Engines
	// Tools: the measurement drivers, the tools image and the host checks (doctor).
	Tools
	// Seam: cluster.Cluster and cluster.Backend, the seam between scenarios and backends, and
	// its fake.
	Seam
	// Backends: the lab backend (with its data plane presets) and the kube backend.
	Backends
	// Scenarios: one file per scenario, written only against cluster.Cluster.
	Scenarios
	// Orchestration: the plan, the runner's rounds of trials, the reports.
	Orchestration
	// CLI: the command (flags and printing only).
	CLI
	// TestTools: the tests' own tools (the test cluster harness, node dumps, the browser
	// driver, this package); imported only by _test.go files and by each other.
	TestTools
)

// LayerNames names the layers in messages, indexed by layer.
var LayerNames = [...]string{
	Vocabulary:    "vocabulary",
	Host:          "host",
	Engines:       "engines",
	Tools:         "tools",
	Seam:          "seam",
	Backends:      "backends",
	Scenarios:     "scenarios",
	Orchestration: "orchestration",
	CLI:           "cli",
	TestTools:     "test tools",
}

// Layers places every package of the module in a layer. A key is an import path without the
// module's path ("internal/lab"); a key ending in "/..." holds that package and every package
// below it ("internal/nf/..."). The longest key that matches a package decides its layer.
var Layers = map[string]int{
	"internal/names":   Vocabulary,
	"internal/param":   Vocabulary,
	"internal/account": Vocabulary,
	"internal/result":  Vocabulary,
	"internal/stats":   Vocabulary,
	"internal/search":  Vocabulary,

	"internal/netns/...": Host, // with netnstest, the tests' scratch namespaces
	"internal/procs":     Host,
	"internal/mounts":    Host,
	"internal/cpupin":    Host,
	"internal/hosttools": Host,
	"internal/owner":     Host,
	"internal/runlock":   Host,
	"internal/connprobe": Host,
	"internal/ethtool":   Host,
	"internal/afpacket":  Host,
	"internal/xsk":       Host,
	"internal/iptsave":   Host,
	"internal/nftnl/...": Host, // nf_tables over netlink, with nftnltest (the listings compared with nft's)
	"internal/ovs":       Host,

	"internal/nf/...":     Engines, // the network functions, their kinds and nftest
	"internal/pktengine":  Engines,
	"internal/hoptrace":   Engines,
	"internal/engine/...": Engines, // the lab's rule renderers, policy compiler and eBPF data path

	"internal/driver": Tools,
	"internal/image":  Tools,
	"internal/doctor": Tools,

	"internal/cluster/...": Seam, // with clustertest, the fake cluster

	"internal/lab":           Backends,
	"internal/lab/dataplane": Backends, // presets and parts: resolves a case's parts for cluster.Backend
	"internal/kube":          Backends,

	"internal/scenario": Scenarios,

	"internal/plan":   Orchestration,
	"internal/runner": Orchestration,
	"internal/report": Orchestration,

	"cmd/...": CLI,

	"internal/testing/...": TestTools,
}
