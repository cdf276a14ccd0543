package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestLongIdleTimeoutEvicts: a tenant is evicted once idle for
// IdleTimeout, however long that is within its bound, although its
// stamps (milliseconds from a base, 32 bits) are rebased several times
// while it waits.
func TestLongIdleTimeoutEvicts(t *testing.T) {
	for _, idle := range []time.Duration{time.Hour, 20 * 24 * time.Hour, 40 * 24 * time.Hour} {
		t.Run(idle.String(), func(t *testing.T) {
			now, advance, _, mine, _ := MemstorePair(t)
			s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: idle})
			defer s.Close()
			tn, err := s.Track("x", quota.Quota{Rate: 10, Burst: 20})
			if err != nil {
				t.Fatal(err)
			}
			refillNow(t, s, tn, 5)
			start := now()
			step := idle / 200
			for !tn.Evicted() {
				if now().Sub(start) > 2*idle {
					t.Fatalf("still tracked %v after its last request (idle timeout %v)", now().Sub(start), idle)
				}
				advance(step)
				s.Tick(context.Background())
			}
			t.Logf("evicted %v after its last request", now().Sub(start))
			if got := now().Sub(start); got < idle {
				t.Errorf("evicted %v after its last request, before its idle timeout %v", got, idle)
			}
		})
	}
}

// TestLongIdleTimeoutEvictsAwakeTenant: a tenant whose bucket was last
// seen below its burst, and at so low a rate that it takes months to
// refill, never goes dormant (see Syncer.sleep), so its last activity is
// a stamp of its State, 32 bits of milliseconds from a base that is moved
// as time passes; it is evicted once idle for IdleTimeout all the same.
func TestLongIdleTimeoutEvictsAwakeTenant(t *testing.T) {
	for _, idle := range []time.Duration{time.Hour, 20 * 24 * time.Hour, 40 * 24 * time.Hour, 100 * 24 * time.Hour} {
		t.Run(idle.String(), func(t *testing.T) {
			now, advance, _, mine, _ := MemstorePair(t)
			s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: idle})
			defer s.Close()
			// 5 of 20 tokens taken refill in 5e7 s, a year and a half.
			tn, err := s.Track("x", quota.Quota{Rate: 1e-7, Burst: 20})
			if err != nil {
				t.Fatal(err)
			}
			refillNow(t, s, tn, 5)
			start := now()
			step := idle / 200
			for !tn.Evicted() {
				if now().Sub(start) > 2*idle {
					t.Fatalf("still tracked %v after its last request (idle timeout %v)", now().Sub(start), idle)
				}
				advance(step)
				s.Tick(context.Background())
				if !tn.Evicted() && tn.Dormant() {
					t.Fatalf("dormant %v after its last request: the test wants a tenant that is not", now().Sub(start))
				}
			}
			t.Logf("evicted %v after its last request", now().Sub(start))
			if got := now().Sub(start); got < idle {
				t.Errorf("evicted %v after its last request, before its idle timeout %v", got, idle)
			}
		})
	}
}
