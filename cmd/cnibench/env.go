package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/result"
	"golang.org/x/sys/unix"
)

// environment records the conditions of a run: host, kernel, CPU, tool versions.
func environment(args []string) map[string]any {
	env := map[string]any{
		"cnibench_version": version,
		"go_version":       runtime.Version(),
		"cpu_count":        runtime.NumCPU(),
		"command":          strings.Join(append([]string{"cnibench"}, args...), " "),
		"started":          time.Now().UTC().Format(time.RFC3339),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		env["kernel"] = unix.ByteSliceToString(u.Release[:])
		env["hostname"] = unix.ByteSliceToString(u.Nodename[:])
		env["arch"] = unix.ByteSliceToString(u.Machine[:])
	}
	if v := fileField("/etc/os-release", "PRETTY_NAME="); v != "" {
		env["os"] = strings.Trim(v, `"`)
	}
	if v := fileField("/proc/cpuinfo", "model name"); v != "" {
		env["cpu_model"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
	}
	if v := fileField("/proc/meminfo", "MemTotal:"); v != "" {
		env["mem_total"] = strings.TrimSpace(v)
	}
	tools := map[string]string{}
	for _, name := range driver.AllTools() {
		t, err := hosttools.Get(name)
		if err != nil || t.Version == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, _ := exec.CommandContext(ctx, name, t.Version...).CombinedOutput()
		cancel()
		tools[name] = driver.Version(name, out)
	}
	env["tools"] = tools
	if nf := lastNoiseFloor(); nf != nil {
		env[result.NoiseFloorKey] = nf // the last cnibench doctor --noise on this host
	}
	return env
}

// fileField returns the rest of the first line of path starting with prefix.
func fileField(path, prefix string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return strings.TrimPrefix(sc.Text(), prefix)
		}
	}
	return ""
}
