package leasequota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestCloseWakesWaiters: requests waiting for tokens return ReasonClosed
// (WaitN, WaitAll: ErrClosed) when Close begins, not when their wait
// would have ended. A WaitN for a tenant of a token every 5 s slept out
// its 5 s to the next token after Close had returned, its goroutine
// with it, and so did a request behind AllowNWithin's wait.
func TestCloseWakesWaiters(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, err := leasequota.NewWithStore(memstore.New(), leasequota.WithLogger(testLogger(t)), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.2, Burst: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tenant := range []string{"a", "b"} {
		if d := l.AllowN(ctx, tenant, 1); !d.Allowed {
			t.Fatalf("the first request of %s: %+v", tenant, d)
		}
	}
	type result struct {
		what   string
		reason leasequota.Reason
		err    error
	}
	results := make(chan result, 3)
	go func() {
		d, err := l.WaitN(ctx, "a", 1)
		results <- result{"WaitN", d.Reason, err}
	}()
	go func() {
		d, err := l.WaitAll(ctx, 1, "a", "b")
		results <- result{"WaitAll", d.Reason, err}
	}()
	go func() {
		d := l.AllowNWithin(ctx, "b", 1, time.Minute)
		results <- result{"AllowNWithin", d.Reason, nil}
	}()
	// The three are waiting once each has asked the syncer for tokens
	// it cannot have: poll for the lease calls they made.
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Calls < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d lease calls within 10 s, want the waiters' too", l.Stats().Calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	for range 3 {
		select {
		case r := <-results:
			if r.reason != leasequota.ReasonClosed || r.what != "AllowNWithin" && !errors.Is(r.err, leasequota.ErrClosed) {
				t.Errorf("%s after Close: %v, %v; want ReasonClosed and ErrClosed", r.what, r.reason, r.err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("a waiting request had not returned 3 s after Close (its token was 5 s away)")
		}
	}
	t.Logf("the waiting requests returned within %v of Close", time.Since(closed))
}
