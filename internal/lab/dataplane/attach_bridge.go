package dataplane

// bridge: every pod's veth on the node's cni0 bridge, the node the pods' gateway (the CNI
// bridge plugin, as Flannel and kube-router configure it).
type bridge struct{}

func init() { RegisterAttach(bridge{}) }

func (bridge) Name() string     { return "bridge" }
func (bridge) Summary() string  { return "pods on the node's cni0 bridge (CNI bridge plugin)" }
func (bridge) Needs() []string  { return []string{"bridge", "cni bridge", "cni host-local"} }
func (bridge) PodNetwork() bool { return true }

func (bridge) CNI(podMTU int, ipam map[string]any) (string, map[string]any) {
	return "cbr0", map[string]any{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
		"hairpinMode": true, "mtu": podMTU, "ipam": ipam}
}

func (bridge) SetupNode(Node) error        { return nil }
func (bridge) PodAdded(Node, PodNet) error { return nil }

// Filtered makes bridged pod traffic pass the IP hooks: kube-proxy needs it for replies of
// DNATed connections between pods on one bridge, and policies must see bridged packets.
func (bridge) Filtered(n Node) error {
	return n.Sysctl("net/bridge/bridge-nf-call-iptables", "1")
}

func (bridge) FilterNeeds() []string { return []string{"br_netfilter"} }
