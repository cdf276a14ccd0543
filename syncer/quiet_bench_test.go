package syncer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// BenchmarkTickHeldBack is one scheduled round (Tick) over 10,000
// tenants that are all over-demanded, their buckets drained and their next
// calls held back while their shares accrue or until their turns, the state most of a
// saturated fleet's tenants are in most of the time; each tick, requests
// have missed on every one of them. ns/tenant is the round's cost per
// tenant; a round makes no call. The store is the in-process model, and
// time is a fake clock that does not move, so every tick finds the same.
func BenchmarkTickHeldBack(b *testing.B) {
	const tenants = 10_000
	s, all, _ := heldBack(b, tenants)
	ctx := context.Background()
	calls := s.Stats().Calls
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, t := range all {
			t.NoteMiss(2)
		}
		s.Tick(ctx)
	}
	b.StopTimer()
	if n := s.Stats().Calls - calls; n != 0 {
		b.Fatalf("%d calls in the held-back ticks", n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tenants, "ns/tenant")
}

// BenchmarkTickColdCache is one scheduled round (Tick) over many tenants
// whose memory is in no CPU cache, as when a process tracks tens of
// thousands of tenants beside other work: before each round (untimed) the
// benchmark writes 64 MiB, more than this machine's caches. The tenants
// are "held-back" (BenchmarkTickHeldBack's state, without its misses),
// "leased" (each holding a lease it does not spend, between two scheduled
// refreshes: planned but quiet), "idle" (their leases expired unspent:
// holding nothing, keeping no lease, not yet dormant) or "dormant" (idle
// until they dropped their lease state: what most of an instance's
// tenants are when it sees many tenants now and then). A round makes no
// call in any. ns/tenant is the round's cost per tenant. The clock does
// not move, so the ticks measured walk the tenants that are not dormant
// (syncer/awake.go): none of the dormant ones.
func BenchmarkTickColdCache(b *testing.B) {
	for _, tenants := range []int{10_000, 64_000} {
		for _, state := range []string{"held-back", "leased", "idle", "dormant"} {
			b.Run(fmt.Sprintf("%s/%d", state, tenants), func(b *testing.B) {
				var s *Syncer
				var clock *atomic.Int64
				switch state {
				case "leased":
					s, clock = leased(b, tenants)
				case "idle":
					s, clock = idle(b, tenants)
				default:
					s, _, clock = heldBack(b, tenants)
				}
				ctx := context.Background()
				if state == "dormant" {
					// Idle past 16 half-lives of the demand, well within
					// the idle timeout.
					for range 3 {
						clock.Add(int64(10 * time.Second))
						s.Tick(ctx)
					}
					if d := s.Dormant(); d != tenants {
						b.Fatalf("%d of %d tenants dormant", d, tenants)
					}
				}
				calls := s.Stats().Calls
				junk := make([]byte, 64<<20)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					for i := 0; i < len(junk); i += 64 {
						junk[i]++
					}
					b.StartTimer()
					s.Tick(ctx)
				}
				b.StopTimer()
				if n := s.Stats().Calls - calls; n != 0 {
					b.Fatalf("%d calls in the benchmarked ticks", n)
				}
				if n := s.Len(); n != tenants {
					b.Fatalf("%d tenants tracked after the ticks, want %d", n, tenants)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tenants), "ns/tenant")
			})
		}
	}
}

// heldBack returns a Syncer on the in-process store, on a fake clock,
// tracking n tenants whose next calls are all held back: each leased its
// bucket dry, spent it and missed, tick after tick (the call budget's
// window opened to all of them), until a tick made no call.
func heldBack(b testing.TB, n int) (*Syncer, []*Tenant, *atomic.Int64) {
	b.Helper()
	s, all, clock := tracking(b, n, quota.Quota{Rate: 10, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: 10 * time.Second})
	ctx := context.Background()
	calls := s.Stats().Calls
	for i := 0; ; i++ {
		if i == 400 {
			b.Fatalf("tenants still calling after %d ticks", i)
		}
		for _, t := range all {
			if h := t.Held(); h > 0 {
				t.Spend(h)
			}
			t.NoteMiss(2)
		}
		clock.Add(int64(25 * time.Millisecond))
		setWindow(s, 4*n)
		s.Tick(ctx)
		if c := s.Stats().Calls; c != calls {
			calls = c
			continue
		}
		if i > 8 {
			break
		}
	}
	for _, t := range all {
		if !t.Leased() {
			b.Fatalf("%s never leased", t.Name())
		}
	}
	return s, all, clock
}

