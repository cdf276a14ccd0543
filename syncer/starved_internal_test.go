package syncer

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

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
