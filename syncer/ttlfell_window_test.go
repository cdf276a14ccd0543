package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestLongLeaseTTLFellCountsOnlyInItsWindow: an evicted tenant's LeaseTTL
// of two hours counts in every refund's age while a tenant tracked again
// under its name may hold tokens leased under it (noteTTLFell), and no
// longer once that window is over: an eviction of a tenant with the
// default LeaseTTL three hours later does not bring the two hours back.
// A refund of a tenant with a LeaseTTL of 2 s, spent a moment ago, is
// returned to Redis with an age of seconds, not forfeited as older than
// RefundHorizon.
func TestLongLeaseTTLFellCountsOnlyInItsWindow(t *testing.T) {
	now, advance, _, mine, _ := MemstorePair(t)
	s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: 24 * time.Hour})
	defer s.Close()
	q := quota.Quota{Rate: 100, Burst: 100, MinLease: 10, MaxLease: 10, LeaseTTL: 2 * time.Second}
	long := q
	long.LeaseTTL = 2 * time.Hour
	track := func(name string, q quota.Quota) *Tenant {
		tn, err := s.Track(name, q)
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	s.evict([]*Tenant{track("long", long)}, now(), nil)
	advance(3 * time.Hour) // the two hours' window is over
	s.evict([]*Tenant{track("other", q)}, now(), nil)

	tn := track("short", q)
	refillNow(t, s, tn, 10)
	front, clock := tn.Front(), s.Clock()
	if front == 0 || clock == 0 {
		t.Fatalf("front %d, clock %d: want both known", front, clock)
	}
	if ok, _ := tn.Spend(1); !ok {
		t.Fatal("the spend failed")
	}
	advance(time.Second)
	tn.mu.Lock() // a lease call in flight: the refund goes to Redis
	got := s.Refund(tn, 1, front, clock)
	tn.mu.Unlock()
	s.pendingMu.Lock()
	var age time.Duration
	for _, q := range s.pending {
		age = q.r.Age
	}
	s.pendingMu.Unlock()
	t.Logf("refund %v, age %v (LeaseTTL counted %v)", got, age, s.leaseTTLOf(tn.Limits(), clock))
	if got != RefundReturned {
		t.Fatalf("refund %v, want RefundReturned: the two hours' LeaseTTL counted 3 hours after the tenant that had it was evicted", got)
	}
	if age > time.Minute {
		t.Errorf("returned with an age of %v, want seconds", age)
	}
}

// TestTTLWindows: each fallen LeaseTTL counts for admissions before its
// own window's end, a later shorter one's window does not extend it, and
// a third window merges the two oldest, overstating (never understating)
// the TTL.
func TestTTLWindows(t *testing.T) {
	const h = int64(time.Hour)
	var w ttlWindows
	ttlAt := func(clock int64) int64 {
		var ttl int64
		for i := range w.ttl {
			if clock < w.until[i] {
				ttl = max(ttl, w.ttl[i])
			}
		}
		return ttl
	}
	check := func(clock, want int64) {
		t.Helper()
		if got := ttlAt(clock); got != want {
			t.Errorf("TTL for a clock of %.2f h: %.2f h, want %.2f h (windows %+v)", float64(clock)/float64(h), float64(got)/float64(h), float64(want)/float64(h), w)
		}
	}
	w.add(2*h, 2*h, -h)  // two hours, noted at 0
	w.add(h/100, 3*h, 0) // 36 s, noted near 3 h
	check(h, 2*h)
	check(2*h+1, h/100)
	check(3*h, 0)
	if w.add(h/200, 2*h, 0) {
		t.Error("a window inside another one changed them")
	}
	w.add(h/1000, 4*h, 0) // 3.6 s, a third: the two hours now reach 3 h
	check(h, 2*h)
	check(3*h-1, 2*h)
	check(3*h+1, h/1000)
	check(4*h, 0)
	w.add(h/100, 5*h, 4*h) // the others ended more than RefundHorizon ago
	check(h, h/100)
	check(5*h, 0)
}
