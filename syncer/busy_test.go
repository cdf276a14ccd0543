package syncer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// lateStore is a store whose lease calls all time out, while the quota
// version is read at once: a Redis that answers, too busy to run the
// scripts in time.
type lateStore struct{ lease.Store }

func (s lateStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	results = results[:0]
	for range reqs {
		results = append(results, lease.Result{Err: context.DeadlineExceeded})
	}
	return results, context.DeadlineExceeded
}

// TestFirstTimeoutsWithRedisAnsweringAreBusy: lease calls that time out
// before any of them was answered count as congestion, not an outage,
// when the quota version was read in time: the tenant backs off but is
// not failing (its failure mode does not decide), and the call counts in
// Errors. Before, a limiter took every timeout before its first answered
// lease call for an outage, so a fleet started at once put tenants in
// their failure mode while Redis answered.
func TestFirstTimeoutsWithRedisAnsweringAreBusy(t *testing.T) {
	var clock time.Time = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := syncer.New(lateStore{view}, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
	defer s.Close()
	ctx := context.Background()
	tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		tn.NoteMiss(1)
		clock = clock.Add(25 * time.Millisecond)
		s.Tick(ctx)
		if tn.Failing() {
			t.Fatalf("tick %d: failing after a timeout, though the quota version was read in time", i)
		}
	}
	if st := s.Stats(); st.Errors == 0 {
		t.Fatal("no failed lease call counted: the test shows nothing")
	}
}

// slowReadStore is lateStore whose reads of the quota version each take
// took on the test's clock (advanced by the read itself, as a Redis or a
// process that slow would), and fail with a timeout instead when silent.
type slowReadStore struct {
	lateStore
	clock     *atomic.Int64 // unix nanoseconds
	took      time.Duration
	firstTook time.Duration // the first read's, when not zero
	reads     *atomic.Int64
	silent    bool
	refused   bool // refuses connections (syncer.Refuser)
}

func (s slowReadStore) Refuses(context.Context) bool { return s.refused }

func (s slowReadStore) QuotaVersion(ctx context.Context) (int64, error) {
	took := s.took
	if s.reads.Add(1) == 1 {
		if s.firstTook > 0 {
			took = s.firstTook
		}
	}
	s.clock.Add(int64(took))
	if d, ok := ctx.Deadline(); s.silent || ok && time.Until(d) < took {
		// Silent, or slower than the read's deadline (which the syncer
		// set on the real clock, and took is well inside of or beyond).
		return 0, context.DeadlineExceeded
	}
	return 1, nil
}

// TestLateAnswersAreBusyForAWhile: lease calls that all time out while
// the quota version is read, but only after the call deadline (a process
// too short of CPU to read replies in time, or a Redis that slow), count
// as congestion for lateGrace lease lifetimes since the last answer in
// time, then as an outage: a Redis that only ever answers late cannot
// lease, and its failure mode decides. Before, the tenant was failing as
// soon as a lease lifetime had passed without an answer in time. A read
// that is answered in time keeps it busy throughout, and one that is not
// answered at all makes it failing at once. The first read may take a
// whole lease lifetime (a fleet's first calls queue in Redis before any
// reply can cut a call window): answered after more than half of it,
// and the later reads in time, the tenant is never failing. But not when
// Redis refuses connections (syncer.Refuser): then the first poll ends at
// once and the timeouts count. With a lease TTL above MaxDownAfter
// (3 s), the same times hold with MaxDownAfter for the lease lifetime:
// a Redis silent that long is down, however long leases live.
func TestLateAnswersAreBusyForAWhile(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second, 3 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) { testLateAnswers(t, ttl) })
	}
}

