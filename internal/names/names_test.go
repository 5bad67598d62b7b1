package names

import (
	"strings"
	"testing"
)

func TestRandom(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		s := Random(Lower, 8)
		if len(s) != 8 {
			t.Fatalf("Random(Lower, 8) = %q: length %d", s, len(s))
		}
		for _, r := range s {
			if !strings.ContainsRune(Lower, r) {
				t.Fatalf("Random(Lower, 8) = %q: %q is not in the alphabet", s, r)
			}
		}
		seen[s] = true
	}
	if len(seen) < 195 { // 36^8 names: a collision among 200 is a broken source
		t.Errorf("200 random names gave only %d distinct ones", len(seen))
	}
	if got := Random(Kube, 0); got != "" {
		t.Errorf("Random(Kube, 0) = %q, want empty", got)
	}
}
