package dataplane

// The baselines' attach kinds: no pod network at all. "none" is the host network only (pods
// share their node's namespace: node2node); "veth" is two namespaces joined by one veth pair
// (bare), which the lab builds itself.
type noPodNetwork struct{ name, summary string }

func init() {
	RegisterAttach(noPodNetwork{"none", "host network only (pods share the node's namespace)"})
	RegisterAttach(noPodNetwork{"veth", "two namespaces joined by one veth pair"})
}

func (a noPodNetwork) Name() string                                   { return a.name }
func (a noPodNetwork) Summary() string                                { return a.summary }
func (noPodNetwork) Needs() []string                                  { return nil }
func (noPodNetwork) PodNetwork() bool                                 { return false }
func (noPodNetwork) CNI(int, map[string]any) (string, map[string]any) { return "", nil }
func (noPodNetwork) SetupNode(Node) error                             { return nil }
func (noPodNetwork) PodAdded(Node, PodNet) error                      { return nil }
func (noPodNetwork) Filtered(Node) error                              { return nil }
func (noPodNetwork) FilterNeeds() []string                            { return nil }
