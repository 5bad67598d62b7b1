package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestParallel(t *testing.T) {
	var done [100]atomic.Bool
	if err := Parallel(context.Background(), 100, 8, func(i int) error { done[i].Store(true); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range done {
		if !done[i].Load() {
			t.Fatalf("item %d not run", i)
		}
	}
	// The first error is returned and no item starts after it (one worker: items in order).
	var ran atomic.Int32
	boom := errors.New("boom")
	err := Parallel(context.Background(), 100, 1, func(i int) error {
		ran.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || ran.Load() > 12 {
		t.Errorf("err %v after %d items, want boom after about 11", err, ran.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Parallel(ctx, 5, 2, func(int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if err := Parallel(context.Background(), 0, 4, func(int) error { return boom }); err != nil {
		t.Errorf("no items: %v", err)
	}
}
