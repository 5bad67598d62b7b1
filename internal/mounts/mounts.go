// Package mounts reads this process's mount table (/proc/self/mountinfo): the one parser of it
// for every part that looks for a file system (cgroup hierarchies, bpf file systems, what the
// test cluster mounted).
package mounts

import (
	"os"
	"sort"
	"strings"
)

// Mount is one line of the table.
type Mount struct {
	Root   string   // the mount's root within its file system ("/" for the whole of it)
	Point  string   // where it is mounted
	Type   string   // file system type: cgroup, cgroup2, bpf, nsfs, ...
	Source string   // what is mounted
	Super  []string // super options (a cgroup v1 hierarchy's controllers are among them)
}

// List returns the mount table (nil when it cannot be read).
func List() []Mount {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	return parse(string(data))
}

// parse reads mountinfo lines: "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE
// SOURCE SUPER-OPTIONS" (proc(5)); lines of another form are skipped.
func parse(data string) []Mount {
	var out []Mount
	for _, line := range strings.Split(data, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 2 {
			continue
		}
		m := Mount{Root: f[3], Point: f[4], Type: g[0], Source: g[1]}
		if len(g) > 2 {
			m.Super = strings.Split(g[2], ",")
		}
		out = append(out, m)
	}
	return out
}

// Under lists the mount points at or below dir, deepest first (the order to unmount them in).
func Under(dir string) []string {
	var out []string
	for _, m := range List() {
		if m.Point == dir || strings.HasPrefix(m.Point, strings.TrimSuffix(dir, "/")+"/") {
			out = append(out, m.Point)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}
