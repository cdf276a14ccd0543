package leasequota_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
)

// The tests in this file are the regressions of the paths around the
// core: eviction, outages, waiting and Close. Outages are those of
// internal/faultstore, wrapped around the in-process store: the store
// down (every call fails at once) or holding its calls.

// faultySetup returns a faultstore around a fresh in-process store, up,
// with setup's goroutine leak check.
func faultySetup(t *testing.T) *faultstore.Store {
	t.Helper()
	return faultstore.New(setup(t))
}

// TestWaitNFollowsEvictedTenant: a WaitN whose tenant is evicted while it
// waits (WithMaxTenants(1), another tenant busy) moves to the tenant's new
// entry and is admitted once the bucket refills, instead of waiting on the
// evicted entry until its ctx ends.
func TestWaitNFollowsEvictedTenant(t *testing.T) {
	store := setup(t)
	quotas := map[string]leasequota.Quota{
		"slow": {Rate: 2, Burst: 1},
		"busy": {Rate: 1e6, Burst: 1e6},
	}
	l := newLimiter(t, store, leasequota.WithMaxTenants(1),
		leasequota.WithRefreshInterval(10*time.Millisecond), leasequota.WithLogger(testLogger(t)),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quotas[tenant] }))
	ctx := context.Background()
	if d := l.AllowN(ctx, "slow", 1); !d.Allowed {
		t.Fatalf("first request of slow: %+v", d)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.AllowN(ctx, "busy", 1)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	wctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	start := time.Now()
	d, err := l.WaitN(wctx, "slow", 1)
	took := time.Since(start)
	if err != nil || !d.Allowed {
		t.Fatalf("WaitN of a tenant evicted under it: %+v, %v after %v; want an admission once the bucket refills (0.5s)", d, err, took)
	}
	t.Logf("admitted after %v (%d evictions)", took, l.Stats().Evicted)
	if n := leasequota.MaxTurnsWithoutWait(l); n > 3 {
		t.Errorf("a decision took %d turns without waiting, want at most 3", n)
	}
}

// TestEvictionStress drives 120,000 tenants through a limiter that keeps
// 16, with a short idle timeout, while requests and waits hit tenants as
// they are evicted. No decision may go round an evicted entry: it counts
// the turns each decision takes without waiting, which a recursion or a
// spin would raise, whatever the machine's speed.
func TestEvictionStress(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithMaxTenants(16),
		leasequota.WithIdleTimeout(20*time.Millisecond), leasequota.WithRefreshInterval(5*time.Millisecond),
		leasequota.WithColdStartWait(0), leasequota.WithLogger(testLogger(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 50}))
	ctx := context.Background()
	const tenants, workers = 120_000, 4
	var next atomic.Int64
	var admitted, waited atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > tenants {
					return
				}
				// New tenants flood the registry; a few hot ones keep
				// coming back as they are evicted.
				if l.AllowN(ctx, fmt.Sprintf("flood-%d", i), 1).Allowed {
					admitted.Add(1)
				}
				if i%64 == 0 {
					hot := fmt.Sprintf("hot-%d", i%8)
					if l.AllowN(ctx, hot, 1).Allowed {
						admitted.Add(1)
					}
				}
				if i%4096 == int64(w) {
					wctx, cancel := context.WithTimeout(ctx, time.Second)
					if _, err := l.WaitN(wctx, fmt.Sprintf("hot-%d", i%8), 1); err == nil {
						waited.Add(1)
					}
					cancel()
				}
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("%d admitted, %d waits admitted, %d evicted, %d tracked", admitted.Load(), waited.Load(), st.Evicted, l.Tenants())
	if st.Evicted == 0 {
		t.Fatal("no tenant was evicted: the test did not exercise eviction")
	}
	if n := leasequota.MaxTurnsWithoutWait(l); n > 3 {
		t.Errorf("a decision took %d turns without waiting, want at most 3", n)
	}
	if waited.Load() == 0 {
		t.Error("no WaitN was admitted within its second")
	}
	// Every admission counts once, those of evicted tenants too: tokens
	// spent between a tenant's removal and its drain were counted nowhere
	// (TestEvictedAdmissionsCountOnce has the deterministic case).
	if got, want := st.Admitted(), admitted.Load()+waited.Load(); got != want {
		t.Errorf("Stats().Admitted() = %d, want the %d admissions made", got, want)
	}
}

