package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// pkg is what the checks read of a package `go list -json` describes.
type pkg struct {
	ImportPath string
	Imports    []string // of its non-test files only: tests may import any layer
}

const testTools = "internal/testing/"

// TestLayers: every package of the module is in the table, every entry of the table places
// some package, and every import of a non-test file points to the importer's layer or a lower
// one.
func TestLayers(t *testing.T) {
	mod := loadModule(t)
	for _, p := range check(mod.path, mod.pkgs, Layers) {
		t.Error(p)
	}
}

// TestCLIHoldsNoTestTool: cmd/cnibench depends on no package under internal/testing/ and on no
// package of the module that imports "testing" (a test helper left among the product's
// packages).
func TestCLIHoldsNoTestTool(t *testing.T) {
	mod := loadModule(t)
	deps, err := goList(mod.root, "-deps", "./cmd/cnibench")
	if err != nil {
		t.Fatal(err)
	}
	if len(deps) == 0 {
		t.Fatal("go list -deps ./cmd/cnibench listed no package")
	}
	for _, p := range deps {
		rel, ok := relative(mod.path, p.ImportPath)
		if !ok {
			continue
		}
		if strings.HasPrefix(rel+"/", testTools) {
			t.Errorf("cmd/cnibench depends on %s, a test tool (%s...: imported only by _test.go files); the product compiles without them", rel, testTools)
		}
		if slices.Contains(p.Imports, "testing") {
			t.Errorf(`cmd/cnibench depends on %s, which imports "testing" in a non-test file: a test helper belongs under %s`, rel, testTools)
		}
	}
}

// The checks themselves fail when they should: on a made-up module with one import running
// up, a package in no layer, a test tool imported by a product package and a stale entry.
func TestCheckFindsViolations(t *testing.T) {
	const m = "example.com/m"
	layers := map[string]int{
		"internal/low":         Vocabulary,
		"internal/mid/...":     Engines,
		"internal/mid/top":     Scenarios, // longer than internal/mid/..., so it decides
		"internal/gone":        Host,
		"cmd/...":              CLI,
		"internal/testing/...": TestTools,
	}
	pkgs := []pkg{
		{ImportPath: m + "/internal/low", Imports: []string{"fmt", m + "/internal/mid/sub"}},
		{ImportPath: m + "/internal/mid/sub", Imports: []string{m + "/internal/low"}},
		{ImportPath: m + "/internal/mid/top", Imports: []string{m + "/internal/mid/sub", m + "/internal/testing/tool"}},
		{ImportPath: m + "/internal/new"},
		{ImportPath: m + "/internal/testing/tool", Imports: []string{m + "/internal/mid/top"}},
		{ImportPath: m + "/cmd/m", Imports: []string{m + "/internal/mid/top", m + "/internal/low"}},
	}
	got := check(m, pkgs, layers)
	want := []string{
		"internal/low (layer 0, vocabulary) imports internal/mid/sub (layer 2, engines)",
		"internal/mid/top (layer 6, scenarios) imports internal/testing/tool (layer 9, test tools)",
		"internal/new is in no layer",
		`"internal/gone" places no package`,
	}
	if len(got) != len(want) {
		t.Errorf("check found %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("check did not report %q; it reported:\n%s", w, strings.Join(got, "\n"))
		}
	}
}

// check returns one message per package in no layer, per table entry that places no package
// and per import from a lower layer to a higher one.
func check(modPath string, pkgs []pkg, layers map[string]int) []string {
	var problems []string
	used := map[string]bool{}
	for _, p := range pkgs {
		rel, ok := relative(modPath, p.ImportPath)
		if !ok {
			continue
		}
		if key, _, ok := layerOf(layers, rel); ok {
			used[key] = true
			continue
		}
		problems = append(problems, fmt.Sprintf("%s is in no layer: place it in the layer of what it serves in internal/testing/archtest/layers.go (docs/design.md, Layers)", rel))
	}
	for _, key := range slices.Sorted(maps.Keys(layers)) {
		if !used[key] {
			problems = append(problems, fmt.Sprintf("%q places no package of the module: remove it from internal/testing/archtest/layers.go or fix its path", key))
		}
	}
	for _, p := range pkgs {
		from, _ := relative(modPath, p.ImportPath)
		_, fl, ok := layerOf(layers, from)
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := relative(modPath, imp)
			if !ok {
				continue
			}
			_, tl, ok := layerOf(layers, to)
			if !ok || tl <= fl {
				continue
			}
			why := "imports only point down (docs/design.md, Layers): move what it needs down, or the package up"
			if strings.HasPrefix(to+"/", testTools) {
				why = "a test tool is imported only by _test.go files (or by another test tool under " + testTools + ")"
			}
			problems = append(problems, fmt.Sprintf("%s (layer %d, %s) imports %s (layer %d, %s): %s",
				from, fl, layerName(fl), to, tl, layerName(tl), why))
		}
	}
	return problems
}

