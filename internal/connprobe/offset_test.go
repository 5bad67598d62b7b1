package connprobe

import (
	"testing"
	"time"
)

// A run begins at the port of its start's slot: runs that follow one another go on through
// the range rather than all starting at its first port.
func TestFirstSrcOffset(t *testing.T) {
	t0 := time.Unix(1795886574, 315295323)
	const n = 64512
	a := firstSrcOffset(t0, time.Millisecond, n)
	b := firstSrcOffset(t0.Add(1100*time.Millisecond), time.Millisecond, n)
	if (b+n-a)%n != 1100 {
		t.Errorf("offsets %d then %d 1.1 s later, want 1100 ports further", a, b)
	}
	if c := firstSrcOffset(t0.Add(n*time.Millisecond), time.Millisecond, n); c != a {
		t.Errorf("offset %d after a whole range's time, want %d again", c, a)
	}
	if a >= n {
		t.Errorf("offset %d outside the range of %d", a, n)
	}
}
