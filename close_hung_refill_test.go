package leasequota_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestCloseWakesRequestsWaitingOnAHungRefill: a request waiting for an
// urgent refill whose lease call hangs (a Redis that accepts the call and
// answers nothing) returns ReasonClosed when Close begins, as Close says
// of waiting requests, not when the call's deadline (WithRedisTimeout)
// ends it. Close itself waits for that call (its grant would be lost to
// a cancel); the requests need not: the tenant's first WaitN, a cold
// AllowN within WithColdStartWait, and an AllowNWithin sat out the rest
// of the call's 2 s.
func TestCloseWakesRequestsWaitingOnAHungRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		store.SetHook(faultstore.Hang(faultstore.OpAcquire)) // answers nothing: a call ends at its deadline
		l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}),
			leasequota.WithRedisTimeout(2*time.Second), leasequota.WithColdStartWait(5*time.Second))
		ctx := context.Background()
		type result struct {
			what   string
			reason leasequota.Reason
			err    error
			at     time.Time
		}
		results := make(chan result, 3)
		go func() {
			d, err := l.WaitN(ctx, "a", 1)
			results <- result{"WaitN", d.Reason, err, time.Now()}
		}()
		go func() {
			d := l.AllowN(ctx, "b", 1)
			results <- result{"AllowN", d.Reason, nil, time.Now()}
		}()
		go func() {
			d := l.AllowNWithin(ctx, "c", 1, time.Minute)
			results <- result{"AllowNWithin", d.Reason, nil, time.Now()}
		}()
		time.Sleep(100 * time.Millisecond) // the refills are in flight, hung
		synctest.Wait()
		if len(results) != 0 {
			t.Fatalf("%d requests returned before Close, their refills hung", len(results))
		}
		began := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- l.Close(ctx) }()
		for range 3 {
			r := <-results
			t.Logf("%s: %v, %v, %v after Close began", r.what, r.reason, r.err, r.at.Sub(began))
			if r.reason != leasequota.ReasonClosed || r.what == "WaitN" && !errors.Is(r.err, leasequota.ErrClosed) {
				t.Errorf("%s after Close: %v, %v; want ReasonClosed (WaitN: ErrClosed)", r.what, r.reason, r.err)
			}
			if wait := r.at.Sub(began); wait != 0 {
				t.Errorf("%s returned %v after Close began, want at once", r.what, wait)
			}
		}
		if err := <-closed; err != nil {
			t.Error(err)
		}
	})
}

// TestCloseWakesWaitNInAnOutageOnAHungRefill: as
// TestCloseWakesRequestsWaitingOnAHungRefill, for a WaitN that waits
// through an outage (its tenant's last call failed, FailClosed) and has
// asked for a lease again when the call hangs. Without l.done in that
// select (e21f2ca), it returned 7.58 s after Close began: the hung calls
// of the loop's round and of its refill, one after the other.
func TestCloseWakesWaitNInAnOutageOnAHungRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		var hang atomic.Bool
		store.SetHook(func(ctx context.Context, c faultstore.Call) error {
			if c.Op != faultstore.OpAcquire {
				return nil
			}
			if hang.Load() {
				<-ctx.Done() // answers nothing: the call ends at its deadline
				return ctx.Err()
			}
			return faultstore.ErrDown
		})
		l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}),
			leasequota.WithRedisTimeout(2*time.Second), leasequota.WithFailureMode(leasequota.FailClosed))
		ctx := context.Background()
		if d := l.AllowN(ctx, "a", 1); d.Allowed || d.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("first request, its lease call failed: %+v, want unavailable", d)
		}
		hang.Store(true)
		type result struct {
			reason leasequota.Reason
			err    error
			at     time.Time
		}
		results := make(chan result, 1)
		go func() {
			d, err := l.WaitN(ctx, "a", 1)
			results <- result{d.Reason, err, time.Now()}
		}()
		// Past its sleep (RetryAfter: the tenant's backoff, 100 ms): it
		// has asked for a lease again, and the call hangs.
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if len(results) != 0 {
			t.Fatal("WaitN returned before Close, its lease call hung")
		}
		began := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- l.Close(ctx) }()
		r := <-results
		t.Logf("WaitN: %v, %v, %v after Close began", r.reason, r.err, r.at.Sub(began))
		if r.reason != leasequota.ReasonClosed || !errors.Is(r.err, leasequota.ErrClosed) {
			t.Errorf("WaitN after Close: %v, %v; want ReasonClosed and ErrClosed", r.reason, r.err)
		}
		if wait := r.at.Sub(began); wait != 0 {
			t.Errorf("WaitN returned %v after Close began, want at once", wait)
		}
		if err := <-closed; err != nil {
			t.Log(err) // the hung call's tokens: none were granted
		}
	})
}
