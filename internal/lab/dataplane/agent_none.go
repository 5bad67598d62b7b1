package dataplane

// noAgent: the preset's node agent programs nothing beyond the attachment and the overlay.
type noAgent struct{}

func init() { RegisterAgent(noAgent{}) }

func (noAgent) Name() string         { return None }
func (noAgent) Summary() string      { return "no rules of a node agent" }
func (noAgent) Needs() []string      { return nil }
func (noAgent) SetupNode(Node) error { return nil }