// layerOf finds the table's entry for a package (its path without the module's): the exact
// path, or the longest "DIR/..." whose DIR is the package or one of its parents.
func layerOf(layers map[string]int, rel string) (key string, layer int, ok bool) {
	if l, found := layers[rel]; found {
		return rel, l, true
	}
	best := ""
	for k := range layers {
		dir, tree := strings.CutSuffix(k, "/...")
		if !tree || (rel != dir && !strings.HasPrefix(rel, dir+"/")) {
			continue
		}
		if len(k) > len(best) {
			best = k
		}
	}
	if best == "" {
		return "", 0, false
	}
	return best, layers[best], true
}

func layerName(l int) string {
	if l >= 0 && l < len(LayerNames) && LayerNames[l] != "" {
		return LayerNames[l]
	}
	return "unnamed"
}

// relative is an import path without the module's path; ok is false for other modules'.
func relative(modPath, importPath string) (string, bool) {
	if importPath == modPath {
		return ".", true
	}
	rel, ok := strings.CutPrefix(importPath, modPath+"/")
	return rel, ok
}

type module struct {
	root, path string
	pkgs       []pkg
}

// loadModule lists the module's packages once per test binary: the module root is the first
// directory upwards from the test's that holds go.mod.
var loadModule = func() func(t *testing.T) module {
	var once sync.Once
	var m module
	var err error
	return func(t *testing.T) module {
		t.Helper()
		once.Do(func() {
			if m.root, m.path, err = findModule(); err != nil {
				return
			}
			m.pkgs, err = goList(m.root, "./...")
			if err == nil && len(m.pkgs) == 0 {
				err = errors.New("go list ./... listed no package")
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}()

func findModule() (root, path string, err error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(p), `"`), nil
				}
			}
			return "", "", fmt.Errorf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", errors.New("no go.mod in the test's directory or above it")
		}
		dir = parent
	}
}

// goList runs `go list -json ARGS...` in the module root.
func goList(root string, args ...string) ([]pkg, error) {
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -json %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list -json %s: %v", strings.Join(args, " "), err)
		}
		pkgs = append(pkgs, p)
	}
}

// citedFile is a page a comment names: a Markdown file in upper case (README.md)
// or under docs/.
var citedFile = regexp.MustCompile(`(?:^|[\s(\x60"])((?:[\w.-]+/)*(?:docs/[\w./-]+\.md|[A-Z][A-Z0-9_-]*\.md))`)

// TestCitedFilesExist: every page a comment of the module's Go code names (docs/design.md,
// README.md, a testdata folder's README.md) exists, from the module root or from the citing
// file's folder: the code relies on no page the repository lacks.
func TestCitedFilesExist(t *testing.T) {
	mod := loadModule(t)
	err := filepath.WalkDir(mod.root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "runs" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			c := strings.Index(line, "//")
			if c < 0 {
				continue
			}
			for _, m := range citedFile.FindAllStringSubmatch(line[c:], -1) {
				name := strings.TrimRight(m[1], ".")
				if exists(filepath.Join(mod.root, name)) || exists(filepath.Join(filepath.Dir(path), name)) {
					continue
				}
				rel, _ := filepath.Rel(mod.root, path)
				t.Errorf("%s:%d cites %s, which the repository lacks (put what the code relies on into docs/, or fix the path)", rel, i+1, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