// testLateAnswers is TestLateAnswersAreBusyForAWhile with a default
// lease TTL of ttl: the times it checks are downAfter's (the lease TTL,
// at most syncer.MaxDownAfter), whatever the lease TTL beyond that.
func testLateAnswers(t *testing.T, ttl time.Duration) {
	const (
		iv     = 100 * time.Millisecond
		callTO = 10 * time.Millisecond
	)
	d := min(ttl, syncer.MaxDownAfter)
	horizon := 8 * d
	for _, tc := range []struct {
		name            string
		took, firstTook time.Duration
		silent, refused bool
		// The tenant must not be failing before notBefore, and must be
		// by failingBy (0: never).
		notBefore, failingBy time.Duration
	}{
		{name: "in time", took: callTO / 2, notBefore: horizon},
		{name: "late", took: 3 * callTO, notBefore: 2 * d, failingBy: (syncer.LateGrace+1)*d + iv},
		{name: "silent", took: callTO, silent: true, failingBy: iv},
		// 550 ms: past half of d (the later reads' deadline), and 450 ms
		// of real time inside the first read's, for a loaded machine.
		{name: "slow first", took: callTO / 2, firstTook: d * 11 / 20, notBefore: horizon},
		// As go-redis shows a Redis that refuses connections: every call,
		// the reads too, runs out of its deadline.
		{name: "refused", took: d * 3 / 4, silent: true, refused: true, failingBy: iv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Int64
			start := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			clock.Store(start.UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			st := slowReadStore{lateStore: lateStore{view}, clock: &clock, took: tc.took, firstTook: tc.firstTook, reads: new(atomic.Int64), silent: tc.silent, refused: tc.refused}
			s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: iv}, 1), Now: now, CallTimeout: callTO,
				Defaults: quota.Defaults{LeaseTTL: ttl, Interval: iv}})
			defer s.Close()
			ctx := context.Background()
			tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			var failedAt time.Duration
			for now().Sub(start) < horizon {
				tn.NoteMiss(1)
				clock.Add(int64(iv / 4))
				tickAt := now().Sub(start) // before the reads of this tick move the clock
				s.Tick(ctx)
				s.Wait() // the poll of the quota version
				if tn.Failing() {
					failedAt = tickAt
					break
				}
			}
			t.Logf("failing after %v (0: never), %d lease calls failed", failedAt, s.Stats().Errors)
			if s.Stats().Errors == 0 {
				t.Fatal("no failed lease call counted: the test shows nothing")
			}
			if failedAt != 0 && failedAt < tc.notBefore {
				t.Errorf("failing after %v, want not before %v", failedAt, tc.notBefore)
			}
			if tc.failingBy > 0 && (failedAt == 0 || failedAt > tc.failingBy) {
				t.Errorf("failing after %v (0: never), want by %v", failedAt, tc.failingBy)
			}
		})
	}
}

// heldReadStore is lateStore whose reads of the quota version wait until
// released, past their deadline (so that the first read stays out
// however slowly the test runs), saying when one began.
type heldReadStore struct {
	lateStore
	began   chan struct{} // receives once per read begun
	release chan struct{} // closed to let the reads answer
}

func (s heldReadStore) QuotaVersion(context.Context) (int64, error) {
	select {
	case s.began <- struct{}{}:
	default:
	}
	<-s.release
	return 1, nil
}

// TestTimeoutsBeforeTheFirstTickAreBusy: Run reads the quota version at
// once, not at its first tick, so a lease call that a request makes right
// after New (a tenant's first lease, Refill) and that times out finds the
// first read out and counts as congestion: the tenant is not failing.
// Before, the read began at the first tick, a quarter interval later (here
// 15 minutes), and such a timeout opened the way to the failure mode: a
// fleet whose instances all started at once decided thousands of requests
// by it while Redis answered (BenchmarkFleet -fleet.coldasync).
func TestTimeoutsBeforeTheFirstTickAreBusy(t *testing.T) {
	view, err := memstore.New().Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st := heldReadStore{lateStore: lateStore{view}, began: make(chan struct{}, 1), release: make(chan struct{})}
	s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: time.Hour}, 1)})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	defer func() {
		// The read first: Run and Close wait for it.
		close(st.release)
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		s.Close()
	}()

	select {
	case <-st.began:
	case <-time.After(10 * time.Second):
		t.Fatal("Run had not begun reading the quota version within 10s; its first tick is 15 minutes away")
	}
	tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.Refill(context.Background(), tn, 1):
		if r.Err == nil {
			t.Fatal("the refill succeeded: the store times out every lease call, so the test shows nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refill did not answer within 10s")
	}
	if st := s.Stats(); st.Errors == 0 {
		t.Fatal("no failed lease call counted: the test shows nothing")
	}
	if tn.Failing() {
		t.Error("failing after a timeout while the first read of the quota version was out: want busy, not down")
	}
}
