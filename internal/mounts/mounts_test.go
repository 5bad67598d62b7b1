package mounts

import (
	"os"
	"slices"
	"testing"
)

// The parser against a mount table recorded on a host of the project's kind (cgroup v1
// controllers each on its own hierarchy, the v2 one at /sys/fs/cgroup/unified, a named network
// namespace and a bpf file system of a lab).
func TestParseRecorded(t *testing.T) {
	data, err := os.ReadFile("testdata/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ms := parse(string(data) + "garbage line\n")
	if len(ms) != 24 {
		t.Fatalf("%d mounts, want 24", len(ms))
	}
	find := func(point string) Mount {
		for _, m := range ms {
			if m.Point == point {
				return m
			}
		}
		t.Fatalf("no mount at %s", point)
		return Mount{}
	}
	if m := find("/sys/fs/cgroup/cpuset"); m.Type != "cgroup" || !slices.Equal(m.Super, []string{"rw", "cpuset"}) || m.Root != "/" {
		t.Errorf("cpuset hierarchy: %+v", m)
	}
	if m := find("/sys/fs/cgroup/unified"); m.Type != "cgroup2" || m.Source != "cgroup2" {
		t.Errorf("v2 hierarchy: %+v", m)
	}
	if m := find("/run/cnibench/cnbtmnt0/bpf"); m.Type != "bpf" {
		t.Errorf("bpf: %+v", m)
	}
	if m := find("/run/netns/cnbt312d43-r"); m.Type != "nsfs" || m.Root != "net:[4026532246]" {
		t.Errorf("netns: %+v", m)
	}
}

func TestUnderLive(t *testing.T) {
	got := Under("/proc")
	if len(got) == 0 || got[len(got)-1] != "/proc" {
		t.Errorf("mounts under /proc %v: want /proc itself last", got)
	}
	if u := Under("/pro"); slices.Contains(u, "/proc") {
		t.Errorf("/pro matched /proc: %v", u)
	}
}
