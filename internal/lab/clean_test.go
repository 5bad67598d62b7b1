package lab

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/owner"
)

// `lab clean` spares the labs of live owners (a run or a test still going) and the labs kept by
// `lab up`, naming why; it removes a lab whose owner is dead; --force removes all. (It used to
// remove every lab, a run still going included.)
func TestCleanSparesLiveOwners(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	live, dead, kept := testPrefix(), testPrefix(), testPrefix()
	labs := map[string]*Lab{}
	for _, p := range []string{live, dead, kept} {
		l, err := Up(ctx, Config{Prefix: p, Dataplane: "flannel"})
		if err != nil {
			t.Fatal(err)
		}
		labs[p] = l
		t.Cleanup(func() { _ = Clean(p) })
	}
	r, err := Owner(live)
	if err != nil || !r.Alive() || r.PID == 0 {
		t.Fatalf("owner of %s: %+v %v", live, r, err)
	}
	// The dead lab's owner: a process that has ended.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := r
	gone.PID = cmd.Process.Pid
	if err := owner.Write(filepath.Join(StateRoot, dead, OwnerFile), gone); err != nil {
		t.Fatal(err)
	}
	if err := MarkKept(kept); err != nil {
		t.Fatal(err)
	}
	removed, skipped, err := cleanLabs([]string{dead, kept, live}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(Leftovers(dead)) != 0 || !slices.ContainsFunc(removed, func(s string) bool { return strings.Contains(s, "netns "+dead+"-n0") }) {
		t.Errorf("dead owner's lab not removed: removed %v, left %v", removed, Leftovers(dead))
	}
	if len(skipped) != 2 || !strings.Contains(skipped[0], kept+": kept by") || !strings.Contains(skipped[0], "lab down --prefix "+kept) ||
		!strings.Contains(skipped[1], live+": owned by pid") || !strings.Contains(skipped[1], "still running") {
		t.Errorf("skipped %q", skipped)
	}
	for _, p := range []string{live, kept} {
		if len(Namespaces(p)) == 0 {
			t.Errorf("lab %s of a live owner removed", p)
		}
	}
	if _, skipped, err = cleanLabs([]string{kept, live}, true); err != nil || len(skipped) != 0 {
		t.Fatalf("force: skipped %v, %v", skipped, err)
	}
	for _, p := range []string{live, kept} {
		if left := Leftovers(p); len(left) > 0 {
			t.Errorf("--force left %v", left)
		}
	}
	for _, l := range labs {
		l.stopProcs("")
	}
}

// The lab's scratch directory (Facts.TempDir: nginx's files) goes with the lab.
func TestTempDirRemovedWithLab(t *testing.T) {
	needRoot(t)
	p := testPrefix()
	l, err := Up(context.Background(), Config{Prefix: p, Dataplane: "flannel"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Clean(p) })
	dir := l.Facts().TempDir
	if dir != filepath.Join(TempRoot, p) || !slices.Contains(Leftovers(p), "scratch "+dir) {
		t.Fatalf("TempDir %q, leftovers %v", dir, Leftovers(p))
	}
	if err := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(dir, "f"), "bs=1k", "count=4").Run(); err != nil {
		t.Fatal(err)
	}
	if err := Clean(p); err != nil {
		t.Fatal(err)
	}
	if left := Leftovers(p); len(left) > 0 {
		t.Errorf("left %v", left)
	}
}