// TestWaitNThroughOutage: WaitN calls that start while the store (Redis)
// is down keep waiting in every failure mode (FailClosed too), are
// admitted by the local fallback when it can, and wake when the store is
// back: within about a refresh interval of the limiter seeing it answer
// again.
func TestWaitNThroughOutage(t *testing.T) {
	store := faultySetup(t)
	const interval = 20 * time.Millisecond
	quotas := map[string]leasequota.Quota{
		"closed": {Rate: 100, Burst: 10, FailureMode: leasequota.FailClosed},
		// With 10 instances expected, the fallback bucket of a tenant new
		// here holds 1 token: it can never admit 5.
		"local-big":   {Rate: 100, Burst: 10, FailureMode: leasequota.FailLocal},
		"local-small": {Rate: 100, Burst: 10, FailureMode: leasequota.FailLocal},
	}
	l := newLimiter(t, store,
		leasequota.WithRefreshInterval(interval), leasequota.WithExpectedInstances(10),
		leasequota.WithLogger(testLogger(t)),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quotas[tenant] }))
	ctx := context.Background()
	store.SetDown(nil)
	// The fallback admits a small request during the outage.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if d, err := l.WaitN(wctx, "local-small", 1); err != nil || !d.Allowed || d.Reason != leasequota.ReasonFallback {
		t.Errorf("WaitN(local-small, 1) during the outage: %+v, %v; want a fallback admission", d, err)
	}
	type result struct {
		d   leasequota.Decision
		err error
		at  time.Time
	}
	waits := map[string]int64{"closed": 1, "local-big": 5}
	done := map[string]chan result{}
	for tenant, n := range waits {
		ch := make(chan result, 1)
		done[tenant] = ch
		go func() {
			d, err := l.WaitN(wctx, tenant, n)
			ch <- result{d, err, time.Now()}
		}()
	}
	// Every waiter has seen the outage: its tenant's lease call failed.
	deadline := time.Now().Add(10 * time.Second)
	for tenant := range waits {
		for {
			if info, ok := l.Tenant(tenant); ok && info.Failures > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no failed lease call 10s into the outage", tenant)
			}
			time.Sleep(time.Millisecond) // polling; the deadline bounds it
		}
	}
	for tenant, ch := range done {
		select {
		case r := <-ch:
			t.Fatalf("%s: WaitN returned during the outage: %+v, %v; want it to wait", tenant, r.d, r.err)
		default:
		}
	}
	// The store answers from here on.
	up := time.Now()
	store.SetUp()
	for tenant, ch := range done {
		r := <-ch
		if r.err != nil || !r.d.Allowed || r.d.Mode != leasequota.FailDefault {
			t.Errorf("%s: WaitN after the outage: %+v, %v; want a lease admission", tenant, r.d, r.err)
			continue
		}
		// The breaker lets a probe through at most an interval after it
		// opened, the tenant's backoff is at most an interval, and a
		// waiter wakes as soon as a call succeeds. The slack is for a
		// loaded machine; the bug this guards against parked waiters for
		// minutes.
		late := r.at.Sub(up)
		t.Logf("%s admitted %v after the store answered again", tenant, late)
		if late > 2*interval+time.Second {
			t.Errorf("%s: admitted %v after the store answered, want within two intervals (%v) and a round trip", tenant, late, 2*interval)
		}
	}
	if l.Degraded() {
		t.Error("Degraded() after the waiters were admitted")
	}
}

