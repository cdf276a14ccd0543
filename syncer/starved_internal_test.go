package syncer

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestWaitedAtLeast holds the read of the runtime's waits to its rule: a
// count that grew in a bucket whose lower bound is at least the
// threshold, and nothing below it.
func TestWaitedAtLeast(t *testing.T) {
	buckets := []float64{0, 0.01, 0.05, 0.1, 1} // 4 buckets
	for _, c := range []struct {
		name      string
		prev, cur []uint64
		want      bool
	}{
		{"no growth", []uint64{5, 3, 2, 1}, []uint64{5, 3, 2, 1}, false},
		{"below the threshold", []uint64{5, 3, 2, 1}, []uint64{9, 7, 2, 1}, false},
		{"in the bucket at the threshold", []uint64{5, 3, 2, 1}, []uint64{5, 3, 3, 1}, true},
		{"in the last bucket", []uint64{5, 3, 2, 1}, []uint64{5, 3, 2, 4}, true},
		{"a bucket new since", []uint64{5, 3}, []uint64{5, 3, 0, 1}, true},
	} {
		if got := waitedAtLeast(c.prev, c.cur, buckets, 0.05); got != c.want {
			t.Errorf("%s: waitedAtLeast = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStarvationSeesGoroutinesWaitingToRun makes the process short of
// CPU (four busy goroutines a P for 300 ms, each waiting its turn) and
// holds starvation to seeing it: a read after finds a wait of 5 ms or
// more. The zero value reads nothing.
func TestStarvationSeesGoroutinesWaitingToRun(t *testing.T) {
	var s starvation
	s.init(5*time.Millisecond, time.Now())
	stop := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for x := 0; time.Now().Before(stop); x++ {
				_ = x
			}
		})
	}
	wg.Wait()
	now := time.Now()
	s.observe(now)
	if got := s.starvedAt.Load(); got != now.UnixNano() {
		t.Errorf("starvedAt = %d after the busy goroutines, want %d (now)", got, now.UnixNano())
	}

	var zero starvation
	zero.observe(time.Now())
	if zero.starvedAt.Load() != 0 {
		t.Error("the zero value read the runtime's waits")
	}
}
