package dataplane

import (
	"errors"
	"github.com/cnibench/cnibench/internal/engine/policy"
)

// noPolicy: NetworkPolicies are not enforced (Flannel, baselines).
type noPolicy struct{}

func init() { RegisterPolicy(noPolicy{}) }

func (noPolicy) Name() string    { return None }
func (noPolicy) Summary() string { return "no NetworkPolicy enforcement" }
func (noPolicy) Needs() []string { return nil }
func (noPolicy) Usable() error {
	return errors.New("enforces no NetworkPolicy (policy none)")
}
func (noPolicy) Render(*policy.Program) (Rendering, policy.Counts) { return nil, policy.Counts{} }
func (p noPolicy) Apply(Node, Rendering) error                     { return p.Usable() }
