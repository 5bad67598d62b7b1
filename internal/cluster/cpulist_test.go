package cluster

import (
	"os"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]string{"0-1": "0,1", "0": "0", "0-2,5,7-8\n": "0,1,2,5,7,8", "": ""} {
		got, err := ParseCPUList(in)
		if err != nil || FormatCPUList(got) != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "1-x", "-1"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// AllowedCPUs reads Cpus_allowed_list from a real /proc/PID/status (recorded on this 2-CPU
// host: "0-1"); a status without it is an error.
func TestAllowedCPUs(t *testing.T) {
	b, err := os.ReadFile("testdata/proc-status.txt")
	if err != nil {
		t.Fatal(err)
	}
	if cpus, err := AllowedCPUs(b); err != nil || len(cpus) != 2 || cpus[0] != 0 || cpus[1] != 1 {
		t.Errorf("AllowedCPUs = %v, %v; want [0 1]", cpus, err)
	}
	if _, err := AllowedCPUs([]byte("Name:\tcat\nState:\tR (running)\n")); err == nil {
		t.Error("a status without Cpus_allowed_list: no error")
	}
}
