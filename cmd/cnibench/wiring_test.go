package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The CLI reaches the backends through cluster's registry (run, resume, plans) and the lab's
// engines through dataplane's registries (list, the plan's valid names). Only the wiring files
// name a backend package: backends.go and backends_kube.go (left out of the labonly build)
// link them in, labcmd.go and kubecmd.go are each
// backend's own housekeeping commands. A new file that imports a backend would put backend
// knowledge back into cmd.
func TestOnlyWiringFilesImportBackends(t *testing.T) {
	wiring := []string{"backends.go", "backends_kube.go", "labcmd.go", "kubecmd.go"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			backend := path == "github.com/cnibench/cnibench/internal/lab" || path == "github.com/cnibench/cnibench/internal/kube"
			if backend && !slices.Contains(wiring, f) {
				t.Errorf("%s imports %s: reach it through cluster.Backends() (or a dataplane registry) instead", f, path)
			}
		}
	}
}
