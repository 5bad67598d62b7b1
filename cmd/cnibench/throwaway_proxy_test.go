package main

// This file alone adds a Service implementation to the lab: it registers a throwaway proxy
// engine, and the test below finds it in `cnibench list`, in the case labels of a run that
// names it, and in preflight (which refuses it for the tool it needs) — with no other file
// touched. It is the proof that a new engine is one new file (docs/design.md, rule 3).

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/engine/proxy"
	"github.com/cnibench/cnibench/internal/lab/dataplane"
)

type throwawayProxy struct{}

func init() { dataplane.RegisterProxy(throwawayProxy{}) }

func (throwawayProxy) Name() string    { return "throwaway" }
func (throwawayProxy) Summary() string { return "a Service implementation that exists only in a test" }
func (throwawayProxy) Needs() []string { return []string{"tool cnibench-throwaway-tool"} }
func (throwawayProxy) Usable() error   { return nil }
func (throwawayProxy) Render([]proxy.Service, proxy.Options) ([]byte, proxy.Counts) {
	return nil, proxy.Counts{}
}
func (throwawayProxy) Apply(dataplane.Node, []byte) error {
	return errors.New("throwaway proxy programs nothing")
}

func TestThrowawayProxyShowsInListPreflightAndLabels(t *testing.T) {
	// list: a row of its own among the proxies, and among the built ones in the footnote.
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"list"})
	if err := root.Execute(); err != nil {
		t.Fatalf("cnibench list: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`(?m)^proxy\s+throwaway\s`).MatchString(out.String()) {
		t.Errorf("cnibench list has no row for the throwaway proxy:\n%s", out.String())
	}
	if !regexp.MustCompile(`built: proxies [^;]*\bthrowaway\b`).MatchString(out.String()) {
		t.Errorf("cnibench list does not count the throwaway proxy among the built ones:\n%s", out.String())
	}

	// case labels: a plan that names it gets it in the labels and the case id.
	lab, err := cluster.BackendNamed("lab")
	if err != nil {
		t.Fatal(err)
	}
	cases, _, err := expandCases("", map[string]string{"scenario": "p2s", "dataplane": "flannel,calico", "placement": "inter",
		"protocol": "crr", "proxy": "throwaway,iptables"}, runBackends{lab})
	if err != nil {
		t.Fatalf("expanding a plan that names the throwaway proxy: %v", err)
	}
	var ids []string
	for _, cs := range cases {
		ids = append(ids, cs.Case.ID)
	}
	want := []string{"p2s/flannel/inter/crr/proxy=throwaway", "p2s/flannel/inter/crr/proxy=iptables",
		"p2s/calico/inter/crr/proxy=throwaway", "p2s/calico/inter/crr/proxy=iptables"}
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Errorf("case ids = %v, want %v", ids, want)
	}
	if c := cases[0].Case; c.Proxy != "throwaway" || c.Attach != "bridge" || c.Overlay != "vxlan" || c.Policy != "none" {
		t.Errorf("labels of %s = attach %q overlay %q proxy %q policy %q, want bridge vxlan throwaway none", c.ID, c.Attach, c.Overlay, c.Proxy, c.Policy)
	}
	// An engine nobody registered is bad input naming the valid ones, the throwaway among them.
	_, _, err = expandCases("", map[string]string{"scenario": "p2s", "dataplane": "flannel", "proxy": "nosuch"}, runBackends{lab})
	if err == nil || !strings.Contains(err.Error(), "throwaway") {
		t.Errorf("an unknown proxy: error %v, want one listing the valid proxies with throwaway", err)
	}

	// preflight: the tool it needs is missing on this host, and preflight says which part
	// needs what, as bad input.
	if os.Geteuid() != 0 {
		t.Skip("preflight of the lab backend needs root")
	}
	err = lab.Preflight(context.Background(), cases[:1])
	if !errors.Is(err, cluster.ErrBadInput) || !strings.Contains(err.Error(), "proxy throwaway needs tool cnibench-throwaway-tool") {
		t.Errorf("preflight = %v, want bad input: proxy throwaway needs tool cnibench-throwaway-tool", err)
	}
	// The same cases with the preset's own proxy pass preflight.
	if err := lab.Preflight(context.Background(), cases[1:2]); err != nil {
		t.Errorf("preflight of %s: %v", cases[1].Case.ID, err)
	}
}
