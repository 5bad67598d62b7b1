package netnstest

import (
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Scratch creates a network namespace named with a fresh test prefix and returns its path and
// a function that deletes it early; it is deleted at the end of the test anyway, failed or
// not. Without root the test is skipped.
func Scratch(tb testing.TB) (path string, del func()) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces)")
	}
	name := Prefix()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		tb.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	var once sync.Once
	del = func() {
		once.Do(func() {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				tb.Errorf("ip netns del %s: %v: %s", name, err, out)
			}
		})
	}
	tb.Cleanup(del)
	return "/run/netns/" + name, del
}
