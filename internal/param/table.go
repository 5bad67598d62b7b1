package param

// The parameters several scenarios share or the shared layers know (load, workload, the lab's
// parts) and those of the built-in scenarios, in id order. A scenario may declare more of its
// own (scenario.Info.Declares); which scenario uses which is its Info.Params.
func init() {
	for _, p := range []Param{
		{Key: "services", Label: "services", Help: "Service counts to sweep (scenarios with Services)",
			Order: 10, Max: 100000, ID: "svc", Sweep: true, Load: true, Compare: Scale},
		{Key: "policies", Label: "policies", Help: "NetworkPolicy counts to sweep",
			Order: 20, Max: 100000, ID: "pol", Sweep: true, Load: true, Compare: Scale},
		{Key: "pods", Label: "pods", Help: "silent pod counts to sweep: pods beside the client and server that only load the data plane",
			Order: 30, Max: 100000, ID: "pods", Sweep: true, Load: true, Compare: Scale},
		{Key: "replicas", Label: "replicas", Help: "server replica counts to sweep",
			Order: 40, Min: 1, Max: 1000, Default: 1, Neutral: 1, ID: "rep", Sweep: true, Load: true, LoadBase: 1, Compare: Scale},
		{Key: "proxy", Label: "proxy", Kind: Word, Help: "Service implementations (override the preset's)",
			Order: 50, ID: "proxy", Place: Named},
		{Key: "policy", Label: "policy", Kind: Word, Help: "policy engines (override the preset's)",
			Order: 60, ID: "policy", Place: Named},
		{Key: "nf", Label: "nf", Kind: Word, Help: "chain: network-function kinds to sweep (default route-iptables)",
			Order: 70, ID: "nf", Place: Variant},
		{Key: "chain-length", Label: "chain_length", Help: "chain: network functions between client and server, to sweep (default 1)",
			Order: 80, Min: 1, Max: 32, ID: "len", Sweep: true, Load: true, LoadBase: 1, Compare: Scale},
		{Key: "rules", Label: "rules", Help: "chain: firewall rules per network function, the matching ones last, to sweep (default 10)",
			Order: 90, Min: 1, Max: 100000, ID: "rules", Sweep: true, Load: true, Compare: Scale},
		{Key: "external-traffic-policy", Label: "external_traffic_policy", Kind: Word,
			Help:  "n2s: the NodePort Service's externalTrafficPolicy, Kubernetes' Cluster and Local in lower case (default both)",
			Order: 100, Words: []string{"cluster", "local"}, ID: "etp"},
		{Key: "vnf", Label: "vnf", Kind: Word, Help: "vnf: VNF kinds to sweep (default userspace)",
			Order: 110, ID: "vnf", Place: Variant},
		{Key: "cpu-limit", Label: "cpu_limit", Help: "vnf: each VNF replica's CPU limit in millicores, to sweep (0 = none; default 0)",
			Order: 120, Max: 64000, ID: "cpu", Sweep: true},
		{Key: "cpu-isolation", Label: "cpu_isolation", Kind: Word,
			Help:  "vnf: the VNF's CPUs shared with the node's other pods (Kubernetes' Burstable) or exclusive to it (Guaranteed, static CPU manager) (default shared)",
			Order: 130, Words: []string{"shared", "exclusive"}, ID: "iso"},
		{Key: "frame-size", Label: "frame_size", Help: "vnf: frame sizes in bytes with FCS, to sweep (default 256)",
			Order: 140, Min: 64, Max: 1518, ID: "size", Sweep: true},
		{Key: "lb", Label: "lb", Kind: Word,
			Help:  "vnf: what spreads the traffic over the VNF's replicas: a ClusterIP Service or a user-space UDP load balancer pod on the generator's node (ingress) or the other (ingress-remote, as seed 002's Ingress controller) (default service)",
			Order: 150, Words: []string{"service", "ingress", "ingress-remote"}, ID: "lb"},
		{Key: "search", Label: "search", Kind: Word,
			Help:  "vnf: NDR/PDR by an MLRsearch-style search (mlr), by RFC 2544 binary searches (binary), or seed 002's maximum feasible throughput by a rate rising 5 % a step (ramp) (default mlr)",
			Order: 160, ID: "search"},
		{Key: "change", Label: "change", Kind: Word, Help: "change: the kinds of change to time, each made and taken back again and again (default all)",
			Order: 170, ID: "change"},
		{Key: "sync", Label: "sync", Kind: Word,
			Help:  "change, lab: the proxy programs only what changed (partial, as kube-proxy's partial syncs) or every Service again (full) (default partial)",
			Order: 180, Words: []string{"partial", "full"}, ID: "sync", Compare: Against},
		{Key: "noisy", Label: "noisy", Help: "vnf: CPU-bound pods beside the VNF replicas (seed 002's local calculation), to sweep (default 0)",
			Order: 190, Max: 64, ID: "noisy", Sweep: true, Load: true, Compare: Scale},
		{Key: "noisy-cpu-limit", Label: "noisy_cpu_limit", Help: "vnf: each noisy pod's CPU limit in millicores, to sweep (0 = none; default 0)",
			Order: 200, Max: 64000, ID: "ncpu", Sweep: true, Compare: Scale},
		{Key: "streams", Label: "streams",
			Help:  "parallel streams to sweep: iperf3 -P for tcp,udp; concurrent netperf instances for rr,crr,udprr, rates summed (default 1)",
			Order: 210, Min: 1, Max: 64, Neutral: 1, ID: "streams", Sweep: true, Workload: true},
		{Key: "msg-size", Label: "msg_size",
			Help:  "message sizes in bytes to sweep: iperf3 -l (tcp write, udp datagram), netperf -r request and response (default: the tool's; udp stays under the pod MTU)",
			Order: 220, Min: 1, Max: 1 << 20, ID: "msg", Sweep: true, Workload: true}, // iperf3's largest TCP block; a protocol's own limit is its driver's
		{Key: "fragment", Label: "fragment", Kind: Word,
			Help:  "allow: send UDP messages larger than one packet at the pod MTU fragmented (default: such a case is skipped)",
			Order: 230, Words: []string{FragmentAllow}, ID: "fragment", Workload: true},
	} {
		Register(p)
	}
}

// FragmentAllow is the value of parameter fragment that lets UDP messages larger than one
// packet at the pod MTU be sent fragmented.
const FragmentAllow = "allow"