// leased returns a Syncer on the in-process store, on a fake clock,
// tracking n tenants that each hold a lease of 10 tokens from a bucket
// of plenty, got for one miss, which they do not spend.
func leased(b testing.TB, n int) (*Syncer, *atomic.Int64) {
	s, _, clock := leasedFor(b, n, 10*time.Second)
	return s, clock
}

// idle returns a Syncer as leased does, whose tenants' leases (of 2 s)
// have since expired unspent and gone back: they hold nothing and keep
// no lease, and may not go dormant yet.
func idle(b testing.TB, n int) (*Syncer, *atomic.Int64) {
	b.Helper()
	s, all, clock := leasedFor(b, n, 2*time.Second)
	expireAll(b, all, ticker(s, clock))
	if d := s.Dormant(); d != 0 {
		b.Fatalf("%d of %d idle tenants dormant", d, n)
	}
	return s, clock
}

// expireAll ticks until every tenant of all has let its lease expire
// (a 2 s lease is 80 ticks of ticker's 25 ms; it gives up after 200), then once more,
// for the plans that see the ledgers empty to settle their quiet times.
func expireAll(b testing.TB, all []*Tenant, tick func()) {
	b.Helper()
	for i := 0; ; i++ {
		held := int64(0)
		for _, t := range all {
			held += t.Held()
		}
		if held == 0 {
			break
		}
		if i == 200 {
			b.Fatalf("%d tokens still held after %d ticks", held, i)
		}
		tick()
	}
	tick()
}

// leasedFor is leased with leases of ttl, tuned as tracking is, and
// returns the tenants too.
func leasedFor(b testing.TB, n int, ttl time.Duration, tune ...func(*Options)) (*Syncer, []*Tenant, *atomic.Int64) {
	b.Helper()
	s, all, clock := tracking(b, n, quota.Quota{Rate: 1e6, Burst: 1e6, MinLease: 10, MaxLease: 10, LeaseTTL: ttl}, tune...)
	for _, t := range all {
		t.NoteMiss(1)
	}
	for i := 0; ; i++ {
		if i == 400 {
			b.Fatalf("tenants still without a lease after %d ticks", i)
		}
		clock.Add(int64(25 * time.Millisecond))
		setWindow(s, 4*n)
		s.Tick(context.Background())
		held := 0
		for _, t := range all {
			if t.Held() > 0 {
				held++
			}
		}
		if held == n {
			break
		}
	}
	return s, all, clock
}

// tracking returns a Syncer on the in-process store, on a fake clock (the
// third result), tracking n tenants of quota q; tune, if any, sets its
// Options further.
func tracking(b testing.TB, n int, q quota.Quota, tune ...func(*Options)) (*Syncer, []*Tenant, *atomic.Int64) {
	b.Helper()
	clock := new(atomic.Int64)
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now}
	for _, f := range tune {
		f(&opts)
	}
	s := New(view, opts)
	all := make([]*Tenant, n)
	for i := range all {
		if all[i], err = s.Track(fmt.Sprintf("tenant-%06d", i), q); err != nil {
			b.Fatal(err)
		}
	}
	return s, all, clock
}

// drivenMode tunes tracking's Syncer to driven mode (Options.Driven): its
// quota version is read in the tick that polls it, not by a goroutine
// whose answer a later tick takes, at a moment the scheduler decides. A
// test that counts plans needs it: the first answer's round re-reads
// quotas, which plans every tenant (TestUnspentLeaseNotPlannedUntilItExpires
// failed about one run in three without it).
func drivenMode(o *Options) { o.Driven = true }

// ticker returns a tick of s: the fake clock moves a quarter of the
// interval on, and s ticks.
func ticker(s *Syncer, clock *atomic.Int64) func() {
	return func() {
		clock.Add(int64(25 * time.Millisecond))
		s.Tick(context.Background())
	}
}

// leaseFirst has tn's first request miss a token, and ticks until tn has
// leased.
func leaseFirst(b testing.TB, tn *Tenant, tick func()) {
	b.Helper()
	tn.NoteMiss(1)
	for i := 0; !tn.Leased(); i++ {
		if i == 100 {
			b.Fatal("no lease after 100 ticks")
		}
		tick()
	}
}
