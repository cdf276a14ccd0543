package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestConcurrentCloseInABubble: two Closes at once, the first waiting
// for a lease call in flight, both return the first's result inside a
// testing/synctest bubble, where services built on a Limiter are tested.
// The second waited for the first on a sync.Once's mutex, which the
// bubble does not count as durably blocked: its fake clock stopped, the
// call's deadline never came, and the test hung until go test's -timeout
// (this test's own guard says so in 10 s of real time).
func TestConcurrentCloseInABubble(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, func(t *testing.T) {
			store := faultstore.New(memstore.New())
			store.SetHook(faultstore.Hang(faultstore.OpAcquire)) // answers nothing: a call ends at its deadline
			l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}), leasequota.WithRedisTimeout(time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			ctx := context.Background()
			go l.AllowN(ctx, "a", 1) // its refill hangs: Close waits for it
			time.Sleep(10 * time.Millisecond)
			errs := make(chan error, 2)
			for range 2 {
				go func() { errs <- l.Close(ctx) }()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("two concurrent Closes had not returned after 10 s of real time: the bubble's clock stopped")
	}
}
