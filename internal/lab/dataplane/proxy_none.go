package dataplane

import (
	"errors"
	"github.com/cnibench/cnibench/internal/engine/proxy"
)

// noProxy: no Service implementation (baselines, and presets whose proxy is not built yet).
type noProxy struct{}

func init() { RegisterProxy(noProxy{}) }

func (noProxy) Name() string    { return None }
func (noProxy) Summary() string { return "no Services" }
func (noProxy) Needs() []string { return nil }
func (noProxy) Usable() error   { return errors.New("has no Service implementation (proxy none)") }
func (noProxy) Render([]proxy.Service, proxy.Options) ([]byte, proxy.Counts) {
	return nil, proxy.Counts{}
}
func (p noProxy) Apply(Node, []byte) error { return p.Usable() }
