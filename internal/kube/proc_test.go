package kube

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/cluster"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestListeningPorts parses /proc/net/tcp and tcp6 recorded by testdata/record.sh with known
// listeners and one established connection (expect.txt).
func TestListeningPorts(t *testing.T) {
	text := append(readTestdata(t, "proc_net_tcp.txt"), readTestdata(t, "proc_net_tcp6.txt")...)
	ports := cluster.ListeningPorts(text)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(readTestdata(t, "expect.txt"))), "\n") {
		kind, p, _ := strings.Cut(line, " ")
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("expect.txt: %q", line)
		}
		switch kind {
		case "listen":
			n++
			if !ports[port] {
				t.Errorf("port %d listens but was not found in %v", port, ports)
			}
		case "established":
			if ports[port] {
				t.Errorf("port %d is only an established connection's, reported as listening", port)
			}
		}
	}
	if n == 0 {
		t.Fatal("expect.txt names no listener")
	}
	// tcp alone (a kernel without IPv6: cat prints tcp, then fails on tcp6).
	if !cluster.ListeningPorts(readTestdata(t, "proc_net_tcp.txt"))[45280] {
		t.Error("IPv4 listener not found in tcp alone")
	}
	if got := cluster.ListeningPorts([]byte("garbage\n  0: zz:zz 0 0A\n")); len(got) != 0 {
		t.Errorf("garbage parsed as %v", got)
	}
}

func TestParseProcStat(t *testing.T) {
	b := readTestdata(t, "proc_stat.txt")
	s, err := cluster.ParseProcStat(b)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	want := make([]uint64, 8)
	for i := range want {
		want[i], _ = strconv.ParseUint(f[i+1], 10, 64)
	}
	got := []uint64{s.User, s.Nice, s.System, s.Idle, s.IOWait, s.IRQ, s.SoftIRQ, s.Steal}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d: %d, want %d (%+v)", i+1, got[i], want[i], s)
		}
	}
	if s.Total() == 0 {
		t.Error("zero total")
	}
	// Followed by the per-CPU lines, as cat /proc/stat prints it.
	if s2, err := cluster.ParseProcStat(append(append([]byte{}, b...), "cpu0 1 2 3 4 5 6 7 8 0 0\n"...)); err != nil || s2 != s {
		t.Errorf("with more lines: %+v %v", s2, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x 0 0\n"} {
		if _, err := cluster.ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	var zero cluster.CPUSample
	if s == zero {
		t.Error("empty sample")
	}
}

func TestProcState(t *testing.T) {
	for file, want := range map[string]string{"proc_pid_stat_running.txt": "S", "proc_pid_stat_zombie.txt": "Z"} {
		if st, ok := procState(readTestdata(t, file)); !ok || st != want {
			t.Errorf("%s: state %q %v, want %s", file, st, ok, want)
		}
	}
	if st, ok := procState([]byte("42 (we ird) (x) R 1 42 42 0 -1\n")); !ok || st != "R" {
		t.Errorf("name with spaces and parentheses: %q %v", st, ok)
	}
	if _, ok := procState([]byte("")); ok {
		t.Error("empty stat parsed")
	}
}

func TestLogTail(t *testing.T) {
	if got := logTail([]byte("a\nb\nc\nd\n"), 2); got != "c\nd" {
		t.Errorf("tail %q", got)
	}
	if got := logTail(nil, 3); got != "" {
		t.Errorf("empty tail %q", got)
	}
}
