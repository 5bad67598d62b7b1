package doctor

import (
	"github.com/cnibench/cnibench/internal/hosttools"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const cmdTimeout = 5 * time.Second

// cniPlugins are the reference plugins the default presets use.
var cniPlugins = []string{"bridge", "ptp", "host-local"}

// cniDirs returns the directories searched for CNI plugins.
func cniDirs() []string {
	dirs := filepath.SplitList(os.Getenv("CNI_PATH"))
	return append(dirs, "/usr/lib/cni", "/opt/cni/bin")
}

func toolChecks(ctx context.Context) []Check {
	var cs []Check
	for _, t := range hosttools.All() {
		c := Check{Name: "tool " + t.Name, Kind: "tool", Required: t.Core}
		if path, err := hosttools.Look(t.Name); err != nil {
			c.Detail = err.Error()
		} else if t.Version == nil {
			c.OK, c.Detail = true, path
		} else if out, err := run(ctx, "", nil, path, t.Version...); err != nil {
			c.Detail = fmt.Sprintf("%s: %v", path, err)
		} else {
			c.OK, c.Detail = true, oneLine(out)
		}
		cs = append(cs, c)
	}
	for _, p := range cniPlugins {
		c := Check{Name: "cni " + p, Kind: "tool", Required: true}
		c.OK, c.Detail = cniVersion(ctx, p)
		cs = append(cs, c)
	}
	return cs
}

// cniVersion finds plugin in the CNI directories and asks it for the spec
// versions it supports.
func cniVersion(ctx context.Context, plugin string) (bool, string) {
	for _, dir := range cniDirs() {
		path := filepath.Join(dir, plugin)
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		out, err := run(ctx, `{"cniVersion":"1.0.0"}`, []string{"CNI_COMMAND=VERSION"}, path)
		if err != nil {
			return false, fmt.Sprintf("%s: VERSION: %v", path, err)
		}
		var v struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return false, fmt.Sprintf("%s: VERSION: bad output: %v", path, err)
		}
		return true, fmt.Sprintf("%s (CNI %s; supports %s)", dir, v.CNIVersion, strings.Join(v.SupportedVersions, ","))
	}
	return false, fmt.Sprintf("not found in %s", strings.Join(cniDirs(), ", "))
}

// run executes path with args (no shell) under a short timeout and returns
// its stdout, or an error naming the first line of stderr.
func run(ctx context.Context, stdin string, env []string, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("killed: %w", ctx.Err())
	}
	if err != nil {
		if msg := oneLine(stderr.String()); msg != "" {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", errors.New(msg)
			}
			return "", fmt.Errorf("%v: %s", err, msg)
		}
		return "", err
	}
	if stdout.Len() == 0 { // some tools print their version on stderr
		return stderr.String(), nil
	}
	return stdout.String(), nil
}
