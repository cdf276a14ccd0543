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

// TestSnapshotWaitsDurably: Limiter.Tenant read while the tenant's lease
// call is in flight waits for the call and returns, inside a
// testing/synctest bubble. It waited on the tenant's mutex, which the
// bubble does not count as durably blocked: the fake clock stopped, the
// call's deadline never came, and the test hung until go test's -timeout
// (this test's own guard says so in 10 s of real time). Refills waited
// on a broadcast already; the snapshot now waits as they do.
func TestSnapshotWaitsDurably(t *testing.T) {
	bubbleWithin(t, 10*time.Second, "Limiter.Tenant", func(t *testing.T) {
		l := hungLimiter(t)
		if l == nil {
			return
		}
		defer l.Close(context.Background())
		go l.AllowN(context.Background(), "a", 1) // its first lease call hangs
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		info, ok := l.Tenant("a")
		if !ok {
			t.Error("tenant a not tracked")
		}
		// It waited for the call's deadline (the fake clock moved).
		if waited := time.Since(start); waited <= 0 {
			t.Errorf("Tenant returned after %v with the call in flight, want after the call ended", waited)
		}
		if info.Tokens != 0 {
			t.Errorf("tokens %d after a call that failed, want 0", info.Tokens)
		}
	})
}

// bubbleWithin runs f in a testing/synctest bubble and fails t if it has
// not returned after limit of real time: what of f had not returned (a
// wait the bubble does not count as durable stops its fake clock for
// good). The bubble's goroutine is left behind then.
func bubbleWithin(t *testing.T, limit time.Duration, what string, f func(t *testing.T)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, f)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s had not returned after %v of real time: the bubble's clock stopped", what, limit)
	}
}

// hungLimiter returns a Limiter (Rate 10, Burst 10, WithRedisTimeout 1 s)
// on a store whose acquires answer nothing (a call ends at its deadline),
// or nil after reporting an error to t.
func hungLimiter(t *testing.T) *leasequota.Limiter {
	store := faultstore.New(memstore.New())
	store.SetHook(faultstore.Hang(faultstore.OpAcquire))
	l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}), leasequota.WithRedisTimeout(time.Second))
	if err != nil {
		t.Error(err)
		return nil
	}
	return l
}