// TestRetryAfterDuringOutage: denials of tenants new to an instance while
// the store (Redis) is down carry a RetryAfter estimated from the numbers
// the decision used (the fallback bucket's rate, the next lease call),
// never minutes.
func TestRetryAfterDuringOutage(t *testing.T) {
	store := faultySetup(t)
	l := newLimiter(t, store, leasequota.WithLogger(testLogger(t)),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			q := leasequota.Quota{Rate: 50, Burst: 50}
			if strings.HasPrefix(tenant, "closed") {
				q.FailureMode = leasequota.FailClosed
			}
			return q
		}))
	store.SetDown(nil)
	ctx := context.Background()
	var worst time.Duration
	for i := range 40 {
		for _, kind := range []string{"local", "closed"} {
			tenant := fmt.Sprintf("%s-%d", kind, i)
			for range 3 {
				d := l.AllowN(ctx, tenant, 1)
				if d.Allowed {
					continue
				}
				if d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second {
					t.Errorf("%s: denied %+v; want 0 < RetryAfter <= 2s for a 50/s tenant", tenant, d)
				}
				worst = max(worst, d.RetryAfter)
			}
		}
	}
	t.Logf("longest RetryAfter: %v", worst)
}

// TestFallbackFleetShare: during an outage, tenants new to the instances
// fall back to Rate/n per instance, with n the fleet size seen on other
// tenants, and an instance started during the outage uses its
// WithExpectedInstances hint: the fleet admits about Rate*t, not
// Rate*t per instance.
func TestFallbackFleetShare(t *testing.T) {
	store := faultySetup(t)
	const rate, burst = 200, 20
	quota := func(string) leasequota.Quota { return leasequota.Quota{Rate: rate, Burst: burst} }
	var fleet []*leasequota.Limiter
	for range 4 {
		fleet = append(fleet, newLimiter(t, store, leasequota.WithLogger(testLogger(t)),
			leasequota.WithRefreshInterval(20*time.Millisecond), leasequota.WithQuotaFunc(quota)))
	}
	ctx := context.Background()
	// Each instance learns the fleet's size from a tenant they share.
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, l := range fleet {
			l.AllowN(ctx, "known", 1)
			if info, _ := l.Tenant("known"); info.Instances != 4 {
				all = false
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the instances did not all see 4 instances on the shared tenant within 10s")
		}
		time.Sleep(5 * time.Millisecond) // pacing; the deadline bounds it
	}
	store.SetDown(nil)
	late := newLimiter(t, store, leasequota.WithLogger(testLogger(t)),
		leasequota.WithExpectedInstances(4), leasequota.WithQuotaFunc(quota))

	// Offer far more than the quota from each instance for a while.
	run := func(ls []*leasequota.Limiter, tenant string) (admitted int64, elapsed float64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for _, l := range ls {
			wg.Go(func() {
				for time.Since(start) < 1500*time.Millisecond {
					if l.AllowN(ctx, tenant, 1).Allowed {
						n.Add(1)
					}
					time.Sleep(100 * time.Microsecond) // offered load: up to 10k/s per instance
				}
			})
		}
		wg.Wait()
		return n.Load(), time.Since(start).Seconds()
	}
	got, el := run(fleet, "fresh")
	t.Logf("4 instances, a tenant new during the outage: %d admitted in %.2fs (quota %.0f)", got, el, rate*el)
	if hi := burst + rate*el*1.1; float64(got) > hi {
		t.Errorf("fleet admitted %d in %.2fs, above Burst + Rate*t = %.0f: each instance fell back to the whole rate", got, el, hi)
	}
	if lo := 0.5 * rate * el; float64(got) < lo {
		t.Errorf("fleet admitted %d in %.2fs, below half the quota (%.0f)", got, el, lo)
	}
	got, el = run([]*leasequota.Limiter{late}, "fresh-late")
	t.Logf("an instance started during the outage, hint 4: %d admitted in %.2fs", got, el)
	if hi := burst/4 + rate/4*el*1.1; float64(got) > hi {
		t.Errorf("an instance started during the outage with WithExpectedInstances(4) admitted %d in %.2fs, above its share %.0f", got, el, hi)
	}
	if got == 0 {
		t.Error("the late instance admitted nothing")
	}
	// Back up, so that Close can return the leases.
	store.SetUp()
}

