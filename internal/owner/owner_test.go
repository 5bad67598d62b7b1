package owner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSelfAliveAndRoundTrip(t *testing.T) {
	r := Self("owner.test")
	if !r.Alive() || !r.Live() || r.Start == 0 {
		t.Fatalf("this process is not alive: %+v", r)
	}
	p := filepath.Join(t.TempDir(), "owner.json")
	if err := Write(p, r); err != nil {
		t.Fatal(err)
	}
	got, err := Read(p)
	if err != nil || got != r {
		t.Fatalf("Read = %+v, %v; want %+v", got, err, r)
	}
	if s := r.String(); !strings.Contains(s, "owner.test") || !strings.Contains(s, "pid ") {
		t.Errorf("String = %q", s)
	}
}

// A PID alone is not an owner: a finished process, a reused PID (another start time) and
// another host are all dead owners; a kept record is live whoever made it.
func TestDeadOwners(t *testing.T) {
	cmd := exec.Command("sleep", "0")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	r := Self("x")
	gone := r
	gone.PID = cmd.Process.Pid
	if gone.Alive() {
		t.Errorf("finished child %d is alive", gone.PID)
	}
	reused := r
	reused.Start++
	if reused.Alive() {
		t.Error("a record with another start time is alive")
	}
	other := r
	other.Host = r.Host + "-elsewhere"
	if other.Alive() {
		t.Error("an owner on another host is alive here")
	}
	kept := gone
	kept.Kept = true
	if !kept.Live() || kept.Alive() {
		t.Error("a kept record must be live, and not alive")
	}
}

func TestParseStart(t *testing.T) {
	// A command name with spaces and parentheses, as /proc prints it.
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	got, err := parseStart(line)
	if err != nil || got != 987654 {
		t.Errorf("parseStart = %d, %v; want 987654", got, err)
	}
	if _, err := parseStart("4242 (cmd S 1"); err == nil {
		t.Error("no ')' accepted")
	}
	if _, err := parseStart("4242 (cmd) S 1 2"); err == nil {
		t.Error("short line accepted")
	}
	b, _ := os.ReadFile("/proc/self/stat")
	if _, err := parseStart(string(b)); err != nil {
		t.Errorf("own stat line: %v", err)
	}
}
