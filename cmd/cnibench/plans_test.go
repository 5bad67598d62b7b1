package main

import (
	"path/filepath"
	"testing"

	"github.com/cnibench/cnibench/internal/plan"
)

// Every plan the repository ships loads and expands against this build's catalog on the lab
// backend: a key, value or combination a change made invalid fails here, not in a user's run.
func TestShippedPlans(t *testing.T) {
	files, err := filepath.Glob("../../plans/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no plans: %v", err)
	}
	for _, f := range files {
		groups, err := plan.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		specs, err := plan.Expand(plan.Merge(groups, plan.Group{}), catalog(), "lab", plan.BuiltinDefaults())
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(specs) == 0 {
			t.Errorf("%s: no case", f)
		}
	}
}