// TestCloseStopsAdmissions: admissions stop when Close is called, not
// when it returns. Close is kept waiting on a round whose store call hangs
// (faultstore.Pause, as Redis's CLIENT PAUSE); requests that start after
// Close logged that it began are all denied with ReasonClosed, though the
// tenant still holds leased tokens then.
func TestCloseStopsAdmissions(t *testing.T) {
	store := faultySetup(t)
	var closing atomic.Bool
	logs := newTestLog(t, func(r slog.Record) {
		if strings.Contains(r.Message, "closing") {
			closing.Store(true)
		}
	})
	l, err := leasequota.NewWithStore(store, leasequota.WithLogger(slog.New(logs)),
		leasequota.WithRedisTimeout(2*time.Second), leasequota.WithColdStartWait(0),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-6, Burst: 1_000_000, MinLease: 500_000}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for !l.AllowN(ctx, "held", 1).Allowed {
		if time.Now().After(deadline) {
			t.Fatal("no lease within 5s")
		}
		time.Sleep(time.Millisecond) // polling; the deadline bounds it
	}
	// The store holds every call for 1s: a miss on another tenant sends
	// the loop into a call that hangs, and Close waits for it.
	store.SetHook(faultstore.Pause(time.Now().Add(time.Second)))
	l.AllowN(ctx, "trigger", 1)
	closed := make(chan error, 1)
	go func() { closed <- l.Close(ctx) }()
	var before, after, violations int
	for {
		seen := closing.Load()
		d := l.AllowN(ctx, "held", 1)
		switch {
		case !seen && d.Allowed:
			before++
		case seen && d.Allowed:
			violations++
		case seen:
			after++
		}
		select {
		case err := <-closed:
			_ = err // the held return may fail; what matters is admissions
			if !closing.Load() {
				t.Fatal("Close returned without logging that it began")
			}
			t.Logf("%d admitted before Close began, %d denied after", before, after)
			if violations > 0 {
				t.Errorf("%d requests admitted after Close began", violations)
			}
			if after == 0 {
				t.Error("no request was made while Close ran: the test proved nothing")
			}
			if d := l.AllowN(ctx, "held", 1); d.Allowed || d.Reason != leasequota.ReasonClosed {
				t.Errorf("after Close: %+v, want ReasonClosed", d)
			}
			if _, err := l.WaitN(ctx, "held", 1); !errors.Is(err, leasequota.ErrClosed) {
				t.Errorf("WaitN after Close: %v, want ErrClosed", err)
			}
			return
		default:
		}
	}
}

