package result

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func testCase(id string) Case {
	return Case{ID: id, Scenario: "pod2pod", Backend: "kind", Dataplane: "bridge",
		Placement: "cross-node", Protocol: "tcp", Tool: "iperf3"}
}

func testTrial(id string, n int) Trial {
	return Trial{Run: "r1", Case: testCase(id), Trial: n, Start: "2025-01-01T00:00:00Z",
		DurationS: 10.5, Metrics: map[string]float64{"gbps": float64(n) + 0.25}, Status: "ok"}
}

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAppend(t *testing.T, s *Store, trials ...Trial) {
	t.Helper()
	for _, tr := range trials {
		if err := s.Append(tr); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
}

func mustLoad(t *testing.T, dir string) []Trial {
	t.Helper()
	got, err := LoadTrials(dir)
	if err != nil {
		t.Fatalf("LoadTrials: %v", err)
	}
	return got
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStoreRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs", "r1") // OpenStore creates it
	s := mustOpen(t, dir)
	want := []Trial{
		{Run: "r1", Case: testCase("a"), Trial: 0, Warmup: true, Metrics: map[string]float64{"gbps": 1}},
		testTrial("a", 1),
		testTrial("a", 2),
		{Run: "r1", Case: testCase("b"), Trial: 1, Status: "skipped", Error: "needs 2 nodes",
			Raw: "line1\nline2 \"quoted\""},
	}
	mustAppend(t, s, want...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(testTrial("a", 3)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}

	content := readFile(t, filepath.Join(dir, TrialsFile))
	if n := strings.Count(content, "\n"); n != len(want) || !strings.HasSuffix(content, "\n") {
		t.Errorf("file has %d lines, want %d one-line records:\n%s", n, len(want), content)
	}
	if got := mustLoad(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("LoadTrials = %+v\nwant %+v", got, want)
	}

	// Reopening appends after the existing records.
	s2 := mustOpen(t, dir)
	mustAppend(t, s2, testTrial("a", 3))
	s2.Close()
	got := mustLoad(t, dir)
	if len(got) != 5 || got[4].Trial != 3 || !reflect.DeepEqual(got[:4], want) {
		t.Errorf("after reopen: %+v", got)
	}
}

func TestStoreRejectsNaN(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	bad := testTrial("a", 1)
	bad.Metrics["gbps"] = math.NaN()
	if err := s.Append(bad); err == nil {
		t.Fatal("Append with NaN metric succeeded")
	}
	mustAppend(t, s, testTrial("a", 2))
	if got := mustLoad(t, dir); len(got) != 1 || got[0].Trial != 2 {
		t.Errorf("got %+v", got)
	}
}

func TestStoreConcurrentAppend(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				tr := testTrial("c", g*100+i)
				tr.Raw = strings.Repeat("x", 5000) // make interleaving visible if it happened
				if err := s.Append(tr); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got := mustLoad(t, dir)
	if len(got) != 80 {
		t.Fatalf("loaded %d trials, want 80", len(got))
	}
	distinct := map[int]bool{}
	for _, tr := range got {
		distinct[tr.Trial] = true
	}
	if len(distinct) != 80 {
		t.Errorf("%d distinct trials, want 80", len(distinct))
	}
}

func TestLoadTrialsMissing(t *testing.T) {
	if _, err := LoadTrials(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want ErrNotExist", err)
	}
}

func TestTruncatedLastLineRecovery(t *testing.T) {
	for _, tail := range []string{
		`{"run":"r1","case":{"id":"a"`,           // crash mid-write
		"\x00\x00\x00\x00\n",                     // zero-filled block after a crash
		`{"run":"r1","case":{"id":"a"}` + "\n\n", // garbled, followed by blank lines
	} {
		dir := t.TempDir()
		s := mustOpen(t, dir)
		mustAppend(t, s, testTrial("a", 1), testTrial("a", 2))
		s.Close()
		path := filepath.Join(dir, TrialsFile)
		good := readFile(t, path)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(tail)
		f.Close()

		// Loading skips the broken tail without touching the file.
		if got := mustLoad(t, dir); len(got) != 2 {
			t.Errorf("tail %q: loaded %d trials, want 2", tail, len(got))
		}
		if readFile(t, path) != good+tail {
			t.Errorf("tail %q: LoadTrials modified the file", tail)
		}

		// Opening the store truncates the tail; the next append starts on a clean line.
		s = mustOpen(t, dir)
		if got := readFile(t, path); got != good {
			t.Errorf("tail %q: after OpenStore file is\n%q\nwant\n%q", tail, got, good)
		}
		mustAppend(t, s, testTrial("a", 3))
		s.Close()
		got := mustLoad(t, dir)
		if len(got) != 3 || got[2].Trial != 3 {
			t.Errorf("tail %q: after recovery loaded %+v", tail, got)
		}
	}
}

func TestGarbageOnlyLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TrialsFile)
	if err := os.WriteFile(path, []byte(`{"ru`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); len(got) != 0 {
		t.Errorf("loaded %+v", got)
	}
	s := mustOpen(t, dir)
	mustAppend(t, s, testTrial("a", 1))
	s.Close()
	if got := mustLoad(t, dir); len(got) != 1 {
		t.Errorf("loaded %+v", got)
	}
}

func TestMissingFinalNewline(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TrialsFile)
	line, _ := json.Marshal(testTrial("a", 1))
	if err := os.WriteFile(path, line, 0o644); err != nil { // complete record, no newline
		t.Fatal(err)
	}
	if got := mustLoad(t, dir); len(got) != 1 {
		t.Fatalf("loaded %d trials, want 1", len(got))
	}
	s := mustOpen(t, dir)
	mustAppend(t, s, testTrial("a", 2))
	s.Close()
	if got := mustLoad(t, dir); len(got) != 2 || got[0].Trial != 1 || got[1].Trial != 2 {
		t.Errorf("loaded %+v", got)
	}
}

func TestGarbageInMiddle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TrialsFile)
	l1, _ := json.Marshal(testTrial("a", 1))
	l3, _ := json.Marshal(testTrial("a", 2))
	content := string(l1) + "\n" + `{"run":"r1","tri` + "\n" + string(l3) + "\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadTrials(dir)
	if err == nil || !strings.Contains(err.Error(), TrialsFile+":2:") {
		t.Errorf("LoadTrials error = %v, want one naming line 2", err)
	}
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("OpenStore error = %v, want one naming line 2", err)
	}
	if readFile(t, path) != content {
		t.Error("file modified despite mid-file corruption")
	}

	// Blank lines are not garbage; the line number still counts them.
	content = string(l1) + "\n\n" + string(l3) + "\nnot json\n" + string(l1) + "\n"
	os.WriteFile(path, []byte(content), 0o644)
	if _, err := LoadTrials(dir); err == nil || !strings.Contains(err.Error(), ":4:") {
		t.Errorf("error = %v, want one naming line 4", err)
	}
}
