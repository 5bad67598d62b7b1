package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cnibench/cnibench/internal/cluster"
	"github.com/cnibench/cnibench/internal/result"
)

// runBackends are the backends one run measures on, in the order given. With more than one
// (--backend kube,lab), every case group is planned on each, the cases of the first backend
// come first and are the reference of the run's "backend" comparisons (a lab case against the
// real cluster's case measuring the same thing, paired by round), and each case of the others
// runs in the rounds of the first's case it is compared with (runner.Options.Standings).
type runBackends []cluster.Backend

// parseBackends turns a --backend value ("lab", "kube,lab") into the run's backends.
func parseBackends(s string) (runBackends, error) {
	var bs runBackends
	for _, n := range cluster.ParseList(s) {
		b, err := cluster.BackendNamed(n)
		if err != nil {
			if leftOut != "" && n != "lab" {
				return nil, cluster.BadInput("%v; %s", err, leftOut)
			}
			return nil, err
		}
		if bs.named(n) != nil {
			return nil, cluster.BadInput("backend %s named twice", n)
		}
		bs = append(bs, b)
	}
	if len(bs) == 0 {
		return nil, cluster.BadInput("no backend given (e.g. lab, or kube,lab to hold the lab against a real cluster)")
	}
	return bs, nil
}

// backendsOf are the backends of recorded cases, in the order their first case comes.
func backendsOf(cases []result.CaseSpec) (runBackends, error) {
	var names []string
	for _, cs := range cases {
		if !slices.Contains(names, cs.Case.Backend) {
			names = append(names, cs.Case.Backend)
		}
	}
	return parseBackends(strings.Join(names, ","))
}

func (bs runBackends) named(name string) cluster.Backend {
	for _, b := range bs {
		if b.Name() == name {
			return b
		}
	}
	return nil
}

// String is the --backend value naming them.
func (bs runBackends) String() string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name()
	}
	return strings.Join(names, ",")
}

// newCluster builds the cluster of a key on the backend its cases are on.
func (bs runBackends) newCluster(ctx context.Context, k cluster.Key) (cluster.Cluster, error) {
	b := bs.named(k.Backend)
	if b == nil {
		return nil, fmt.Errorf("a cluster on backend %q, which this run does not use (%s)", k.Backend, bs)
	}
	return b.NewCluster(ctx, k)
}

// standings is how each backend's clusters stand, for a run on several (nil for one).
func (bs runBackends) standings() map[string]cluster.Standing {
	if len(bs) < 2 {
		return nil
	}
	out := map[string]cluster.Standing{}
	for _, b := range bs {
		out[b.Name()] = b.Standing()
	}
	return out
}

// resolve plans the groups' cases on every backend (each resolving its own: a real cluster
// measures its installed data plane whatever preset a group names) and joins them in the
// backends' order. Two backends giving one case id (a baseline planned on both) is an error:
// a run holds each case once.
func (bs runBackends) resolve(expand func(backend string) ([]result.CaseSpec, error)) ([]result.CaseSpec, error) {
	var out []result.CaseSpec
	on := map[string]string{} // case id -> backend
	for _, b := range bs {
		cases, err := expand(b.Name())
		if err != nil {
			return nil, err
		}
		if cases, err = b.Resolve(cases); err != nil {
			return nil, err
		}
		for _, cs := range cases {
			if other, dup := on[cs.Case.ID]; dup {
				return nil, usagef("case %s is planned on both the %s and the %s backend: a run holds a case once (measure it in a run of one backend)", cs.Case.ID, other, b.Name())
			}
			on[cs.Case.ID] = b.Name()
		}
		out = append(out, cases...)
	}
	return out, nil
}

// configure gives each backend its options (opts[backend]) and checks its cases before
// anything is created.
func (bs runBackends) configure(ctx context.Context, opts map[string]map[string]string, runID string, cases []result.CaseSpec) error {
	for _, b := range bs {
		if err := b.Configure(opts[b.Name()], runID); err != nil {
			return err
		}
	}
	for _, b := range bs {
		var mine []result.CaseSpec
		for _, cs := range cases {
			if cs.Case.Backend == b.Name() {
				mine = append(mine, cs)
			}
		}
		if err := b.Preflight(ctx, mine); err != nil {
			return err
		}
	}
	return nil
}
