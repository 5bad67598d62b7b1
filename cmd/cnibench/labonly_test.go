package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The lab-only build (make demo: go build -tags labonly) leaves client-go out, which is what
// makes it fast to build cold, and says clearly what it lacks when asked for the kube backend.
func TestLabOnlyBuild(t *testing.T) {
	deps, err := exec.Command("go", "list", "-deps", "-tags", "labonly", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -tags labonly: %v", err)
	}
	for _, p := range strings.Fields(string(deps)) {
		if strings.HasPrefix(p, "k8s.io/client-go") || p == "github.com/cnibench/cnibench/internal/kube" {
			t.Errorf("the lab-only build links %s: the lab path must not import the kube backend or client-go", p)
		}
	}
	full, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !strings.Contains(string(full), "k8s.io/client-go/kubernetes\n") {
		t.Error("the default build has no k8s.io/client-go/kubernetes: is the kube backend still linked in?")
	}

	bin := filepath.Join(t.TempDir(), "cnibench-lab")
	if out, err := exec.Command("go", "build", "-tags", "labonly", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags labonly: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		c := exec.Command(bin, args...)
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", args, err)
		}
		return stdout.String(), stderr.String(), c.ProcessState.ExitCode()
	}
	if out, _, code := run("version"); code != 0 || !strings.Contains(out, "lab backend only") {
		t.Errorf("version: exit %d, %q: want it to say the build has the lab backend only", code, out)
	}
	for _, args := range [][]string{{"run", "--backend", "kube", "--scenario", "p2p"}, {"kube", "clean"}} {
		_, stderr, code := run(args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "make build") {
			t.Errorf("%v: exit %d, stderr %q: want exit 2 and one line naming `make build`", args, code, stderr)
		}
	}
	if out, stderr, code := run("run", "--help"); code != 0 || !strings.Contains(out, "--backend") {
		t.Errorf("run --help: exit %d, %s%s", code, out, stderr)
	}
}
