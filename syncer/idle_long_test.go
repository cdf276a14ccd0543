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
			checkEvictedAfter(t, idle, quota.Quota{Rate: 10, Burst: 20}, false)
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
			// 5 of 20 tokens taken refill in 5e7 s, a year and a half.
			checkEvictedAfter(t, idle, quota.Quota{Rate: 1e-7, Burst: 20}, true)
		})
	}
}

// checkEvictedAfter takes 5 tokens of a tenant of quota q on a driven
// syncer with IdleTimeout idle, then ticks in steps of idle/200 until it
// is evicted: not before idle, and within twice it. With awake, the
// tenant must not go dormant meanwhile (what the test wants to see).
func checkEvictedAfter(t *testing.T, idle time.Duration, q quota.Quota, awake bool) {
	t.Helper()
	now, advance, _, mine, _ := MemstorePair(t)
	s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: idle})
	defer s.Close()
	tn, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	refillNow(t, s, tn, 5)
	// Taken: spent, not left to expire and go back, which would fill the
	// bucket again (as a return's reply says: leaseState.sawReturn).
	if ok, _ := tn.Spend(5); !ok {
		t.Fatalf("could not spend the 5 tokens leased (held %d)", tn.Held())
	}
	start := now()
	step := idle / 200
	for !tn.Evicted() {
		if now().Sub(start) > 2*idle {
			t.Fatalf("still tracked %v after its last request (idle timeout %v)", now().Sub(start), idle)
		}
		advance(step)
		s.Tick(context.Background())
		if awake && !tn.Evicted() && tn.Dormant() {
			t.Fatalf("dormant %v after its last request: the test wants a tenant that is not", now().Sub(start))
		}
	}
	t.Logf("evicted %v after its last request", now().Sub(start))
	if got := now().Sub(start); got < idle {
		t.Errorf("evicted %v after its last request, before its idle timeout %v", got, idle)
	}
}

// TestLongIdleTimeoutCountsLatestActivity: an awake tenant's idleness is
// counted from its latest activity, however long after that its State's
// stamp of it is clamped. Active at T0 (an idle check saw that), then at
// T0 + 10 days (a refill: no idle check after it), then ticked once the
// stamp has been clamped (30 days later, say after the host slept): it has
// been idle for 30 days, under its IdleTimeout of 40, and is kept.
func TestLongIdleTimeoutCountsLatestActivity(t *testing.T) {
	const day = 24 * time.Hour
	for _, gap := range []time.Duration{26 * day, 30 * day, 35 * day} {
		t.Run(gap.String(), func(t *testing.T) {
			const idle = 40 * day
			now, advance, _, mine, _ := MemstorePair(t)
			s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: idle})
			defer s.Close()
			tn, err := s.Track("x", quota.Quota{Rate: 1e-7, Burst: 20})
			if err != nil {
				t.Fatal(err)
			}
			refillNow(t, s, tn, 5)
			advance(time.Second)
			s.Tick(context.Background()) // an idle check sees the activity
			advance(10 * day)
			refillNow(t, s, tn, 1)
			last := now()
			advance(gap)
			s.Tick(context.Background())
			if tn.Evicted() {
				t.Fatalf("evicted %v after its last request, before its idle timeout %v", now().Sub(last), idle)
			}
			for !tn.Evicted() {
				if now().Sub(last) > 2*idle {
					t.Fatalf("still tracked %v after its last request (idle timeout %v)", now().Sub(last), idle)
				}
				advance(idle / 200)
				s.Tick(context.Background())
			}
			if got := now().Sub(last); got < idle {
				t.Errorf("evicted %v after its last request, before its idle timeout %v", got, idle)
			}
		})
	}
}
