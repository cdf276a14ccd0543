package leasequota_test

import (
	"context"
	"testing"
	"time"
)

// TestConcurrentCloseInABubble: two Closes at once, the first waiting
// for a lease call in flight, both return the first's result inside a
// testing/synctest bubble, where services built on a Limiter are tested.
// The second waited for the first on a sync.Once's mutex, which the
// bubble does not count as durably blocked: its fake clock stopped, the
// call's deadline never came, and the test hung until go test's -timeout
// (this test's own guard says so in 10 s of real time).
func TestConcurrentCloseInABubble(t *testing.T) {
	bubbleWithin(t, 10*time.Second, "two concurrent Closes", func(t *testing.T) {
		l := hungLimiter(t)
		if l == nil {
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
}
