package param

// The parameters several scenarios share or the shared layers read (load, workload, the lab's
// parts, a chain's kinds, the lab's sync mode, a NodePort's externalTrafficPolicy), in id
// order. A scenario declares those only it reads itself (scenario.Info.Declares: the vnf
// scenario's eight); which scenario uses which shared one is its Info.Params.
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
		{Key: "change", Label: "change", Kind: Word, Help: "change: the kinds of change to time, each made and taken back again and again (default all)",
			Order: 170, ID: "change"},
		{Key: "sync", Label: "sync", Kind: Word,
			Help:  "change, lab: the proxy programs only what changed (partial, as kube-proxy's partial syncs) or every Service again (full) (default partial)",
			Order: 180, Words: []string{"partial", "full"}, ID: "sync", Compare: Against},
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