// TestColdStartSkipsAWaitThatCannotEnd: while urgent lease calls take
// longer than WithColdStartWait (the store holds every call for 3 s), a
// new tenant's first request is denied at once instead of waiting its
// whole 2 s in vain; once the last urgent call is more than a second old
// (and the store answers at once again), cold requests wait for their
// lease again and are admitted. Leases live 10 s: one that lands 3 s after
// its call still has most of its life (with the default second it is
// taken back at the next round, which the poll of the quota version,
// held 3 s too, no longer holds up).
func TestColdStartSkipsAWaitThatCannotEnd(t *testing.T) {
	const wait = 2 * time.Second
	store := faultySetup(t)
	l := newLimiter(t, store, leasequota.WithLogger(testLogger(t)),
		leasequota.WithColdStartWait(wait), leasequota.WithRedisTimeout(10*time.Second), leasequota.WithLeaseTTL(10*time.Second),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}))
	ctx := context.Background()
	store.SetHook(faultstore.Delay(3 * time.Second))

	// The first cold request cannot know: it waits, and is denied.
	began := time.Now()
	if d := l.AllowN(ctx, "first", 1); d.Allowed || d.Reason != leasequota.ReasonColdStart {
		t.Fatalf("first cold request while the store holds calls: %+v, want a cold-start denial", d)
	}
	firstTook := time.Since(began)
	if firstTook < wait {
		t.Fatalf("the first cold request returned after %v, before its wait of %v: the test proves nothing", firstTook, wait)
	}
	// Its urgent call ends when the store lets it through: the lease lands.
	deadline := time.Now().Add(20 * time.Second)
	for !l.AllowN(ctx, "first", 1).Allowed {
		if time.Now().After(deadline) {
			t.Fatal("the first tenant's lease did not land within 20s")
		}
		time.Sleep(10 * time.Millisecond) // polling; the deadline bounds it
	}

	// The last urgent call took 3 s, more than the wait: a cold request
	// now is denied without waiting.
	began = time.Now()
	d := l.AllowN(ctx, "second", 1)
	took := time.Since(began)
	if d.Allowed || d.Reason != leasequota.ReasonColdStart {
		t.Fatalf("second cold request: %+v, want a cold-start denial", d)
	}
	// The first request's wait is what the machine delivered for a wait;
	// half of the wait is far beyond a denial from memory.
	if took >= wait/2 {
		t.Errorf("second cold request took %v (the first, which waited, %v): it waited for a lease that could not come in time", took, firstTook)
	}

	// The store answers at once again. A second after the last urgent
	// call, cold requests wait again: one of them is admitted after its
	// wait (ReasonColdStart). One admitted from a lease (ReasonLeased) did
	// not wait: a round leased its new tenant between the request's
	// tracking it and its refill, which a loaded machine gives time for
	// (the race detector beside two busy loops: once in about a dozen
	// runs of make test). It proves nothing either way; the next tenant
	// is asked.
	store.SetHook(nil)
	deadline = time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		d := l.AllowN(ctx, fmt.Sprintf("later-%d", i), 1)
		if d.Allowed && d.Reason == leasequota.ReasonColdStart {
			break
		}
		if d.Allowed && d.Reason != leasequota.ReasonLeased {
			t.Fatalf("a later cold request was admitted with %v, want ReasonColdStart (it waited for its first lease)", d.Reason)
		}
		if time.Now().After(deadline) {
			t.Fatal("no cold request was admitted after its wait within 20s of the store answering again")
		}
		time.Sleep(10 * time.Millisecond) // polling; the deadline bounds it
	}
}

// TestCloseGivesReturnsTheCallersTime: Close returns the leased tokens
// within the time its ctx gives, not a lease call's deadline. With the
// store holding every call 300 ms (six times WithRedisTimeout's 50 ms), a
// Close given 5 s returns the tokens held, credited; a Close given no
// deadline has only a call's, and forfeits them.
func TestCloseGivesReturnsTheCallersTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // of Close's ctx; 0: none
	}{
		{"ctx of 5s", 5 * time.Second},
		{"ctx without deadline", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := faultySetup(t)
			l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
				leasequota.WithRedisTimeout(50*time.Millisecond),
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1000, MinLease: 50}))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if d := l.AllowN(ctx, "t", 1); !d.Allowed {
				t.Fatalf("first request: %+v", d)
			}
			info, _ := l.Tenant("t")
			if info.Tokens <= 0 {
				t.Fatalf("holds %d tokens after its first lease", info.Tokens)
			}
			store.SetHook(faultstore.Delay(300 * time.Millisecond))
			cctx := ctx
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			err = l.Close(cctx)
			st := l.Stats()
			t.Logf("Close: %v; held %d, stats %+v", err, info.Tokens, st)
			if tc.timeout > 0 {
				if err != nil || st.Returned < info.Tokens || st.Forfeited != 0 {
					t.Errorf("Close with %v: %v, %d of %d tokens returned and credited, %d forfeited; want nil, all, 0",
						tc.timeout, err, st.Returned, info.Tokens, st.Forfeited)
				}
				return
			}
			if err == nil || st.Forfeited < info.Tokens {
				t.Errorf("Close without a deadline: %v, %d of %d tokens forfeited; want an error and all (the store holds calls past the call deadline)",
					err, st.Forfeited, info.Tokens)
			}
		})
	}
}
