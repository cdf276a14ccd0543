package syncer_test

import (
	"context"
	"testing"
	"time"
)

// TestDormantTenant: a tenant idle for 16 half-lives of the demand (8 s by
// default) after its lease expired goes dormant; it then holds no lease
// state, its requests are told the bucket is full (it was when it went
// dormant), and a miss revives it and gets it a lease; a dormant tenant
// idle for the idle timeout is evicted.
func TestDormantTenant(t *testing.T) {
	r := newDrivenRig(t, 100*time.Millisecond)
	ctx := context.Background()
	tn := r.track(t, "a")
	r.s.Refill(ctx, tn, 1)
	r.s.Refills(ctx)
	r.s.Deliver()
	if tn.Held() == 0 {
		t.Fatal("no lease after the refill")
	}
	if ok, _ := tn.Spend(1); !ok {
		t.Fatal("spend from the lease failed")
	}
	advance := func(d time.Duration) {
		for end := r.clock.Load() + int64(d); r.clock.Load() < end; {
			r.clock.Add(int64(25 * time.Millisecond))
			r.s.Tick(ctx)
		}
	}
	advance(7 * time.Second)
	if tn.Dormant() || r.s.Dormant() != 0 {
		t.Fatal("dormant after 7 s idle, want 8 s (16 half-lives of 500 ms)")
	}
	advance(1500 * time.Millisecond)
	if !tn.Dormant() || r.s.Dormant() != 1 {
		t.Fatal("not dormant after 8.5 s idle, with its lease expired")
	}
	if s := r.s.Snapshot(tn); s.Tokens != 0 || s.Target != 0 || s.Demand != 0 {
		t.Errorf("dormant snapshot %+v, want all zero", s)
	}
	if w := tn.RetryAfter(r.now(), 10); w != 0 {
		t.Errorf("dormant RetryAfter(10) = %v, want 0: the bucket was full", w)
	}
	calls := len(r.store.calls())
	advance(time.Second)
	if n := len(r.store.calls()); n != calls {
		t.Fatalf("%d lease calls for a dormant tenant", n-calls)
	}
	r.s.NoteMiss(tn, 5)
	r.s.Urgent(ctx)
	if tn.Dormant() {
		t.Fatal("still dormant after a miss was planned")
	}
	if tn.Held() < 5 {
		t.Fatalf("revived tenant holds %d tokens, want at least the 5 it missed", tn.Held())
	}
	if !tn.Leased() {
		t.Fatal("revived tenant forgot it had leased")
	}
	// Idle again: dormant, then evicted at the idle timeout (a minute).
	advance(10 * time.Second)
	if !tn.Dormant() {
		t.Fatal("not dormant again after 10 s idle")
	}
	advance(49 * time.Second)
	if r.s.Len() != 1 || tn.Evicted() {
		t.Fatal("evicted before the idle timeout")
	}
	advance(2 * time.Second)
	if r.s.Len() != 0 || !tn.Evicted() {
		t.Fatal("a dormant tenant idle for the idle timeout was not evicted")
	}
}
